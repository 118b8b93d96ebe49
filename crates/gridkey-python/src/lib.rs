//! `gridkey._gridkey`: the extension module of the `gridkey` Python package, built with maturin
//! from this crate (an abi3 wheel for CPython 3.10 and later).
//!
//! It exposes gridkey's crates to NumPy users with the field's names: the table digest
//! (gridkey-digest, format v1), the table store (gridkey-store), compile-time views of offset
//! providers (gridkey-offsets), translation keys (gridkey-fingerprint), the per-key locks
//! (gridkey-fs) and GT4Py's side of the shared tier (gridkey-remote, ADR 0041). The package
//! `python/gridkey` re-exports it and holds what must be Python (the exception classes, the
//! host copy of device arrays).
//!
//! # Architecture invariant
//!
//! No table is copied to compute its digest or to store it: host tables are read where NumPy
//! holds them, in any memory order, strides or byte order (`raw.rs`), and a device table is
//! copied to the host once per conversion. Every entry point catches panics and returns a
//! `gridkey.GridkeyError` (no unwinding into the interpreter), and the GIL is released while
//! tables are hashed and written. Settings come from the environment in one place
//! (`settings.rs`). Arrays over stored tables are read-only and keep their mapping alive.
//!
//! # Example
//!
//! ```python
//! import numpy as np, gridkey
//!
//! c2e = np.asfortranarray(np.arange(12, dtype=np.int64).reshape(4, 3))
//! store = gridkey.TableStore("/tmp/cache")
//! digest = store.put(c2e)                       # == gridkey.table_digest(c2e)
//! table = store.open(digest, np.int64, (4, 3))  # read-only, C-contiguous, memory-mapped
//! provider = {"C2E": gridkey.Connectivity(c2e, gridkey.Dimension("Cell"),
//!                                         gridkey.Dimension("C2EDim", "local"), gridkey.Dimension("Edge")),
//!             "Koff": gridkey.Dimension("K", "vertical")}
//! view = gridkey.compile_time_offset_provider(provider, store)
//! key = gridkey.KeyInputs("my-frontend", "1.0", "div", b"...", {}, view).key()
//! ```

mod args;
mod array;
mod device;
mod errors;
mod gt4py_tiers;
mod interrupt;
mod keys;
mod locks;
mod offsets;
mod raw;
mod settings;
mod shared;
mod store;

use pyo3::prelude::*;

/// The digest (format v1) of `table`, 32 hex digits: xxh3_128 over the dtype, the shape and
/// the elements in C order, little-endian (ADR 0001), the same for every memory order, strides
/// and byte order of the same table.
///
/// `table` is a 2-D int32 or int64 array: a NumPy array or `numpy.memmap`, or anything NumPy
/// reads without a copy (the buffer protocol, `__array__`, a host `__dlpack__`); it is read in
/// place (C and Fortran order at memory speed, other strides through a 64 KiB buffer) with the
/// GIL released. A device array (`__dlpack__` on a device, `__cuda_array_interface__`) is
/// copied to the host once.
///
/// A table of more than `max_table_bytes` bytes (default `DEFAULT_MAX_TABLE_BYTES`, 2**40) is
/// refused before it is read, and Ctrl-C stops the hashing within a fraction of a second
/// (ADR 0035).
///
/// Errors: `TableTypeError` (not an array; float, bool, unsigned or object elements),
/// `TableValueError` (not 2-D), `TableTooLargeError`, `DeviceCopyError`, `KeyboardInterrupt`.
#[pyfunction]
#[pyo3(signature = (table, *, max_table_bytes = settings::DEFAULT_MAX_TABLE_BYTES))]
fn table_digest(
    py: Python<'_>,
    table: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = args::max_table_bytes)] max_table_bytes: u64,
) -> PyResult<String> {
    errors::guard(|| store::digest_object(py, table, max_table_bytes).map(|d| d.to_hex()))
}

/// The extension module.
#[pymodule]
fn _gridkey(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::add_classes(m)?;
    m.add("DIGEST_FORMAT_VERSION", gridkey_digest::DIGEST_FORMAT_VERSION)?;
    m.add("KEY_FORMAT_VERSION", gridkey_fingerprint::KEY_FORMAT_VERSION)?;
    m.add("TABLES_DIR", gridkey_store::TABLES_DIR)?;
    m.add("DEFAULT_MAX_TABLE_BYTES", settings::DEFAULT_MAX_TABLE_BYTES)?;
    m.add_function(wrap_pyfunction!(table_digest, m)?)?;
    m.add_class::<settings::Settings>()?;
    m.add_class::<store::TableStore>()?;
    m.add_class::<store::MappedTable>()?;
    m.add_class::<offsets::Dimension>()?;
    m.add_class::<offsets::Connectivity>()?;
    m.add_class::<offsets::CompileTimeConnectivity>()?;
    m.add_class::<offsets::IdentityMemo>()?;
    m.add_function(wrap_pyfunction!(offsets::compile_time_connectivity, m)?)?;
    m.add_function(wrap_pyfunction!(offsets::compile_time_offset_provider, m)?)?;
    m.add_function(wrap_pyfunction!(offsets::conversion_stats, m)?)?;
    m.add_function(wrap_pyfunction!(offsets::rehydrate, m)?)?;
    m.add_class::<locks::KeyLocks>()?;
    m.add_class::<locks::KeyLock>()?;
    m.add_class::<keys::KeyInputs>()?;
    m.add_function(wrap_pyfunction!(keys::translation_key, m)?)?;
    m.add_function(wrap_pyfunction!(keys::explain, m)?)?;
    m.add("GT4PY_DIR", gridkey_fingerprint::gt4py::GT4PY_DIR)?;
    m.add_class::<gt4py_tiers::Gt4pyStore>()?;
    m.add_function(wrap_pyfunction!(gt4py_tiers::cxx_compiler_identity, m)?)?;
    m.add_function(wrap_pyfunction!(gt4py_tiers::start_cxx_compiler_identity, m)?)?;
    m.add_class::<gt4py_tiers::PendingCxxIdentity>()?;
    m.add_function(wrap_pyfunction!(gt4py_tiers::gt4py_extension_key, m)?)?;
    m.add_function(wrap_pyfunction!(gt4py_tiers::gt4py_translation_key, m)?)?;
    m.add_function(wrap_pyfunction!(gt4py_tiers::gt4py_folder_memo_key, m)?)?;
    m.add_class::<shared::Gt4pyShared>()?;
    m.add_function(wrap_pyfunction!(shared::remote_keygen, m)?)?;
    Ok(())
}
