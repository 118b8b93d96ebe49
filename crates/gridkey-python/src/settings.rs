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

use crate::args;
use crate::errors::{error, guard, IntoPyErr, Kind};

/// gridkey's settings (`gridkey_settings::Settings`), read from environment variables once:
/// `Settings()` reads `os.environ`, `Settings.from_vars(mapping)` any mapping of variable names
/// to values.
///
/// Errors: `SettingsError` naming the variable, its value and what it accepts.
#[pyclass(module = "gridkey", frozen)]
pub struct Settings {
    inner: gridkey_settings::Settings,
    max_table_bytes: u64,
}

/// The default of `max_table_bytes`: 2**40 bytes (1 TiB) of table elements, more than any
/// neighbour table of a real grid (an R2B11 cell table is about 1.6 GB in int64) and less than
/// a `numpy.lib.stride_tricks.as_strided` table of a huge virtual shape, which would be hashed
/// for hours (ADR 0035).
pub const DEFAULT_MAX_TABLE_BYTES: u64 = 1 << 40;

impl Settings {
    /// Parses the settings from `lookup` (variable name to value): `Settings::from_vars`.
    fn from_vars(lookup: impl Fn(&str) -> Option<String>, max_table_bytes: u64) -> PyResult<Self> {
        gridkey_settings::Settings::from_vars(lookup)
            .map(|inner| Self { inner, max_table_bytes })
            .map_err(IntoPyErr::into_py_err)
    }

    /// The settings of the process environment as Python sees it (`os.environ`): the package's
    /// one reader of the environment.
    pub fn from_environ(py: Python<'_>) -> PyResult<Self> {
        let environ = py.import("os")?.getattr("environ")?;
        Self::from_mapping(&environ, "os.environ", DEFAULT_MAX_TABLE_BYTES)
    }

    /// The largest table, in bytes, that is hashed or stored.
    pub fn max_table_bytes(&self) -> u64 {
        self.max_table_bytes
    }

    fn from_mapping(mapping: &Bound<'_, PyAny>, what: &str, max_table_bytes: u64) -> PyResult<Self> {
        let mapping = mapping.cast::<PyMapping>().map_err(|_| {
            error(
                Kind::Type,
                format!(
                    "argument {what} must be a mapping of variable names to values, not {}",
                    mapping.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ),
            )
        })?;
        let mut vars = HashMap::new();
        for item in mapping.items()?.iter() {
            let (name, value): (String, String) = crate::args::arg(&item, what, "a mapping of str to str")?;
            vars.insert(name, value);
        }
        Self::from_vars(|k| vars.get(k).cloned(), max_table_bytes)
    }

    /// The cache directory.
    pub fn cache_dir(&self) -> &Path {
        &self.inner.cache_dir
    }

    /// Whether every open of a stored table recomputes its digest.
    pub fn verify_tables(&self) -> bool {
        self.inner.verify_tables
    }

    /// The shared tier's settings (`GRIDKEY_REMOTE_*`), when `GRIDKEY_REMOTE_URL` is set.
    pub fn remote(&self) -> Option<&gridkey_settings::RemoteSettings> {
        self.inner.remote.as_ref()
    }

    /// The bound of a per-key lock wait (`GRIDKEY_LOCK_WAIT`, ADR 0033).
    pub fn key_lock_wait(&self) -> std::time::Duration {
        self.inner.key_lock_wait
    }
}

#[pymethods]
impl Settings {
    /// The settings of the environment (`os.environ`), read now. `max_table_bytes` (bytes of
    /// table elements, default `DEFAULT_MAX_TABLE_BYTES`, 2**40) is the largest table hashed or
    /// stored through a store of these settings: a larger one is refused before it is read
    /// (ADR 0035). It is an argument, not a variable: a program states its own limit.
    #[new]
    #[pyo3(signature = (*, max_table_bytes = DEFAULT_MAX_TABLE_BYTES))]
    fn new(py: Python<'_>, #[pyo3(from_py_with = args::max_table_bytes)] max_table_bytes: u64) -> PyResult<Self> {
        guard(|| {
            let environ = py.import("os")?.getattr("environ")?;
            Self::from_mapping(&environ, "os.environ", max_table_bytes)
        })
    }

    /// The settings of `vars`, a mapping of environment variable names to values (pure: the
    /// environment is not read), and `max_table_bytes` as for `Settings()`.
    #[staticmethod]
    #[pyo3(name = "from_vars", signature = (vars, *, max_table_bytes = DEFAULT_MAX_TABLE_BYTES))]
    fn py_from_vars(
        vars: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::max_table_bytes)] max_table_bytes: u64,
    ) -> PyResult<Self> {
        guard(|| Self::from_mapping(vars, "vars", max_table_bytes))
    }

    /// The largest table, in bytes of its elements in C order (rows x max_neighbours x
    /// itemsize of its own dtype), that is hashed or stored; default 2**40.
    #[getter(max_table_bytes)]
    fn py_max_table_bytes(&self) -> u64 {
        self.max_table_bytes
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

    /// Seconds a per-key lock is waited for before the work goes on without it
    /// (`GRIDKEY_LOCK_WAIT`, default 60; ADR 0033).
    #[getter(key_lock_wait)]
    fn py_key_lock_wait(&self) -> f64 {
        self.inner.key_lock_wait.as_secs_f64()
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
            "Settings(cache_dir={:?}, verify_tables={}, verify_cache_hits={}, build_jobs_mode={:?}, build_jobs={}, build_timeout={}, max_table_bytes={})",
            self.inner.cache_dir,
            if self.inner.verify_tables { "True" } else { "False" },
            if self.inner.verify_cache_hits { "True" } else { "False" },
            self.build_jobs_mode(),
            self.inner.build_jobs.jobs,
            self.build_timeout().map_or_else(|| "None".to_owned(), |t| t.to_string()),
            self.max_table_bytes
        )
    }
}
