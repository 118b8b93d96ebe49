//! `gridkey.KeyLocks`: gridkey's per-key locks (`gridkey_fs::lock::KeyLocks`, ADR 0025) for
//! Python code that produces an artifact once per key across processes, such as GT4Py's
//! translation step under `gridkey.gt4py` (ADR 0039).
//!
//! The lock is the Rust one, not a copy: a lock file `<cache_dir>/locks/<name>.lock` held with
//! `flock(2)`, released when its holder releases it or dies, and waited for at most the bound of
//! `GRIDKEY_LOCK_WAIT` (ADR 0033). The wait runs with the GIL released.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use gridkey_fs::lock::{self, Acquired};
use pyo3::prelude::*;

use crate::args;
use crate::errors::{error, guard, os_error, Kind};
use crate::settings::Settings;

/// The longest lock name, in bytes: a file name with its `.lock` suffix stays far below the
/// 255 bytes of a name on common file systems.
const MAX_NAME_BYTES: usize = 200;

/// The per-key locks of a gridkey cache directory: `<cache_dir>/locks/<name>.lock`.
///
/// `KeyLocks(cache_dir=None, *, settings=None)`: `cache_dir` defaults to the settings' cache
/// directory (`GRIDKEY_CACHE_DIR`); the wait bound is the settings' `key_lock_wait`
/// (`GRIDKEY_LOCK_WAIT`, seconds, default 60). `settings` defaults to `gridkey.Settings()`, read
/// from the environment once, here. Nothing is created until the first `lock`.
#[pyclass(module = "gridkey", frozen)]
pub struct KeyLocks {
    inner: lock::KeyLocks,
    wait: Duration,
}

/// How a `KeyLocks.lock` call ended.
#[derive(Debug)]
enum State {
    /// The lock, until released.
    Held(lock::KeyLock),
    /// Released by `release` or the end of a `with` block.
    Released,
    /// Another process held it for the whole wait bound.
    GaveUp,
    /// The file system has no locks (`ENOLCK`): the work goes on without one (ADR 0025).
    NoLocks,
}

/// What `KeyLocks.lock` got: the lock, held until `release()` (or the end of a `with` block, or
/// the process), or the news that the caller goes on without it.
///
/// `held`: whether the lock is held now. `gave_up`: another process held it for the whole wait
/// bound (ADR 0033). `waited`: seconds spent waiting (0.0 when it was free at the first try).
/// `path`: the lock file.
#[pyclass(module = "gridkey", frozen)]
pub struct KeyLock {
    state: Mutex<State>,
    path: PathBuf,
    waited: Duration,
    gave_up: bool,
}

fn check_name(name: &str) -> PyResult<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.starts_with('.') || !name.chars().all(allowed) {
        return Err(error(
            Kind::Value,
            format!(
                "lock name {name:?} is not a file name of 1 to {MAX_NAME_BYTES} letters, digits, '-', '_' and '.' that does not start with '.': name the lock after its key's digest"
            ),
        ));
    }
    Ok(())
}

fn lock_error(e: &io::Error, path: &Path) -> PyErr {
    os_error(
        format!("cannot take the lock {}: {e}: check that the cache directory is writable", path.display()),
        e,
        path,
    )
}

#[pymethods]
impl KeyLocks {
    /// The locks of `cache_dir` (see the class documentation).
    ///
    /// Errors: `SettingsError` for a bad `GRIDKEY_LOCK_WAIT` when `settings` is read here.
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
            let wait = settings.key_lock_wait();
            let inner = lock::KeyLocks::new(&dir).with_wait(lock::LockWait { limit: wait, notice: None });
            Ok(Self { inner, wait })
        })
    }

    /// The lock directory, `<cache_dir>/locks`.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.inner.dir().to_path_buf()
    }

    /// The wait bound in seconds: past it, `lock` returns without the lock.
    #[getter]
    fn wait(&self) -> f64 {
        self.wait.as_secs_f64()
    }

    /// The lock file of the lock named `name`.
    ///
    /// Errors: `TableValueError` for a name that is not a plain file name.
    fn path(&self, #[pyo3(from_py_with = args::name)] name: String) -> PyResult<PathBuf> {
        guard(|| {
            check_name(&name)?;
            Ok(self.inner.path(&name))
        })
    }

    /// Takes the lock named `name` (letters, digits, `-`, `_`, `.`; for example
    /// `gt4py-translation-<digest>`), waiting with the GIL released while another process or
    /// thread holds it, at most `wait` seconds. Returns a `KeyLock`: `held` is False when the
    /// bound passed (`gave_up`) or the file system has no locks; the caller then does the work
    /// without the lock, which the atomic writes of the caches make harmless (ADR 0025, 0033).
    ///
    /// Errors: `TableValueError` for a bad name; `GridkeyOSError` naming the lock file when the
    /// lock directory or file cannot be created or locked.
    fn lock(&self, py: Python<'_>, #[pyo3(from_py_with = args::name)] name: String) -> PyResult<KeyLock> {
        guard(|| {
            check_name(&name)?;
            let path = self.inner.path(&name);
            let got = py.detach(|| self.inner.lock(&name));
            let (state, waited, gave_up) = match got {
                Ok((Acquired::Held(held), waited)) => (State::Held(held), waited, false),
                Ok((Acquired::GaveUp { .. }, waited)) => (State::GaveUp, waited, true),
                Err(e) if lock::is_no_locks(&e) => (State::NoLocks, Duration::ZERO, false),
                Err(e) => return Err(lock_error(&e, &path)),
            };
            Ok(KeyLock { state: Mutex::new(state), path, waited, gave_up })
        })
    }

    fn __repr__(&self) -> String {
        format!("KeyLocks({:?}, wait={})", self.inner.dir(), self.wait())
    }
}

impl KeyLock {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the mutex was held cannot leave the state half-changed (one assignment).
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[pymethods]
impl KeyLock {
    /// Whether the lock is held now.
    #[getter]
    fn held(&self) -> bool {
        matches!(*self.state(), State::Held(_))
    }

    /// Whether another process held the lock for the whole wait bound.
    #[getter]
    fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// Seconds spent waiting for the lock.
    #[getter]
    fn waited(&self) -> f64 {
        self.waited.as_secs_f64()
    }

    /// The lock file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Releases the lock (removing its lock file) if it is held; a second call does nothing.
    fn release(&self) {
        let mut state = self.state();
        if matches!(*state, State::Held(_)) {
            *state = State::Released;
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release();
        false
    }

    fn __repr__(&self) -> String {
        let state = match &*self.state() {
            State::Held(held) => format!("held on {}", held.path().display()),
            State::Released => "released".to_owned(),
            State::GaveUp => "gave up".to_owned(),
            State::NoLocks => "no locks on this file system".to_owned(),
        };
        format!("KeyLock({:?}, {state}, waited={:.3})", self.path, self.waited.as_secs_f64())
    }
}
