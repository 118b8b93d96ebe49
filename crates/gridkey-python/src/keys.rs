//! Translation keys (format v1, ADR 0003) from Python: `KeyInputs`, `translation_key` and
//! `explain`, all computed by gridkey-fingerprint.

use std::collections::BTreeMap;

use gridkey_fingerprint::{diff_inputs, Frontend, TranslationOptions};
use gridkey_offsets::{CompileTimeOffsetProvider, Entry};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyMapping};

use crate::args;
use crate::errors::{error, guard, IntoPyErr, Kind};
use crate::offsets::{CompileTimeConnectivity, Connectivity, Dimension};

/// Every input of a translation key, in key order: the format versions, the frontend and its
/// version, the program's name and stable encoding, the translation options, and every entry of
/// the compile-time offset provider in order (a dimension's name and kind; a connectivity's
/// domain, local and codomain dimensions, skip value, dtype, shape and table digest). Nothing
/// else enters the key: no path, runner, memory order or array library (ADR 0003).
///
/// Also the JSON record kept beside every translation-cache entry (`to_json`, `from_json`).
#[pyclass(module = "gridkey", frozen, eq)]
#[derive(PartialEq)]
pub struct KeyInputs {
    inner: gridkey_fingerprint::KeyInputs,
}

fn compile_time_provider(provider: &Bound<'_, PyAny>) -> PyResult<CompileTimeOffsetProvider> {
    let provider = provider.cast::<PyMapping>().map_err(|_| {
        error(
            Kind::Type,
            format!("argument provider must be a mapping of offset names to compile-time connectivities and dimensions, not {}", provider.get_type().name().map(|n| n.to_string()).unwrap_or_default()),
        )
    })?;
    let mut out = CompileTimeOffsetProvider::new();
    for item in provider.items()?.iter() {
        let (name, entry): (String, Bound<'_, PyAny>) = crate::args::arg(
            &item,
            "provider",
            "a mapping of str offset names to compile-time connectivities and dimensions",
        )?;
        let entry = if let Ok(c) = entry.cast::<CompileTimeConnectivity>() {
            Entry::Gather(c.get().inner().clone())
        } else if let Ok(d) = entry.cast::<Dimension>() {
            Entry::Dimension(d.get().inner.clone())
        } else if entry.cast::<Connectivity>().is_ok() {
            return Err(error(
                Kind::Type,
                format!("argument provider, offset {name} is a runtime connectivity: key the compile-time view (gridkey.compile_time_offset_provider)"),
            ));
        } else {
            return Err(error(
                Kind::Type,
                format!(
                    "argument provider, offset {name}: an object of type {} is neither a compile-time connectivity nor a dimension",
                    entry.get_type().fully_qualified_name()?
                ),
            ));
        };
        out.push(name, entry).map_err(IntoPyErr::into_py_err)?;
    }
    Ok(out)
}

#[pymethods]
impl KeyInputs {
    /// The key inputs of translating `program` (with its stable `encoding`, bytes) by
    /// `frontend` at `frontend_version` with `options` (a mapping of names to strings) against
    /// `provider`, a compile-time offset provider (`compile_time_offset_provider`).
    /// `frontend_fingerprint` is a digest of the frontend's translation code (key format v2,
    /// ADR 0020): a frontend rebuilt with other translation code passes another one.
    ///
    /// Errors: `TableTypeError` for a provider entry that is not a `CompileTimeConnectivity` or
    /// a `Dimension` (a runtime `Connectivity` included).
    #[new]
    #[pyo3(signature = (frontend, frontend_version, program, encoding, options, provider, frontend_fingerprint = String::new()))]
    fn new(
        #[pyo3(from_py_with = args::frontend)] frontend: String,
        #[pyo3(from_py_with = args::frontend_version)] frontend_version: String,
        #[pyo3(from_py_with = args::program)] program: String,
        #[pyo3(from_py_with = args::encoding)] encoding: Vec<u8>,
        #[pyo3(from_py_with = args::options)] options: BTreeMap<String, String>,
        provider: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::frontend_fingerprint)] frontend_fingerprint: String,
    ) -> PyResult<Self> {
        guard(|| {
            let provider = compile_time_provider(provider)?;
            let frontend = Frontend { name: frontend, version: frontend_version, fingerprint: frontend_fingerprint };
            let options: TranslationOptions = options;
            Ok(Self { inner: gridkey_fingerprint::KeyInputs::new(&frontend, &program, &encoding, &options, &provider) })
        })
    }

    /// The key inputs of a JSON record (as `to_json` writes it and the translation cache keeps
    /// beside each entry, `translation-v2/ab/<key>.json`).
    ///
    /// Errors: `TableValueError` naming what is wrong with the record.
    #[staticmethod]
    fn from_json(#[pyo3(from_py_with = args::text)] text: String) -> PyResult<Self> {
        serde_json::from_str(&text).map(|inner| Self { inner }).map_err(|e| {
            error(
                Kind::Value,
                format!("not a key-input record of format v{}: {e}", gridkey_fingerprint::KEY_FORMAT_VERSION),
            )
        })
    }

    /// The JSON record of these inputs (the translation cache's `.json` beside each entry).
    fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.inner).expect("key inputs serialise")
    }

    /// The translation key, 32 hex digits.
    fn key(&self) -> String {
        self.inner.key().to_hex()
    }

    /// The program's name.
    #[getter]
    fn program(&self) -> &str {
        &self.inner.program
    }

    /// The frontend's name.
    #[getter]
    fn frontend(&self) -> &str {
        &self.inner.frontend.name
    }

    /// The frontend's version.
    #[getter]
    fn frontend_version(&self) -> &str {
        &self.inner.frontend.version
    }

    /// The program's stable encoding.
    #[getter]
    fn encoding<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let hex = &self.inner.program_encoding;
        let bytes: Option<Vec<u8>> =
            (0..hex.len() / 2).map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()).collect();
        let bytes = bytes.ok_or_else(|| error(Kind::Value, format!("program encoding {hex:?} is not hex")))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The translation options, sorted by name.
    #[getter]
    fn options(&self) -> BTreeMap<String, String> {
        self.inner.options.clone()
    }

    /// The offset-provider entries as plain dicts, in order (the record's `offsets`).
    #[getter]
    fn offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let json = serde_json::to_string(&self.inner.offsets).expect("offsets serialise");
        py.import("json")?.call_method1("loads", (json,))?.cast_into::<PyList>().map_err(|e| e.into())
    }

    fn __repr__(&self) -> String {
        format!("KeyInputs(program={:?}, key={})", self.inner.program, self.key())
    }
}

/// The translation key of `inputs` (format v1), 32 hex digits: the same as `inputs.key()`.
#[pyfunction]
pub fn translation_key(#[pyo3(from_py_with = args::inputs)] inputs: Bound<'_, KeyInputs>) -> String {
    inputs.get().key()
}

/// The key inputs that differ between `a` and `b`, as the object `gridkey explain KEY_A KEY_B
/// --json` prints: `{"a": key, "b": key, "identical": bool, "differences": [{"input", "before",
/// "after"}, ...]}`, differences in key order (versions, frontend, program, options, offsets
/// by name, then their order); a value missing on one side reads `absent`.
#[pyfunction]
pub fn explain<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::a)] a: Bound<'py, KeyInputs>,
    #[pyo3(from_py_with = args::b)] b: Bound<'py, KeyInputs>,
) -> PyResult<Bound<'py, PyDict>> {
    let (a, b) = (a.get(), b.get());
    let differences = PyList::empty(py);
    for change in diff_inputs(&a.inner, &b.inner) {
        let d = PyDict::new(py);
        d.set_item("input", change.input)?;
        d.set_item("before", change.before)?;
        d.set_item("after", change.after)?;
        differences.append(d)?;
    }
    let out = PyDict::new(py);
    out.set_item("a", a.key())?;
    out.set_item("b", b.key())?;
    out.set_item("identical", differences.is_empty())?;
    out.set_item("differences", differences)?;
    Ok(out)
}
