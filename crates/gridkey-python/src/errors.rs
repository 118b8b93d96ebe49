//! The one place where Rust errors become Python exceptions.
//!
//! The exception classes are defined in Python (`gridkey/errors.py`), because a class such as
//! `TableNotFoundError` derives from both `GridkeyOSError` and `FileNotFoundError`; they are
//! imported once, when the extension module is initialised ([`add_classes`]), held in
//! [`CLASSES`] and added to the module, so that `gridkey._gridkey.TableTypeError is
//! gridkey.errors.TableTypeError` and nothing is looked up by name afterwards. Each exception
//! carries the Rust message unchanged, and an `OSError` subclass also gets `errno` and
//! `filename`.
//!
//! Every error enum of a crate this package calls is mapped by one [`IntoPyErr`] impl here, each
//! an exhaustive `match`, so a new variant is a compile error until it is given a class.

use std::path::Path;

use gridkey_digest::{DigestError, Dtype};
use gridkey_fingerprint::FingerprintError;
use gridkey_offsets::OffsetsError;
use gridkey_settings::SettingsError;
use gridkey_store::StoreError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// The exception classes of `gridkey.errors`.
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
    /// `TableTypeError(GridkeyError, TypeError)`: not a table, or not an int32/int64 one, or an
    /// argument of another type.
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

/// The classes of `gridkey.errors`, imported once.
struct Classes {
    base: Py<PyType>,
    os: Py<PyType>,
    not_found: Py<PyType>,
    table_file: Py<PyType>,
    value: Py<PyType>,
    type_: Py<PyType>,
    settings: Py<PyType>,
    device_copy: Py<PyType>,
    internal: Py<PyType>,
    too_large: Py<PyType>,
}

impl Classes {
    /// Every class with its name in `gridkey.errors`, the base first.
    fn named(&self) -> [(&'static str, &Py<PyType>); 10] {
        [
            ("GridkeyError", &self.base),
            ("GridkeyOSError", &self.os),
            ("TableNotFoundError", &self.not_found),
            ("TableFileError", &self.table_file),
            ("TableValueError", &self.value),
            ("TableTypeError", &self.type_),
            ("SettingsError", &self.settings),
            ("DeviceCopyError", &self.device_copy),
            ("InternalError", &self.internal),
            ("TableTooLargeError", &self.too_large),
        ]
    }

    fn of(&self, kind: Kind) -> &Py<PyType> {
        match kind {
            Kind::Os => &self.os,
            Kind::NotFound => &self.not_found,
            Kind::TableFile => &self.table_file,
            Kind::Value => &self.value,
            Kind::Type => &self.type_,
            Kind::Settings => &self.settings,
            Kind::DeviceCopy => &self.device_copy,
            Kind::Internal => &self.internal,
            Kind::TooLarge => &self.too_large,
        }
    }

    fn import(py: Python<'_>) -> PyResult<Self> {
        let module = py.import("gridkey.errors")?;
        let get = |name: &str| -> PyResult<Py<PyType>> { Ok(module.getattr(name)?.cast_into::<PyType>()?.unbind()) };
        Ok(Self {
            base: get("GridkeyError")?,
            os: get("GridkeyOSError")?,
            not_found: get("TableNotFoundError")?,
            table_file: get("TableFileError")?,
            value: get("TableValueError")?,
            type_: get("TableTypeError")?,
            settings: get("SettingsError")?,
            device_copy: get("DeviceCopyError")?,
            internal: get("InternalError")?,
            too_large: get("TableTooLargeError")?,
        })
    }
}

/// The classes every exception of this module is made from, set by [`add_classes`].
static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&'static Classes> {
    CLASSES.get_or_try_init(py, || Classes::import(py))
}

/// Imports the exception classes of `gridkey.errors` once and adds each to `m` under its own
/// name (`gridkey._gridkey.TableTypeError`), the very objects the exceptions are made from.
///
/// Errors: the `ImportError` or `AttributeError` of a `gridkey.errors` without them (a broken
/// install), which fails the import of the module.
pub fn add_classes(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for (name, class) in classes(m.py())?.named() {
        m.add(name, class.clone_ref(m.py()))?;
    }
    Ok(())
}

fn class<'py>(py: Python<'py>, kind: Kind) -> PyResult<Bound<'py, PyType>> {
    Ok(classes(py)?.of(kind).bind(py).clone())
}

/// A crate's error enum as the Python exception of its kind, carrying its message: the one
/// mapping of each enum (`map_err(IntoPyErr::into_py_err)`).
pub trait IntoPyErr {
    /// The exception.
    fn into_py_err(self) -> PyErr;
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

impl IntoPyErr for StoreError {
    fn into_py_err(self) -> PyErr {
        store_error_in(None, self)
    }
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

/// Its message names the offset; a failed host copy is a `DeviceCopyError` whose cause is the
/// array library's exception (`device::HostCopyError`).
impl IntoPyErr for OffsetsError {
    fn into_py_err(self) -> PyErr {
        match self {
            OffsetsError::Store { offset, source } => store_error_in(Some(&offset), source),
            OffsetsError::HostCopy { ref source, .. } => {
                let err = error(Kind::DeviceCopy, self.to_string());
                if let Some(cause) = crate::device::cause_of(source) {
                    Python::attach(|py| err.set_cause(py, Some(cause)));
                }
                err
            }
            OffsetsError::HostCopyShape { .. } => error(Kind::DeviceCopy, self.to_string()),
            OffsetsError::DuplicateOffset { .. }
            | OffsetsError::TableLength { .. }
            | OffsetsError::DimensionKind { .. }
            | OffsetsError::NegativeEntry { .. } => error(Kind::Value, self.to_string()),
        }
    }
}

impl IntoPyErr for DigestError {
    fn into_py_err(self) -> PyErr {
        match self {
            DigestError::Length { .. } | DigestError::Parse { .. } => error(Kind::Value, self.to_string()),
        }
    }
}

/// A key that does not parse is a `TableValueError`; a directory or entry that cannot be
/// written a `GridkeyOSError` with its errno and path.
impl IntoPyErr for FingerprintError {
    fn into_py_err(self) -> PyErr {
        let message = self.to_string();
        match &self {
            FingerprintError::Directory { path, source } | FingerprintError::Write { path, source } => {
                construct(Kind::Os, message, source.raw_os_error(), Some(path))
            }
            FingerprintError::TierWrite { .. } => error(Kind::Os, message),
            FingerprintError::ParseKey { .. } | FingerprintError::BadEntry { .. } => error(Kind::Value, message),
        }
    }
}

impl IntoPyErr for SettingsError {
    fn into_py_err(self) -> PyErr {
        match self {
            SettingsError::BadSetting { .. }
            | SettingsError::CompilerNotFound { .. }
            | SettingsError::CompilerNotIdentified { .. }
            | SettingsError::TaskCacheDir { .. } => error(Kind::Settings, self.to_string()),
        }
    }
}

/// The exception of a [`SettingsError`] about a compiler command read from `var` (GT4Py's
/// `CXX`) rather than from the variable the settings parser read it from (`CC`): the error
/// names `var`, in its message and its fix.
pub fn settings_error_of(var: &'static str, mut e: SettingsError) -> PyErr {
    match &mut e {
        SettingsError::BadSetting { var: v, .. }
        | SettingsError::CompilerNotFound { var: v, .. }
        | SettingsError::CompilerNotIdentified { var: v, .. } => *v = var,
        SettingsError::TaskCacheDir { .. } => {}
    }
    e.into_py_err()
}

/// A layout that `raw.rs` cannot read: a bad value of the array (its strides or span).
impl IntoPyErr for crate::raw::LayoutError {
    fn into_py_err(self) -> PyErr {
        error(Kind::Value, self.0)
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
