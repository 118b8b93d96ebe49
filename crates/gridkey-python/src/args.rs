//! Arguments of the public functions and methods, converted with gridkey's exceptions.
//!
//! PyO3 converts a typed parameter before the function runs and raises a plain `TypeError`
//! (or `OverflowError`) for an argument of another type. The public entry points therefore take
//! their arguments as objects and convert them here, so that a wrong type is a `TableTypeError`
//! and an integer out of range a `TableValueError`, both subclasses of `GridkeyError` whose
//! message names the argument. What PyO3 still raises itself, before any of this runs, is the
//! `TypeError` of a call with a missing, an extra or an unknown keyword argument.

use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::PyClass;

use crate::errors::{error, Kind};

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned())
}

/// The argument `name` of a public call, `obj`, as `T`; `expected` says what it takes
/// (`"a str"`, `"an int from 0"`).
///
/// Errors: `TableValueError` for an integer out of the range of `T` (a negative size);
/// `TableTypeError` for an object of another type, both naming the argument, with PyO3's
/// message as the cause.
pub fn arg<'py, T>(obj: &Bound<'py, PyAny>, name: &str, expected: &str) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py>,
    for<'a> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
{
    obj.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        let py = obj.py();
        let err = if e.is_instance_of::<PyOverflowError>(py) {
            error(Kind::Value, format!("argument {name} is {}, out of range: pass {expected}", repr(obj)))
        } else {
            error(Kind::Type, format!("argument {name} must be {expected}, not {}", type_name(obj)))
        };
        err.set_cause(py, Some(e));
        err
    })
}

/// The argument `name`, `obj`, as `T` or `None` for `None`.
///
/// Errors: as [`arg`].
pub fn optional<'py, T>(obj: Option<&Bound<'py, PyAny>>, name: &str, expected: &str) -> PyResult<Option<T>>
where
    T: for<'a> FromPyObject<'a, 'py>,
    for<'a> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
{
    match obj {
        Some(obj) if !obj.is_none() => arg(obj, name, expected).map(Some),
        _ => Ok(None),
    }
}

/// The argument `name`, `obj`, as an instance of the class `T` (`gridkey.<class>`).
///
/// Errors: `TableTypeError` naming the argument and the class for an object of another type.
pub fn instance<'a, 'py, T: PyClass>(obj: &'a Bound<'py, PyAny>, name: &str) -> PyResult<&'a Bound<'py, T>> {
    obj.cast::<T>().map_err(|_| {
        let class = obj.py().get_type::<T>().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned());
        error(Kind::Type, format!("argument {name} must be a gridkey.{class}, not {}", type_name(obj)))
    })
}

fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".to_owned())
}

/// One converter per argument name, for `#[pyo3(from_py_with = args::NAME)]`: the argument
/// `NAME` as its type, with the errors of [`arg`] (or [`optional`] for an `Option`).
macro_rules! converters {
    ($($f:ident: $t:ty = $expected:literal;)*) => {
        $(
            #[doc = concat!("The argument `", stringify!($f), "`: ", $expected, ".")]
            pub fn $f(obj: &Bound<'_, PyAny>) -> PyResult<$t> {
                arg(obj, stringify!($f), $expected)
            }
        )*
    };
}

/// As [`converters`], for an argument that may be `None`.
macro_rules! optional_converters {
    ($($f:ident: $t:ty = $expected:literal;)*) => {
        $(
            #[doc = concat!("The argument `", stringify!($f), "`: ", $expected, ", or None.")]
            pub fn $f(obj: &Bound<'_, PyAny>) -> PyResult<Option<$t>> {
                optional(Some(obj), stringify!($f), $expected)
            }
        )*
    };
}

converters! {
    max_table_bytes: u64 = "an int from 0 to 2**64 - 1 (bytes)";
    name: String = "a str";
    kind: String = "a str";
    digest: String = "a str of 32 hex digits";
    route: String = "a str (a route: local, remote, lease, here, here-upload or wait)";
    reason: String = "a str";
    verified: bool = "a bool";
    path: std::path::PathBuf = "a path (str or os.PathLike)";
    table_dtype: String = "\"canonical\" or \"runtime\"";
    offset: String = "a str (the offset's name)";
    frontend: String = "a str";
    frontend_version: String = "a str";
    frontend_fingerprint: String = "a str";
    program: String = "a str";
    encoding: Vec<u8> = "bytes";
    options: std::collections::BTreeMap<String, String> = "a mapping of str to str";
    text: String = "a str";
    data: Vec<u8> = "bytes";
    names: Vec<String> = "a sequence of str";
    folder: std::path::PathBuf = "a path (str or os.PathLike)";
    target: std::path::PathBuf = "a path (str or os.PathLike)";
    cwd: std::path::PathBuf = "a path (str or os.PathLike)";
    build_folder: String = "a str";
    compiler_identity: String = "a str";
    ext_suffix: String = "a str";
    platform: String = "a str";
    nanobind_version: String = "a str";
    gridtools_cpp_version: String = "a str";
    gt4py_version: String = "a str";
    cache_name: String = "a str";
    gt4py_key: String = "a str";
    entry: std::path::PathBuf = "a path (str or os.PathLike)";
    build_cache_version_id: String = "a str";
    bindings_fingerprint: String = "a str";
    build_context_id: String = "a str";
}

optional_converters! {
    cache_dir: std::path::PathBuf = "a path (str or os.PathLike)";
    skip_value: i64 = "an int (a 64-bit index)";
}

/// The argument `cache_dir` where it is required (`Gt4pyStore`): a path.
///
/// Errors: as [`arg`].
pub fn required_cache_dir(obj: &Bound<'_, PyAny>) -> PyResult<std::path::PathBuf> {
    arg(obj, "cache_dir", "a path (str or os.PathLike)")
}

/// The argument `key` of GT4Py's store and shared tier: 32 hex digits, as the key they name.
///
/// Errors: as [`arg`] for another type; `TableValueError` for a str that is not 32 hex digits.
pub fn hex_key(obj: &Bound<'_, PyAny>) -> PyResult<gridkey_fingerprint::TranslationKey> {
    let text: String = arg(obj, "key", "a str of 32 hex digits")?;
    text.parse().map_err(|e: gridkey_fingerprint::FingerprintError| crate::errors::IntoPyErr::into_py_err(e))
}

/// The argument `kind` of GT4Py's store and shared tier: `"translation"` or `"extension"`.
///
/// Errors: as [`arg`] for another type; `TableValueError` for another str.
pub fn gt4py_kind(obj: &Bound<'_, PyAny>) -> PyResult<gridkey_fingerprint::gt4py::Gt4pyKind> {
    let name: String = arg(obj, "kind", "\"translation\" or \"extension\"")?;
    gridkey_fingerprint::gt4py::Gt4pyKind::from_name(&name).ok_or_else(|| {
        error(
            Kind::Value,
            format!("argument kind is {name:?}, not a GT4Py entry kind: pass \"translation\" or \"extension\""),
        )
    })
}

/// The argument `store` of `Gt4pyShared`: a `gridkey.Gt4pyStore`.
///
/// Errors: `TableTypeError` naming the argument.
pub fn gt4py_store<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, crate::gt4py_tiers::Gt4pyStore>> {
    instance::<crate::gt4py_tiers::Gt4pyStore>(obj, "store").cloned()
}

/// The argument `settings` where it is required (`Gt4pyShared.connect`): a `gridkey.Settings`.
///
/// Errors: `TableTypeError` naming the argument.
pub fn required_settings<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, crate::settings::Settings>> {
    instance::<crate::settings::Settings>(obj, "settings").cloned()
}

/// The argument `settings`: a `gridkey.Settings`, or None.
///
/// Errors: `TableTypeError` naming the argument.
pub fn settings(obj: &Bound<'_, PyAny>) -> PyResult<Option<Py<crate::settings::Settings>>> {
    if obj.is_none() {
        return Ok(None);
    }
    Ok(Some(instance::<crate::settings::Settings>(obj, "settings")?.clone().unbind()))
}

/// A converter per argument name of a class `T`: the argument as a `Bound<T>`.
macro_rules! instances {
    ($($f:ident: $t:ty;)*) => {
        $(
            #[doc = concat!("The argument `", stringify!($f), "`: a `gridkey.", stringify!($t), "`.")]
            pub fn $f<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, $t>> {
                instance::<$t>(obj, stringify!($f)).cloned()
            }
        )*
    };
}

instances! {
    domain: crate::offsets::Dimension;
    local: crate::offsets::Dimension;
    codomain: crate::offsets::Dimension;
    connectivity: crate::offsets::Connectivity;
    store: crate::store::TableStore;
    inputs: crate::keys::KeyInputs;
    a: crate::keys::KeyInputs;
    b: crate::keys::KeyInputs;
}
