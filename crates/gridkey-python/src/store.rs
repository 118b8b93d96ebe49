//! `gridkey.TableStore` and `gridkey.MappedTable`: the content-addressed `.npy` store of
//! gridkey-store, with tables put from NumPy memory and opened as read-only NumPy arrays over
//! the memory map (ADR 0002).

use std::path::PathBuf;
use std::sync::Arc;

use gridkey_digest::{Dtype, TableDigest};
use gridkey_store::{StoreError, TableSpec};
use pyo3::prelude::*;

use crate::args;
use crate::array::{dtype_arg, readonly_array, table, Table};
use crate::device::{copy_error, PyDeviceTable};
use crate::errors::{error, guard, too_large, IntoPyErr, Kind};
use crate::interrupt::{self, Cancel};
use crate::raw::{Narrow, RawTable, Source, DOES_NOT_FIT};
use crate::settings::Settings;
use gridkey_offsets::TableSource;

/// Stores `raw` (as its own dtype, or with [`Narrow::ToI32`] an int64 table whose elements all
/// fit as int32, ADR 0006) and returns its spec, through `TableStore::put_blocks`: every block
/// of the table is copied once and hashed and written from the copy, so the stored file holds
/// the bytes its name is the digest of even while another thread writes the array (ADR 0035);
/// a table stored before is found and compared as ADR 0027 says. An int64 table that stops
/// fitting while it is narrowed is stored at its own width. Stops, removing its temp file,
/// once `cancel` is set. Call without the GIL.
///
/// Errors: those of the store; a [`StoreError::WriteTemp`] whose source is
/// `interrupt::interrupted()` once `cancel` is set.
pub fn store_raw(
    store: &gridkey_store::TableStore,
    raw: &RawTable<'_>,
    narrow: Narrow,
    cancel: &Cancel,
) -> Result<TableSpec, StoreError> {
    let shape = raw.shape();
    if narrow == Narrow::ToI32 && raw.dtype() == Dtype::I64 && raw.fits_i32(cancel) {
        let source = Source { raw, narrow: Narrow::ToI32, cancel };
        match store.put_blocks(Dtype::I32, shape, &source) {
            // Written since it was checked: kept at its own width (the digest is of what is stored).
            Err(StoreError::WriteTemp { source, .. })
                if source.kind() == std::io::ErrorKind::InvalidData && source.to_string() == DOES_NOT_FIT => {}
            other => return other.map(|(spec, _)| spec),
        }
    }
    let source = Source { raw, narrow: Narrow::Keep, cancel };
    store.put_blocks(raw.dtype(), shape, &source).map(|(spec, _)| spec)
}

/// The size in bytes of a table of `dtype` and `shape` (its elements in C order, as the digest
/// reads them), when it is at most `max_bytes`.
///
/// Errors: `TableTooLargeError` naming `offset` (when given), the size and the limit.
pub fn check_size(offset: Option<&str>, dtype: Dtype, shape: [usize; 2], max_bytes: u64) -> PyResult<usize> {
    let size = shape[0] as u128 * shape[1] as u128 * dtype.itemsize() as u128;
    match usize::try_from(size) {
        Ok(bytes) if size <= u128::from(max_bytes) => Ok(bytes),
        _ => Err(too_large(offset, dtype, shape, size, max_bytes)),
    }
}

/// The spec of a table given by its digest text, dtype-like and shape.
///
/// Errors: `TableValueError` for a digest that is not 32 hex digits or a shape whose byte size
/// overflows; `TableTypeError` for a dtype that is not int32 or int64 little-endian.
pub fn spec_arg(digest: &str, dtype: &Bound<'_, PyAny>, shape: &Bound<'_, PyAny>) -> PyResult<TableSpec> {
    let digest: TableDigest = digest.parse().map_err(|e: gridkey_digest::DigestError| e.into_py_err())?;
    let dtype = dtype_arg(dtype)?;
    let shape = shape_arg(shape)?;
    let fits = shape[0]
        .checked_mul(shape[1])
        .and_then(|n| n.checked_mul(dtype.itemsize()))
        .is_some_and(|b| b <= isize::MAX as usize);
    if !fits {
        return Err(error(
            Kind::Value,
            format!("shape {shape:?} of {dtype} is larger than any table in memory can be: pass the table's own shape"),
        ));
    }
    Ok(TableSpec { digest, dtype, shape })
}

/// A shape argument: two non-negative integers.
///
/// Errors: `TableValueError` for anything else.
fn shape_arg(shape: &Bound<'_, PyAny>) -> PyResult<[usize; 2]> {
    let bad = || {
        error(
            Kind::Value,
            format!("shape {shape} is not a table shape: pass (rows, max_neighbours), two integers from 0"),
        )
    };
    let items: Vec<Bound<'_, PyAny>> = match shape.try_iter() {
        Ok(iter) if !shape.is_instance_of::<pyo3::types::PyString>() => {
            iter.collect::<PyResult<_>>().map_err(|_| bad())?
        }
        _ => return Err(bad()),
    };
    let [n, k] = items.as_slice() else { return Err(bad()) };
    let extent = |x: &Bound<'_, PyAny>| -> PyResult<usize> {
        let index = x.call_method0("__index__").map_err(|_| bad())?;
        index.extract::<usize>().map_err(|_| {
            error(
                Kind::Value,
                format!(
                    "shape {shape} is larger than any table in memory can be, or negative: pass the table's own shape"
                ),
            )
        })
    };
    Ok([extent(n)?, extent(k)?])
}

/// What a mapped array keeps alive: the mapping (and its shared lock, ADR 0009).
pub enum Mapping {
    /// Opened from the store.
    Store(gridkey_store::MappedTable),
    /// The table of a compile-time connectivity.
    View(Arc<gridkey_offsets::CompileTimeConnectivity>),
}

/// A stored table mapped read-only into memory: the `base` of every array
/// [`TableStore::open`] returns, holding the mapping and its shared lock while any view of it
/// lives.
#[pyclass(module = "gridkey", frozen)]
pub struct MappedTable {
    mapping: Mapping,
    path: PathBuf,
}

impl MappedTable {
    fn spec(&self) -> TableSpec {
        match &self.mapping {
            Mapping::Store(t) => *t.spec(),
            Mapping::View(c) => *c.spec(),
        }
    }

    fn data_ptr(&self) -> *const u8 {
        let view = match &self.mapping {
            Mapping::Store(t) => t.view(),
            Mapping::View(c) => c.table(),
        };
        match view {
            gridkey_store::TableView::I32(v) => v.as_ptr().cast(),
            gridkey_store::TableView::I64(v) => v.as_ptr().cast(),
        }
    }

    /// A read-only C-contiguous NumPy array over `mapping` whose base holds it.
    pub fn array(py: Python<'_>, mapping: Mapping, path: PathBuf) -> PyResult<Bound<'_, PyAny>> {
        let owner = Bound::new(py, MappedTable { mapping, path })?;
        let (spec, data) = {
            let t = owner.get();
            (t.spec(), t.data_ptr())
        };
        // SAFETY: `data` is the first element of the mapping that `owner` holds and never
        // changes (store files are never written in place, ADR 0002); the mapping holds
        // `shape[0] * shape[1]` elements in C order, checked when it was opened.
        unsafe { readonly_array(py, spec.dtype, spec.shape, data, owner.into_any()) }
    }
}

#[pymethods]
impl MappedTable {
    /// The table digest, 32 hex digits.
    #[getter]
    fn digest(&self) -> String {
        self.spec().digest.to_hex()
    }

    /// The dtype's typestr, `"<i4"` or `"<i8"`.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.spec().dtype.typestr()
    }

    /// The shape `(n, k)`.
    #[getter]
    fn shape(&self) -> (usize, usize) {
        let [n, k] = self.spec().shape;
        (n, k)
    }

    /// The `.npy` file mapped.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Recomputes the digest of the mapped bytes and compares it with the table's name, reading
    /// the file the mapping was made from (the same inode) through `pread`, never the mapping
    /// itself: a file truncated while mapped is an error here, not a crash (ADR 0034). Reads the
    /// whole table once, with the GIL released.
    ///
    /// Errors: `TableFileError` naming the file when its bytes are not the table its name says,
    /// it is shorter than the table, or its header changed; `GridkeyOSError` when it cannot be
    /// read.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        guard(|| {
            py.detach(|| match &self.mapping {
                Mapping::Store(t) => t.verify(),
                Mapping::View(c) => c.verify(),
            })
            .map_err(IntoPyErr::into_py_err)
        })
    }

    fn __repr__(&self) -> String {
        format!("MappedTable({}, {}, {:?}, {})", self.digest(), self.dtype(), self.shape(), self.path.display())
    }
}

/// The table store in a cache directory: `<cache_dir>/tables-v1/<hex[0..2]>/<hex>.npy`, NumPy
/// `.npy` files named by the digest of their content (format v1), written atomically and synced,
/// checked on every open (ADR 0002, ADR 0012).
#[pyclass(module = "gridkey", frozen)]
pub struct TableStore {
    inner: gridkey_store::TableStore,
    max_table_bytes: u64,
}

impl TableStore {
    /// The Rust store.
    pub fn inner(&self) -> &gridkey_store::TableStore {
        &self.inner
    }

    /// The largest table, in bytes, that is hashed or stored through this store.
    pub fn max_bytes(&self) -> u64 {
        self.max_table_bytes
    }
}

#[pymethods]
impl TableStore {
    /// Opens (creating it if needed) the store of `cache_dir`, by default the settings' cache
    /// directory (`GRIDKEY_CACHE_DIR`, else `.gridkey_cache`). Every open recomputes the digest
    /// when the settings say so (`GRIDKEY_VERIFY_TABLES`); a table larger than their
    /// `max_table_bytes` is refused before it is read. `settings` defaults to
    /// `gridkey.Settings()`, read from the environment once, here.
    #[new]
    #[pyo3(signature = (cache_dir = None, *, settings = None))]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = args::cache_dir)] cache_dir: Option<PathBuf>,
        #[pyo3(from_py_with = args::settings)] settings: Option<Py<Settings>>,
    ) -> PyResult<Self> {
        guard(|| {
            let settings = match settings {
                Some(s) => s,
                None => Py::new(py, Settings::from_environ(py)?)?,
            };
            let settings = settings.get();
            let dir = cache_dir.unwrap_or_else(|| settings.cache_dir().to_path_buf());
            let verify = settings.verify_tables();
            let max_table_bytes = settings.max_table_bytes();
            let inner =
                py.detach(|| gridkey_store::TableStore::open(&dir)).map_err(IntoPyErr::into_py_err)?.verifying(verify);
            Ok(Self { inner, max_table_bytes })
        })
    }

    /// The cache directory.
    #[getter]
    fn cache_dir(&self) -> PathBuf {
        self.inner.cache_dir().to_path_buf()
    }

    /// Whether every open recomputes the digest of the file.
    #[getter]
    fn verifies(&self) -> bool {
        self.inner.verifies()
    }

    /// The largest table, in bytes of its elements, that `put` and the conversions through
    /// this store read (`max_table_bytes` of its settings).
    #[getter]
    fn max_table_bytes(&self) -> u64 {
        self.max_table_bytes
    }

    /// Stores `table` (a 2-D int32 or int64 array of any layout, see `table_digest`) with its
    /// own dtype, in C order, little-endian, and returns its digest (the same as
    /// `table_digest(table)` while nothing writes it). A file already under that name is kept
    /// only when its bytes are the table's (else it is replaced). Each block of the table is
    /// copied once and hashed and written from the copy, so the file's bytes are those its name
    /// is the digest of, even while another thread writes the array (ADR 0035). The GIL is
    /// released while the table is hashed and written, and Ctrl-C stops it within a fraction of
    /// a second (`KeyboardInterrupt`, the temp file removed); a device table is copied to the
    /// host once.
    ///
    /// Errors: `TableTypeError`, `TableValueError` for a bad table; `TableTooLargeError` for a
    /// table of more than `max_table_bytes`, before it is read; `GridkeyOSError` when the file
    /// cannot be written (nothing is left behind); `DeviceCopyError`; `KeyboardInterrupt`.
    fn put(&self, py: Python<'_>, table: &Bound<'_, PyAny>) -> PyResult<String> {
        guard(|| {
            let spec = put_table(py, &self.inner, self.max_table_bytes, table, Narrow::Keep)?;
            Ok(spec.digest.to_hex())
        })
    }

    /// Stores every table of `tables` (a sequence of what `put` takes) as `put` does and
    /// returns their digests in order, the new ones written as one batch (ADR 0050): each to
    /// its temp file, then all synced together and renamed, so that a cache that stores a
    /// grid's tables for the first time waits for their syncs together. A table that cannot be
    /// stored fails alone: the tables before it are stored, and its error is raised.
    ///
    /// Errors: as `put`, for the first table that failed.
    fn put_all(&self, py: Python<'_>, tables: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        guard(|| {
            let batch = self.inner.deferring();
            let mut digests = Vec::new();
            let mut failed = None;
            for item in tables.try_iter()? {
                match put_table(py, &batch, self.max_table_bytes, &item?, Narrow::Keep) {
                    Ok(spec) => digests.push(spec.digest.to_hex()),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let committed = py.detach(|| batch.commit_deferred());
            if let Some(e) = failed {
                return Err(e);
            }
            for (_, result) in committed {
                result.map_err(IntoPyErr::into_py_err)?;
            }
            Ok(digests)
        })
    }

    /// The digest of each table of `tables` (a sequence of what `put` takes) whose file is
    /// stored under it already and passes the store's checked open (a regular file; magic,
    /// header, dtype, shape and length), else None (a table not stored, and a device table);
    /// nothing is written. Its bytes are unchecked: the caller recomputes their digest before
    /// anything reads them (ADR 0052).
    ///
    /// Errors: `TableTypeError`, `TableValueError` for a bad table; `TableTooLargeError`;
    /// `KeyboardInterrupt`.
    fn stored_digests(&self, py: Python<'_>, tables: &Bound<'_, PyAny>) -> PyResult<Vec<Option<String>>> {
        guard(|| {
            let mut digests = Vec::new();
            for item in tables.try_iter()? {
                let found = stored_under_digest(py, &self.inner, self.max_table_bytes, &item?)?;
                digests.push(found.map(|d| d.to_hex()));
            }
            Ok(digests)
        })
    }

    /// The stored table `digest` of `dtype` (`numpy.int32` or `numpy.int64`) and `shape`
    /// `(n, k)`, as a read-only, C-contiguous NumPy array over the memory-mapped file (no copy;
    /// its `base` is the `MappedTable` that keeps the mapping alive). The file is checked: a
    /// regular file, `.npy` magic and header, dtype, C order, shape and length; on a verifying
    /// store the digest too.
    ///
    /// Errors: `TableNotFoundError` (not stored), `TableFileError` (truncated, tampered, another
    /// dtype or shape), `GridkeyOSError` (unreadable, not a regular file), `TableValueError`
    /// (a bad digest or shape), `TableTypeError` (a bad dtype).
    fn open<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::digest)] digest: String,
        dtype: &Bound<'py, PyAny>,
        shape: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let spec = spec_arg(&digest, dtype, shape)?;
            let mapped = py.detach(|| self.inner.open_table(&spec)).map_err(IntoPyErr::into_py_err)?;
            let path = mapped.path().to_path_buf();
            MappedTable::array(py, Mapping::Store(mapped), path)
        })
    }

    /// The path of the file of `digest` (whether or not it is stored).
    ///
    /// Errors: `TableValueError` for a digest that is not 32 hex digits.
    fn path_of(&self, #[pyo3(from_py_with = args::digest)] digest: String) -> PyResult<PathBuf> {
        let digest: TableDigest = digest.parse().map_err(|e: gridkey_digest::DigestError| e.into_py_err())?;
        Ok(self.inner.path_of(&digest))
    }

    fn __repr__(&self) -> String {
        format!("TableStore({:?}, verifies={})", self.inner.cache_dir(), self.inner.verifies())
    }
}

/// Stores the table `obj` (host or device) into `store` with the GIL released, answering
/// Ctrl-C ([`interrupt::run`]); a table of more than `max_bytes` is refused before it is read.
///
/// Errors: as `TableStore.put`.
pub fn put_table(
    py: Python<'_>,
    store: &gridkey_store::TableStore,
    max_bytes: u64,
    obj: &Bound<'_, PyAny>,
    narrow: Narrow,
) -> PyResult<TableSpec> {
    match table(obj)? {
        Table::Host(host) => {
            let bytes = check_size(None, host.dtype(), host.shape(), max_bytes)?;
            let raw = host.raw()?;
            interrupt::run(py, bytes, |cancel| store_raw(store, &raw, narrow, cancel))?.map_err(IntoPyErr::into_py_err)
        }
        Table::Device { dtype, shape } => {
            check_size(None, dtype, shape, max_bytes)?;
            let host = copy_device(py, obj, dtype, shape)?;
            put_host_copy(py, store, &host, narrow)
        }
    }
}

/// The digest of the host table `obj` when the store holds a file under it that passes its
/// checked open (`TableStore::open_table`: a regular file; magic, header, dtype, shape and
/// length; its digest recomputed only on a verifying store); `None` for a device table and for
/// one not stored (or whose file fails the open), which the caller stores or keeps unstored
/// (`gridkey.gt4py` keeps a private copy until a translation or a worker needs the file, ADR 0052).
///
/// Errors: `TableTypeError`, `TableValueError`, `TableTooLargeError` as `put`;
/// `KeyboardInterrupt`.
fn stored_under_digest(
    py: Python<'_>,
    store: &gridkey_store::TableStore,
    max_bytes: u64,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Option<TableDigest>> {
    let Table::Host(host) = table(obj)? else { return Ok(None) };
    check_size(None, host.dtype(), host.shape(), max_bytes)?;
    let raw = host.raw()?;
    let digest = digest_raw_interruptible(py, &raw, Narrow::Keep)?;
    let spec = TableSpec { digest, dtype: host.dtype(), shape: host.shape() };
    Ok(py.detach(|| store.open_table(&spec)).ok().map(|_| digest))
}

/// Stores a host copy of a device table, with the GIL released, answering Ctrl-C.
///
/// Errors: as `TableStore.put`.
pub fn put_host_copy(
    py: Python<'_>,
    store: &gridkey_store::TableStore,
    host: &gridkey_offsets::IndexTable,
    narrow: Narrow,
) -> PyResult<TableSpec> {
    let raw = crate::raw::of_index_table(host).map_err(|e| error(Kind::Internal, e.0))?;
    interrupt::run(py, raw.data_len(), |cancel| store_raw(store, &raw, narrow, cancel))?.map_err(IntoPyErr::into_py_err)
}

/// One host copy of the device table `obj` (dtype and shape from its metadata), through its
/// [`TableSource`].
fn copy_device(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    dtype: Dtype,
    shape: [usize; 2],
) -> PyResult<gridkey_offsets::IndexTable> {
    let source = PyDeviceTable::new(obj, dtype, shape);
    py.detach(|| source.copy_to_host()).map_err(copy_error)
}

/// The digest of `raw` with the GIL released, answering Ctrl-C.
///
/// Errors: the exception of a signal handler (`KeyboardInterrupt`).
pub fn digest_raw_interruptible(py: Python<'_>, raw: &RawTable<'_>, narrow: Narrow) -> PyResult<TableDigest> {
    let digest = interrupt::run(py, raw.data_len(), |cancel| raw.digest_checked(narrow, cancel))?;
    // `None` only once the flag is set, and then `run` returned the signal's exception.
    digest.ok_or_else(|| error(Kind::Internal, "a digest stopped without a signal"))
}

/// `gridkey.table_digest`: see the Python documentation in `lib.rs`.
///
/// Errors: as `table_digest`.
pub fn digest_object(py: Python<'_>, obj: &Bound<'_, PyAny>, max_bytes: u64) -> PyResult<TableDigest> {
    match table(obj)? {
        Table::Host(host) => {
            check_size(None, host.dtype(), host.shape(), max_bytes)?;
            let raw = host.raw()?;
            digest_raw_interruptible(py, &raw, Narrow::Keep)
        }
        Table::Device { dtype, shape } => {
            check_size(None, dtype, shape, max_bytes)?;
            let host = copy_device(py, obj, dtype, shape)?;
            let raw = crate::raw::of_index_table(&host).map_err(|e| error(Kind::Internal, e.0))?;
            digest_raw_interruptible(py, &raw, Narrow::Keep)
        }
    }
}
