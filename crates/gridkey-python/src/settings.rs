//! `gridkey.Settings`: gridkey's environment variables, parsed once into typed settings.
//!
//! This is the package's one reader of the environment ([`Settings::from_environ`] reads
//! `os.environ`); everything else takes a `Settings` or what it holds. The parsing is the Rust
//! crates' own (`from_vars` over a lookup function), so the package accepts and refuses
//! exactly what the `gridkey` command does, with the same messages.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gridkey_jobs::{switch_from_vars, BuildJobs};
use pyo3::prelude::*;
use pyo3::types::PyMapping;

use crate::errors::{error, guard, Kind};

/// Variable naming the cache directory.
const ENV_CACHE_DIR: &str = "GRIDKEY_CACHE_DIR";
/// Variable switching on verifying opens of stored tables.
const ENV_VERIFY_TABLES: &str = "GRIDKEY_VERIFY_TABLES";
/// Variable switching on re-translation of every cache hit.
const ENV_VERIFY_HITS: &str = "GRIDKEY_VERIFY_CACHE_HITS";
/// The cache directory when `GRIDKEY_CACHE_DIR` is unset or empty.
const DEFAULT_CACHE_DIR: &str = ".gridkey_cache";

/// gridkey's settings, read from environment variables once: `Settings()` reads
/// `os.environ`, `Settings.from_vars(mapping)` any mapping of variable names to values.
///
/// Errors: `SettingsError` naming the variable, its value and what it accepts.
#[pyclass(module = "gridkey", frozen)]
pub struct Settings {
    cache_dir: PathBuf,
    verify_tables: bool,
    verify_cache_hits: bool,
    build_jobs: BuildJobs,
}

impl Settings {
    /// Parses the settings from `lookup` (variable name to value).
    fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> PyResult<Self> {
        let bad = |e: gridkey_jobs::JobsError| error(Kind::Settings, e.to_string());
        let cache_dir = match lookup(ENV_CACHE_DIR) {
            Some(v) if !v.is_empty() => PathBuf::from(v),
            _ => PathBuf::from(DEFAULT_CACHE_DIR),
        };
        let verify_tables = switch_from_vars(ENV_VERIFY_TABLES, lookup(ENV_VERIFY_TABLES).as_deref()).map_err(bad)?;
        let verify_cache_hits = switch_from_vars(ENV_VERIFY_HITS, lookup(ENV_VERIFY_HITS).as_deref()).map_err(bad)?;
        let build_jobs = BuildJobs::from_vars(&lookup).map_err(bad)?;
        Ok(Self { cache_dir, verify_tables, verify_cache_hits, build_jobs })
    }

    /// The settings of the process environment as Python sees it (`os.environ`).
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
        &self.cache_dir
    }

    /// Whether every open of a stored table recomputes its digest.
    pub fn verify_tables(&self) -> bool {
        self.verify_tables
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
    fn py_cache_dir(&self) -> PathBuf {
        self.cache_dir.clone()
    }

    /// Whether every open of a stored table recomputes its digest (`GRIDKEY_VERIFY_TABLES`).
    #[getter(verify_tables)]
    fn py_verify_tables(&self) -> bool {
        self.verify_tables
    }

    /// Whether every translation-cache hit is translated again and compared
    /// (`GRIDKEY_VERIFY_CACHE_HITS`).
    #[getter]
    fn verify_cache_hits(&self) -> bool {
        self.verify_cache_hits
    }

    /// `"serial"`, `"thread"` or `"process"` (`GRIDKEY_BUILD_JOBS_MODE`, `GRIDKEY_BUILD_JOBS`).
    #[getter]
    fn build_jobs_mode(&self) -> &'static str {
        self.build_jobs.mode.as_str()
    }

    /// Number of build jobs (1 in serial mode).
    #[getter]
    fn build_jobs(&self) -> usize {
        self.build_jobs.jobs
    }

    /// Seconds a process-mode task may run (`GRIDKEY_BUILD_TIMEOUT`), or `None`.
    #[getter]
    fn build_timeout(&self) -> Option<f64> {
        self.build_jobs.timeout.map(|t| t.as_secs_f64())
    }

    fn __repr__(&self) -> String {
        format!(
            "Settings(cache_dir={:?}, verify_tables={}, verify_cache_hits={}, build_jobs_mode={:?}, build_jobs={}, build_timeout={:?})",
            self.cache_dir,
            self.verify_tables,
            self.verify_cache_hits,
            self.build_jobs_mode(),
            self.build_jobs.jobs,
            self.build_timeout()
        )
    }
}
