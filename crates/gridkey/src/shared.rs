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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey_fingerprint::{KeyInputs, Tier, TranslationCache};
use gridkey_remote::{library_key, Claim, Fetched, Kind, ObjectKey, Remote, RemoteTier, Retracted, Waited};
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
    /// The objects downloaded for each program (by program index): what [`SharedRun::reject`]
    /// retracts or quarantines when the program fails its check.
    fetched: BTreeMap<usize, Vec<(Kind, ObjectKey, Vec<u8>)>>,
    /// This node's quarantine, as loaded at the start of the run.
    quarantine: crate::quarantine::Quarantine,
}

/// What [`SharedRun::reject`] did with a program's downloaded objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rejected {
    /// The objects retracted from the shared tier (a writer), `kind object-name`.
    pub retracted: Vec<String>,
    /// The objects quarantined on this node (a reader, or a writer whose retraction found
    /// another object already), `kind object-name`.
    pub quarantined: Vec<String>,
}

impl Rejected {
    /// Nothing came from the shared tier.
    pub fn is_empty(&self) -> bool {
        self.retracted.is_empty() && self.quarantined.is_empty()
    }

    /// The sentence for the program's report, naming what was done with which objects.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.retracted.is_empty() {
            parts.push(format!("retracted from the shared tier: {}", self.retracted.join(", ")));
        }
        if !self.quarantined.is_empty() {
            parts.push(format!(
                "quarantined on this node, not fetched again until a writer replaces it: {}",
                self.quarantined.join(", ")
            ));
        }
        parts.join("; ")
    }
}

impl SharedRun {
    /// The shared tier of a run with task `settings` (the compiler identified, so that its
    /// libraries can be shared) and translation `options`.
    pub fn new(
        remote: Arc<Remote>,
        settings: Arc<TaskSettings>,
        options: gridkey_fingerprint::TranslationOptions,
    ) -> Self {
        let quarantine = crate::quarantine::Quarantine::load(settings.cache_dir());
        Self {
            tier: RemoteTier::new(remote),
            settings,
            options,
            written_locally: 0,
            fetched: BTreeMap::new(),
            quarantine,
        }
    }

    /// Of the objects of `kind` under `keys`, those this node quarantined and that are still the
    /// object it quarantined (same trailing checksum), in one round trip that reads only the
    /// checksums, and only when some key is quarantined. A quarantine whose object changed or
    /// went away ends here (removed from the file).
    fn quarantined(&mut self, kind: Kind, keys: &[ObjectKey]) -> Vec<bool> {
        let remote = self.tier.remote().clone();
        let names: Vec<String> = keys.iter().map(|k| remote.object_name(kind, k)).collect();
        let listed: Vec<usize> = (0..keys.len()).filter(|&i| self.quarantine.objects.contains_key(&names[i])).collect();
        let mut out = vec![false; keys.len()];
        if listed.is_empty() {
            return out;
        }
        let Some(sums) = remote.checksums(kind, &listed.iter().map(|&i| keys[i]).collect::<Vec<_>>()) else {
            // The tier is off: nothing is fetched anyway.
            return out;
        };
        let mut ended = Vec::new();
        for (&i, sum) in listed.iter().zip(sums) {
            let held = sum.map(|s| crate::quarantine::hex(&s));
            if held.as_deref() == self.quarantine.objects.get(&names[i]).map(|q| q.checksum.as_str()) {
                out[i] = true;
            } else {
                ended.push(names[i].clone());
            }
        }
        if !ended.is_empty() {
            for name in &ended {
                self.quarantine.objects.remove(name);
            }
            // Best effort: a quarantine that cannot be rewritten ends again on the next run.
            let _ = crate::quarantine::Quarantine::update(self.settings.cache_dir(), |q| {
                for name in &ended {
                    q.objects.remove(name);
                }
            });
        }
        out
    }

    /// Rejects what program `i` downloaded from the shared tier (the objects of `kinds` among
    /// them) because it failed a check here, `reason`: a writer retracts each object from the
    /// server (only while it is still the object fetched, [`Remote::retract_many`]); a reader
    /// quarantines it on this node ([`crate::quarantine`]). Counted as rejected.
    pub fn reject(&mut self, i: usize, kinds: &[Kind], reason: &str) -> Rejected {
        let remote = self.tier.remote().clone();
        let mut out = Rejected::default();
        let objects: Vec<(Kind, ObjectKey, Vec<u8>)> = match self.fetched.get_mut(&i) {
            Some(list) => {
                let (taken, kept): (Vec<_>, Vec<_>) =
                    std::mem::take(list).into_iter().partition(|(k, _, _)| kinds.contains(k));
                *list = kept;
                taken
            }
            None => return out,
        };
        if objects.is_empty() {
            return out;
        }
        remote.count_rejected(objects.len() as u64);
        let mut quarantine = Vec::new();
        for (kind, key, payload) in &objects {
            let shown = format!("{kind} {}", remote.object_name(*kind, key));
            let item = [(*key, payload.as_slice())];
            if remote.is_writer() && remote.retract_many(*kind, &item) == [Retracted::Deleted] {
                out.retracted.push(shown);
                continue;
            }
            // A reader, or a writer that found another object under the key: quarantine what is
            // there only while it is the object fetched.
            if let [Some(sum)] = remote.checksums_holding(*kind, &item)[..] {
                quarantine.push((remote.object_name(*kind, key), crate::quarantine::hex(&sum)));
                out.quarantined.push(shown);
            }
        }
        if !quarantine.is_empty() {
            let entry =
                |sum: &str| crate::quarantine::Quarantined { checksum: sum.to_owned(), reason: reason.to_owned() };
            for (name, sum) in &quarantine {
                self.quarantine.objects.insert(name.clone(), entry(sum));
            }
            // Best effort: a quarantine that cannot be written costs one more fetch next run.
            let _ = crate::quarantine::Quarantine::update(self.settings.cache_dir(), |q| {
                for (name, sum) in &quarantine {
                    q.objects.insert(name.clone(), entry(sum));
                }
            });
        }
        out
    }

    /// Whether program `i`'s kernel library came from the shared tier in this run.
    pub fn library_fetched(&self, i: usize) -> bool {
        self.fetched.get(&i).is_some_and(|l| l.iter().any(|(k, _, _)| *k == Kind::KernelLibrary))
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
        // An object this node quarantined, and still the same, is not fetched: translated here.
        let missing: Vec<usize> = (0..inputs.len()).filter(|&i| routes[i].is_none()).collect();
        let keys: Vec<[u8; 16]> = missing.iter().map(|&i| *inputs[i].key().as_bytes()).collect();
        for (&i, q) in missing.iter().zip(self.quarantined(Kind::TranslationEntry, &keys)) {
            if q {
                routes[i] = Some(Route::Here { upload: writer && remote.is_on() });
            }
        }
        let missing: Vec<usize> = (0..inputs.len()).filter(|&i| routes[i].is_none()).collect();
        let keys: Vec<[u8; 16]> = missing.iter().map(|&i| *inputs[i].key().as_bytes()).collect();
        let fetched = remote.get_many(Kind::TranslationEntry, &keys);
        for (&i, f) in missing.iter().zip(fetched) {
            routes[i] = match f {
                Fetched::Hit(payload) => Some(self.write_back(local, i, &inputs[i], &payload, writer)),
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
                Fetched::Hit(payload) => self.write_back(local, i, &inputs[i], &payload, writer),
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

    /// Writes the translation entry downloaded for program `i` to the local tier (through the
    /// cache protocol's [`Tier::put`]): a remote hit, or a translation here when the local tier
    /// cannot take it.
    fn write_back(
        &mut self,
        local: &TranslationCache,
        i: usize,
        inputs: &KeyInputs,
        payload: &[u8],
        writer: bool,
    ) -> Route {
        if std::str::from_utf8(payload).is_err() {
            return Route::Here { upload: writer };
        }
        match Tier::put(local, inputs, payload) {
            Ok(()) => {
                self.written_locally += payload.len() as u64;
                self.fetched.entry(i).or_default().push((
                    Kind::TranslationEntry,
                    *inputs.key().as_bytes(),
                    payload.to_vec(),
                ));
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
        let wanted: Vec<(usize, PathBuf, [u8; 16])> = which
            .iter()
            .filter_map(|&i| self.library(local, &inputs[i]).map(|(path, key)| (i, path, key)))
            .filter(|(_, path, _)| !path.exists())
            .collect();
        let keys: Vec<[u8; 16]> = wanted.iter().map(|(_, _, k)| *k).collect();
        // A library this node quarantined is not fetched: the worker builds it.
        let quarantined = self.quarantined(Kind::KernelLibrary, &keys);
        let wanted: Vec<(usize, PathBuf, [u8; 16])> =
            wanted.into_iter().zip(quarantined).filter(|(_, q)| !q).map(|(w, _)| w).collect();
        let keys: Vec<[u8; 16]> = wanted.iter().map(|(_, _, k)| *k).collect();
        for ((i, path, key), f) in wanted.iter().zip(self.tier.remote().get_many(Kind::KernelLibrary, &keys)) {
            if let Fetched::Hit(library) = f {
                // A library that cannot be written is built by the worker instead.
                if write_library(path, &library).is_ok() {
                    self.written_locally += library.len() as u64;
                    self.fetched.entry(*i).or_default().push((Kind::KernelLibrary, *key, library));
                }
            }
        }
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
                Waited::Arrived(payload) => self.write_back(local, i, &inputs[i], &payload, writer),
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
