//! The shared tier in `gridkey run` (ADR 0018, ADR 0019): the CLI's adapter of the shared-tier
//! protocol ([`gridkey_fingerprint::shared::SharedSession`], ADR 0041), which routes its
//! translation entries and kernel libraries. The parent does every request to the shared tier, so a dead server is found once per run, never once per worker; the workers see
//! only the local tier, which the parent has filled with what it downloaded.
//!
//! For each program that the local tier misses, the parent, in this order and in batches of one
//! round trip:
//! 1. looks the translation entry up in the shared tier; a checked hit is written to the local
//!    tier (and then is a local hit for the worker);
//! 2. otherwise claims it: a writer takes the lease (`Route::Lease`) unless another writer holds it
//!    (`Route::Wait`); a read-only client translates here without uploading;
//! 3. for every program whose source is now local, downloads the kernel library when the local
//!    build cache lacks it and the compiler identity matches;
//! 4. runs the first batch (everything but the waits) and verifies each kernel against the Rust
//!    reference; uploads what it translated and built **and verified** (libraries first, then
//!    translation entries, which releases the leases), and releases the leases of the programs
//!    that failed (ADR 0030: only verified artifacts travel; the heartbeat keeps the leases while
//!    the parent verifies);
//! 5. waits on the other writers' leases: an object that arrives is a hit as in 1 and 3, a lease
//!    whose holder died is taken over, past the wait cap the program is translated here;
//! 6. runs the second batch, verifies and uploads as in 4.
//!
//! Correctness never depends on this: every downloaded object was checked by `gridkey-remote`
//! before it is written, and the worker checks a library before it loads it. What came from the
//! shared tier and then fails a check here (the kernel against the reference, a library that
//! does not load) is rejected ([`SharedRun::reject`]): a writer retracts it from the server, a
//! reader quarantines it on this node ([`crate::quarantine`]) and does not fetch it again.
//!
//! What is the CLI's here: the translation entries are `gridkey run`'s translation cache (a
//! payload that is not UTF-8 is unusable), a program's artifact is its kernel library in the
//! build cache, named by its build key and the compiler identity ([`library_key`]), fetched
//! without a lease once its source is local.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey_fingerprint::shared::{Domain, SharedSession, Taken, Verified};
use gridkey_fingerprint::{KeyInputs, TranslationCache};
use gridkey_remote::{library_key, Kind, ObjectKey, Remote, RemoteTier};
use gridkey_settings::TaskSettings;
use gridkey_stencil::CompileOutcome;

/// How one program gets its translation in a run with a shared tier (the protocol's route).
pub use gridkey_fingerprint::shared::Route;

/// What [`SharedRun::reject`] did with a program's downloaded objects.
pub use gridkey_fingerprint::shared::Rejected;

/// The shared tier of one run: the protocol over the client, and what the parent needs to name
/// libraries.
pub struct SharedRun {
    session: SharedSession<RemoteTier>,
    settings: Arc<TaskSettings>,
    options: gridkey_fingerprint::TranslationOptions,
    /// Bytes of translation entries and libraries written to the local tier from the shared one.
    pub written_locally: u64,
}

impl SharedRun {
    /// The shared tier of a run with task `settings` (the compiler identified, so that its
    /// libraries can be shared) and translation `options`.
    pub fn new(
        remote: Arc<Remote>,
        settings: Arc<TaskSettings>,
        options: gridkey_fingerprint::TranslationOptions,
    ) -> Self {
        let session = SharedSession::new(RemoteTier::new(remote), settings.cache_dir());
        Self { session, settings, options, written_locally: 0 }
    }

    /// Rejects what program `i` downloaded from the shared tier (the objects of `kinds` among
    /// them) because it failed a check here, `reason`: a writer retracts each object from the
    /// server (only while it is still the object fetched, [`Remote::retract_many`]); a reader
    /// quarantines it on this node ([`crate::quarantine`]). Counted as rejected.
    pub fn reject(&mut self, i: usize, kinds: &[Kind], reason: &str) -> Rejected {
        self.session.reject(i, kinds, reason)
    }

    /// Whether program `i`'s kernel library came from the shared tier in this run.
    pub fn library_fetched(&self, i: usize) -> bool {
        self.session.fetched(i, Kind::KernelLibrary)
    }

    /// The client.
    pub fn remote(&self) -> &Remote {
        self.session.tier().remote()
    }

    /// Steps 1 to 3 for programs with key `inputs` and local hits `local_hit`: the route of each.
    pub fn plan(&mut self, local: &TranslationCache, inputs: &[KeyInputs], local_hit: &[bool]) -> Vec<Route> {
        let keys = keys_of(inputs);
        let routes = self.session.plan(Domain::CLI.translation, &keys, local_hit, &mut store_entry(local, inputs));
        // 3. Libraries of every program whose source is local now.
        let ready: Vec<usize> =
            (0..inputs.len()).filter(|&i| matches!(routes[i], Route::Local | Route::Remote)).collect();
        self.fetch_libraries(local, inputs, &ready);
        self.written_locally = self.session.written_locally();
        routes
    }

    /// The build-cache path and the remote key of the library of the program with `inputs`,
    /// when its source is in the local tier.
    fn library(&self, local: &TranslationCache, inputs: &KeyInputs) -> Option<(PathBuf, ObjectKey)> {
        let compiler = self.settings.compiler();
        let source = String::from_utf8(local.get(&inputs.key()).ok()?).ok()?;
        let build_key = gridkey_stencil::library_build_key(&source, &self.options, compiler).ok()?;
        let path = self.settings.cache_dir().join(gridkey_stencil::BUILD_DIR).join(format!("{build_key}.so"));
        Some((path, library_key(&build_key, compiler.identity())))
    }

    /// Downloads, in one round trip, the libraries of programs `which` that the local build
    /// cache lacks, and writes each checked one atomically into the build cache.
    fn fetch_libraries(&mut self, local: &TranslationCache, inputs: &[KeyInputs], which: &[usize]) {
        let paths: BTreeMap<usize, (PathBuf, ObjectKey)> = which
            .iter()
            .filter_map(|&i| self.library(local, &inputs[i]).map(|lib| (i, lib)))
            .filter(|(_, (path, _))| !path.exists())
            .collect();
        let wanted: Vec<(usize, ObjectKey)> = paths.iter().map(|(&i, (_, key))| (i, *key)).collect();
        // A library that cannot be written is built by the worker instead.
        // One batch of atomic writes per round trip (ADR 0049).
        let mut store = |batch: &[(usize, &[u8])]| {
            let files: Vec<(&Path, &[u8])> =
                batch.iter().filter_map(|(i, library)| paths.get(i).map(|(p, _)| (p.as_path(), *library))).collect();
            let mut written = gridkey_fs::write_atomic_all(&files, None).into_iter();
            batch.iter().map(|(i, _)| paths.contains_key(i) && written.next().is_some_and(|w| w.is_ok())).collect()
        };
        self.session.fetch(Domain::CLI.artifact, &wanted, &mut store);
    }

    /// Step 4 and 6: uploads what the programs `which` (with `routes` and `outcomes`) translated
    /// and built here, libraries first, then translation entries (which releases the leases);
    /// releases the leases of programs that failed. `outcomes` holds only what verified: a
    /// program whose kernel failed the reference (or that failed to compile) is `None`, and
    /// nothing of it travels (ADR 0030).
    pub fn upload(
        &self,
        local: &TranslationCache,
        inputs: &[KeyInputs],
        routes: &[Route],
        which: &[usize],
        outcomes: &[Option<&CompileOutcome>],
    ) {
        let remote = self.remote();
        if !remote.is_writer() || !remote.is_on() {
            return;
        }
        let done: Vec<Verified> = which
            .iter()
            .zip(outcomes)
            .map(|(&i, outcome)| {
                let key = *inputs[i].key().as_bytes();
                let route = routes[i];
                let Some(outcome) = outcome else { return Verified::Failed { key, route } };
                let artifact = if outcome.built || route.uploads() {
                    match (self.library(local, &inputs[i]), std::fs::read(&outcome.artifact)) {
                        (Some((_, lib_key)), Ok(bytes)) => Some((lib_key, bytes)),
                        _ => None,
                    }
                } else {
                    None
                };
                let translation = if route.uploads() { local.get(&inputs[i].key()).ok() } else { None };
                Verified::Passed { key, route, translation, artifact }
            })
            .collect();
        self.session.upload(Domain::CLI, &done);
    }

    /// Step 5: waits on the other writers' leases of programs `which`; returns their new routes.
    pub fn wait(&mut self, local: &TranslationCache, inputs: &[KeyInputs], which: &[usize]) -> Vec<Route> {
        let keys = keys_of(inputs);
        let routes = self.session.wait(Domain::CLI.translation, &keys, which, &mut store_entry(local, inputs));
        let arrived: Vec<usize> =
            which.iter().zip(&routes).filter(|(_, r)| **r == Route::Remote).map(|(&i, _)| i).collect();
        self.fetch_libraries(local, inputs, &arrived);
        self.written_locally = self.session.written_locally();
        routes
    }
}

/// The translation keys of `inputs`, as object keys.
fn keys_of(inputs: &[KeyInputs]) -> Vec<ObjectKey> {
    inputs.iter().map(|i| *i.key().as_bytes()).collect()
}

/// Stores the downloaded translation entries of one round trip (program index, payload) in the
/// local tier as one batch of atomic writes ([`TranslationCache::put_all`], ADR 0049), each with
/// its key-input record; an entry that is not UTF-8 C source is unusable.
fn store_entry<'a>(
    local: &'a TranslationCache,
    inputs: &'a [KeyInputs],
) -> impl FnMut(&[(usize, &[u8])]) -> Vec<Taken> + 'a {
    move |batch| {
        let usable: Vec<bool> = batch.iter().map(|(_, payload)| std::str::from_utf8(payload).is_ok()).collect();
        let items: Vec<(&KeyInputs, &[u8])> =
            batch.iter().zip(&usable).filter(|(_, u)| **u).map(|(&(i, payload), _)| (&inputs[i], payload)).collect();
        let mut stored = local.put_all(&items).into_iter();
        usable
            .iter()
            .map(|&u| match u {
                false => Taken::Unusable,
                true if matches!(stored.next(), Some(Ok(_))) => Taken::Stored,
                true => Taken::Failed,
            })
            .collect()
    }
}
