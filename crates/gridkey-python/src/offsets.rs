//! Offset providers from Python: `Dimension`, the runtime `Connectivity`, its
//! `CompileTimeConnectivity`, the conversion with its per-connectivity memo, and the public
//! `IdentityMemo` that the memo is made of (ADR 0006).
//!
//! A runtime connectivity is converted once per process, store and table dtype while it lives:
//! the memo is keyed by the identity of the Python object and validated by a weak reference,
//! since connectivities are not hashable and an address can be reused by a new object once the
//! old one is gone. On a verifying store (`GRIDKEY_VERIFY_TABLES`) a memo hit of a host table
//! recomputes its digest, so that a table changed in place after its conversion is converted
//! again instead of keyed by its old content.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gridkey_digest::Dtype;
use gridkey_offsets::{DimensionKind, OffsetsError};
use gridkey_store::{StoreError, TableSpec};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyWeakrefMethods, PyWeakrefReference};

use crate::args;
use crate::array::{table as as_table, Table};
use crate::device::PyDeviceTable;
use crate::errors::{error, guard, IntoPyErr, Kind};
use crate::interrupt::{self, Cancel};
use crate::raw::{Narrow, RawTable};
use crate::store::{check_size, put_host_copy, store_raw, MappedTable, Mapping, TableStore};
use gridkey_offsets::TableSource;

/// A named dimension: `Dimension("Cell")`, `Dimension("K", "vertical")`,
/// `Dimension("C2EDim", "local")`. Immutable and hashable; equal when name and kind are.
#[pyclass(module = "gridkey", frozen, eq, hash, from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Dimension {
    pub(crate) inner: gridkey_offsets::Dimension,
}

fn kind_of(kind: &str) -> PyResult<DimensionKind> {
    match kind {
        "horizontal" => Ok(DimensionKind::Horizontal),
        "vertical" => Ok(DimensionKind::Vertical),
        "local" => Ok(DimensionKind::Local),
        other => Err(error(
            Kind::Value,
            format!("{other:?} is not a dimension kind: pass \"horizontal\", \"vertical\" or \"local\""),
        )),
    }
}

#[pymethods]
impl Dimension {
    /// A dimension called `name` of `kind`: `"horizontal"` (a mesh location: `Cell`, `Edge`,
    /// `Vertex`), `"vertical"` (`K`) or `"local"` (the neighbour axis of a connectivity).
    ///
    /// Errors: `TableValueError` for another kind.
    #[new]
    #[pyo3(signature = (name, kind = "horizontal".to_owned()), text_signature = "(name, kind=\"horizontal\")")]
    fn new(
        #[pyo3(from_py_with = args::name)] name: String,
        #[pyo3(from_py_with = args::kind)] kind: String,
    ) -> PyResult<Self> {
        Ok(Self { inner: gridkey_offsets::Dimension::new(name, kind_of(&kind)?) })
    }

    /// The name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// `"horizontal"`, `"vertical"` or `"local"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind().as_str()
    }

    fn __getnewargs__(&self) -> (String, &'static str) {
        (self.inner.name().to_owned(), self.kind())
    }

    fn __repr__(&self) -> String {
        format!("Dimension({:?}, {:?})", self.inner.name(), self.kind())
    }
}

fn check_dimensions(domain: &Dimension, local: &Dimension, codomain: &Dimension) -> PyResult<()> {
    let bad = |what, d: &Dimension, expected| {
        Err(OffsetsError::DimensionKind { what, name: d.inner.name().to_owned(), expected }.into_py_err())
    };
    if domain.inner.kind() == DimensionKind::Local {
        return bad("domain", domain, DimensionKind::Horizontal);
    }
    if codomain.inner.kind() == DimensionKind::Local {
        return bad("codomain", codomain, DimensionKind::Horizontal);
    }
    if local.inner.kind() != DimensionKind::Local {
        return bad("local", local, DimensionKind::Local);
    }
    Ok(())
}

/// A runtime gather connectivity: a neighbour table `(n, max_neighbours)` from `domain` (with
/// the neighbour axis `local`) to `codomain`, where `skip_value` marks a missing neighbour.
///
/// The table is any 2-D int32 or int64 array (see `table_digest`), on the host or on a device
/// (`__dlpack__`, `__cuda_array_interface__`); it is kept as given, for execution, and read only
/// when the connectivity is converted. Not hashable (compared by identity), weakly referenceable.
#[pyclass(module = "gridkey", frozen, weakref)]
pub struct Connectivity {
    table: Py<PyAny>,
    domain: Dimension,
    local: Dimension,
    codomain: Dimension,
    skip_value: Option<i64>,
    dtype: Dtype,
    shape: [usize; 2],
    /// For a device table: the Rust connectivity over its [`PyDeviceTable`] source, which
    /// conversion asks for the host copy (`Connectivity::host_table`).
    device: Option<Arc<gridkey_offsets::Connectivity>>,
}

#[pymethods]
impl Connectivity {
    /// Errors: `TableTypeError`, `TableValueError` for a table that is not 2-D int32 or int64;
    /// `TableValueError` when `domain` or `codomain` is a local dimension or `local` is not.
    #[new]
    #[pyo3(signature = (table, domain, local, codomain, skip_value = None))]
    fn new(
        table: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::domain)] domain: Bound<'_, Dimension>,
        #[pyo3(from_py_with = args::local)] local: Bound<'_, Dimension>,
        #[pyo3(from_py_with = args::codomain)] codomain: Bound<'_, Dimension>,
        #[pyo3(from_py_with = args::skip_value)] skip_value: Option<i64>,
    ) -> PyResult<Self> {
        let [domain, local, codomain] = [domain, local, codomain].map(|d| d.get().clone());
        guard(|| {
            check_dimensions(&domain, &local, &codomain)?;
            let (dtype, shape, device) = match as_table(table)? {
                Table::Host(host) => (host.dtype(), host.shape(), None),
                Table::Device { dtype, shape } => {
                    let source: Arc<dyn TableSource> = PyDeviceTable::new(table, dtype, shape);
                    let [d, l, c] = [&domain, &local, &codomain].map(|d| d.inner.clone());
                    let rust = gridkey_offsets::Connectivity::new(d, l, c, skip_value, source)
                        .map_err(IntoPyErr::into_py_err)?;
                    (dtype, shape, Some(Arc::new(rust)))
                }
            };
            Ok(Self { table: table.clone().unbind(), domain, local, codomain, skip_value, dtype, shape, device })
        })
    }

    /// The runtime table, as given.
    #[getter]
    fn table(&self, py: Python<'_>) -> Py<PyAny> {
        self.table.clone_ref(py)
    }

    /// The domain dimension.
    #[getter]
    fn domain(&self) -> Dimension {
        self.domain.clone()
    }

    /// The neighbour dimension.
    #[getter]
    fn local(&self) -> Dimension {
        self.local.clone()
    }

    /// The codomain dimension.
    #[getter]
    fn codomain(&self) -> Dimension {
        self.codomain.clone()
    }

    /// The skip value, or `None`.
    #[getter]
    fn skip_value(&self) -> Option<i64> {
        self.skip_value
    }

    /// The runtime element type, `numpy.dtype("int32")` or `numpy.dtype("int64")`.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, numpy::PyArrayDescr> {
        numpy_dtype(py, self.dtype)
    }

    /// The shape `(n, k)`.
    #[getter]
    fn shape(&self) -> (usize, usize) {
        (self.shape[0], self.shape[1])
    }

    /// Whether the table lives on a device (read through a copy to the host).
    #[getter]
    fn on_device(&self) -> bool {
        self.device.is_some()
    }

    fn __repr__(&self) -> String {
        format!(
            "Connectivity({} x {} {}, {} -> {}, skip_value={}{})",
            self.shape[0],
            self.shape[1],
            self.dtype,
            self.domain.inner.name(),
            self.codomain.inner.name(),
            py_option(self.skip_value),
            if self.device.is_some() { ", on a device" } else { "" }
        )
    }
}

/// `None` or the value, as Python prints it.
fn py_option(v: Option<i64>) -> String {
    v.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

fn numpy_dtype(py: Python<'_>, dtype: Dtype) -> Bound<'_, numpy::PyArrayDescr> {
    match dtype {
        Dtype::I32 => numpy::dtype::<i32>(py),
        Dtype::I64 => numpy::dtype::<i64>(py),
    }
}

/// The compile-time form of a connectivity: its dimensions and skip value, and a read-only,
/// C-contiguous table memory-mapped from the store, named by its digest. Pickles as a reference
/// to its file (cache directory, digest, dtype, shape), which is mapped again and checked when
/// unpickled, so that a worker process receives no table bytes.
#[pyclass(module = "gridkey", frozen)]
pub struct CompileTimeConnectivity {
    inner: Arc<gridkey_offsets::CompileTimeConnectivity>,
    table: Py<PyAny>,
    cache_dir: PathBuf,
    verify: bool,
}

impl CompileTimeConnectivity {
    /// The Rust compile-time connectivity (for keys).
    pub fn inner(&self) -> &Arc<gridkey_offsets::CompileTimeConnectivity> {
        &self.inner
    }

    fn open(
        py: Python<'_>,
        offset: &str,
        store: &gridkey_store::TableStore,
        spec: &TableSpec,
        dims: [&Dimension; 3],
        skip_value: Option<i64>,
    ) -> PyResult<Self> {
        let [domain, local, codomain] = dims.map(|d| d.inner.clone());
        let inner = py
            .detach(|| {
                gridkey_offsets::CompileTimeConnectivity::rehydrate(
                    offset, store, spec, domain, local, codomain, skip_value,
                )
            })
            .map_err(IntoPyErr::into_py_err)?;
        let inner = Arc::new(inner);
        let path = store.path_of(&spec.digest);
        let table = MappedTable::array(py, Mapping::View(inner.clone()), path)?.unbind();
        Ok(Self { inner, table, cache_dir: store.cache_dir().to_path_buf(), verify: store.verifies() })
    }
}

#[pymethods]
impl CompileTimeConnectivity {
    /// The domain dimension.
    #[getter]
    fn domain(&self) -> Dimension {
        Dimension { inner: self.inner.domain().clone() }
    }

    /// The neighbour dimension.
    #[getter]
    fn local(&self) -> Dimension {
        Dimension { inner: self.inner.local().clone() }
    }

    /// The codomain dimension.
    #[getter]
    fn codomain(&self) -> Dimension {
        Dimension { inner: self.inner.codomain().clone() }
    }

    /// The skip value, or `None`.
    #[getter]
    fn skip_value(&self) -> Option<i64> {
        self.inner.skip_value()
    }

    /// The table digest (format v1), 32 hex digits.
    #[getter]
    fn digest(&self) -> String {
        self.inner.digest().to_hex()
    }

    /// The compile-time element type.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, numpy::PyArrayDescr> {
        numpy_dtype(py, self.inner.dtype())
    }

    /// The shape `(n, k)`.
    #[getter]
    fn shape(&self) -> (usize, usize) {
        let [n, k] = self.inner.shape();
        (n, k)
    }

    /// The table: a read-only, C-contiguous NumPy array over the mapped `.npy` file.
    #[getter]
    fn table(&self, py: Python<'_>) -> Py<PyAny> {
        self.table.clone_ref(py)
    }

    /// The `.npy` file of the table.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.table_path().to_path_buf()
    }

    /// The cache directory of the store it was mapped from.
    #[getter]
    fn cache_dir(&self) -> PathBuf {
        self.cache_dir.clone()
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, pyo3::types::PyTuple>)> {
        let rehydrate = py.import("gridkey._gridkey")?.getattr("_rehydrate")?;
        let [n, k] = self.inner.shape();
        let args = (
            self.cache_dir.clone(),
            self.verify,
            self.digest(),
            self.inner.dtype().typestr(),
            (n, k),
            self.domain(),
            self.local(),
            self.codomain(),
            self.skip_value(),
        )
            .into_pyobject(py)?;
        Ok((rehydrate, args))
    }

    fn __repr__(&self) -> String {
        let [n, k] = self.inner.shape();
        format!(
            "CompileTimeConnectivity({} x {} {}, {} -> {}, skip_value={}, digest={})",
            n,
            k,
            self.inner.dtype(),
            self.inner.domain().name(),
            self.inner.codomain().name(),
            py_option(self.inner.skip_value()),
            self.inner.digest()
        )
    }
}

/// Unpickles a [`CompileTimeConnectivity`]: maps its table again from the store, with the
/// checks of an open (and the digest on a verifying store).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(name = "_rehydrate")]
pub fn rehydrate(
    py: Python<'_>,
    cache_dir: PathBuf,
    verify: bool,
    digest: &str,
    dtype: &Bound<'_, PyAny>,
    shape: &Bound<'_, PyAny>,
    domain: Dimension,
    local: Dimension,
    codomain: Dimension,
    skip_value: Option<i64>,
) -> PyResult<CompileTimeConnectivity> {
    guard(|| {
        let spec = crate::store::spec_arg(digest, dtype, shape)?;
        let store = py
            .detach(|| gridkey_store::TableStore::open(&cache_dir))
            .map_err(IntoPyErr::into_py_err)?
            .verifying(verify);
        CompileTimeConnectivity::open(py, "(unpickled)", &store, &spec, [&domain, &local, &codomain], skip_value)
    })
}

/// How a witness of an object's identity holds it.
enum Witness {
    /// A weak reference: the object may die, and its address be reused.
    Weak(Py<PyWeakrefReference>),
    /// A strong reference, for objects that take no weak reference: kept alive by the memo.
    Strong(Py<PyAny>),
}

impl Witness {
    fn new(obj: &Bound<'_, PyAny>) -> Self {
        match PyWeakrefReference::new(obj) {
            Ok(w) => Witness::Weak(w.unbind()),
            Err(_) => Witness::Strong(obj.clone().unbind()),
        }
    }

    /// Whether the witnessed object is `obj` (alive and the same object).
    fn is(&self, obj: &Bound<'_, PyAny>) -> bool {
        match self {
            Witness::Weak(w) => w.bind(obj.py()).upgrade().is_some_and(|live| live.is(obj)),
            Witness::Strong(o) => o.bind(obj.py()).is(obj),
        }
    }

    fn alive(&self, py: Python<'_>) -> bool {
        match self {
            Witness::Weak(w) => w.bind(py).upgrade().is_some(),
            Witness::Strong(_) => true,
        }
    }
}

struct MemoEntry<V> {
    witness: Witness,
    value: V,
}

/// A map from Python objects, by identity, to values: what a memo of unhashable objects needs.
/// An entry is found only while its object lives (checked by a weak reference), and entries
/// of dead objects are dropped on every insert.
struct IdentityMap<K, V> {
    entries: HashMap<(usize, K), MemoEntry<V>>,
}

impl<K: std::hash::Hash + Eq, V> IdentityMap<K, V> {
    fn new() -> Self {
        Self { entries: HashMap::new() }
    }

    fn get(&self, obj: &Bound<'_, PyAny>, extra: K) -> Option<&V> {
        let entry = self.entries.get(&(obj.as_ptr() as usize, extra))?;
        entry.witness.is(obj).then_some(&entry.value)
    }

    fn insert(&mut self, obj: &Bound<'_, PyAny>, extra: K, value: V) {
        let py = obj.py();
        self.entries.retain(|_, e| e.witness.alive(py));
        self.entries.insert((obj.as_ptr() as usize, extra), MemoEntry { witness: Witness::new(obj), value });
    }

    fn remove(&mut self, obj: &Bound<'_, PyAny>, extra: K) -> Option<V> {
        let key = (obj.as_ptr() as usize, extra);
        let found = self.entries.get(&key).is_some_and(|e| e.witness.is(obj));
        if found {
            self.entries.remove(&key).map(|e| e.value)
        } else {
            None
        }
    }

    fn len(&self, py: Python<'_>) -> usize {
        self.entries.values().filter(|e| e.witness.alive(py)).count()
    }
}

/// A memo keyed by the identity of Python objects, for objects that are not hashable (such as
/// connectivities): `memo.get(obj)` finds a value only while `obj` itself lives, checked by a
/// weak reference, so that a new object at a reused address is never mistaken for the old one.
/// An object that takes no weak reference is held strongly by its entry (kept alive until it
/// is removed). Thread-safe.
#[pyclass(module = "gridkey", frozen)]
pub struct IdentityMemo {
    map: Mutex<IdentityMap<(), Py<PyAny>>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[pymethods]
impl IdentityMemo {
    #[new]
    fn new() -> Self {
        Self { map: Mutex::new(IdentityMap::new()) }
    }

    /// The value stored for `obj`, or `default`.
    #[pyo3(signature = (obj, default = None))]
    fn get(&self, py: Python<'_>, obj: &Bound<'_, PyAny>, default: Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        locked(&self.map).get(obj, ()).map(|v| v.clone_ref(py)).or(default)
    }

    /// Stores `value` for `obj` (replacing any).
    fn insert(&self, obj: &Bound<'_, PyAny>, value: Py<PyAny>) {
        locked(&self.map).insert(obj, (), value);
    }

    /// The value stored for `obj`; when there is none, `factory()` is called (without the
    /// memo's lock held), stored and returned; what `factory` raises propagates unchanged.
    ///
    /// Errors: `TableTypeError` for a `factory` that is not callable.
    fn get_or_insert(&self, py: Python<'_>, obj: &Bound<'_, PyAny>, factory: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if !factory.is_callable() {
            return Err(error(
                Kind::Type,
                format!("argument factory must be callable, not {}", factory.get_type().name()?),
            ));
        }
        if let Some(v) = locked(&self.map).get(obj, ()).map(|v| v.clone_ref(py)) {
            return Ok(v);
        }
        let value = factory.call0()?.unbind();
        locked(&self.map).insert(obj, (), value.clone_ref(py));
        Ok(value)
    }

    /// Removes and returns the value stored for `obj`, or `None`.
    fn pop(&self, obj: &Bound<'_, PyAny>) -> Option<Py<PyAny>> {
        locked(&self.map).remove(obj, ())
    }

    fn __contains__(&self, obj: &Bound<'_, PyAny>) -> bool {
        locked(&self.map).get(obj, ()).is_some()
    }

    /// Number of entries whose object lives.
    fn __len__(&self, py: Python<'_>) -> usize {
        locked(&self.map).len(py)
    }
}

/// How a compile-time table's dtype is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TableDtype {
    /// gridkey's canonical table: int32 whenever every index fits (ADR 0006).
    Canonical,
    /// The runtime table's own dtype (what GT4Py's generated code needs).
    Runtime,
}

impl TableDtype {
    fn parse(text: &str) -> PyResult<Self> {
        match text {
            "canonical" => Ok(TableDtype::Canonical),
            "runtime" => Ok(TableDtype::Runtime),
            other => Err(error(Kind::Value, format!("table_dtype {other:?} is not \"canonical\" or \"runtime\""))),
        }
    }

    /// int32 when every index fits (canonical), else the runtime dtype.
    fn narrow(self) -> Narrow {
        match self {
            TableDtype::Canonical => Narrow::ToI32,
            TableDtype::Runtime => Narrow::Keep,
        }
    }
}

type ConversionMemo = IdentityMap<(PathBuf, TableDtype), Py<CompileTimeConnectivity>>;

fn conversions() -> &'static Mutex<ConversionMemo> {
    static MEMO: std::sync::OnceLock<Mutex<ConversionMemo>> = std::sync::OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(IdentityMap::new()))
}

static CONVERTED: AtomicU64 = AtomicU64::new(0);
static MEMO_HITS: AtomicU64 = AtomicU64::new(0);
static HOST_COPIES: AtomicU64 = AtomicU64::new(0);

/// `{"converted", "memo_hits", "host_copies"}`: runtime connectivities converted (each table
/// hashed and stored once), conversions served by the memo, and device tables copied to the
/// host, by this process so far.
#[pyfunction]
pub fn conversion_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("converted", CONVERTED.load(Ordering::SeqCst))?;
    d.set_item("memo_hits", MEMO_HITS.load(Ordering::SeqCst))?;
    d.set_item("host_copies", HOST_COPIES.load(Ordering::SeqCst))?;
    Ok(d)
}

/// `err` with `offset X: ` before its message (its class and cause kept).
fn with_offset(py: Python<'_>, offset: &str, err: PyErr) -> PyErr {
    let value = err.value(py);
    let message = value.str().map(|s| s.to_string()).unwrap_or_default();
    if value.setattr("args", (format!("offset {offset}: {message}"),)).is_err() {
        return err;
    }
    err
}

/// The memoised view of `conn` in `store`, if there is one that still holds (on a verifying
/// store a host table's digest is recomputed: it may have changed in place).
fn memo_hit(
    py: Python<'_>,
    conn: &Bound<'_, Connectivity>,
    store: &gridkey_store::TableStore,
    table_dtype: TableDtype,
) -> PyResult<Option<Py<CompileTimeConnectivity>>> {
    let key = (store.dir().to_path_buf(), table_dtype);
    let Some(hit) = locked(conversions()).get(conn.as_any(), key).map(|h| h.clone_ref(py)) else {
        return Ok(None);
    };
    let c = conn.get();
    if c.device.is_none() && store.verifies() {
        let host = crate::array::host_table(c.table.bind(py))?;
        let raw = host.raw()?;
        let digest = crate::store::digest_raw_interruptible(py, &raw, table_dtype.narrow())?;
        if digest != hit.get().inner.digest() {
            return Ok(None);
        }
    }
    MEMO_HITS.fetch_add(1, Ordering::SeqCst);
    Ok(Some(hit))
}

/// The view of `conn` over its table stored as `spec`, memoised.
fn finish(
    py: Python<'_>,
    offset: &str,
    conn: &Bound<'_, Connectivity>,
    store: &gridkey_store::TableStore,
    table_dtype: TableDtype,
    spec: &TableSpec,
) -> PyResult<Py<CompileTimeConnectivity>> {
    let c = conn.get();
    CONVERTED.fetch_add(1, Ordering::SeqCst);
    let ct = CompileTimeConnectivity::open(py, offset, store, spec, [&c.domain, &c.local, &c.codomain], c.skip_value)?;
    let ct = Py::new(py, ct)?;
    locked(conversions()).insert(conn.as_any(), (store.dir().to_path_buf(), table_dtype), ct.clone_ref(py));
    Ok(ct)
}

fn store_error_of(offset: &str, e: StoreError) -> PyErr {
    OffsetsError::Store { offset: offset.to_owned(), source: e }.into_py_err()
}

fn convert(
    py: Python<'_>,
    offset: &str,
    conn: &Bound<'_, Connectivity>,
    store: &gridkey_store::TableStore,
    max_bytes: u64,
    table_dtype: TableDtype,
) -> PyResult<Py<CompileTimeConnectivity>> {
    if let Some(hit) = memo_hit(py, conn, store, table_dtype)? {
        return Ok(hit);
    }
    let c = conn.get();
    let bytes = check_size(Some(offset), c.dtype, c.shape, max_bytes)?;
    let spec = match &c.device {
        None => {
            let host = crate::array::host_table(c.table.bind(py))?;
            let raw = host.raw()?;
            let narrow = table_dtype.narrow();
            interrupt::run(py, bytes, |cancel| store_raw(store, &raw, narrow, cancel))?
                .map_err(|e| store_error_of(offset, e))?
        }
        Some(rust) => {
            HOST_COPIES.fetch_add(1, Ordering::SeqCst);
            let host = py.detach(|| rust.host_table(offset)).map_err(IntoPyErr::into_py_err)?;
            put_host_copy(py, store, &host, table_dtype.narrow()).map_err(|e| with_offset(py, offset, e))?
        }
    };
    finish(py, offset, conn, store, table_dtype, &spec)
}

/// How many tables of one provider are stored at once: their writes and syncs overlap (each
/// table is synced on its own, ADR 0002), which a provider of several tables needs to cost
/// about one synced write of all its bytes.
const PARALLEL_PUTS: usize = 8;

/// Stores `raws` with up to [`PARALLEL_PUTS`] at once; the results in the same order. Every put
/// stops once `cancel` is set.
fn store_all(
    store: &gridkey_store::TableStore,
    raws: &[RawTable<'_>],
    narrow: Narrow,
    cancel: &Cancel,
) -> Vec<Result<TableSpec, StoreError>> {
    let mut out = Vec::with_capacity(raws.len());
    for batch in raws.chunks(PARALLEL_PUTS) {
        std::thread::scope(|scope| {
            let handles: Vec<_> =
                batch.iter().map(|raw| scope.spawn(move || store_raw(store, raw, narrow, cancel))).collect();
            for h in handles {
                out.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            }
        });
    }
    out
}

/// The compile-time view of one runtime connectivity, converted once per connectivity, store
/// and `table_dtype` while it lives (see `compile_time_offset_provider`).
///
/// Errors: as `compile_time_offset_provider`.
#[pyfunction]
#[pyo3(
    signature = (connectivity, store, *, table_dtype = "canonical".to_owned(), offset = "?".to_owned()),
    text_signature = "(connectivity, store, *, table_dtype=\"canonical\", offset=\"?\")"
)]
pub fn compile_time_connectivity(
    py: Python<'_>,
    #[pyo3(from_py_with = args::connectivity)] connectivity: Bound<'_, Connectivity>,
    #[pyo3(from_py_with = args::store)] store: Bound<'_, TableStore>,
    #[pyo3(from_py_with = args::table_dtype)] table_dtype: String,
    #[pyo3(from_py_with = args::offset)] offset: String,
) -> PyResult<Py<CompileTimeConnectivity>> {
    let store = store.get();
    guard(|| convert(py, &offset, &connectivity, store.inner(), store.max_bytes(), TableDtype::parse(&table_dtype)?))
}

/// The compile-time view of an offset provider: a new dict with every entry of `provider` (a
/// mapping of offset names to `Connectivity` or `Dimension`), in the same order, each
/// connectivity replaced by its `CompileTimeConnectivity` in `store` and each dimension kept.
///
/// A connectivity is converted once per process, store and `table_dtype` while it lives (memo
/// by identity and weak reference): its table is hashed once, stored once and mapped; a device
/// table is copied to the host once. `table_dtype="canonical"` stores int64 tables whose indices
/// fit as int32 (gridkey's canonical tables, ADR 0006); `"runtime"` keeps the runtime dtype. The
/// GIL is released while tables are hashed and written; the tables of one provider are stored
/// several at once, so that their writes and syncs overlap. Each stored file holds the bytes its
/// digest (the view's `digest`) was computed from, whatever another thread writes into the
/// runtime tables meanwhile (ADR 0035), and Ctrl-C stops the conversion within a fraction of a
/// second, leaving no file under a final name.
///
/// Errors: `TableTypeError` for an entry that is neither; `TableTooLargeError` for a table of
/// more than the store's `max_table_bytes`, before any table is read; the store's errors
/// (`GridkeyOSError`, `TableFileError`), naming the offset; `DeviceCopyError`;
/// `KeyboardInterrupt`.
#[pyfunction]
#[pyo3(
    signature = (provider, store, *, table_dtype = "canonical".to_owned()),
    text_signature = "(provider, store, *, table_dtype=\"canonical\")"
)]
pub fn compile_time_offset_provider<'py>(
    py: Python<'py>,
    provider: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = args::store)] store: Bound<'py, TableStore>,
    #[pyo3(from_py_with = args::table_dtype)] table_dtype: String,
) -> PyResult<Bound<'py, PyDict>> {
    guard(|| {
        let table_dtype = TableDtype::parse(&table_dtype)?;
        let provider = provider.cast::<PyMapping>().map_err(|_| {
            error(
                Kind::Type,
                format!(
                    "argument provider must be a mapping of offset names to connectivities and dimensions, not {}",
                    provider.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ),
            )
        })?;
        let max_bytes = store.get().max_bytes();
        let store = store.get().inner();
        // Memo hits and device tables first, in order; host tables that need storing are then
        // stored together (their syncs overlap), without the GIL.
        let mut slots: Vec<(String, Option<Bound<'py, PyAny>>)> = Vec::new();
        let mut pending: Vec<(usize, Bound<'py, Connectivity>, crate::array::HostTable<'py>)> = Vec::new();
        // A connectivity under two names is stored once: (slot, its first slot).
        let mut aliases: Vec<(usize, usize)> = Vec::new();
        let mut pending_bytes = 0usize;
        for item in provider.items()?.iter() {
            let (name, entry): (String, Bound<'py, PyAny>) =
                args::arg(&item, "provider", "a mapping of str offset names to connectivities and dimensions")?;
            if let Ok(conn) = entry.cast::<Connectivity>() {
                if let Some((first, _, _)) = pending.iter().find(|(_, c, _)| c.is(conn)) {
                    aliases.push((slots.len(), *first));
                    slots.push((name, None));
                } else if let Some(hit) = memo_hit(py, conn, store, table_dtype)? {
                    slots.push((name, Some(hit.into_bound(py).into_any())));
                } else if conn.get().device.is_none() {
                    let c = conn.get();
                    pending_bytes = pending_bytes.saturating_add(check_size(Some(&name), c.dtype, c.shape, max_bytes)?);
                    let host = crate::array::host_table(c.table.bind(py))?;
                    pending.push((slots.len(), conn.clone(), host));
                    slots.push((name, None));
                } else {
                    let ct = convert(py, &name, conn, store, max_bytes, table_dtype)?;
                    slots.push((name, Some(ct.into_bound(py).into_any())));
                }
            } else if entry.cast::<Dimension>().is_ok() || entry.cast::<CompileTimeConnectivity>().is_ok() {
                slots.push((name, Some(entry)));
            } else {
                return Err(error(
                    Kind::Type,
                    format!(
                        "argument provider, offset {name}: an object of type {} is neither a gridkey.Connectivity nor a gridkey.Dimension",
                        entry.get_type().fully_qualified_name()?
                    ),
                ));
            }
        }
        let raws = pending.iter().map(|(_, _, host)| host.raw()).collect::<PyResult<Vec<_>>>()?;
        let narrow = table_dtype.narrow();
        let specs = interrupt::run(py, pending_bytes, |cancel| store_all(store, &raws, narrow, cancel))?;
        for ((slot, conn, _), spec) in pending.iter().zip(specs) {
            let name = slots[*slot].0.clone();
            let spec = spec.map_err(|e| store_error_of(&name, e))?;
            let ct = finish(py, &name, conn, store, table_dtype, &spec)?;
            slots[*slot].1 = Some(ct.into_bound(py).into_any());
        }
        for (slot, first) in aliases {
            slots[slot].1 = slots[first].1.clone();
        }
        let out = PyDict::new(py);
        for (name, value) in slots {
            out.set_item(name, value.expect("every slot was filled"))?;
        }
        Ok(out)
    })
}
