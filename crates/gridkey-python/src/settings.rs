//! `gridkey.Settings`: gridkey's environment variables, parsed once into typed settings.
//!
//! This is the package's one reader of the environment ([`Settings::from_environ`] reads
//! `os.environ`); everything else takes a `Settings` or what it holds. The parsing is the Rust
//! crates' own (`from_vars` over a lookup function), so the package accepts and refuses
//! exactly what the `gridkey` command does, with the same messages.

use std::collections::HashMap;
use std::path::Path;

use pyo3::prelude::*;
use pyo3::types::PyMapping;

use crate::errors::{error, guard, Kind};

/// gridkey's settings (`gridkey_settings::Settings`), read from environment variables once:
/// `Settings()` reads `os.environ`, `Settings.from_vars(mapping)` any mapping of variable names
/// to values.
///
/// Errors: `SettingsError` naming the variable, its value and what it accepts.
#[pyclass(module = "gridkey", frozen)]
pub struct Settings {
    inner: gridkey_settings::Settings,
}

impl Settings {
    /// Parses the settings from `lookup` (variable name to value): `Settings::from_vars`.
    fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> PyResult<Self> {
        gridkey_settings::Settings::from_vars(lookup)
            .map(|inner| Self { inner })
            .map_err(|e| error(Kind::Settings, e.to_string()))
    }

    /// The settings of the process environment as Python sees it (`os.environ`): the package's
    /// one reader of the environment.
    pub fn from_environ(py: Python<'_>) -> PyResult<Self> {
        let environ = py.import("os")?.getattr("environ")?;
        Self::from_mapping(&environ)
    }

    fn from_mapping(mapping: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mapping = mapping
            .cast::<PyMapping>()
            .map_err(|_| error(Kind::Type, "settings come from a mapping of variable names to values"))?;
        let mut vars = HashMap::new();
        for item in mapping.items()?.iter() {
            let (name, value): (String, String) = item.extract()?;
            vars.insert(name, value);
        }
        Self::from_vars(|k| vars.get(k).cloned())
    }

    /// The cache directory.
    pub fn cache_dir(&self) -> &Path {
        &self.inner.cache_dir
    }

    /// Whether every open of a stored table recomputes its digest.
    pub fn verify_tables(&self) -> bool {
        self.inner.verify_tables
    }
}

#[pymethods]
impl Settings {
    /// The settings of the environment (`os.environ`), read now.
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        guard(|| Self::from_environ(py))
    }

    /// The settings of `vars`, a mapping of environment variable names to values (pure: the
    /// environment is not read).
    #[staticmethod]
    #[pyo3(name = "from_vars")]
    fn py_from_vars(vars: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| Self::from_mapping(vars))
    }

    /// The cache directory (`GRIDKEY_CACHE_DIR`, default `.gridkey_cache`).
    #[getter(cache_dir)]
    fn py_cache_dir(&self) -> std::path::PathBuf {
        self.inner.cache_dir.clone()
    }

    /// Whether every open of a stored table recomputes its digest (`GRIDKEY_VERIFY_TABLES`).
    #[getter(verify_tables)]
    fn py_verify_tables(&self) -> bool {
        self.inner.verify_tables
    }

    /// Whether every translation-cache hit is translated again and compared
    /// (`GRIDKEY_VERIFY_CACHE_HITS`).
    #[getter]
    fn verify_cache_hits(&self) -> bool {
        self.inner.verify_cache_hits
    }

    /// `"serial"`, `"thread"` or `"process"` (`GRIDKEY_BUILD_JOBS_MODE`, `GRIDKEY_BUILD_JOBS`).
    #[getter]
    fn build_jobs_mode(&self) -> &'static str {
        self.inner.build_jobs.mode.as_str()
    }

    /// Number of build jobs (1 in serial mode).
    #[getter]
    fn build_jobs(&self) -> usize {
        self.inner.build_jobs.jobs
    }

    /// Seconds a process-mode task may run (`GRIDKEY_BUILD_TIMEOUT`), or `None`.
    #[getter]
    fn build_timeout(&self) -> Option<f64> {
        self.inner.build_jobs.timeout.map(|t| t.as_secs_f64())
    }

    /// The C compiler command, as words (`CC`, default `["cc"]`).
    #[getter]
    fn compiler(&self) -> Vec<String> {
        self.inner.compiler.command.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "Settings(cache_dir={:?}, verify_tables={}, verify_cache_hits={}, build_jobs_mode={:?}, build_jobs={}, build_timeout={})",
            self.inner.cache_dir,
            if self.inner.verify_tables { "True" } else { "False" },
            if self.inner.verify_cache_hits { "True" } else { "False" },
            self.build_jobs_mode(),
            self.inner.build_jobs.jobs,
            self.build_timeout().map_or_else(|| "None".to_owned(), |t| t.to_string())
        )
    }
}
