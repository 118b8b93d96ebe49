//! The shared tier in `gridkey run` (ADR 0018, ADR 0019): the parent does every request to the
//! shared tier, so a dead server is found once per run, never once per worker; the workers see
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
//! 4. runs the first batch (everything but the waits), uploads what it translated and built
//!    (libraries first, then translation entries, which releases the leases);
//! 5. waits on the other writers' leases: an object that arrives is a hit as in 1 and 3, a lease
//!    whose holder died is taken over, past the wait cap the program is translated here;
//! 6. runs the second batch and uploads as in 4.
//!
//! Correctness never depends on this: every downloaded object was checked by `gridkey-remote`
//! before it is written, and the worker checks a library before it loads it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey_fingerprint::{KeyInputs, Tier, TranslationCache};
use gridkey_remote::{library_key, Claim, Fetched, Kind, Remote, RemoteTier, Waited};
use gridkey_settings::TaskSettings;
use gridkey_stencil::CompileOutcome;

/// How one program gets its translation in a run with a shared tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The local tier had it before the run.
    Local,
    /// Downloaded from the shared tier and written to the local tier.
    Remote,
    /// This writer holds the lease: translate here, upload, release.
    Lease,
    /// Translate here without a lease; `upload` when this client is a writer (a bad object was
    /// in the way, or the wait cap passed).
    Here {
        /// Whether the translation is uploaded.
        upload: bool,
    },
    /// Another writer holds the lease: wait for its object after the first batch.
    Wait,
}

impl Route {
    /// Whether the translation came from a tier, and which.
    pub fn tier(self) -> Option<&'static str> {
        match self {
            Route::Local => Some("local"),
            Route::Remote => Some("remote"),
            _ => None,
        }
    }

    fn uploads(self) -> bool {
        matches!(self, Route::Lease | Route::Here { upload: true })
    }
}

/// The shared tier of one run: the client and what the parent needs to name libraries.
pub struct SharedRun {
    tier: RemoteTier,
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
        Self { tier: RemoteTier::new(remote), settings, options, written_locally: 0 }
    }

    /// The client.
    pub fn remote(&self) -> &Remote {
        self.tier.remote()
    }

    /// Steps 1 to 3 for programs with key `inputs` and local hits `local_hit`: the route of each.
    pub fn plan(&mut self, local: &TranslationCache, inputs: &[KeyInputs], local_hit: &[bool]) -> Vec<Route> {
        let remote = self.tier.remote().clone();
        let writer = remote.is_writer();
        let mut routes: Vec<Option<Route>> = local_hit.iter().map(|&hit| hit.then_some(Route::Local)).collect();
        // 1. One lookup of every local miss.
        let missing: Vec<usize> = (0..inputs.len()).filter(|&i| routes[i].is_none()).collect();
        let keys: Vec<[u8; 16]> = missing.iter().map(|&i| *inputs[i].key().as_bytes()).collect();
        let fetched = remote.get_many(Kind::TranslationEntry, &keys);
        for (&i, f) in missing.iter().zip(fetched) {
            routes[i] = match f {
                Fetched::Hit(payload) => Some(self.write_back(local, &inputs[i], &payload, writer)),
                // A bad object under the key: translate here and, as a writer, replace it; no
                // claim, which would only find the same object again.
                Fetched::Rejected(_) => Some(Route::Here { upload: writer && remote.is_on() }),
                Fetched::Absent | Fetched::Off => None,
            };
        }
        // 2. Claims for the rest.
        let missing: Vec<usize> = (0..inputs.len()).filter(|&i| routes[i].is_none()).collect();
        let keys: Vec<[u8; 16]> = missing.iter().map(|&i| *inputs[i].key().as_bytes()).collect();
        let claims = remote.claim(Kind::TranslationEntry, &keys);
        let mut present = Vec::new();
        for (&i, claim) in missing.iter().zip(claims) {
            routes[i] = match claim {
                Claim::Won => Some(Route::Lease),
                Claim::Held => Some(Route::Wait),
                Claim::Free | Claim::Off => Some(Route::Here { upload: false }),
                Claim::Present => {
                    present.push(i);
                    None
                }
            };
        }
        let keys: Vec<[u8; 16]> = present.iter().map(|&i| *inputs[i].key().as_bytes()).collect();
        for (&i, f) in present.iter().zip(remote.get_many(Kind::TranslationEntry, &keys)) {
            routes[i] = Some(match f {
                Fetched::Hit(payload) => self.write_back(local, &inputs[i], &payload, writer),
                // A bad object under the key: translate here and, as a writer, replace it.
                _ => Route::Here { upload: writer && remote.is_on() },
            });
        }
        let routes: Vec<Route> = routes.into_iter().map(|r| r.expect("every program routed")).collect();
        // 3. Libraries of every program whose source is local now.
        let ready: Vec<usize> =
            (0..inputs.len()).filter(|&i| matches!(routes[i], Route::Local | Route::Remote)).collect();
        self.fetch_libraries(local, inputs, &ready);
        routes
    }

    /// Writes a downloaded translation entry to the local tier (through the cache protocol's
    /// [`Tier::put`]): a remote hit, or a translation here when the local tier cannot take it.
    fn write_back(&mut self, local: &TranslationCache, inputs: &KeyInputs, payload: &[u8], writer: bool) -> Route {
        if std::str::from_utf8(payload).is_err() {
            return Route::Here { upload: writer };
        }
        match Tier::put(local, inputs, payload) {
            Ok(()) => {
                self.written_locally += payload.len() as u64;
                Route::Remote
            }
            Err(_) => Route::Here { upload: false },
        }
    }

    /// The build-cache path and the remote key of the library of the program with `inputs`,
    /// when its source is in the local tier.
    fn library(&self, local: &TranslationCache, inputs: &KeyInputs) -> Option<(PathBuf, [u8; 16])> {
        let compiler = self.settings.compiler();
        let source = String::from_utf8(local.get(&inputs.key()).ok()?).ok()?;
        let build_key = gridkey_stencil::library_build_key(&source, &self.options, compiler).ok()?;
        let path = self.settings.cache_dir().join(gridkey_stencil::BUILD_DIR).join(format!("{build_key}.so"));
        Some((path, library_key(&build_key, compiler.identity())))
    }

    /// Downloads, in one round trip, the libraries of programs `which` that the local build
    /// cache lacks, and writes each checked one atomically into the build cache.
    fn fetch_libraries(&mut self, local: &TranslationCache, inputs: &[KeyInputs], which: &[usize]) {
        let wanted: Vec<(PathBuf, [u8; 16])> =
            which.iter().filter_map(|&i| self.library(local, &inputs[i])).filter(|(path, _)| !path.exists()).collect();
        let keys: Vec<[u8; 16]> = wanted.iter().map(|(_, k)| *k).collect();
        for ((path, _), f) in wanted.iter().zip(self.tier.remote().get_many(Kind::KernelLibrary, &keys)) {
            if let Fetched::Hit(library) = f {
                // A library that cannot be written is built by the worker instead.
                if write_library(path, &library).is_ok() {
                    self.written_locally += library.len() as u64;
                }
            }
        }
    }

    /// Step 4 and 6: uploads what the programs `which` (with `routes` and `outcomes`) translated
    /// and built here, libraries first, then translation entries (which releases the leases);
    /// releases the leases of programs that failed.
    pub fn upload(
        &self,
        local: &TranslationCache,
        inputs: &[KeyInputs],
        routes: &[Route],
        which: &[usize],
        outcomes: &[Option<&CompileOutcome>],
    ) {
        let remote = self.tier.remote();
        if !remote.is_writer() || !remote.is_on() {
            return;
        }
        let mut libraries: Vec<([u8; 16], Vec<u8>)> = Vec::new();
        let mut entries: Vec<([u8; 16], Vec<u8>)> = Vec::new();
        let mut failed: Vec<[u8; 16]> = Vec::new();
        for (&i, outcome) in which.iter().zip(outcomes) {
            let key = inputs[i].key();
            let Some(outcome) = outcome else {
                if routes[i] == Route::Lease {
                    failed.push(*key.as_bytes());
                }
                continue;
            };
            if outcome.built || routes[i].uploads() {
                if let (Some((_, lib_key)), Ok(bytes)) =
                    (self.library(local, &inputs[i]), std::fs::read(&outcome.artifact))
                {
                    libraries.push((lib_key, bytes));
                }
            }
            if routes[i].uploads() {
                match local.get(&key) {
                    Ok(payload) => entries.push((*key.as_bytes(), payload)),
                    Err(_) => failed.push(*key.as_bytes()),
                }
            }
        }
        fn as_items(v: &[([u8; 16], Vec<u8>)]) -> Vec<([u8; 16], &[u8])> {
            v.iter().map(|(k, b)| (*k, b.as_slice())).collect()
        }
        if !libraries.is_empty() {
            remote.put_many(Kind::KernelLibrary, &as_items(&libraries));
        }
        if !entries.is_empty() {
            remote.put_many(Kind::TranslationEntry, &as_items(&entries));
        }
        remote.release(Kind::TranslationEntry, &failed);
    }

    /// Step 5: waits on the other writers' leases of programs `which`; returns their new routes.
    pub fn wait(&mut self, local: &TranslationCache, inputs: &[KeyInputs], which: &[usize]) -> Vec<Route> {
        let remote = self.tier.remote().clone();
        let writer = remote.is_writer();
        let keys: Vec<[u8; 16]> = which.iter().map(|&i| *inputs[i].key().as_bytes()).collect();
        let waited = remote.wait(Kind::TranslationEntry, &keys);
        let routes: Vec<Route> = which
            .iter()
            .zip(waited)
            .map(|(&i, w)| match w {
                Waited::Arrived(payload) => self.write_back(local, &inputs[i], &payload, writer),
                Waited::TakenOver => Route::Lease,
                Waited::Rejected(_) | Waited::TimedOut => Route::Here { upload: writer && remote.is_on() },
                Waited::Gone | Waited::Off => Route::Here { upload: false },
            })
            .collect();
        let arrived: Vec<usize> =
            which.iter().zip(&routes).filter(|(_, r)| **r == Route::Remote).map(|(&i, _)| i).collect();
        self.fetch_libraries(local, inputs, &arrived);
        routes
    }
}

/// Writes a downloaded library under its final name with the one atomic writer.
fn write_library(path: &Path, library: &[u8]) -> std::io::Result<u64> {
    gridkey_fs::write_atomic(path, None, |out| out.write_all(library))
}
