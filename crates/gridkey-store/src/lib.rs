//! Content-addressed store of neighbour tables as `.npy` files (ADR 0002; docs/design.md "Formats").
//!
//! A table with digest `d` lives at `<cache>/tables-v1/<d[0..2]>/<d>.npy`: NumPy `.npy` format
//! 1.0, little-endian `descr`, `fortran_order: False`, header padded so that the data starts at
//! a multiple of 64 bytes, file mode read-only. `numpy.load(path, mmap_mode="r")` reads it.
//!
//! # Architecture invariant
//!
//! The store never exposes a partially written file under a final name: a table is written to a
//! temp file in the same directory, `sync_all`ed, made read-only and renamed; a lost rename race
//! is success, since the name is the content. The store never trusts a file: every open checks
//! that it is a regular file, its magic, header, dtype, shape and length against what the
//! caller expects ([`TableStore::open_table`]); [`TableStore::open_verified`] also recomputes
//! the digest. It knows nothing of connectivities, keys or runners.
//!
//! Crash consistency and hostile files (ADR 0012): every file is written through
//! [`gridkey_fs`] (temp file, `sync_all`, read-only, rename; ADR 0047), so a writer killed
//! at any point leaves at most a temp file, which [`gridkey_fs::remove_stale_temps`] removes
//! once no process holds its lock; a mapped table is locked shared
//! ([`gridkey_fs::lock::open_shared`]) so that `gridkey cache gc` never removes it (ADR 0009).
//!
//! # Example
//!
//! Frontends usually reach the store through `gridkey_offsets::compile_time_offset_provider`,
//! which digests, stores and maps every table of a provider once. By hand, a table goes in
//! under its digest and comes back as a checked, read-only memory map:
//!
//! ```
//! use gridkey_store::ndarray::Array2;
//! use gridkey_store::{digest_table, Dtype, TableSpec, TableStore, TableView};
//!
//! let dir = tempfile::tempdir()?;
//! let store = TableStore::open(dir.path())?;
//!
//! let c2e = Array2::from_shape_vec((2, 3), vec![0i32, 1, 2, 2, 3, 4])?;
//! let digest = digest_table(c2e.view());
//! let path = store.put_table(digest, c2e.view())?;
//! // <cache>/tables-v1/<hex[0..2]>/<hex>.npy, a plain .npy file numpy.load can map.
//! assert_eq!(path, dir.path().join("tables-v1").join(&digest.to_hex()[..2]).join(format!("{digest}.npy")));
//!
//! // Opening checks the file against what the caller expects; a verifying store also
//! // recomputes the digest.
//! let spec = TableSpec { digest, dtype: Dtype::I32, shape: [2, 3] };
//! let mapped = store.clone().verifying(true).open_table(&spec)?;
//! let TableView::I32(view) = mapped.view() else { unreachable!("opened as int32") };
//! assert_eq!(view, c2e);
//!
//! // Another shape under the same name is a typed error naming the file, never a wrong table.
//! let wrong = TableSpec { shape: [3, 2], ..spec };
//! assert!(matches!(store.open_table(&wrong), Err(gridkey_store::StoreError::Shape { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use gridkey_digest::TableElement;
use memmap2::Mmap;
use ndarray::ArrayView2;
use ndarray_npy::npy::header::{Header, Layout};
use ndarray_npy::{ViewElement, WritableElement};

/// The digest, its dtype and the function that computes it, which a caller needs to name a
/// [`TableSpec`] and to put a table ([`TableStore::put_table`] takes the table's digest).
pub use gridkey_digest::{digest_table, Dtype, TableDigest};
pub use gridkey_fs::Fault;
/// The `ndarray` whose views [`TableStore::put_table`] takes and [`TableView`] holds.
pub use ndarray;

/// Name of the store directory under the cache directory; carries the digest format version.
pub const TABLES_DIR: &str = gridkey_fs::CacheBucket::Tables.name();

/// Errors of the table store (ADR 0005, ADR 0012). Every variant names the file and what to do;
/// a bad file under a table's name is an error at open and is rewritten by a put.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store directory could not be created or written.
    #[error("cannot use table store directory {path}: {source}; point the cache directory at a writable directory")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Writing a table failed (full disk, permissions); nothing was left under the final name.
    #[error("cannot write table {digest} to {path}: {source}; {}, nothing was left behind", write_advice(.source))]
    Write {
        /// The final path the table was going to.
        path: PathBuf,
        /// The digest of the table.
        digest: TableDigest,
        /// The I/O error.
        source: io::Error,
    },
    /// A stored table is missing.
    #[error("table {digest} is not in the store: {path} does not exist; convert the offset provider again")]
    Missing {
        /// The expected path.
        path: PathBuf,
        /// The digest asked for.
        digest: TableDigest,
    },
    /// Reading a stored table failed.
    #[error("cannot read table file {path}: {source}; check its permissions or delete it so it is rebuilt")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The path is a directory, a symlink or another non-regular file.
    #[error("table path {path} is not a regular file; delete it so the table is rebuilt")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// The file is not a valid `.npy` file of the expected dtype and layout (truncated, tampered).
    #[error("table file {path} is not a valid {dtype} C-order .npy table: {reason}; delete it so it is rebuilt")]
    Format {
        /// The file.
        path: PathBuf,
        /// The dtype expected.
        dtype: Dtype,
        /// What is wrong.
        reason: String,
    },
    /// The file's shape is not the one expected.
    #[error("table file {path} has shape {found:?}, expected {expected:?}; delete it so it is rebuilt")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The shape expected.
        expected: [usize; 2],
        /// The shape in the header.
        found: [usize; 2],
    },
    /// Writing a table to a temp file in the store failed before its digest was known (full disk,
    /// permissions, or its source stopped the read, [`TableStore::put_blocks`]); nothing was left
    /// behind.
    #[error("cannot write a {dtype} table of shape {shape:?} to a temp file in {dir}: {source}; {}, nothing was left behind", write_advice(.source))]
    WriteTemp {
        /// The store directory the temp file was in.
        dir: PathBuf,
        /// The element type of the table.
        dtype: Dtype,
        /// The shape of the table.
        shape: [usize; 2],
        /// The I/O error (of the file, or the one the source returned).
        source: io::Error,
    },
    /// A stored file holds fewer bytes than the table it was opened as (truncated after it was
    /// stored or mapped); found by [`MappedTable::verify`], which reads through `pread` and so
    /// never touches a mapped page past the end of the file (ADR 0034).
    #[error("table file {path} holds {found} bytes, but its table needs {expected} (truncated after it was stored); delete it so it is rebuilt")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes of header and element data the table needs.
        expected: u64,
        /// Bytes the file holds now.
        found: u64,
    },
    /// A verifying open recomputed a digest different from the file's name.
    #[error("table file {path} has digest {found}, not the {expected} its name says (modified after it was stored); delete it so it is rebuilt")]
    Digest {
        /// The file.
        path: PathBuf,
        /// The digest in the name.
        expected: TableDigest,
        /// The digest of the content.
        found: TableDigest,
    },
}

/// What to do about a failed table write: a directory in the way is the caller's to remove (the
/// store removes no directory it did not create, ADR 0012); anything else is space or permissions.
fn write_advice(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(libc::EISDIR) {
        "remove the directory in the way (the store never removes a directory)"
    } else {
        "free space or fix permissions"
    }
}

/// What a caller expects of a stored table: its digest, dtype and shape `(n, k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TableSpec {
    /// The digest (format v1) of the table; names the file.
    pub digest: TableDigest,
    /// The element type (int32 or int64, stored little-endian).
    pub dtype: Dtype,
    /// The shape `(rows, max_neighbours)` in elements.
    pub shape: [usize; 2],
}

/// A handle on the table store inside a cache directory, `<cache_dir>/tables-v1` (ADR 0002).
/// Cheap to clone; holds no open file.
#[derive(Clone, Debug)]
pub struct TableStore {
    cache_dir: PathBuf,
    dir: PathBuf,
    /// `<site_cache>/tables-v1` of a read-only site cache, looked up after `dir` (ADR 0036).
    site: Option<PathBuf>,
    verify: bool,
    readers_check: bool,
    fault: Option<Fault>,
    /// Files replaced because they did not hold the table their name says, shared by clones.
    repaired: std::sync::Arc<std::sync::Mutex<Vec<PathBuf>>>,
    /// Commits held back until [`Self::commit_deferred`], shared by clones; `None`: every put
    /// commits its file at once.
    deferred: Option<std::sync::Arc<std::sync::Mutex<Vec<Deferred>>>>,
}

/// A written table whose commit a deferring store held back ([`TableStore::deferring`]).
#[derive(Debug)]
struct Deferred {
    temp: gridkey_fs::PendingFile,
    spec: TableSpec,
    /// A file that was not this table was under its name.
    replacing: bool,
    /// A file found under the name after a failed rename is used only after its digest is
    /// recomputed (the writer of the bytes may have changed them, ADR 0035).
    verified_race: bool,
}

impl TableStore {
    /// Opens (creating if needed) the store `<cache_dir>/tables-v1`. Opens do not recompute
    /// digests unless [`Self::verifying`] says so (the `verify_tables` setting).
    ///
    /// Errors: [`StoreError::Directory`] when the directory cannot be created.
    pub fn open(cache_dir: &Path) -> Result<Self, StoreError> {
        let dir = cache_dir.join(TABLES_DIR);
        gridkey_fs::create_private_dir_all(&dir)
            .map_err(|source| StoreError::Directory { path: dir.clone(), source })?;
        Ok(Self {
            cache_dir: cache_dir.to_path_buf(),
            dir,
            site: None,
            verify: false,
            readers_check: false,
            fault: None,
            repaired: Default::default(),
            deferred: None,
        })
    }

    /// This store with the tables of the read-only site cache `site_cache` (its `tables-v1`)
    /// looked up after its own (ADR 0036): a table missing here and stored there is opened there,
    /// with the checked open and, since nobody here can repair a file there, its digest always
    /// recomputed; a site file that fails is not used, and a put writes the table here. Nothing
    /// is ever written to the site cache. `None`: no site cache.
    pub fn with_site(mut self, site_cache: Option<&Path>) -> Self {
        self.site = site_cache.map(|site| site.join(TABLES_DIR));
        self
    }

    /// The table directory of the site cache, `<site_cache>/tables-v1`, if any
    /// ([`Self::with_site`]).
    pub fn site_dir(&self) -> Option<&Path> {
        self.site.as_deref()
    }

    /// This store with `fault` (the fault matrix's hook, parsed by the caller at its edge;
    /// `None` in normal use) passed to every write it makes ([`gridkey_fs::write_atomic`]).
    pub fn with_fault(mut self, fault: Option<Fault>) -> Self {
        self.fault = fault;
        self
    }

    /// The fault hook every write of this store gets.
    pub fn fault(&self) -> Option<&Fault> {
        self.fault.as_ref()
    }

    /// The table files that puts through this store (or a clone of it) found under a table's
    /// name without that table's bytes (truncated, tampered, modified in place) and replaced
    /// with the table, in the order replaced. A caller that prints reports them: a repaired
    /// table means something wrote into the cache (ADR 0012).
    pub fn repaired(&self) -> Vec<PathBuf> {
        self.repaired.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A clone of this store whose puts write each table to a temp file and hold its commit
    /// back until [`Self::commit_deferred`], so that a batch of tables is synced together (ADR
    /// 0050, the order of ADR 0049): a put returns the final path of a file that is not there
    /// yet, and nothing may open it before the commit. Dropped without a commit, it removes the
    /// temp files.
    pub fn deferring(&self) -> Self {
        let mut store = self.clone();
        store.deferred = Some(Default::default());
        store
    }

    /// Commits every put this deferring store held back ([`Self::deferring`]): each temp file
    /// made read-only and its write-back started, then each synced, then each renamed to its
    /// name (`gridkey_fs::commit_all`). Returns each table's spec with its final path, or the
    /// [`StoreError::Write`] naming it (nothing is left under that name then), in the order of
    /// the puts. A store that does not defer has nothing to commit.
    pub fn commit_deferred(&self) -> Vec<(TableSpec, Result<PathBuf, StoreError>)> {
        let Some(deferred) = &self.deferred else { return Vec::new() };
        let held = std::mem::take(&mut *deferred.lock().unwrap_or_else(|p| p.into_inner()));
        let paths: Vec<PathBuf> = held.iter().map(|d| self.path_of(&d.spec.digest)).collect();
        let (temps, held): (Vec<_>, Vec<_>) =
            held.into_iter().map(|d| (d.temp, (d.spec, d.replacing, d.verified_race))).unzip();
        let results =
            gridkey_fs::commit_all(temps.into_iter().zip(paths.iter().map(PathBuf::as_path)).collect(), self.fault());
        held.into_iter()
            .zip(results)
            .map(|((spec, replacing, verified_race), result)| {
                (spec, self.committed(&spec, replacing, verified_race, result))
            })
            .collect()
    }

    /// Commits `temp` as the file of `spec` ([`gridkey_fs::PendingFile::commit`]), or holds the
    /// commit back on a deferring store; returns the final path.
    ///
    /// Errors: [`StoreError::Write`] naming the final path.
    fn commit_or_defer(
        &self,
        temp: gridkey_fs::PendingFile,
        spec: &TableSpec,
        replacing: bool,
        verified_race: bool,
    ) -> Result<PathBuf, StoreError> {
        if let Some(deferred) = &self.deferred {
            let held = Deferred { temp, spec: *spec, replacing, verified_race };
            deferred.lock().unwrap_or_else(|p| p.into_inner()).push(held);
            return Ok(self.path_of(&spec.digest));
        }
        let result = temp.commit(&self.path_of(&spec.digest), self.fault());
        self.committed(spec, replacing, verified_race, result)
    }

    /// What a commit of the file of `spec` came to: its path (noted as repaired when it replaced
    /// another file), or, when the rename failed, the path of the same table a concurrent writer
    /// renamed there first, or the error.
    fn committed(
        &self,
        spec: &TableSpec,
        replacing: bool,
        verified_race: bool,
        result: io::Result<()>,
    ) -> Result<PathBuf, StoreError> {
        let path = self.path_of(&spec.digest);
        match result {
            Ok(()) => {
                if replacing {
                    self.note_repaired(&path);
                }
                Ok(path)
            }
            Err(_) if verified_race && self.open_verified(spec).is_ok() => Ok(path),
            Err(_) if !verified_race && self.open_table(spec).is_ok() => Ok(path),
            Err(source) => Err(StoreError::Write { path, digest: spec.digest, source }),
        }
    }

    fn note_repaired(&self, path: &Path) {
        self.repaired.lock().unwrap_or_else(|p| p.into_inner()).push(path.to_path_buf());
    }

    /// Whether a file is under `spec`'s name that is not that table: an open that fails for
    /// any reason other than the file being absent, or `differs` on the mapped bytes.
    fn holds_other(&self, spec: &TableSpec, differs: impl FnOnce(&MappedTable) -> bool) -> bool {
        match self.open_table(spec) {
            Ok(existing) => differs(&existing),
            Err(StoreError::Missing { .. }) => false,
            Err(_) => fs::symlink_metadata(self.path_of(&spec.digest)).is_ok(),
        }
    }

    /// This store with every [`Self::open_table`] (and so every check of an existing file by
    /// [`Self::put_with`]) recomputing the digest: a file modified in place after it was stored
    /// is then an error on open and is rewritten by a put (ADR 0012).
    pub fn verifying(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// Whether every open recomputes the digest (see [`Self::verifying`]).
    pub fn verifies(&self) -> bool {
        self.verify
    }

    /// This store with puts that keep a file found under a table's name after its checked open
    /// ([`Self::open_table`]: a regular file, header, dtype, shape, length) without reading its
    /// bytes, for a caller whose every reader of table content recomputes the digest of what it
    /// read before using the result (ADR 0028). A table stored before then costs its digest
    /// alone (`cargo xtask bench`, case `convert_stored`). A file whose bytes do not match its
    /// name is left for that reader to find, and a put through a [`Self::verifying`] store
    /// rewrites it. The `gridkey` binary's runs use it, since their translations check every
    /// table they read (ADR 0024); the default, `false`, compares every byte (ADR 0012).
    pub fn checked_by_readers(mut self, readers_check: bool) -> Self {
        self.readers_check = readers_check;
        self
    }

    /// Whether puts keep a file under the name without comparing its bytes (see
    /// [`Self::checked_by_readers`]); never on a verifying store.
    pub fn trusts_names(&self) -> bool {
        self.readers_check && !self.verify
    }

    /// The cache directory this store lives in.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The store directory, `<cache_dir>/tables-v1`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The final path of the table with `digest`: `<dir>/<hex[0..2]>/<hex>.npy`.
    pub fn path_of(&self, digest: &TableDigest) -> PathBuf {
        let hex = digest.to_hex();
        self.dir.join(&hex[..2]).join(format!("{hex}.npy"))
    }

    /// Stores a table whose C-order little-endian element bytes `write_data` writes, unless a
    /// valid file of `spec` is already there. Returns the final path.
    ///
    /// `write_data` must write exactly `shape[0] * shape[1] * itemsize` bytes; the caller is
    /// responsible for `spec.digest` being the digest of those bytes (see [`Self::put_table`]).
    /// Errors: [`StoreError::Directory`], [`StoreError::Write`]; on error no file is left behind.
    pub fn put_with(
        &self,
        spec: &TableSpec,
        write_data: impl Fn(&mut dyn Write) -> io::Result<()>,
    ) -> Result<PathBuf, StoreError> {
        let path = self.path_of(&spec.digest);
        // The name is trusted only once the bytes under it are the bytes being stored: a file
        // planted or damaged under the right name and size is replaced, never mapped as this
        // table (it would poison every translation made from it). Costs one comparison read.
        let mut same_bytes = false;
        let replacing = self.holds_other(spec, |existing| {
            if self.trusts_names() {
                // ADR 0028: whoever reads the bytes checks them.
                same_bytes = true;
                return false;
            }
            same_bytes = existing.same_data(|out| write_data(out));
            !same_bytes
        });
        if same_bytes {
            return Ok(path);
        }
        let write_err = |source| StoreError::Write { path: path.clone(), digest: spec.digest, source };
        let header = npy_header(spec).map_err(write_err)?;
        let expected_len = header.len() as u64 + data_bytes(spec) as u64;
        let written = gridkey_fs::write_temp_for(&path, self.fault(), |out| {
            out.write_all(&header)?;
            write_data(out)
        });
        match written {
            Ok((temp, len)) if len == expected_len => self.commit_or_defer(temp, spec, replacing, false),
            // The writer broke its contract: the bytes are not the table the name says (the
            // temp file is removed as it is dropped).
            Ok((_, len)) => Err(write_err(io::Error::other(format!(
                "the table writer produced {len} bytes, the header announces {expected_len}"
            )))),
            // The name is the content: a writer that won the race wrote the same table.
            Err(_) if self.open_table(spec).is_ok() => Ok(path),
            Err(source) => Err(write_err(source)),
        }
    }

    /// Stores `table` (any layout) under `digest`, written in C order little-endian through a
    /// bounded buffer. The digest must be [`digest_table`] of `table`.
    ///
    /// Errors: as [`Self::put_with`].
    pub fn put_table<T: TableElement>(
        &self,
        digest: TableDigest,
        table: ArrayView2<'_, T>,
    ) -> Result<PathBuf, StoreError> {
        let spec = TableSpec { digest, dtype: T::DTYPE, shape: [table.nrows(), table.ncols()] };
        self.put_with(&spec, |out| write_c_order(table, out))
    }

    /// Stores a C-contiguous table given as its little-endian element bytes `data` while `digest`
    /// computes its digest on another thread, and returns its spec and final path.
    ///
    /// The write cannot wait for the digest, since the digest names the file: the bytes go to a
    /// temp file in the store directory while the digest runs, and the file is renamed to its
    /// final name once both are done, so the view costs about one write instead of a read and
    /// a write (`cargo xtask bench`, case `view_build`; ADR 0011). As soon as the digest is known
    /// and a valid file of it is already stored, the write stops and the temp file is removed.
    /// A file found under the table's name is used only once its element bytes are compared
    /// with `data`, all of them (ADR 0012), unless the store is [`Self::checked_by_readers`].
    ///
    /// A table of less than [`CANDIDATE_MIN_BYTES`] is hashed first, then compared with a file
    /// under its name or written ([`Self::put_with`]): its digest takes milliseconds at most,
    /// less than a temp file that a table stored before would not need.
    ///
    /// A table of at least [`CANDIDATE_MIN_BYTES`] looks for a stored file of its size whose
    /// first bytes are its own first (a listing of the store, a read of one page per file of that
    /// size) before anything is written. When there is one, the table was most likely stored
    /// before: instead of the temp file, this thread compares every byte of that file with
    /// `data` while the digest runs, and the file is used when all bytes are equal and its name
    /// is the digest; anything else goes the general way, with the digest known (ADR 0027). On a
    /// store [`Self::checked_by_readers`], the candidate is used when its name is the digest,
    /// without the comparison (ADR 0028), so a table stored before costs its digest, in a fresh
    /// process too (case `convert_stored`). `data` must hold `shape[0] * shape[1] * dtype.itemsize()` bytes and
    /// `digest` must return the digest of the table they hold; a length that does not match is
    /// a [`StoreError::Write`].
    ///
    /// Errors: [`StoreError::Directory`], [`StoreError::Write`] (naming the final path once the
    /// digest is known); on error no file is left behind.
    pub fn put_slice(
        &self,
        dtype: Dtype,
        shape: [usize; 2],
        data: &[u8],
        digest: impl FnOnce() -> TableDigest + Send,
    ) -> Result<(TableSpec, PathBuf), StoreError> {
        let expected_len = shape[0] * shape[1] * dtype.itemsize();
        if data.len() < CANDIDATE_MIN_BYTES && data.len() == expected_len {
            // Hashed first (milliseconds at most): a table stored before is then compared and
            // kept without a temp file, a new one written as by `put_table`.
            let spec = TableSpec { digest: digest(), dtype, shape };
            return self.put_with(&spec, |out| out.write_all(data)).map(|path| (spec, path));
        }
        // A verifying store would hash every candidate it opens: it takes the general way.
        if self.verify || data.len() != expected_len {
            return self.put_slice_writing(dtype, shape, data, digest);
        }
        let Some(candidate) = self.candidate(dtype, shape, data) else {
            return self.put_slice_writing(dtype, shape, data, digest);
        };
        if self.trusts_names() {
            // ADR 0028: the candidate is the table when its name is the digest; its bytes are
            // checked by whoever reads them.
            let digest = digest();
            if candidate.spec().digest == digest {
                return Ok((TableSpec { digest, dtype, shape }, self.path_of(&digest)));
            }
            drop(candidate);
            return self.put_slice_writing(dtype, shape, data, move || digest);
        }
        // One pass: each chunk is hashed, then compared while it is still in the cache with the
        // stored file's bytes, read with `pread` (ADR 0034), so the runtime table is read from
        // memory once and the stored file once.
        let mut hasher = gridkey_digest::TableHasher::new(dtype, &shape);
        let mut same = SameBytes::new(&candidate.file, candidate.data_start as u64, data.len() as u64);
        for ours in data.chunks(COMPARE_CHUNK_BYTES) {
            hasher.update(ours);
            if same.equal {
                let _ = same.write(ours);
            }
        }
        let same_bytes = same.equal;
        drop(same);
        let digest = hasher.finish().expect("data holds shape[0] * shape[1] elements");
        // The candidate was mapped by its name, so equal bytes under the digest's name are the
        // table itself: the one case in which nothing is written.
        if same_bytes && candidate.spec().digest == digest {
            return Ok((TableSpec { digest, dtype, shape }, self.path_of(&digest)));
        }
        drop(candidate);
        self.put_slice_writing(dtype, shape, data, move || digest)
    }

    /// A stored file that `data` (of `dtype` and `shape`, `data.len()` bytes) probably is: one
    /// under a table name in the store, a regular file of the length such a table has, whose
    /// first [`CANDIDATE_PROBE_BYTES`] of element data are those of `data`, mapped by its name
    /// with the checked open. A guess only: the caller compares every byte and the name.
    fn candidate(&self, dtype: Dtype, shape: [usize; 2], data: &[u8]) -> Option<MappedTable> {
        self.candidate_of(dtype, shape, data.len(), &data[..data.len().min(CANDIDATE_PROBE_BYTES)])
    }

    /// [`Self::candidate`] for a table of `len` bytes of element data whose first bytes are
    /// `probe` (all of them, or the first [`CANDIDATE_PROBE_BYTES`]).
    fn candidate_of(&self, dtype: Dtype, shape: [usize; 2], len: usize, probe: &[u8]) -> Option<MappedTable> {
        use std::io::Read as _;
        let header_len = npy_header(&TableSpec { digest: TableDigest::from_bytes([0; 16]), dtype, shape }).ok()?.len();
        let file_len = (header_len + len) as u64;
        let mut head = vec![0u8; header_len + probe.len()];
        for shard in fs::read_dir(&self.dir).ok()?.flatten() {
            let Ok(files) = fs::read_dir(shard.path()) else { continue };
            for entry in files.flatten() {
                let name = entry.file_name();
                let Some(digest) = name.to_str().and_then(|n| n.strip_suffix(".npy")).and_then(|h| h.parse().ok())
                else {
                    continue;
                };
                // The entry's own metadata (no symlink followed): a regular file of the size.
                if !entry.metadata().is_ok_and(|m| m.is_file() && m.len() == file_len) {
                    continue;
                }
                let path = self.path_of(&digest);
                let read = fs::File::open(&path).and_then(|mut f| f.read_exact(&mut head));
                if read.is_err() || &head[header_len..] != probe {
                    continue;
                }
                if let Ok(table) = MappedTable::map(path, &TableSpec { digest, dtype, shape }) {
                    return Some(table);
                }
            }
        }
        None
    }

    /// [`Self::put_slice`] without looking for a candidate: the bytes written to a temp file
    /// while `digest` runs.
    fn put_slice_writing(
        &self,
        dtype: Dtype,
        shape: [usize; 2],
        data: &[u8],
        digest: impl FnOnce() -> TableDigest + Send,
    ) -> Result<(TableSpec, PathBuf), StoreError> {
        let known: std::sync::OnceLock<TableDigest> = std::sync::OnceLock::new();
        let spec_of = |digest| TableSpec { digest, dtype, shape };
        let header_spec = spec_of(TableDigest::from_bytes([0; 16]));
        let expected_len = shape[0] * shape[1] * dtype.itemsize();
        let (digest, written) = std::thread::scope(|scope| {
            let hashing = scope.spawn(|| {
                let d = digest();
                let _ = known.set(d);
                d
            });
            let written = (|| {
                if data.len() != expected_len {
                    return Err(io::Error::other(format!(
                        "{} bytes given, dtype {dtype} and shape {shape:?} need {expected_len}",
                        data.len()
                    )));
                }
                let header = npy_header(&header_spec)?;
                gridkey_fs::write_temp(&self.dir, self.fault(), |out| {
                    out.write_all(&header)?;
                    let mut looked = false;
                    for chunk in data.chunks(PUT_CHUNK_BYTES) {
                        if let (false, Some(d)) = (looked, known.get()) {
                            looked = true;
                            if self.open_table(&spec_of(*d)).is_ok() {
                                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "stored before"));
                            }
                        }
                        out.write_all(chunk)?;
                    }
                    Ok(())
                })
            })();
            (hashing.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), written)
        });
        let spec = spec_of(digest);
        let path = self.path_of(&digest);
        let mut same_bytes = false;
        let replacing = self.holds_other(&spec, |existing| {
            same_bytes = self.trusts_names() || existing.same_data(|out| out.write_all(data));
            !same_bytes
        });
        if same_bytes {
            // Stored before (or by a concurrent writer), with these very bytes.
            return Ok((spec, path));
        }
        let write_err = |source| StoreError::Write { path: path.clone(), digest, source };
        let (temp, _) = match written {
            // The write stopped early for a file under the name that does not hold these bytes.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && data.len() == expected_len => {
                return self.put_with(&spec, |out| out.write_all(data)).map(|path| (spec, path));
            }
            other => other.map_err(write_err)?,
        };
        self.commit_or_defer(temp, &spec, replacing, false).map(|path| (spec, path))
    }

    /// Stores the table of `dtype` and `shape` whose C-order little-endian element bytes `source`
    /// feeds, and returns its spec and final path. Every block of the source is copied once into
    /// a buffer of [`BLOCK_BYTES`] and hashed and written (or compared) from that buffer, so the
    /// file under the name holds exactly the bytes the name was computed from, whatever another
    /// thread writes into the source's memory meanwhile (ADR 0035); streaming, never a copy of
    /// the whole table (ADR 0016), but for a table of less than [`CANDIDATE_MIN_BYTES`], which
    /// is copied once, whole, hashed, then compared with a file under its name or written from
    /// that copy: its source is read once, stored before or not.
    ///
    /// A larger table stored before is found as by [`Self::put_slice`] (ADR 0027), by its size
    /// and first bytes; the found file is kept when a pass that hashes each copied block and
    /// compares it with the file finds every byte equal and the digest equal to the file's name
    /// (on a store [`Self::checked_by_readers`], when the digest is its name, ADR 0028).
    /// Anything else is written to a temp file in the store, hashed as written, and renamed to
    /// the digest of those bytes, replacing whatever was under that name. The source of a large
    /// table is read once when it is new, twice when it was stored before.
    ///
    /// The source may stop the read by returning an error from [`TableBytes::feed`] (the
    /// Python package does when Ctrl-C is pressed): the temp file is removed and that error is
    /// the `source` of the [`StoreError::WriteTemp`] returned.
    ///
    /// Errors: [`StoreError::WriteTemp`] (the temp file could not be written, the source
    /// failed, or it fed another number of bytes than `shape` and `dtype` need),
    /// [`StoreError::Write`] (the rename, naming the final path); on error no file is left
    /// behind.
    pub fn put_blocks(
        &self,
        dtype: Dtype,
        shape: [usize; 2],
        source: &dyn TableBytes,
    ) -> Result<(TableSpec, PathBuf), StoreError> {
        let temp_err = |source| StoreError::WriteTemp { dir: self.dir.clone(), dtype, shape, source };
        let expected_len = shape[0]
            .checked_mul(shape[1])
            .and_then(|n| n.checked_mul(dtype.itemsize()))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                temp_err(io::Error::new(io::ErrorKind::InvalidInput, "the shape overflows the address space"))
            })?;
        if expected_len < CANDIDATE_MIN_BYTES {
            return self.put_copied(dtype, shape, expected_len, source);
        }
        if let Some(found) = self.stored_before(dtype, shape, expected_len, source).map_err(temp_err)? {
            return Ok(found);
        }
        let header =
            npy_header(&TableSpec { digest: TableDigest::from_bytes([0; 16]), dtype, shape }).map_err(temp_err)?;
        let mut hasher = gridkey_digest::TableHasher::new(dtype, &shape);
        let (temp, _) = gridkey_fs::write_temp(&self.dir, self.fault(), |out| {
            out.write_all(&header)?;
            let fed = copied_blocks(source, |block| {
                hasher.update(block);
                out.write_all(block)
            })?;
            check_length(fed, expected_len, dtype, shape)
        })
        .map_err(temp_err)?;
        let digest = hasher
            .finish()
            .ok_or_else(|| temp_err(io::Error::new(io::ErrorKind::InvalidData, "the table was not fed whole")))?;
        let spec = TableSpec { digest, dtype, shape };
        let replacing = self.holds_other(&spec, |_| false);
        // A concurrent writer may have renamed the same bytes under the name first.
        self.commit_or_defer(temp, &spec, replacing, true).map(|path| (spec, path))
    }

    /// [`Self::put_blocks`] of a table of less than [`CANDIDATE_MIN_BYTES`] (`len` bytes of
    /// element data): the source is copied once, whole, into memory (at most 16 MiB, so the
    /// bound of ADR 0016 holds), the copy hashed, then compared with a file under its name or
    /// written from the copy ([`Self::put_slice`]'s way for a table this small). The source is read once whether or not the
    /// table was stored before, and the file under the name holds the bytes it was computed
    /// from (ADR 0035).
    ///
    /// Errors: as [`Self::put_blocks`].
    fn put_copied(
        &self,
        dtype: Dtype,
        shape: [usize; 2],
        len: usize,
        source: &dyn TableBytes,
    ) -> Result<(TableSpec, PathBuf), StoreError> {
        let temp_err = |source| StoreError::WriteTemp { dir: self.dir.clone(), dtype, shape, source };
        let mut copy = scratch::take(&scratch::COPY, len);
        let result = self.put_copied_into(&mut copy, dtype, shape, len, source).map_err(temp_err);
        scratch::keep(&scratch::COPY, copy);
        result?
    }

    /// [`Self::put_copied`] with `copy`, an empty buffer of at least `len` bytes of capacity
    /// (from [`scratch::take`]), as the copy. The outer error is the source's or its length's,
    /// the inner one the store's.
    fn put_copied_into(
        &self,
        copy: &mut Vec<u8>,
        dtype: Dtype,
        shape: [usize; 2],
        len: usize,
        source: &dyn TableBytes,
    ) -> io::Result<Result<(TableSpec, PathBuf), StoreError>> {
        let mut fed = 0usize;
        source.feed(&mut |piece| {
            fed += piece.len();
            // Never more than the table: a source that feeds too much is refused below.
            let take = (len - copy.len()).min(piece.len());
            copy.extend_from_slice(&piece[..take]);
            Ok(())
        })?;
        check_length(fed, len, dtype, shape)?;
        // The copy is an immutable C-order slice of the table's length: `put_slice`'s small-table
        // way (hashed, then compared with a file under the name or written).
        let copy = &copy[..];
        let digest = || {
            gridkey_digest::digest_raw(
                copy,
                dtype,
                gridkey_digest::ByteOrder::Little,
                gridkey_digest::MemoryOrder::C,
                &shape,
            )
            .expect("the copy holds shape[0] * shape[1] elements")
        };
        Ok(self.put_slice(dtype, shape, copy, digest))
    }

    /// The spec and path of a stored file that holds the bytes `source` feeds, checked as
    /// [`Self::put_blocks`] says; `None` when there is none (the table must be written).
    ///
    /// Errors: those of the source.
    fn stored_before(
        &self,
        dtype: Dtype,
        shape: [usize; 2],
        len: usize,
        source: &dyn TableBytes,
    ) -> io::Result<Option<(TableSpec, PathBuf)>> {
        let mut probe = Vec::with_capacity(CANDIDATE_PROBE_BYTES);
        let read = source.feed(&mut |piece| {
            let want = (CANDIDATE_PROBE_BYTES - probe.len()).min(piece.len());
            probe.extend_from_slice(&piece[..want]);
            if probe.len() == CANDIDATE_PROBE_BYTES {
                return Err(io::Error::new(io::ErrorKind::WriteZero, PROBE_FULL));
            }
            Ok(())
        });
        match read {
            Err(e) if e.kind() != io::ErrorKind::WriteZero || e.to_string() != PROBE_FULL => return Err(e),
            _ => {}
        }
        let Some(candidate) = self.candidate_of(dtype, shape, len, &probe) else { return Ok(None) };
        let theirs = candidate.data_bytes();
        let mut hasher = gridkey_digest::TableHasher::new(dtype, &shape);
        let mut at = 0;
        let mut same = true;
        let trusting = self.trusts_names();
        let fed = copied_blocks(source, |block| {
            hasher.update(block);
            if !trusting {
                same = same && theirs.get(at..at + block.len()) == Some(block);
            }
            at += block.len();
            Ok(())
        })?;
        let Some(digest) = hasher.finish().filter(|_| fed == len) else { return Ok(None) };
        // Equal bytes, copied once, hashed to the candidate's name: the file is the table.
        if same && candidate.spec().digest == digest {
            let spec = TableSpec { digest, dtype, shape };
            return Ok(Some((spec, self.path_of(&digest))));
        }
        Ok(None)
    }

    /// Opens a stored table read-only by mmap, checking that the path is a regular file and its
    /// magic, header, dtype, C order, shape and length against `spec`, and takes a shared lock
    /// on it for the life of the mapping (ADR 0009). Recomputes the digest only on a
    /// [`Self::verifying`] store (see [`Self::open_verified`]).
    ///
    /// Errors: [`StoreError::Missing`] (also when the file was removed while being opened),
    /// [`StoreError::NotAFile`], [`StoreError::Read`], [`StoreError::Format`],
    /// [`StoreError::Shape`], and on a verifying store [`StoreError::Digest`].
    /// A table missing here is opened in the site cache ([`Self::with_site`]), verified.
    pub fn open_table(&self, spec: &TableSpec) -> Result<MappedTable, StoreError> {
        self.open_checked(spec, self.verify)
    }

    /// [`Self::open_table`], then recomputes the digest of the content and compares it with the
    /// file's name. Reads the whole table once.
    ///
    /// Errors: those of [`Self::open_table`], and [`StoreError::Digest`].
    pub fn open_verified(&self, spec: &TableSpec) -> Result<MappedTable, StoreError> {
        self.open_checked(spec, true)
    }

    /// The checked open of `spec` here, its digest recomputed when `verify`; when it is missing
    /// here, the checked and verified open of the site cache's file (ADR 0036). A site cache
    /// that does not have it either leaves the error of the file here.
    fn open_checked(&self, spec: &TableSpec, verify: bool) -> Result<MappedTable, StoreError> {
        let table = match (MappedTable::map(self.path_of(&spec.digest), spec), &self.site) {
            (Err(missing @ StoreError::Missing { .. }), Some(site)) => {
                let hex = spec.digest.to_hex();
                return match MappedTable::map(site.join(&hex[..2]).join(format!("{hex}.npy")), spec) {
                    Err(StoreError::Missing { .. }) => Err(missing),
                    found => found.and_then(|table| table.verify().map(|()| table)),
                };
            }
            (table, _) => table?,
        };
        if verify {
            table.verify()?;
        }
        Ok(table)
    }
}

/// A table's C-order little-endian element bytes, as [`TableStore::put_blocks`] reads them.
pub trait TableBytes: Sync {
    /// Calls `sink` with consecutive pieces (of any sizes, in order) that together are the
    /// table's element bytes, read anew on every call: memory another thread writes may give
    /// other bytes each time. Stops at the first error of `sink`, and returns it.
    ///
    /// Errors: those of `sink`, or the source's own (which stop the put that reads it).
    fn feed(&self, sink: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()>;
}

/// Bytes held by the caller, which nothing else writes while they are stored.
impl TableBytes for Vec<u8> {
    fn feed(&self, sink: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        sink(self)
    }
}

/// Bytes of a table copied, then hashed and written or compared, per step of
/// [`TableStore::put_blocks`]: 1 MiB, large for the write, small enough to stay in the cache
/// between the copy and the hash.
pub const BLOCK_BYTES: usize = 1 << 20;

/// The message of the sentinel error that ends the read of a candidate's probe.
const PROBE_FULL: &str = "probe full";

/// Feeds `source` through one buffer of [`BLOCK_BYTES`]: `block` gets every [`BLOCK_BYTES`]
/// (the last block shorter) of copied bytes, never the source's memory itself. Returns the
/// number of bytes fed.
///
/// Errors: those of the source and of `block`.
fn copied_blocks(source: &dyn TableBytes, mut block: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<usize> {
    let mut buf = Vec::with_capacity(BLOCK_BYTES);
    let mut fed = 0usize;
    source.feed(&mut |mut piece| {
        fed += piece.len();
        while !piece.is_empty() {
            let take = (BLOCK_BYTES - buf.len()).min(piece.len());
            buf.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
            if buf.len() == BLOCK_BYTES {
                block(&buf)?;
                buf.clear();
            }
        }
        Ok(())
    })?;
    if !buf.is_empty() {
        block(&buf)?;
    }
    Ok(fed)
}

/// Ok when `fed` bytes are the `expected` bytes of a table of `dtype` and `shape`.
///
/// Errors: `InvalidData` naming both.
fn check_length(fed: usize, expected: usize, dtype: Dtype, shape: [usize; 2]) -> io::Result<()> {
    if fed == expected {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the source fed {fed} bytes, dtype {dtype} and shape {shape:?} need {expected}"),
    ))
}

/// Bytes written per step by [`TableStore::put_slice`] between two looks at the digest.
const PUT_CHUNK_BYTES: usize = 8 << 20;

/// Tables of at least this many bytes of element data look for a stored file of their own
/// before they are written ([`TableStore::put_slice`], ADR 0027): 16 MiB, whose digest takes
/// milliseconds, against microseconds for listing a store of hundreds of tables.
pub const CANDIDATE_MIN_BYTES: usize = 16 << 20;

/// Bytes hashed and then compared with a candidate per step of [`TableStore::put_slice`]: small
/// enough to stay in the core's cache between the two.
const COMPARE_CHUNK_BYTES: usize = 128 << 10;

/// Bytes of element data of a stored file read and compared to choose it as a candidate
/// ([`TableStore::put_slice`]): 64 KiB.
pub const CANDIDATE_PROBE_BYTES: usize = 64 << 10;

/// Bytes read per `pread` by [`MappedTable::verify`] and by the comparisons of what is written
/// with a stored file: 256 KiB, small enough to stay in the core's cache between the read and
/// the hash or comparison.
pub const VERIFY_BLOCK_BYTES: usize = 256 << 10;

/// A writer that compares what is written with `len` bytes of `file` from `start`, read with
/// `pread` (ADR 0034), instead of storing it. A file that ends early is not equal.
struct SameBytes<'a> {
    file: &'a File,
    start: u64,
    len: u64,
    at: u64,
    equal: bool,
    scratch: Vec<u8>,
}

impl<'a> SameBytes<'a> {
    fn new(file: &'a File, start: u64, len: u64) -> Self {
        let scratch = scratch::take(&scratch::BLOCK, VERIFY_BLOCK_BYTES);
        Self { file, start, len, at: 0, equal: true, scratch }
    }

    /// Whether exactly the `len` bytes of the file were written.
    fn all_equal(&self) -> bool {
        self.equal && self.at == self.len
    }
}

impl Drop for SameBytes<'_> {
    fn drop(&mut self) {
        scratch::keep(&scratch::BLOCK, std::mem::take(&mut self.scratch));
    }
}

impl Write for SameBytes<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt as _;
        let end = self.at + buf.len() as u64;
        self.equal &= end <= self.len;
        let mut at = self.at;
        for chunk in buf.chunks(VERIFY_BLOCK_BYTES) {
            if !self.equal {
                break;
            }
            self.scratch.resize(chunk.len(), 0);
            self.equal = self.file.read_exact_at(&mut self.scratch, self.start + at).is_ok() && self.scratch == chunk;
            at += chunk.len() as u64;
        }
        self.at = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Bytes of element data of a table of `spec`.
fn data_bytes(spec: &TableSpec) -> usize {
    spec.shape[0] * spec.shape[1] * spec.dtype.itemsize()
}

/// The `.npy` 1.0 header for `spec`, padded so that the data starts at a multiple of 64 bytes.
fn npy_header(spec: &TableSpec) -> io::Result<Vec<u8>> {
    let type_descriptor = match spec.dtype {
        Dtype::I32 => <i32 as WritableElement>::type_descriptor(),
        Dtype::I64 => <i64 as WritableElement>::type_descriptor(),
    };
    let header = Header { type_descriptor, layout: Layout::Standard, shape: spec.shape.to_vec() };
    header.to_bytes().map_err(io::Error::other)
}

/// The header bytes of `file` when they are exactly those [`npy_header`] writes for `spec` (read
/// through `pread`), else `None`. Such a header declares the spec's dtype, C order and shape by
/// construction, so opening a file the store wrote needs no parse; any other header is parsed
/// and checked field by field (ndarray-npy), which names what is wrong. The parse costs a
/// thread's first use of the parser a read of `/proc/self/maps` (its stack guard), milliseconds
/// in a process with many libraries mapped, such as a Python interpreter.
fn canonical_header(file: &File, spec: &TableSpec) -> Option<Box<[u8]>> {
    use std::os::unix::fs::FileExt as _;
    let expected = npy_header(spec).ok()?;
    let mut head = vec![0u8; expected.len()];
    file.read_exact_at(&mut head, 0).ok()?;
    (head == expected).then(|| expected.into_boxed_slice())
}

/// Writes `table` in C order, little-endian, through a buffer of
/// [`gridkey_digest::BUFFER_BYTES`] (in place when it is C-contiguous on a little-endian
/// host): `rows * cols * itemsize` bytes, the element data of a stored table.
///
/// Errors: the I/O error of `out`.
pub fn write_c_order<T: TableElement>(table: ArrayView2<'_, T>, out: &mut dyn Write) -> io::Result<()> {
    if let (Some(slice), true) = (table.as_slice(), cfg!(target_endian = "little")) {
        return out.write_all(bytemuck::cast_slice(slice));
    }
    let mut buf = vec![0u8; gridkey_digest::BUFFER_BYTES];
    let mut used = 0;
    for &x in table.iter() {
        x.put_le(&mut buf[used..used + T::SIZE]);
        used += T::SIZE;
        if used == buf.len() {
            out.write_all(&buf)?;
            used = 0;
        }
    }
    out.write_all(&buf[..used])
}

/// A reader of a file through `pread` from its start, keeping every byte it read (the header
/// of a table file, read without mapping it).
struct PreadReader<'a> {
    file: &'a File,
    at: u64,
    seen: Vec<u8>,
}

impl io::Read for PreadReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt as _;
        let n = self.file.read_at(buf, self.at)?;
        self.seen.extend_from_slice(&buf[..n]);
        self.at += n as u64;
        Ok(n)
    }
}

/// A read-only view of a mapped table, `(n, k)` in C order, borrowed from the mapping.
#[derive(Clone, Copy, Debug)]
pub enum TableView<'a> {
    /// An int32 table `(n, k)`, C order.
    I32(ArrayView2<'a, i32>),
    /// An int64 table `(n, k)`, C order.
    I64(ArrayView2<'a, i64>),
}

/// A stored table, memory-mapped read-only; checked against its [`TableSpec`] when opened. It
/// holds a shared `flock` on its file while it lives, so `gridkey cache gc` never removes it
/// (ADR 0009).
#[derive(Debug)]
pub struct MappedTable {
    spec: TableSpec,
    path: PathBuf,
    mmap: Mmap,
    // Where the data starts in the mapping, and the header bytes as checked when mapped: the
    // view is built from these, never from the header bytes as they are now, which a writer
    // that breaks the in-place contract may have changed.
    data_start: usize,
    header: Box<[u8]>,
    // The file mapped, which holds the shared lock that keeps `gridkey cache gc` away while the
    // mapping lives; `verify` and the byte comparisons read it with `pread` (ADR 0034).
    file: File,
}

impl MappedTable {
    fn map(path: PathBuf, spec: &TableSpec) -> Result<Self, StoreError> {
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::Missing { path, digest: spec.digest })
            }
            Err(source) => return Err(StoreError::Read { path, source }),
        };
        if !meta.file_type().is_file() {
            return Err(StoreError::NotAFile { path });
        }
        let file = Self::open_locked(&path, spec)?;
        // Marks the table as used now, for the collector's live-run rule (ADR 0026).
        gridkey_fs::touch(&file);
        let meta = file.metadata().map_err(|source| StoreError::Read { path: path.clone(), source })?;
        if !meta.file_type().is_file() {
            return Err(StoreError::NotAFile { path });
        }
        if meta.len() == 0 {
            return Err(StoreError::Format { path, dtype: spec.dtype, reason: "the file is empty".into() });
        }
        // The header and the file's length are checked through `pread` and `fstat`, never
        // through the mapping, so that no open touches a mapped page that a concurrent truncation
        // may have taken away (ADR 0034).
        let format = |reason: String| StoreError::Format { path: path.clone(), dtype: spec.dtype, reason };
        let (data_start, header_bytes, found) = match canonical_header(&file, spec) {
            Some(header) => (header.len(), header, spec.shape),
            None => {
                let mut reader = PreadReader { file: &file, at: 0, seen: Vec::new() };
                let header = Header::from_reader(&mut reader).map_err(|e| format(e.to_string()))?;
                let data_start = reader.seen.len();
                // An empty slice at an address aligned for both element types: the descriptor
                // alone is checked ("<i4" or "<i8", native little-endian).
                let aligned: [i64; 0] = [];
                let no_data: &[u8] = bytemuck::cast_slice(&aligned);
                let descriptor = match spec.dtype {
                    Dtype::I32 => <i32 as ViewElement>::bytes_as_slice(no_data, &header.type_descriptor, 0).map(|_| ()),
                    Dtype::I64 => <i64 as ViewElement>::bytes_as_slice(no_data, &header.type_descriptor, 0).map(|_| ()),
                };
                descriptor.map_err(|e| format(e.to_string()))?;
                let [rows, cols] = header.shape[..] else {
                    return Err(format(format!("its header has {} dimensions, a table has 2", header.shape.len())));
                };
                if !data_start.is_multiple_of(spec.dtype.itemsize()) {
                    return Err(format(format!(
                        "its data starts at byte {data_start}, not aligned for {}",
                        spec.dtype
                    )));
                }
                if header.layout.is_fortran() {
                    return Err(format("its header says fortran_order: True".into()));
                }
                (data_start, reader.seen.into_boxed_slice(), [rows, cols])
            }
        };
        let expected_len = found[0]
            .checked_mul(found[1])
            .and_then(|n| n.checked_mul(spec.dtype.itemsize()))
            .and_then(|n| n.checked_add(data_start))
            .ok_or_else(|| format(format!("its shape {found:?} overflows the address space")))?;
        if meta.len() != expected_len as u64 {
            return Err(format(format!("it holds {} bytes, its header announces {expected_len}", meta.len())));
        }
        if found != spec.shape {
            return Err(StoreError::Shape { path, expected: spec.shape, found });
        }
        // SAFETY: the file is opened read-only and store files are never written in place
        // (they are created under a temp name, made read-only and renamed); a file modified
        // in place by someone else breaks the contract of docs/design.md "Contracts" and ADR 0012 and is caught
        // by `verify`, not by memory unsafety in Rust code that only reads integers. A file
        // truncated while mapped makes a read of the lost pages raise `SIGBUS`, which ends the
        // process that reads them: only translation reads the mapping (ADR 0034).
        let mmap = unsafe { Mmap::map(&file) }.map_err(|source| StoreError::Read { path: path.clone(), source })?;
        if mmap.len() != expected_len {
            return Err(format(format!("it was truncated to {} bytes while it was opened", mmap.len())));
        }
        Ok(Self { spec: *spec, path, mmap, data_start, header: header_bytes, file })
    }

    /// Opens `path` for mapping with a shared lock ([`gridkey_fs::lock::open_shared`]: no
    /// symlink followed, retried while the path is renamed over), mapping its errors.
    fn open_locked(path: &Path, spec: &TableSpec) -> Result<File, StoreError> {
        gridkey_fs::lock::open_shared(path).map_err(|source| match source.raw_os_error() {
            Some(libc::ELOOP) => StoreError::NotAFile { path: path.to_path_buf() },
            Some(libc::ENOENT) => StoreError::Missing { path: path.to_path_buf(), digest: spec.digest },
            _ => StoreError::Read { path: path.to_path_buf(), source },
        })
    }

    /// What this table was opened as: digest, dtype, shape.
    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    /// The file it is mapped from, `<cache>/tables-v1/<hex[0..2]>/<hex>.npy`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The element bytes of the table (C order, little-endian), borrowed from the mapping:
    /// `shape[0] * shape[1] * itemsize` bytes. Reading them touches the mapping, which ends the
    /// process with `SIGBUS` if the file was truncated meanwhile: the store's own checks read
    /// the file with `pread` instead ([`Self::verify`], ADR 0034).
    pub fn data_bytes(&self) -> &[u8] {
        match self.view() {
            TableView::I32(v) => bytemuck::cast_slice(v.to_slice().expect("a stored table is C-contiguous")),
            TableView::I64(v) => bytemuck::cast_slice(v.to_slice().expect("a stored table is C-contiguous")),
        }
    }

    /// Recomputes the digest of the mapped file's content and compares it with the name it was
    /// opened by, and compares the header with the one checked when it was mapped: a file
    /// modified in place after it was stored fails here (ADR 0012).
    ///
    /// Reads the file the mapping was made from (the same inode, so the bytes the mapping shows)
    /// through `pread`, [`VERIFY_BLOCK_BYTES`] at a time, hashing each block as it comes, and
    /// never touches the mapping: a file truncated while it is mapped is an error here, not a
    /// `SIGBUS` (ADR 0034). Reads the whole table once.
    ///
    /// Errors: [`StoreError::Digest`] naming the file, the expected and the found digest;
    /// [`StoreError::Format`] naming the file when its header changed after it was mapped;
    /// [`StoreError::Truncated`] when the file is shorter than the table;
    /// [`StoreError::Read`] when it cannot be read.
    pub fn verify(&self) -> Result<(), StoreError> {
        let mut head = vec![0u8; self.data_start];
        self.read_at(&mut head, 0)?;
        if head != *self.header {
            return Err(StoreError::Format {
                path: self.path.clone(),
                dtype: self.spec.dtype,
                reason: "its header was changed in place after it was mapped".into(),
            });
        }
        let mut hasher = gridkey_digest::TableHasher::new(self.spec.dtype, &self.spec.shape);
        let mut block = vec![0u8; VERIFY_BLOCK_BYTES.min(data_bytes(&self.spec)).max(1)];
        let mut at = self.data_start as u64;
        let end = at + data_bytes(&self.spec) as u64;
        while at < end {
            let n = block.len().min((end - at) as usize);
            self.read_at(&mut block[..n], at)?;
            hasher.update(&block[..n]);
            at += n as u64;
        }
        let found = hasher.finish().ok_or_else(|| StoreError::Format {
            path: self.path.clone(),
            dtype: self.spec.dtype,
            reason: "its element data could not be hashed as a whole table".into(),
        })?;
        if found != self.spec.digest {
            return Err(StoreError::Digest { path: self.path.clone(), expected: self.spec.digest, found });
        }
        Ok(())
    }

    /// Whether the element data of the mapped file equals what `write_data` writes, all of it
    /// and nothing more, read through `pread` (never through the mapping, ADR 0034).
    fn same_data(&self, write_data: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> bool {
        let mut same = SameBytes::new(&self.file, self.data_start as u64, data_bytes(&self.spec) as u64);
        write_data(&mut same).is_ok() && same.all_equal()
    }

    /// Fills `buf` from the mapped file at `offset` with `pread`.
    ///
    /// Errors: [`StoreError::Truncated`] when the file ends first, [`StoreError::Read`].
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), StoreError> {
        use std::os::unix::fs::FileExt as _;
        self.file.read_exact_at(buf, offset).map_err(|source| {
            if source.kind() == io::ErrorKind::UnexpectedEof {
                let found = self.file.metadata().map_or(0, |m| m.len());
                let expected = (self.data_start + data_bytes(&self.spec)) as u64;
                StoreError::Truncated { path: self.path.clone(), expected, found }
            } else {
                StoreError::Read { path: self.path.clone(), source }
            }
        })
    }

    /// The table, C order, borrowed from the mapping.
    pub fn view(&self) -> TableView<'_> {
        // From the data offset and shape checked in `map`, not from the header bytes now: a
        // header changed in place later (the contract broken) cannot make this fail, and is
        // caught by `verify`.
        let data = &self.mmap[self.data_start..];
        match self.spec.dtype {
            Dtype::I32 => TableView::I32(data_view::<i32>(data, self.spec.shape)),
            Dtype::I64 => TableView::I64(data_view::<i64>(data, self.spec.shape)),
        }
    }
}

/// The C-order view of `data`, whose alignment and length `map` checked for `shape` (the mapping's
/// length and address do not change while it lives).
fn data_view<T: bytemuck::Pod>(data: &[u8], shape: [usize; 2]) -> ArrayView2<'_, T> {
    ArrayView2::from_shape((shape[0], shape[1]), bytemuck::cast_slice(data)).expect("shape checked when mapped")
}

/// Buffers kept per thread from one put to the next: the copy of a small table
/// ([`TableStore::put_copied`]) and the block of a stored file read to compare it with
/// (`SameBytes`). A fresh buffer of a table's size is fresh pages that the kernel zeroes on first
/// touch: in a new process, storing or comparing a batch of tables (the 14 tables of an ICON
/// R02B04 grid, 5.7 MB) took 4.0 ms with a fresh buffer per table and 2.9 ms once the
/// allocator's pages were warm (`crates/gridkey-python`, first `TableStore.put_all`). A thread
/// keeps at most [`scratch::KEPT_COPY_BYTES`] + [`VERIFY_BLOCK_BYTES`] (4.25 MiB); a larger
/// copy is freed after its put, as before.
mod scratch {
    use std::cell::Cell;
    use std::thread::LocalKey;

    /// The largest copy buffer a thread keeps between puts: 4 MiB.
    pub const KEPT_COPY_BYTES: usize = 4 << 20;

    thread_local! {
        /// The copy of a small table.
        pub static COPY: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
        /// A block of a stored file read to compare.
        pub static BLOCK: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }

    /// The thread's kept buffer of `which`, emptied, with room for at least `len` bytes (a new
    /// one when the thread keeps none, or when a caller up the stack holds it).
    pub fn take(which: &'static LocalKey<Cell<Vec<u8>>>, len: usize) -> Vec<u8> {
        let mut buf = which.with(Cell::take);
        buf.clear();
        buf.reserve(len);
        buf
    }

    /// Gives `buf` back to the thread's `which`, when it is at most [`KEPT_COPY_BYTES`] (a larger
    /// one is freed).
    pub fn keep(which: &'static LocalKey<Cell<Vec<u8>>>, buf: Vec<u8>) {
        if buf.capacity() <= KEPT_COPY_BYTES {
            which.with(|kept| kept.set(buf));
        }
    }
}
