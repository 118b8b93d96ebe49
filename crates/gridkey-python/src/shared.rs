//! `gridkey.Gt4pyShared`: GT4Py's translation entries and extensions in the shared tier on Redis,
//! through the shared-tier protocol the CLI uses (`gridkey_fingerprint::shared`, ADR 0041).
//!
//! One object per Python process (a dead server costs one timeout per process, ADR 0029); the
//! objects are of GT4Py's own kinds (`Kind::Gt4pyTranslation`, `Kind::Gt4pyExtension`), carried in
//! each object's signed header, so a GT4Py object never checks as a CLI one or the other way. The
//! local side is GT4Py's store in gridkey's cache directory (`Gt4pyStore`): what arrives is written
//! there, what is uploaded is read from there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gridkey_fingerprint::gt4py::{self as core, Gt4pyKind};
use gridkey_fingerprint::shared::{each, Domain, Kind, ObjectKey, Route, SharedSession, Taken, Verified};
use gridkey_fingerprint::TranslationKey;
use gridkey_remote::{Remote, RemoteTier};
use pyo3::prelude::*;

use crate::args;
use crate::errors::{error, guard, Kind as ErrorKind};
use crate::gt4py_tiers::{write_files, Gt4pyStore, WRITES_BEHIND};
use crate::settings::Settings;

/// The protocol and the program index of each object downloaded, so that it can be rejected.
struct State {
    session: SharedSession<RemoteTier>,
    ids: BTreeMap<(Kind, ObjectKey), usize>,
}

impl State {
    fn id(&mut self, kind: Kind, key: ObjectKey) -> usize {
        let next = self.ids.len();
        *self.ids.entry((kind, key)).or_insert(next)
    }
}

/// GT4Py's side of the shared tier (ADR 0041): look-ups, leases around translation and build,
/// uploads of what verified, rejection of what came from the tier and failed here. Made by
/// `Gt4pyShared.connect(settings, cache_dir)` from the same variables as the `gridkey` command
/// (`GRIDKEY_REMOTE_URL`, `GRIDKEY_REMOTE_WRITER`, `GRIDKEY_REMOTE_SIGNING_KEY`,
/// `GRIDKEY_REMOTE_TRUSTED_KEYS`, `GRIDKEY_REMOTE_TRUST`, the timeouts). Every object is checked
/// before it is handed out (format, kind, key, length, checksum, size limit, signature where
/// trusted keys are set, ADR 0019, ADR 0031). `kind` is `"translation"` or `"extension"`, `key`
/// 32 hex digits (`gt4py_translation_key`, `gt4py_extension_key`). Routes are `"local"`,
/// `"remote"`, `"lease"`, `"here"`, `"here-upload"` and `"wait"`.
#[pyclass(module = "gridkey", frozen)]
pub struct Gt4pyShared {
    remote: Arc<Remote>,
    state: Mutex<State>,
}

fn route_name(route: Route) -> &'static str {
    match route {
        Route::Local => "local",
        Route::Remote => "remote",
        Route::Lease => "lease",
        Route::Here { upload: false } => "here",
        Route::Here { upload: true } => "here-upload",
        Route::Wait => "wait",
    }
}

/// The route named `name` (the argument `route`).
///
/// Errors: `TableValueError` for a name that is not a route.
fn route_of(name: &str) -> PyResult<Route> {
    Ok(match name {
        "local" => Route::Local,
        "remote" => Route::Remote,
        "lease" => Route::Lease,
        "here" => Route::Here { upload: false },
        "here-upload" => Route::Here { upload: true },
        "wait" => Route::Wait,
        _ => {
            return Err(error(
                ErrorKind::Value,
                format!(
                    "argument route is {name:?}, not a route: pass local, remote, lease, here, here-upload or wait"
                ),
            ))
        }
    })
}

/// Writes a payload of `kind` downloaded for `key` into the local store: an extension bundle
/// only when it decodes (paths inside the folder), so that a bad bundle is never half-written.
fn store_locally(store: &core::Gt4pyStore, kind: Gt4pyKind, key: &TranslationKey, payload: &[u8]) -> Taken {
    if kind == Gt4pyKind::Extension && core::decode_bundle(payload).is_err() {
        return Taken::Unusable;
    }
    match store.put(kind, key, payload) {
        Ok(_) => Taken::Stored,
        Err(_) => Taken::Failed,
    }
}

/// Writes a payload of `kind` downloaded for `key` to `target` (see `Gt4pyShared.fetch_into`),
/// synced before this returns: an extension's bundle decoded into the folder `target`; a
/// translation entry to the file `target`. Its entry in `store`, which this process does not
/// read back, is written behind (`WRITES_BEHIND`). Returns false for a bundle that does not decode
/// (paths inside the folder), which is not written anywhere.
///
/// Errors: `GridkeyOSError` naming the file under `target` that cannot be written.
fn write_into(
    store: &core::Gt4pyStore,
    kind: Gt4pyKind,
    key: &TranslationKey,
    payload: &[u8],
    target: &Path,
) -> PyResult<bool> {
    let (folder, files) = match kind {
        Gt4pyKind::Extension => {
            let Ok(files) = core::decode_bundle(payload) else { return Ok(false) };
            (target, files)
        }
        Gt4pyKind::Translation => {
            let (folder, name) = translation_target(target)?;
            (folder, vec![(name.to_owned(), payload.to_vec())])
        }
    };
    write_files(folder, &files)?;
    let (entry_path, entry) = store.entry(kind, key, payload);
    WRITES_BEHIND.spawn(vec![(entry_path, entry)]);
    Ok(true)
}

/// The folder and the file name of a translation entry's `target`.
///
/// Errors: `TableValueError` for a path without a file name.
fn translation_target(target: &Path) -> PyResult<(&Path, &str)> {
    match (target.parent(), target.file_name().and_then(|n| n.to_str())) {
        (Some(folder), Some(name)) => Ok((folder, name)),
        _ => Err(error(
            ErrorKind::Value,
            format!("argument target is {}, not a file path: pass GT4Py's entry file", target.display()),
        )),
    }
}

impl Gt4pyShared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update of the state is complete before a panic could happen.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks the object of `kind` under `key` up without a lease (quarantined objects are not
    /// fetched), hands a checked one to `take`, which says whether it kept it, and returns that
    /// (`fetch`, `fetch_into`).
    fn fetch_with(
        &self,
        py: Python<'_>,
        kind: Gt4pyKind,
        key: &TranslationKey,
        mut take: impl FnMut(&[u8]) -> bool + Send,
    ) -> bool {
        let (kind, object) = (kind.object_kind(), *key.as_bytes());
        py.detach(|| {
            let mut state = self.state();
            let id = state.id(kind, object);
            let mut kept = false;
            state.session.fetch(
                kind,
                &[(id, object)],
                &mut each(|_, payload| {
                    kept = take(payload);
                    kept
                }),
            );
            kept
        })
    }

    /// Plan or wait (one program) for the object of `kind` under `key`, storing what arrives.
    fn route(
        &self,
        py: Python<'_>,
        local: Gt4pyKind,
        key: TranslationKey,
        store: &Gt4pyStore,
        wait: bool,
    ) -> &'static str {
        let kind = local.object_kind();
        let object = *key.as_bytes();
        let route = py.detach(|| {
            let mut state = self.state();
            let id = state.id(kind, object);
            let mut keys = vec![[0u8; 16]; id + 1];
            keys[id] = object;
            let mut take = each(|_: usize, payload: &[u8]| store_locally(&store.inner, local, &key, payload));
            if wait {
                state.session.wait(kind, &keys, &[id], &mut take)[0]
            } else {
                let mut hit = vec![true; id + 1];
                hit[id] = false;
                state.session.plan(kind, &keys, &hit, &mut take)[id]
            }
        });
        route_name(route)
    }
}

#[pymethods]
impl Gt4pyShared {
    /// The shared tier of `settings` (a `gridkey.Settings`) for a node whose GT4Py store and
    /// quarantine are in `cache_dir`, or None when `GRIDKEY_REMOTE_URL` is not set. A server that
    /// cannot be reached is not an error: the tier is off, with one `warning`, after at most the
    /// connect timeout.
    ///
    /// Errors: `TableTypeError` for `settings` that is not a `gridkey.Settings` or a `cache_dir`
    /// that is not a path; `SettingsError` for a misconfiguration (a URL it cannot use, refused
    /// credentials, a key file that is missing, malformed or writable by others), with its fix.
    #[staticmethod]
    fn connect(
        py: Python<'_>,
        #[pyo3(from_py_with = args::required_settings)] settings: Bound<'_, Settings>,
        #[pyo3(from_py_with = args::required_cache_dir)] cache_dir: PathBuf,
    ) -> PyResult<Option<Self>> {
        let settings = settings.borrow();
        guard(|| {
            let Some(remote) = settings.remote() else { return Ok(None) };
            let remote =
                py.detach(|| Remote::connect(remote)).map_err(|e| error(ErrorKind::Settings, e.to_string()))?;
            let remote = Arc::new(remote);
            let session = SharedSession::new(RemoteTier::new(remote.clone()), &cache_dir);
            Ok(Some(Self { remote, state: Mutex::new(State { session, ids: BTreeMap::new() }) }))
        })
    }

    /// Whether the tier is still on in this process.
    #[getter]
    fn is_on(&self) -> bool {
        self.remote.is_on()
    }

    /// Whether this client uploads and takes leases (`GRIDKEY_REMOTE_WRITER`).
    #[getter]
    fn is_writer(&self) -> bool {
        self.remote.is_writer()
    }

    /// Why the tier went off in this process, if it did (its one warning).
    #[getter]
    fn warning(&self) -> Option<String> {
        self.remote.warning()
    }

    /// The warning about the objects this process's lookups found under their keys that failed a
    /// check here (forged, damaged, replayed, over the size limit, signed by a key not trusted
    /// here), made here instead: how many, the first, and what an untrusted signer means; None
    /// when there was none (`Remote::rejections`, ADR 0031).
    #[getter]
    fn rejections(&self) -> Option<String> {
        self.remote.rejections().map(|said| gridkey_settings::name_settings(&said, |_| None))
    }

    /// What this client takes from the shared tier (signed by trusted keys, the ACL, nothing).
    #[getter]
    fn trust_statement(&self) -> String {
        self.remote.trust_statement()
    }

    /// This process's counters of the tier: hits, misses, rejected, fetches, bytes_in, uploads,
    /// bytes_out, errors, leases, takeovers, lease_waits, round_trips (counts and bytes).
    fn stats(&self) -> BTreeMap<&'static str, u64> {
        let s = self.remote.stats();
        BTreeMap::from([
            ("hits", s.hits),
            ("misses", s.misses),
            ("rejected", s.rejected),
            ("fetches", s.fetches),
            ("bytes_in", s.bytes_in),
            ("uploads", s.uploads),
            ("bytes_out", s.bytes_out),
            ("errors", s.errors),
            ("leases", s.leases),
            ("takeovers", s.takeovers),
            ("lease_waits", s.lease_waits),
            ("round_trips", s.round_trips),
        ])
    }

    /// Looks the object of `kind` under `key` up without a lease (quarantined objects are not
    /// fetched) and writes a checked one into `store` (a `Gt4pyStore`). Returns whether it did.
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind or a key that is not 32 hex digits.
    fn fetch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::gt4py_store)] store: Bound<'_, Gt4pyStore>,
    ) -> bool {
        let store = store.get();
        self.fetch_with(py, kind, &key, |payload| store_locally(&store.inner, kind, &key, payload) == Taken::Stored)
    }

    /// `fetch`, written where GT4Py reads it in the same batch of atomic writes as its entry in
    /// `store` (ADR 0049: every file synced together, then renamed in order, so a fresh node
    /// waits for one round of syncs per object instead of two). A translation entry's pickle is
    /// written to the file `target` (GT4Py's `FileCache` entry); an extension's files into the
    /// build folder `target`, its build record `gt4py.json` after its module. Returns whether
    /// the object arrived and was written to `target`.
    ///
    /// Errors: `GridkeyOSError` naming a file under `target` that cannot be written (then none of
    /// them is left under its name, and the object is not counted as fetched);
    /// `TableTypeError` for an argument of another type; `TableValueError` for another kind, a
    /// key that is not 32 hex digits, or a translation `target` without a file name.
    fn fetch_into(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::gt4py_store)] store: Bound<'_, Gt4pyStore>,
        #[pyo3(from_py_with = args::target)] target: PathBuf,
    ) -> PyResult<bool> {
        let store = store.get();
        let mut failed = None;
        let written = self.fetch_with(py, kind, &key, |payload| {
            write_into(&store.inner, kind, &key, payload, &target).unwrap_or_else(|e| {
                failed = Some(e);
                false
            })
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// The checked pickle (bytes) of the GT4Py translation entry under `key` from the shared
    /// tier, or None, without waiting for its files: the entry is written to the file `target`
    /// (GT4Py's `FileCache` entry) and to `store` as one batch on a thread of its own (ADR 0049,
    /// "written behind"), each file synced before its name appears; `flush` waits for them.
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for a key that
    /// is not 32 hex digits or a `target` without a file name.
    fn fetch_translation(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::gt4py_store)] store: Bound<'_, Gt4pyStore>,
        #[pyo3(from_py_with = args::target)] target: PathBuf,
    ) -> PyResult<Option<Py<pyo3::types::PyBytes>>> {
        translation_target(&target)?;
        let mut fetched = None;
        self.fetch_with(py, Gt4pyKind::Translation, &key, |payload| {
            fetched = Some(payload.to_vec());
            true
        });
        let Some(payload) = fetched else { return Ok(None) };
        let (entry_path, entry) = store.get().inner.entry(Gt4pyKind::Translation, &key, &payload);
        let bytes = pyo3::types::PyBytes::new(py, &payload).unbind();
        WRITES_BEHIND.spawn(vec![(entry_path, entry), (target, payload)]);
        Ok(Some(bytes))
    }

    /// Waits for every write this process left behind (`fetch_translation`, the store entries
    /// of `fetch_into`, and `Gt4pyStore.put_folder`), without the GIL. Called at exit and before a task goes to
    /// GT4Py's workers, which read those files. A write started by the parent of a forked
    /// process is its parent's to wait for.
    fn flush(&self, py: Python<'_>) {
        py.detach(|| WRITES_BEHIND.join());
    }

    /// Who makes the object of `kind` under `key` that `store` lacks: looks it up once more and
    /// writes a checked one into `store` (`"remote"`), or claims it: `"lease"` (this writer
    /// makes it, then `upload`), `"wait"` (another writer holds the lease: call `wait`),
    /// `"here"` or `"here-upload"` (make it here; upload it only in the second case).
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind or a key that is not 32 hex digits.
    fn claim(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::gt4py_store)] store: Bound<'_, Gt4pyStore>,
    ) -> &'static str {
        self.route(py, kind, key, store.get(), false)
    }

    /// Waits on another writer's lease on the object of `kind` under `key` (at most
    /// `GRIDKEY_REMOTE_LEASE_WAIT` seconds): `"remote"` when it arrived (written into `store`),
    /// `"lease"` when its holder died and this writer took the lease over, `"here"` or
    /// `"here-upload"` otherwise.
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind or a key that is not 32 hex digits.
    fn wait(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::gt4py_store)] store: Bound<'_, Gt4pyStore>,
    ) -> &'static str {
        self.route(py, kind, key, store.get(), true)
    }

    /// Uploads the object of `kind` under `key` as `store` holds it, when `route` uploads
    /// (`"lease"`, `"here-upload"`) and this client is a writer, and releases the lease; call it
    /// only once what it holds verified (GT4Py unpickled the translation entry, or loaded the
    /// extension's module, ADR 0041). `verified=False` (it failed) uploads nothing and releases
    /// the lease. Returns whether something was uploaded.
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind, route, or a key that is not 32 hex digits.
    #[pyo3(signature = (kind, key, route, store, *, verified = true))]
    fn upload(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::route)] route: String,
        #[pyo3(from_py_with = args::gt4py_store)] store: Bound<'_, Gt4pyStore>,
        #[pyo3(from_py_with = args::verified)] verified: bool,
    ) -> PyResult<bool> {
        let store = store.get();
        let (kind, local) = (kind.object_kind(), kind);
        let route = route_of(&route)?;
        let object = *key.as_bytes();
        // Each object is leased on its own: a domain of its one kind.
        let domain = Domain { translation: kind, artifact: kind };
        Ok(py.detach(|| {
            let state = self.state();
            let done = if verified {
                let translation = if route.uploads() { store.inner.get(local, &key).ok() } else { None };
                Verified::Passed { key: object, route, translation, artifact: None }
            } else {
                Verified::Failed { key: object, route }
            };
            let uploads = self.remote.is_writer()
                && self.remote.is_on()
                && matches!(&done, Verified::Passed { route, translation: Some(_), .. } if route.uploads());
            state.session.upload(domain, &[done]);
            uploads && self.remote.is_on()
        }))
    }

    /// Whether the object of `kind` under `key` came from the shared tier in this process (and
    /// was neither confirmed nor rejected since).
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind or a key that is not 32 hex digits.
    fn fetched(
        &self,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
    ) -> bool {
        let (kind, object) = (kind.object_kind(), *key.as_bytes());
        let state = self.state();
        state.ids.get(&(kind, object)).is_some_and(|&id| state.session.fetched(id, kind))
    }

    /// The object of `kind` under `key` that came from the shared tier passed its check here:
    /// it is no longer held for a rejection.
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind or a key that is not 32 hex digits.
    fn confirm(
        &self,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
    ) {
        let (kind, object) = (kind.object_kind(), *key.as_bytes());
        let mut state = self.state();
        if let Some(&id) = state.ids.get(&(kind, object)) {
            state.session.confirm(id);
        }
    }

    /// Rejects the object of `kind` under `key` that came from the shared tier and failed a
    /// check here (`reason`): a writer retracts it from the server (only while it is still the
    /// object fetched), a reader quarantines it on this node and does not fetch it again.
    /// Returns the sentence saying which, or None when it did not come from the shared tier.
    ///
    /// Errors: `TableTypeError` for an argument of another type; `TableValueError` for another
    /// kind or a key that is not 32 hex digits.
    fn reject(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::gt4py_kind)] kind: Gt4pyKind,
        #[pyo3(from_py_with = args::hex_key)] key: TranslationKey,
        #[pyo3(from_py_with = args::reason)] reason: String,
    ) -> Option<String> {
        let (kind, object) = (kind.object_kind(), *key.as_bytes());
        py.detach(|| {
            let mut state = self.state();
            let id = *state.ids.get(&(kind, object))?;
            let rejected = state.session.reject(id, &[kind], &reason);
            (!rejected.is_empty()).then(|| rejected.describe())
        })
    }

    /// Adds this process's counters to the server's totals (`gridkey cache stats`); a reader
    /// publishes nothing.
    fn publish_stats(&self, py: Python<'_>) {
        py.detach(|| self.remote.publish_stats());
    }

    fn __repr__(&self) -> String {
        format!(
            "Gt4pyShared(url={:?}, writer={}, on={})",
            self.remote.shown_url(),
            if self.remote.is_writer() { "True" } else { "False" },
            if self.remote.is_on() { "True" } else { "False" }
        )
    }
}

/// Writes a new Ed25519 signing key for the shared tier to `path` (created, never replaced; mode
/// 0600), as `gridkey cache keygen` does, and returns its public key as 64 hex digits: the line
/// to add to the readers' trusted keys file (`GRIDKEY_REMOTE_TRUSTED_KEYS`, ADR 0031).
///
/// Errors: `SettingsError` naming the file when it exists or cannot be written.
#[pyfunction]
pub fn remote_keygen(#[pyo3(from_py_with = args::path)] path: PathBuf) -> PyResult<String> {
    guard(|| gridkey_remote::trust::generate_signing_key(&path).map_err(|e| error(ErrorKind::Settings, e.to_string())))
}
