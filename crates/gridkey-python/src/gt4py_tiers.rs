//! The Rust core of `gridkey._gt4py_tiers`: the key of a shared GT4Py extension (ADR 0040), the
//! identity of the C++ compiler GT4Py's CMake runs (ADR 0022), and GT4Py's store `gt4py-v1/` in
//! gridkey's cache directory (`gridkey_fingerprint::gt4py`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gridkey_fingerprint::gt4py::{self as core, ExtensionKeyInputs, FolderMemoInputs, Gt4pyKind};
use gridkey_fingerprint::{Miss, TranslationKey};
use gridkey_settings::CompilerSettings;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMapping};

use crate::args;
use crate::errors::{error, guard, settings_error_of, IntoPyErr, Kind};

/// The compilers CMake looks for, in its order, when `CXX` is not set (`CMakeDetermineCXXCompiler`).
const CMAKE_CXX_NAMES: [&str; 3] = ["c++", "g++", "clang++"];

fn vars_of(mapping: &Bound<'_, PyAny>) -> PyResult<BTreeMap<String, String>> {
    let mapping = mapping.cast::<PyMapping>().map_err(|_| {
        error(
            Kind::Type,
            format!(
                "argument environ must be a mapping of variable names to values, not {}",
                mapping.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ),
        )
    })?;
    let mut vars = BTreeMap::new();
    for item in mapping.items()?.iter() {
        let (name, value): (String, String) = args::arg(&item, "environ", "a mapping of str to str")?;
        vars.insert(name, value);
    }
    Ok(vars)
}

/// The C++ compiler GT4Py's CMake runs in the environment `environ` (a mapping, `os.environ`):
/// the words of `CXX` when set, else the first of `c++`, `g++`, `clang++` on its `PATH`
/// (`c++` when none is found), and its identity as ADR 0022 defines it
/// (`gridkey_stencil::compiler_identity`: executable bytes, `--version`, `-dumpmachine`; never
/// its path). Returns `(command, identity)`, the identity 32 hex digits. `cwd` anchors a
/// relative `CXX`.
///
/// Errors: `SettingsError` for a blank `CXX`.
#[pyfunction]
pub fn cxx_compiler_identity(
    py: Python<'_>,
    environ: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = args::cwd)] cwd: PathBuf,
) -> PyResult<(String, String)> {
    let vars = vars_of(environ)?;
    guard(|| py.detach(|| identify_cxx(&vars, &cwd)).map_err(|e| settings_error_of("CXX", e)))
}

/// The compiler `CXX` or the first of [`CMAKE_CXX_NAMES`] on `PATH` in `vars`, and its identity.
///
/// Errors: `SettingsError` for a blank `CXX`.
fn identify_cxx(
    vars: &BTreeMap<String, String>,
    cwd: &Path,
) -> Result<(String, String), gridkey_settings::SettingsError> {
    let lookup = |name: &str| vars.get(name).cloned();
    let words = match vars.get("CXX") {
        Some(cxx) => cxx.clone(),
        None => {
            let path = vars.get("PATH").cloned().unwrap_or_default();
            let found = CMAKE_CXX_NAMES.into_iter().find(|n| which::which_in(n, Some(&path), cwd).is_ok());
            found.unwrap_or(CMAKE_CXX_NAMES[0]).to_owned()
        }
    };
    let compiler = CompilerSettings::from_command(&words, lookup)?;
    let identity = gridkey_stencil::compiler_identity(&compiler, cwd);
    Ok((compiler.command.join(" "), identity))
}

/// `cxx_compiler_identity(environ, cwd)` computed on a thread of its own that never holds the GIL,
/// started by [`start_cxx_compiler_identity`]: `gridkey._gt4py_tiers.install` starts it so that
/// the compiler's probes (milliseconds) run beside GT4Py's work, and the first extension key
/// takes its `result` (ADR 0040). A Python thread doing the same took the GIL from the caller
/// at its start and for each return from the probes.
#[pyclass(module = "gridkey", frozen)]
pub struct PendingCxxIdentity {
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<Option<CxxIdentity>>>>,
    done: std::sync::OnceLock<Option<CxxIdentity>>,
}

/// `(command, identity)` of a C++ compiler, as `cxx_compiler_identity` returns them.
type CxxIdentity = (String, String);

#[pymethods]
impl PendingCxxIdentity {
    /// `(command, identity)` as `cxx_compiler_identity` returns them, waiting (without the GIL)
    /// for the thread when it is still running; `None` when it failed (a blank `CXX`), for the
    /// caller to call `cxx_compiler_identity`, which raises the error.
    fn result(&self, py: Python<'_>) -> Option<CxxIdentity> {
        py.detach(|| {
            self.done
                .get_or_init(|| {
                    let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
                    thread.and_then(|t| t.join().ok()).flatten()
                })
                .clone()
        })
    }

    /// Forgets the thread without joining it: for a child forked while it ran, where the
    /// thread does not exist (joining would wait for ever, detaching would act on the parent's
    /// thread record). `result` then returns None.
    fn abandon(&self) {
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            std::mem::forget(thread);
        }
    }
}

/// Starts `cxx_compiler_identity(environ, cwd)` on a thread of its own (see
/// [`PendingCxxIdentity`]) and returns at once.
///
/// Errors: `TypeError` when `environ` is not a mapping of str to str; `GridkeyOSError` when no
/// thread can be started.
#[pyfunction]
pub fn start_cxx_compiler_identity(
    environ: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = args::cwd)] cwd: PathBuf,
) -> PyResult<PendingCxxIdentity> {
    let vars = vars_of(environ)?;
    let thread = std::thread::Builder::new()
        .name("gridkey-cxx-identity".into())
        .spawn(move || identify_cxx(&vars, &cwd).ok())
        .map_err(|e| error(Kind::Os, format!("cannot start a thread to identify the C++ compiler: {e}")))?;
    Ok(PendingCxxIdentity { thread: std::sync::Mutex::new(Some(thread)), done: std::sync::OnceLock::new() })
}

/// The extension key (ADR 0040), 32 hex digits, of a build folder named `build_folder` (its
/// last path component) built by the C++ compiler of `compiler_identity`, for an interpreter of
/// extension suffix `ext_suffix` on `platform`, against nanobind `nanobind_version` and
/// gridtools-cpp `gridtools_cpp_version`, by GT4Py `gt4py_version`. No path, time or host enters
/// it (`gridkey_fingerprint::gt4py` lists every input and why).
#[pyfunction]
pub fn gt4py_extension_key(
    #[pyo3(from_py_with = args::build_folder)] build_folder: String,
    #[pyo3(from_py_with = args::compiler_identity)] compiler_identity: String,
    #[pyo3(from_py_with = args::ext_suffix)] ext_suffix: String,
    #[pyo3(from_py_with = args::platform)] platform: String,
    #[pyo3(from_py_with = args::nanobind_version)] nanobind_version: String,
    #[pyo3(from_py_with = args::gridtools_cpp_version)] gridtools_cpp_version: String,
    #[pyo3(from_py_with = args::gt4py_version)] gt4py_version: String,
) -> String {
    ExtensionKeyInputs {
        build_folder,
        compiler_identity,
        ext_suffix,
        platform,
        nanobind_version,
        gridtools_cpp_version,
        gt4py_version,
    }
    .key()
    .to_hex()
}

/// The key of a GT4Py translation entry, 32 hex digits: GT4Py's own key (`gt4py_key`, the name
/// of its `FileCache` entry without `.pkl`) in the translation cache `cache_name` (`gtfn`) of
/// GT4Py `gt4py_version` (`gridkey_fingerprint::gt4py::translation_entry_key`).
#[pyfunction]
pub fn gt4py_translation_key(
    #[pyo3(from_py_with = args::gt4py_version)] gt4py_version: String,
    #[pyo3(from_py_with = args::cache_name)] cache_name: String,
    #[pyo3(from_py_with = args::gt4py_key)] gt4py_key: String,
) -> String {
    core::translation_entry_key(&gt4py_version, &cache_name, &gt4py_key).to_hex()
}

/// The build-folder memo key (ADR 0058), 32 hex digits, of the translation entry in the file
/// `entry` (GT4Py's `<key>.pkl`) under GT4Py `gt4py_version`, its `BUILD_CACHE_VERSION_ID`, the
/// fingerprint of the workflow's bindings step and the build context
/// (`gridkey_fingerprint::gt4py::FolderMemoInputs` lists them and why); None when the file cannot
/// be read (GT4Py's own lookup then decides).
#[pyfunction]
pub fn gt4py_folder_memo_key(
    py: Python<'_>,
    #[pyo3(from_py_with = args::entry)] entry: PathBuf,
    #[pyo3(from_py_with = args::gt4py_version)] gt4py_version: String,
    #[pyo3(from_py_with = args::build_cache_version_id)] build_cache_version_id: String,
    #[pyo3(from_py_with = args::bindings_fingerprint)] bindings_fingerprint: String,
    #[pyo3(from_py_with = args::build_context_id)] build_context_id: String,
) -> Option<String> {
    let bytes = py.detach(|| std::fs::read(&entry)).ok()?;
    let inputs = FolderMemoInputs {
        translation_entry: &bytes,
        gt4py_version: &gt4py_version,
        build_cache_version_id: &build_cache_version_id,
        bindings_fingerprint: &bindings_fingerprint,
        build_context_id: &build_context_id,
    };
    Some(inputs.key().to_hex())
}

/// GT4Py's store in gridkey's cache directory: `<cache_dir>/gt4py-v1/{translation,extension}/`
/// and the build-folder memo `folder/` (ADR 0058), entries in the translation cache's checked
/// format (magic, version, key, length, checksum), written atomically. A truncated, corrupted or
/// misplaced entry is a miss, removed and counted (`rejected`), so that GT4Py builds again and
/// the store gets a good one.
#[pyclass(module = "gridkey", frozen)]
pub struct Gt4pyStore {
    pub(crate) inner: core::Gt4pyStore,
    rejected: AtomicU64,
    last_rejection: std::sync::Mutex<Option<String>>,
}

impl Gt4pyStore {
    fn get(&self, kind: Gt4pyKind, key: &TranslationKey) -> Option<Vec<u8>> {
        self.checked(self.inner.get(kind, key))
    }

    /// The value of a lookup, or None: a miss, an invalid entry counted and its reason kept.
    fn checked<T>(&self, found: Result<T, Miss>) -> Option<T> {
        match found {
            Ok(value) => Some(value),
            Err(Miss::Absent) => None,
            Err(Miss::Invalid(why)) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = self.last_rejection.lock() {
                    *last = Some(why);
                }
                None
            }
        }
    }
}

#[pymethods]
impl Gt4pyStore {
    /// Opens (creating if needed) `<cache_dir>/gt4py-v1`.
    ///
    /// Errors: `GridkeyOSError` naming the directory.
    #[new]
    fn new(#[pyo3(from_py_with = args::required_cache_dir)] cache_dir: PathBuf) -> PyResult<Self> {
        let inner = core::Gt4pyStore::open(&cache_dir).map_err(IntoPyErr::into_py_err)?;
        Ok(Self { inner, rejected: AtomicU64::new(0), last_rejection: std::sync::Mutex::new(None) })
    }

    /// The store directory, `<cache_dir>/gt4py-v1`.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.inner.dir().to_path_buf()
    }

    /// Entries found invalid (and removed) by this object's lookups.
    #[getter]
    fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Why the last invalid entry was refused (its path and the check that failed), or None.
    #[getter]
    fn last_rejection(&self) -> Option<String> {
        self.last_rejection.lock().ok().and_then(|l| l.clone())
    }

    /// The path of the entry of `kind` (`"translation"` or `"extension"`) under `key`.
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind or a key that is not 32 hex digits.
    fn entry_path(
        &self,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
    ) -> PyResult<PathBuf> {
        Ok(self.inner.entry_path(kind, &key))
    }

    /// The checked bytes of the translation entry `key` (a pickle GT4Py wrote), or None.
    ///
    /// Errors: `TableValueError` for a key that is not 32 hex digits.
    fn get_translation<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        Ok(guard(|| Ok(self.get(Gt4pyKind::Translation, &key)))?.map(|b| PyBytes::new(py, &b)))
    }

    /// Stores `data` as the translation entry `key`; returns the entry's path.
    ///
    /// Errors: `GridkeyOSError` naming the entry when it cannot be written (nothing is left).
    fn put_translation(
        &self,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::data)] data: Vec<u8>,
    ) -> PyResult<PathBuf> {
        guard(|| self.inner.put(Gt4pyKind::Translation, &key, &data).map_err(IntoPyErr::into_py_err))
    }

    /// Stores the built extension `key`: the files `names` (paths relative to `folder`) read
    /// from the build folder `folder`; returns the entry's path and its size in bytes.
    ///
    /// Errors: `GridkeyOSError` naming the file that cannot be read or the entry that cannot be
    /// written; `TableValueError` for a name that is not relative to the folder.
    fn put_extension(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::folder)] folder: PathBuf,
        #[pyo3(from_py_with = args::names)] names: Vec<String>,
    ) -> PyResult<(PathBuf, u64)> {
        guard(|| {
            let mut files = Vec::new();
            for name in names {
                let path = folder.join(&name);
                let bytes = std::fs::read(&path).map_err(|e| {
                    error(Kind::Os, format!("cannot read {}: {e}; rebuild the program", path.display()))
                })?;
                files.push((name, bytes));
            }
            let bundle = core::encode_bundle(&files);
            core::decode_bundle(&bundle).map_err(|why| error(Kind::Value, why))?;
            let path =
                py.detach(|| self.inner.put(Gt4pyKind::Extension, &key, &bundle)).map_err(IntoPyErr::into_py_err)?;
            Ok((path, bundle.len() as u64))
        })
    }

    /// Removes the entry of `kind` (`"translation"` or `"extension"`) under `key`, if any: one
    /// that came from the shared tier and failed its check here.
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind or a key that is not 32 hex digits.
    fn remove(
        &self,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
    ) {
        self.inner.remove(kind, &key);
    }

    /// The build folder's name the memo holds under `key` (`gt4py_folder_memo_key`, ADR 0058), or
    /// None; an invalid memo entry is removed and counted (`rejected`).
    ///
    /// Errors: `TableValueError` for a key that is not 32 hex digits.
    fn get_folder(&self, #[pyo3(from_py_with = args::hex_key)] key: TranslationKey) -> Option<String> {
        self.checked(self.inner.get_folder(&key))
    }

    /// Remembers that the build folder of the memo key `key` is named `name` (ADR 0058): the
    /// memo entry is written behind, synced before its name appears; `flush` waits for it. One
    /// that cannot be written is left out: the next warm start finds the folder GT4Py's way.
    ///
    /// Errors: `TableValueError` for a key that is not 32 hex digits or a `name` that is not one
    /// path component.
    fn put_folder(
        &self,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::name)] name: String,
    ) -> PyResult<()> {
        let entry = self.inner.folder_entry(&key, &name).map_err(|why| error(Kind::Value, why))?;
        WRITES_BEHIND.spawn(vec![entry]);
        Ok(())
    }

    /// Waits for every write this process left behind (`put_folder`, and those of
    /// `Gt4pyShared`), without the GIL. A write started by the parent of a forked process is
    /// its parent's to wait for.
    fn flush(&self, py: Python<'_>) {
        py.detach(|| WRITES_BEHIND.join());
    }

    /// Writes the files of the stored extension `key` into the build folder `folder` as one
    /// batch of atomic writes (ADR 0049: every file synced, then each renamed in the order they
    /// were stored, the build record `gt4py.json` last, so that GT4Py never sees a record without
    /// its module). Returns the names written, or None when the store has no valid entry (a bad
    /// one is removed and counted).
    ///
    /// Errors: `GridkeyOSError` naming a file that cannot be written; then none of the files is
    /// left under its name.
    fn materialize(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::folder)] folder: PathBuf,
    ) -> PyResult<Option<Vec<String>>> {
        guard(|| {
            let Some(bundle) = self.get(Gt4pyKind::Extension, &key) else { return Ok(None) };
            let files = core::decode_bundle(&bundle).map_err(|why| error(Kind::Value, why))?;
            py.detach(|| write_files(&folder, &files))?;
            Ok(Some(files.into_iter().map(|(name, _)| name).collect()))
        })
    }
}

/// Batches of atomic writes on threads of their own (ADR 0049, "written behind"), each thread
/// with the process that started it, so that a forked child never joins its parent's threads.
pub(crate) struct WritesBehind(Mutex<Vec<(u32, std::thread::JoinHandle<()>)>>);

impl WritesBehind {
    /// Writes `files` (path, bytes) as one batch of atomic writes on a thread of its own: each
    /// file is synced before its name appears, as always; one that cannot be written is left out
    /// alone, the cache then misses it and it is fetched again. Without a thread, written now.
    pub(crate) fn spawn(&self, files: Vec<(PathBuf, Vec<u8>)>) {
        fn write(files: &[(PathBuf, Vec<u8>)]) {
            let batch: Vec<(&Path, &[u8])> = files.iter().map(|(p, b)| (p.as_path(), b.as_slice())).collect();
            let _ = gridkey_fs::write_atomic_all(&batch, None);
        }
        let files = Arc::new(files);
        let theirs = files.clone();
        let mut pending = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match std::thread::Builder::new().name("gridkey-write-behind".into()).spawn(move || write(&theirs)) {
            Ok(handle) => pending.push((std::process::id(), handle)),
            Err(_) => write(&files),
        }
    }

    /// Waits for every batch this process started; forgets those of a parent process.
    pub(crate) fn join(&self) {
        let pending = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        let me = std::process::id();
        for (pid, handle) in pending {
            if pid == me {
                let _ = handle.join();
            } else {
                // Not a thread of this process: never joined here.
                std::mem::forget(handle);
            }
        }
    }
}

/// The writes this process does not wait for (ADR 0049, "written behind"); `flush` joins them.
pub(crate) static WRITES_BEHIND: WritesBehind = WritesBehind(Mutex::new(Vec::new()));

/// Writes `files` (names relative to `folder`, with their bytes) into `folder` as one batch of
/// atomic writes (ADR 0049): every file synced together, then each renamed in the order given,
/// so that a file later in `files` (GT4Py's build record) never names one earlier that is not
/// there.
///
/// Errors: `GridkeyOSError` naming the first file of `files` that cannot be written; then none
/// of `files` is left under its name.
pub(crate) fn write_files(folder: &Path, files: &[(String, Vec<u8>)]) -> PyResult<()> {
    let paths: Vec<PathBuf> = files.iter().map(|(name, _)| folder.join(name)).collect();
    let batch: Vec<(&Path, &[u8])> =
        paths.iter().zip(files).map(|(path, (_, bytes))| (path.as_path(), bytes.as_slice())).collect();
    let written = gridkey_fs::write_atomic_all(&batch, None);
    let Some((path, e)) = paths.iter().zip(&written).find_map(|(path, w)| w.as_ref().err().map(|e| (path, e))) else {
        return Ok(());
    };
    // A file that failed leaves none of the others under its name: no build record without its module.
    for (path, w) in paths.iter().zip(&written) {
        if w.is_ok() {
            let _ = std::fs::remove_file(path);
        }
    }
    Err(error(
        Kind::Os,
        format!("cannot write {}: {e}; free space or fix permissions of the build folder", path.display()),
    ))
}
