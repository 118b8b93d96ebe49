//! The one place where Rust errors become Python exceptions.
//!
//! The exception classes are defined in Python (`gridkey/errors.py`), because a class such as
//! `TableNotFoundError` derives from both `GridkeyOSError` and `FileNotFoundError`; each carries
//! the Rust message unchanged, and an `OSError` subclass also gets `errno` and `filename`.

use std::path::Path;

use gridkey_digest::Dtype;
use gridkey_offsets::OffsetsError;
use gridkey_store::StoreError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// The exception classes of `gridkey.errors`, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `GridkeyOSError(GridkeyError, OSError)`: the file system refused (directory, write, read).
    Os,
    /// `TableNotFoundError(GridkeyOSError, FileNotFoundError)`: a table is not in the store.
    NotFound,
    /// `TableFileError(GridkeyError, ValueError)`: a stored file is not the table it should be.
    TableFile,
    /// `TableValueError(GridkeyError, ValueError)`: a table or an argument has a bad value
    /// (dimensions, shape, digest text, key-input record).
    Value,
    /// `TableTypeError(GridkeyError, TypeError)`: not a table, or not an int32/int64 one.
    Type,
    /// `SettingsError(GridkeyError, ValueError)`: a bad environment variable.
    Settings,
    /// `DeviceCopyError(GridkeyError, RuntimeError)`: copying a device table to the host failed.
    DeviceCopy,
    /// `InternalError(GridkeyError, RuntimeError)`: a bug of gridkey, caught at the boundary.
    Internal,
    /// `TableTooLargeError(GridkeyError, ValueError)`: a table larger than `max_table_bytes`
    /// (made by [`too_large`], with its offset, size and limit).
    TooLarge,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Os => "GridkeyOSError",
            Kind::NotFound => "TableNotFoundError",
            Kind::TableFile => "TableFileError",
            Kind::Value => "TableValueError",
            Kind::Type => "TableTypeError",
            Kind::Settings => "SettingsError",
            Kind::DeviceCopy => "DeviceCopyError",
            Kind::Internal => "InternalError",
            Kind::TooLarge => "TableTooLargeError",
        }
    }
}

fn class<'py>(py: Python<'py>, kind: Kind) -> PyResult<Bound<'py, PyType>> {
    static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = ERRORS.get_or_try_init(py, || py.import("gridkey.errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(kind.class_name())?.cast_into::<PyType>()?)
}

/// A Python exception of `kind` with `message`.
pub fn error(kind: Kind, message: impl Into<String>) -> PyErr {
    construct(kind, message.into(), None, None)
}

fn construct(kind: Kind, message: String, errno: Option<i32>, path: Option<&Path>) -> PyErr {
    Python::attach(|py| {
        let filename = path.map(|p| p.to_string_lossy().into_owned());
        let made = class(py, kind).and_then(|c| match kind {
            // The OSError classes take the message, errno and filename and print the message.
            Kind::Os | Kind::NotFound => c.call1((message.clone(), errno, filename)),
            _ => c.call1((message.clone(),)),
        });
        match made {
            Ok(instance) => PyErr::from_value(instance),
            // The classes ship with the package: failing to import them is itself a bug to report.
            Err(e) => PyRuntimeError::new_err(format!("{message} (and gridkey.errors failed: {e})")),
        }
    })
}

/// `TableTooLargeError` for a table of `dtype` and `shape`, `size` bytes, over `limit` bytes
/// (`max_table_bytes`), with `offset` (or `None`), `size` and `limit` as attributes.
pub fn too_large(offset: Option<&str>, dtype: Dtype, shape: [usize; 2], size: u128, limit: u64) -> PyErr {
    let at = offset.map(|o| format!("offset {o}: ")).unwrap_or_default();
    let message = format!(
        "{at}a {dtype} table of shape ({}, {}) is {size} bytes, more than the limit of {limit} bytes: pass a smaller table, or a larger max_table_bytes to gridkey.Settings (or table_digest)",
        shape[0], shape[1]
    );
    Python::attach(|py| {
        let made = class(py, Kind::TooLarge).and_then(|c| c.call1((message.clone(), offset, size, limit)));
        match made {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => PyRuntimeError::new_err(format!("{message} (and gridkey.errors failed: {e})")),
        }
    })
}

/// `GridkeyOSError` with `message`, the errno of `e` and `path` as its filename.
pub fn os_error(message: impl Into<String>, e: &std::io::Error, path: &Path) -> PyErr {
    construct(Kind::Os, message.into(), e.raw_os_error(), Some(path))
}

/// `ENOENT`, the errno of a missing file (2 on Linux and macOS).
const ENOENT: i32 = 2;

/// The exception for a table-store error, carrying its message (after `prefix`, if any).
pub fn store_error(e: StoreError) -> PyErr {
    store_error_in(None, e)
}

fn store_error_in(offset: Option<&str>, e: StoreError) -> PyErr {
    // The store names the cache directory by its role; this edge reads GRIDKEY_CACHE_DIR too.
    let message = gridkey_settings::name_settings(&e.to_string(), |_| None);
    let message = match offset {
        Some(offset) => format!("offset {offset}: {message}"),
        None => message,
    };
    match &e {
        StoreError::Directory { path, source }
        | StoreError::Write { path, source, .. }
        | StoreError::Read { path, source }
        | StoreError::WriteTemp { dir: path, source, .. } => {
            construct(Kind::Os, message, source.raw_os_error(), Some(path))
        }
        StoreError::NotAFile { path } => construct(Kind::Os, message, None, Some(path)),
        StoreError::Missing { path, .. } => construct(Kind::NotFound, message, Some(ENOENT), Some(path)),
        StoreError::Format { .. }
        | StoreError::Shape { .. }
        | StoreError::Digest { .. }
        | StoreError::Truncated { .. } => error(Kind::TableFile, message),
    }
}

/// The exception for an offsets error; its message names the offset.
pub fn offsets_error(e: OffsetsError) -> PyErr {
    match e {
        OffsetsError::Store { offset, source } => store_error_in(Some(&offset), source),
        other => error(Kind::Value, other.to_string()),
    }
}

/// Runs `f`, turning a panic into `InternalError` instead of unwinding into Python: nothing
/// gridkey does may end the interpreter.
pub fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err(error(Kind::Internal, format!("internal error in gridkey: {what}; please report it")))
        }
    }
}
