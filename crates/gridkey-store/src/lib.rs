//! Content-addressed store of neighbour tables as `.npy` files (DESIGN 4.2, ADR 0002).
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
//! Crash consistency and hostile files (ADR 0012): a writer killed at any point leaves at most a
//! temp file, which [`remove_stale_temps`] removes once no process holds its lock; a mapped
//! table is locked shared so that `gridkey cache gc` never removes it (ADR 0009, [`lock`]).

#![warn(missing_docs)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub mod fault;
pub mod lock;

use gridkey_digest::{digest_table, Dtype, TableDigest, TableElement};
use memmap2::Mmap;
use ndarray::ArrayView2;
use ndarray_npy::npy::header::{Header, Layout};
use ndarray_npy::{ViewNpyExt, WritableElement};

/// Name of the store directory under the cache directory; carries the digest format version.
pub const TABLES_DIR: &str = "tables-v1";

/// Prefix of temp files in the store; anything with it is an unfinished write.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Errors of the table store. Every variant names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store directory could not be created or written.
    #[error("cannot use table store directory {path}: {source}; point GRIDKEY_CACHE_DIR (or --cache-dir) at a writable directory")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Writing a table failed (full disk, permissions); nothing was left under the final name.
    #[error("cannot write table {digest} to {path}: {source}; free space or fix permissions, nothing was left behind")]
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

/// What a caller expects of a stored table: its digest, dtype and shape `(n, k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TableSpec {
    /// The digest (format v1) of the table; names the file.
    pub digest: TableDigest,
    /// The element type.
    pub dtype: Dtype,
    /// The shape `(rows, max_neighbours)` in elements.
    pub shape: [usize; 2],
}

/// A handle on the table store inside a cache directory.
#[derive(Clone, Debug)]
pub struct TableStore {
    cache_dir: PathBuf,
    dir: PathBuf,
    verify: bool,
}

impl TableStore {
    /// Opens (creating if needed) the store `<cache_dir>/tables-v1`. Opens do not recompute
    /// digests unless [`Self::verifying`] says so (the `verify_tables` setting).
    ///
    /// Errors: [`StoreError::Directory`] when the directory cannot be created.
    pub fn open(cache_dir: &Path) -> Result<Self, StoreError> {
        let dir = cache_dir.join(TABLES_DIR);
        fs::create_dir_all(&dir).map_err(|source| StoreError::Directory { path: dir.clone(), source })?;
        Ok(Self { cache_dir: cache_dir.to_path_buf(), dir, verify: false })
    }

    /// This store with every [`Self::open_table`] (and so every check of an existing file by
    /// [`Self::put_with`]) recomputing the digest: a file modified in place after it was stored
    /// is then an error on open and is rewritten by a put (ADR 0012).
    pub fn verifying(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// Whether every open recomputes the digest.
    pub fn verifies(&self) -> bool {
        self.verify
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
        if let Ok(existing) = self.open_table(spec) {
            let mut same = SameBytes::new(existing.data_bytes());
            if write_data(&mut same).is_ok() && same.all_equal() {
                return Ok(path);
            }
        }
        let write_err = |source| StoreError::Write { path: path.clone(), digest: spec.digest, source };
        let header = npy_header(spec).map_err(write_err)?;
        let expected_len = header.len() as u64 + data_bytes(spec) as u64;
        let written = write_atomic(&path, |out| {
            out.write_all(&header)?;
            write_data(out)
        });
        match written {
            Ok(len) if len == expected_len => Ok(path),
            Ok(len) => {
                // The writer broke its contract; the file is named by content it does not hold.
                let _ = fs::remove_file(&path);
                Err(write_err(io::Error::other(format!(
                    "the table writer produced {len} bytes, the header announces {expected_len}"
                ))))
            }
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
    /// a write (`cargo xtask bench`, case `view_build`; ADR 0008). As soon as the digest is known
    /// and a valid file of it is already stored, the write stops and the temp file is removed,
    /// so a table stored before costs about its digest. `data` must hold
    /// `shape[0] * shape[1] * dtype.itemsize()` bytes and `digest` must return the digest of the
    /// table they hold; a length that does not match is a [`StoreError::Write`].
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
                write_temp(&self.dir, fault::Fault::for_path(&self.dir), |out| {
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
        if self.open_table(&spec).is_ok_and(|existing| existing.data_bytes() == data) {
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
        match commit_temp(temp, &path, fault::Fault::for_path(&path)) {
            Ok(_) => Ok((spec, path)),
            Err(_) if self.open_table(&spec).is_ok() => Ok((spec, path)),
            Err(source) => Err(write_err(source)),
        }
    }

    /// Opens a stored table read-only by mmap, checking that the path is a regular file and its
    /// magic, header, dtype, C order, shape and length against `spec`, and takes a shared lock
    /// on it for the life of the mapping (ADR 0009). Recomputes the digest only on a
    /// [`Self::verifying`] store (see [`Self::open_verified`]).
    ///
    /// Errors: [`StoreError::Missing`] (also when the file was removed while being opened),
    /// [`StoreError::NotAFile`], [`StoreError::Read`], [`StoreError::Format`],
    /// [`StoreError::Shape`], and on a verifying store [`StoreError::Digest`].
    pub fn open_table(&self, spec: &TableSpec) -> Result<MappedTable, StoreError> {
        if self.verify {
            return self.open_verified(spec);
        }
        MappedTable::map(self.path_of(&spec.digest), spec)
    }

    /// [`Self::open_table`], then recomputes the digest of the content and compares it with the
    /// file's name. Reads the whole table once.
    ///
    /// Errors: those of [`Self::open_table`], and [`StoreError::Digest`].
    pub fn open_verified(&self, spec: &TableSpec) -> Result<MappedTable, StoreError> {
        let table = MappedTable::map(self.path_of(&spec.digest), spec)?;
        table.verify()?;
        Ok(table)
    }
}

/// Writes a file atomically: `write` fills a temp file (prefix [`TEMP_PREFIX`]) in the directory
/// of `path` (created if needed), which is `sync_all`ed, made read-only and renamed to `path`,
/// and the directory synced. Returns the number of bytes written.
///
/// The temp file is locked exclusively while it is written ([`lock`]), so that
/// [`remove_stale_temps`] can tell a live write from one whose process died. On any error the
/// temp file is removed and nothing appears under `path`. A process killed in the middle leaves
/// only a temp file, which no reader ever opens. This is the one writer of every persistent
/// file of gridkey (tables here, translation entries in gridkey-fingerprint);
/// [`TableStore::put_slice`] uses its two halves with the final name chosen after the write.
/// The test hook [`fault::ENV_FAULT`] can stop or fail it at chosen points.
///
/// Errors: the I/O error of the first step that failed (`ENOSPC` for a full disk, `EROFS` for
/// a read-only file system).
pub fn write_atomic(path: &Path, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<u64> {
    let fault = fault::Fault::for_path(path);
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let (temp, len) = write_temp(parent, fault, write)?;
    commit_temp(temp, path, fault)?;
    Ok(len)
}

/// First half of [`write_atomic`]: a flushed temp file in `dir` (created if needed), locked
/// exclusively while it lives, holding what `write` wrote, and its length in bytes; removed
/// when dropped.
fn write_temp(
    dir: &Path,
    fault: fault::Fault,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<(tempfile::NamedTempFile, u64)> {
    fs::create_dir_all(dir)?;
    let temp = tempfile::Builder::new().prefix(TEMP_PREFIX).tempfile_in(dir)?;
    lock::lock_exclusive(temp.as_file())?;
    fault.pause_at(fault::PausePoint::Created, temp.path());
    let len = {
        let mut sink = fault::FaultWriter { file: temp.as_file(), temp: temp.path(), fault, written: 0 };
        let mut out = BufWriter::with_capacity(1 << 20, &mut sink);
        write(&mut out)?;
        out.flush()?;
        drop(out);
        sink.written
    };
    fault.pause_at(fault::PausePoint::Written, temp.path());
    Ok((temp, len))
}

/// Second half of [`write_atomic`]: `sync_all`, read-only, rename to `path` (its directory created
/// if needed, on the same file system as the temp file), directory synced.
fn commit_temp(temp: tempfile::NamedTempFile, path: &Path, fault: fault::Fault) -> io::Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(parent)?;
    let file = temp.as_file();
    file.sync_all()?;
    let mut perms = file.metadata()?.permissions();
    perms.set_readonly(true);
    file.set_permissions(perms)?;
    fault.pause_at(fault::PausePoint::Synced, temp.path());
    temp.persist(path).map_err(|e| e.error)?;
    File::open(parent)?.sync_all()?;
    Ok(())
}

/// Temp files removed by [`remove_stale_temps`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TempSweep {
    /// The files removed.
    pub removed: Vec<PathBuf>,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// Removes, under `dir` (recursively), every regular file named [`TEMP_PREFIX`]`*` that is at
/// least `min_age` old (by modification time) and that no process holds a lock on: the remains
/// of a writer that was killed or lost power (ADR 0012). A live writer holds an exclusive lock
/// on its temp file, so it is never removed; `min_age` also covers the instant between the
/// creation of a temp file and its lock, and writers that cannot lock (the C compiler's output).
/// A missing `dir` is an empty sweep.
///
/// Errors: the I/O error of listing a directory (a file that vanished meanwhile is skipped).
pub fn remove_stale_temps(dir: &Path, min_age: Duration) -> io::Result<TempSweep> {
    let mut sweep = TempSweep::default();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(sweep),
        Err(e) => return Err(e),
    };
    let now = SystemTime::now();
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if meta.is_dir() {
            let inner = remove_stale_temps(&path, min_age)?;
            sweep.removed.extend(inner.removed);
            sweep.bytes += inner.bytes;
            continue;
        }
        let is_temp = entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX);
        let age = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).unwrap_or_default();
        if !is_temp || !meta.is_file() || age < min_age {
            continue;
        }
        if remove_if_unlocked(&path)? {
            sweep.bytes += meta.len();
            sweep.removed.push(path);
        }
    }
    Ok(sweep)
}

/// Removes the regular file at `path` while holding an exclusive lock on it taken without
/// waiting; `Ok(false)` when a process holds a lock on it (it is mapped or being written) or
/// when it is gone. The lock is held across the `unlink`, so a reader that opens the file
/// meanwhile sees afterwards that its path is gone ([`StoreError::Missing`]) (ADR 0009).
///
/// Errors: the I/O error of opening, locking or removing other than `NotFound`.
pub fn remove_if_unlocked(path: &Path) -> io::Result<bool> {
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !lock::try_lock_exclusive(&file)? {
        return Ok(false);
    }
    // The path may have been renamed over since it was opened: remove only what is locked.
    let same = fs::symlink_metadata(path).is_ok_and(|m| same_file(&m, &file));
    if !same {
        return Ok(false);
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn same_file(meta: &fs::Metadata, file: &File) -> bool {
    file.metadata().is_ok_and(|f| f.dev() == meta.dev() && f.ino() == meta.ino())
}

/// Bytes written per step by [`TableStore::put_slice`] between two looks at the digest.
const PUT_CHUNK_BYTES: usize = 8 << 20;

/// A writer that compares what is written with `expected` instead of storing it.
struct SameBytes<'a> {
    expected: &'a [u8],
    at: usize,
    equal: bool,
}

impl<'a> SameBytes<'a> {
    fn new(expected: &'a [u8]) -> Self {
        Self { expected, at: 0, equal: true }
    }

    /// Whether exactly `expected` was written.
    fn all_equal(&self) -> bool {
        self.equal && self.at == self.expected.len()
    }
}

impl Write for SameBytes<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let end = self.at + buf.len();
        self.equal &= self.expected.get(self.at..end) == Some(buf);
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

/// Writes `table` in C order, little-endian, through a bounded buffer (in place when it is
/// C-contiguous on a little-endian host).
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

/// A read-only view of a mapped table.
#[derive(Clone, Copy, Debug)]
pub enum TableView<'a> {
    /// An int32 table `(n, k)`, C order.
    I32(ArrayView2<'a, i32>),
    /// An int64 table `(n, k)`, C order.
    I64(ArrayView2<'a, i64>),
}

/// A stored table, memory-mapped read-only; checked against its [`TableSpec`] when opened.
#[derive(Debug)]
pub struct MappedTable {
    spec: TableSpec,
    path: PathBuf,
    mmap: Mmap,
    // Holds the shared lock that keeps `gridkey cache gc` away while the mapping lives.
    _lock: File,
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
        let meta = file.metadata().map_err(|source| StoreError::Read { path: path.clone(), source })?;
        if !meta.file_type().is_file() {
            return Err(StoreError::NotAFile { path });
        }
        if meta.len() == 0 {
            return Err(StoreError::Format { path, dtype: spec.dtype, reason: "the file is empty".into() });
        }
        // SAFETY: the file is opened read-only and store files are never written in place
        // (they are created under a temp name, made read-only and renamed); a file modified
        // in place by someone else breaks the contract of DESIGN 7 and ADR 0012 and is caught
        // by `open_verified`, not by memory unsafety in Rust code that only reads integers.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|source| StoreError::Read { path: path.clone(), source })?;
        let table = Self { spec: *spec, path, mmap, _lock: file };
        let found = match spec.dtype {
            Dtype::I32 => ArrayView2::<i32>::view_npy(&table.mmap).map(|v| v.raw_dim()),
            Dtype::I64 => ArrayView2::<i64>::view_npy(&table.mmap).map(|v| v.raw_dim()),
        }
        .map_err(|e| StoreError::Format {
            path: table.path.clone(),
            dtype: spec.dtype,
            reason: e.to_string(),
        })?;
        let found = [found[0], found[1]];
        if found != spec.shape {
            return Err(StoreError::Shape { path: table.path, expected: spec.shape, found });
        }
        Ok(table)
    }

    /// Opens `path` read-only without following a symlink and takes a shared lock on it. The
    /// collector removes a file while holding an exclusive lock, and concurrent writers of the
    /// same table rename identical content over it: once the shared lock is ours, the path must
    /// still name the file we hold, else it is opened again (replaced) or is
    /// [`StoreError::Missing`] (removed).
    fn open_locked(path: &Path, spec: &TableSpec) -> Result<File, StoreError> {
        let mut last = None;
        for _ in 0..16 {
            // O_NOFOLLOW: a symlink planted after the caller's check is refused, not followed.
            let file =
                OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(
                    |source| match source.raw_os_error() {
                        Some(libc::ELOOP) => StoreError::NotAFile { path: path.to_path_buf() },
                        Some(libc::ENOENT) => StoreError::Missing { path: path.to_path_buf(), digest: spec.digest },
                        _ => StoreError::Read { path: path.to_path_buf(), source },
                    },
                )?;
            lock::lock_shared(&file).map_err(|source| StoreError::Read { path: path.to_path_buf(), source })?;
            match fs::symlink_metadata(path) {
                Ok(m) if same_file(&m, &file) => return Ok(file),
                Ok(_) => last = Some(file),
                Err(_) => return Err(StoreError::Missing { path: path.to_path_buf(), digest: spec.digest }),
            }
        }
        // Still replaced after many tries: the last file held is complete (renamed into place
        // whole) and names the same content.
        last.ok_or_else(|| StoreError::Missing { path: path.to_path_buf(), digest: spec.digest })
    }

    /// What this table was opened as.
    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    /// The file it is mapped from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The element bytes of the table (C order, little-endian), borrowed from the mapping:
    /// `shape[0] * shape[1] * itemsize` bytes.
    pub fn data_bytes(&self) -> &[u8] {
        match self.view() {
            TableView::I32(v) => bytemuck::cast_slice(v.to_slice().expect("a stored table is C-contiguous")),
            TableView::I64(v) => bytemuck::cast_slice(v.to_slice().expect("a stored table is C-contiguous")),
        }
    }

    /// Recomputes the digest of the mapped content (reads the whole table once) and compares it
    /// with the name it was opened by: a file modified in place after it was stored fails here
    /// (ADR 0012).
    ///
    /// Errors: [`StoreError::Digest`] naming the file, the expected and the found digest.
    pub fn verify(&self) -> Result<(), StoreError> {
        let found = match self.view() {
            TableView::I32(v) => digest_table(v),
            TableView::I64(v) => digest_table(v),
        };
        if found != self.spec.digest {
            return Err(StoreError::Digest { path: self.path.clone(), expected: self.spec.digest, found });
        }
        Ok(())
    }

    /// The table, C order, borrowed from the mapping.
    pub fn view(&self) -> TableView<'_> {
        // The header was checked in `map`; these cannot fail for the same bytes.
        match self.spec.dtype {
            Dtype::I32 => TableView::I32(view_checked::<i32>(&self.mmap)),
            Dtype::I64 => TableView::I64(view_checked::<i64>(&self.mmap)),
        }
    }
}

fn view_checked<'a, T>(bytes: &'a [u8]) -> ArrayView2<'a, T>
where
    ArrayView2<'a, T>: ViewNpyExt<'a>,
{
    match ArrayView2::<T>::view_npy(bytes) {
        Ok(v) => v,
        Err(e) => unreachable!("header checked when mapped: {e}"),
    }
}
