//! The shared-tier protocol (ADR 0041): how a process that compiles programs routes their
//! translation entries and built artifacts through a shared tier (ADR 0018, ADR 0019, ADR 0030),
//! for every frontend: `gridkey run` (translation entries and kernel libraries) and GT4Py
//! (GT4Py translation entries and extension bundles).
//!
//! The shared tier itself is a [`SharedTier`]: batches of look-ups, claims (leases), waits,
//! uploads and retractions, each batch one round trip. `gridkey-remote`'s Redis tier implements
//! it; the protocol never sees a connection, a URL or a frontend's artifact files.
//!
//! A [`SharedSession`] is the protocol of one process (one run of `gridkey run`, one Python
//! process of GT4Py). For the programs that the local tier misses, in batches:
//! 1. [`SharedSession::plan`] looks each object up; a checked hit is handed to the frontend to
//!    store locally ([`Taken`]) and is then a local hit ([`Route::Remote`]);
//! 2. otherwise it claims it: a writer takes the lease ([`Route::Lease`]) unless another writer
//!    holds it ([`Route::Wait`]); a read-only client makes it here without uploading;
//! 3. the frontend makes what it has to (translates, builds), checks it (the CLI runs the kernel
//!    against the Rust reference; GT4Py loads the module) and passes what verified to
//!    [`SharedSession::upload`]: built artifacts first, then translation entries, which releases
//!    the leases; the leases of what failed are released (ADR 0030: only verified artifacts
//!    travel);
//! 4. [`SharedSession::wait`] waits on the other writers' leases: an object that arrives is a
//!    hit as in 1, a lease whose holder died is taken over, past the wait cap the object is made
//!    here.
//!
//! An object that came from the shared tier and then fails the frontend's check is rejected
//! ([`SharedSession::reject`]): a writer retracts it from the server, a reader quarantines it on
//! this node ([`quarantine`]) and does not fetch it again while it is the same object.
//!
//! Objects carry their [`Kind`] in their signed header (ADR 0019), so an object of one frontend
//! is never accepted as another's: a GT4Py extension never checks as a kernel library, nor a
//! GT4Py translation entry as a CLI one ([`Domain`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub mod quarantine;

use quarantine::{Quarantine, Quarantined};

/// A 16-byte key an object of the shared tier answers: a translation key, or the remote key of
/// a built artifact (a kernel library's, a GT4Py extension's).
pub type ObjectKey = [u8; 16];

/// The trailing checksum of an object of the shared tier (ADR 0019): it names one object under a
/// key, whoever wrote it.
pub type ObjectChecksum = [u8; 16];

/// What an object of the shared tier holds. The kind is part of the object's signed header and
/// of its Redis name, so an object of one kind never checks as another (ADR 0019, ADR 0041).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A translation-cache entry of `gridkey run`: the payload is the translated source, the key
    /// a translation key.
    TranslationEntry,
    /// A kernel library of `gridkey run`'s build cache: the payload is the shared library, the
    /// key the build key combined with the compiler identity.
    KernelLibrary,
    /// A GT4Py translation entry: the payload is the bytes GT4Py's `FileCache` stored, the key
    /// [`crate::gt4py::translation_entry_key`].
    Gt4pyTranslation,
    /// A GT4Py extension: the payload is the bundle of its build folder's files
    /// ([`crate::gt4py::encode_bundle`]), the key the extension key (ADR 0040).
    Gt4pyExtension,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] =
        [Kind::TranslationEntry, Kind::KernelLibrary, Kind::Gt4pyTranslation, Kind::Gt4pyExtension];

    /// The kind byte of the remote object format (ADR 0019): 1 translation entry, 2 kernel
    /// library, 3 GT4Py translation entry, 4 GT4Py extension.
    pub fn code(self) -> u8 {
        match self {
            Kind::TranslationEntry => 1,
            Kind::KernelLibrary => 2,
            Kind::Gt4pyTranslation => 3,
            Kind::Gt4pyExtension => 4,
        }
    }

    /// The kind of kind byte `code`, if it is one.
    pub fn from_code(code: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// The short name used in Redis key names: `te`, `kl`, `gt` or `gx`.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::TranslationEntry => "te",
            Kind::KernelLibrary => "kl",
            Kind::Gt4pyTranslation => "gt",
            Kind::Gt4pyExtension => "gx",
        }
    }

    /// The name people read: `translation entry`, `kernel library`, `GT4Py translation entry`
    /// or `GT4Py extension`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::TranslationEntry => "translation entry",
            Kind::KernelLibrary => "kernel library",
            Kind::Gt4pyTranslation => "GT4Py translation entry",
            Kind::Gt4pyExtension => "GT4Py extension",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The two kinds of one frontend: its translation entries and its one built artifact per
/// program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Domain {
    /// The kind of its translation entries.
    pub translation: Kind,
    /// The kind of its built artifacts.
    pub artifact: Kind,
}

impl Domain {
    /// `gridkey run`: translation entries and kernel libraries.
    pub const CLI: Domain = Domain { translation: Kind::TranslationEntry, artifact: Kind::KernelLibrary };
    /// GT4Py: its translation entries and its extensions.
    pub const GT4PY: Domain = Domain { translation: Kind::Gt4pyTranslation, artifact: Kind::Gt4pyExtension };
}

/// What a look-up in the shared tier found for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A checked payload.
    Hit(Vec<u8>),
    /// No object under the key.
    Absent,
    /// An object that failed a check (the check named): a miss, reported.
    Rejected(String),
    /// The tier is off for this process (unreachable, or failed earlier).
    Off,
}

/// What a claim decided for one key that missed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This writer holds the lease: make the object, then upload it (which releases the lease).
    Won,
    /// The object arrived in the meantime: look it up again.
    Present,
    /// Another writer holds the lease: wait for it.
    Held,
    /// Read-only and no writer holds a lease: make it here and upload nothing.
    Free,
    /// The tier is off for this process: make it here.
    Off,
}

/// How a wait on another writer's lease ended for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// The object arrived and checks: a hit.
    Arrived(Vec<u8>),
    /// An object arrived that failed a check (the check named): make it here (a writer uploads
    /// over it).
    Rejected(String),
    /// The holder's lease expired without an object (the holder died); this writer took the
    /// lease over: make it, then upload it.
    TakenOver,
    /// Read-only: the lease went away without an object; make it here.
    Gone,
    /// The wait cap passed: make it here (a writer uploads without a lease).
    TimedOut,
    /// The tier went off for this process.
    Off,
}

/// The frontend's writer of downloaded objects (ADR 0041, ADR 0047): it is handed the checked
/// objects of one round trip at once, as (program index, payload) pairs, so that it may write
/// them in parallel (each write syncs its own file, and syncs made together overlap), and
/// returns what became of each, in the same order ([`Taken`] for translations, whether it
/// stored it for artifacts). An answer missing at the end counts as not stored.
pub type StoreBatch<'a, T> = dyn FnMut(&[(usize, &[u8])]) -> Vec<T> + 'a;

/// A [`StoreBatch`] that stores one object after the other with `store` (program index,
/// payload).
pub fn each<T>(mut store: impl FnMut(usize, &[u8]) -> T) -> impl FnMut(&[(usize, &[u8])]) -> Vec<T> {
    move |batch| batch.iter().map(|&(i, payload)| store(i, payload)).collect()
}

/// What a retraction or deletion did to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retracted {
    /// The object was deleted.
    Deleted,
    /// Nothing was deleted: no object under the key, or (for a retraction) another object than
    /// the one fetched, which a writer uploaded since.
    NotThere,
    /// Nothing was deleted: this client is read-only.
    ReadOnly,
    /// The tier is off for this process.
    Off,
}

/// The batch operations of a shared tier (ADR 0041), each batch one round trip. Implemented by
/// `gridkey-remote`'s Redis tier; the protocol ([`SharedSession`]) is written against this trait
/// only. None of them returns an error: a tier that fails turns itself off, with one warning of
/// its own, and answers `Off` from then on (ADR 0029).
pub trait SharedTier {
    /// Whether this client uploads, takes leases and retracts (a designated writer).
    fn is_writer(&self) -> bool;

    /// Whether the tier is still on for this process.
    fn is_on(&self) -> bool;

    /// The name that identifies the object of `kind` under `key` on the tier, for reports and
    /// for the quarantine (stable across processes).
    fn object_name(&self, kind: Kind, key: &ObjectKey) -> String;

    /// The checked payloads of the objects of `kind` under `keys`, one [`Lookup`] per key.
    fn look_up(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Lookup>;

    /// For each key of `kind` that missed, who makes it ([`Claim`]); a writer takes the leases it
    /// wins and keeps them alive until they are uploaded or released.
    fn claim(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Claim>;

    /// Waits on other writers' leases on `keys` of `kind`, one [`WaitEnd`] per key.
    fn wait(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<WaitEnd>;

    /// Uploads the objects of `kind` for `items` (key, payload), signed when the tier signs, and
    /// releases this client's leases on those keys. A read-only client uploads nothing.
    fn upload(&self, kind: Kind, items: &[(ObjectKey, &[u8])]);

    /// Releases this client's leases on `keys` of `kind` without uploading.
    fn release(&self, kind: Kind, keys: &[ObjectKey]);

    /// Deletes each object of `kind` for `items` (key, the payload this client fetched) only
    /// while the object under the key still holds exactly that payload.
    fn retract(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Retracted>;

    /// The trailing checksum of the object of `kind` under each of `keys` (`None`: no object),
    /// without downloading the objects; `None` when the tier is off.
    fn checksums(&self, kind: Kind, keys: &[ObjectKey]) -> Option<Vec<Option<ObjectChecksum>>>;

    /// The trailing checksum of the object under each key of `items` (key, payload) while it
    /// still holds exactly that payload, else `None`.
    fn checksums_holding(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Option<ObjectChecksum>>;

    /// Counts `n` objects rejected after they passed the tier's checks (the frontend's check
    /// failed).
    fn count_rejected(&self, n: u64);
}

/// How one program gets one object (its translation entry, or a leased artifact) in a process
/// with a shared tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The local tier had it before.
    Local,
    /// Downloaded from the shared tier and stored locally.
    Remote,
    /// This writer holds the lease: make it here, upload, release.
    Lease,
    /// Make it here without a lease; `upload` when this client is a writer (a bad object was
    /// in the way, or the wait cap passed).
    Here {
        /// Whether what is made is uploaded.
        upload: bool,
    },
    /// Another writer holds the lease: wait for its object ([`SharedSession::wait`]).
    Wait,
}

impl Route {
    /// Whether the object came from a tier, and which: `local` or `remote`.
    pub fn tier(self) -> Option<&'static str> {
        match self {
            Route::Local => Some("local"),
            Route::Remote => Some("remote"),
            _ => None,
        }
    }

    /// Whether what is made on this route is uploaded.
    pub fn uploads(self) -> bool {
        matches!(self, Route::Lease | Route::Here { upload: true })
    }
}

/// What the frontend did with a payload downloaded for one program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Stored in the local tier: a hit from now on.
    Stored,
    /// The payload is not what the frontend can use (the CLI's translation entry is not UTF-8):
    /// made here, and a writer uploads a good one over it.
    Unusable,
    /// The local tier could not store it: made here, nothing uploaded.
    Failed,
}

/// What one program leaves for [`SharedSession::upload`] after the frontend's check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verified {
    /// It failed (to translate, build or verify): nothing of it travels, its lease is released.
    Failed {
        /// Its translation key.
        key: ObjectKey,
        /// Its route.
        route: Route,
    },
    /// It passed the frontend's check.
    Passed {
        /// Its translation key.
        key: ObjectKey,
        /// Its route: its translation entry is uploaded when [`Route::uploads`].
        route: Route,
        /// Its translation entry as stored locally, when the route uploads; `None` there: it
        /// cannot be read, and its lease is released.
        translation: Option<Vec<u8>>,
        /// Its built artifact (remote key, bytes), when it was built here or its route uploads.
        artifact: Option<(ObjectKey, Vec<u8>)>,
    },
}

/// What [`SharedSession::reject`] did with a program's downloaded objects.
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

/// The shared-tier protocol of one process (module documentation): the tier, this node's
/// quarantine and what was downloaded for each program, so that it can be rejected.
pub struct SharedSession<T: SharedTier> {
    tier: T,
    cache_dir: PathBuf,
    /// Bytes of payloads stored locally from the shared tier.
    written_locally: u64,
    /// The objects downloaded for each program (by program index): what
    /// [`SharedSession::reject`] retracts or quarantines when the program fails its check.
    fetched: BTreeMap<usize, Vec<(Kind, ObjectKey, Vec<u8>)>>,
    /// This node's quarantine, as loaded at the start.
    quarantine: Quarantine,
}

impl<T: SharedTier> fmt::Debug for SharedSession<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSession").field("cache_dir", &self.cache_dir).finish_non_exhaustive()
    }
}

impl<T: SharedTier> SharedSession<T> {
    /// The protocol over `tier` for a node whose quarantine is in `cache_dir` (loaded now).
    pub fn new(tier: T, cache_dir: &Path) -> Self {
        let quarantine = Quarantine::load(cache_dir);
        Self { tier, cache_dir: cache_dir.to_path_buf(), written_locally: 0, fetched: BTreeMap::new(), quarantine }
    }

    /// The tier.
    pub fn tier(&self) -> &T {
        &self.tier
    }

    /// Bytes of payloads stored locally from the shared tier so far.
    pub fn written_locally(&self) -> u64 {
        self.written_locally
    }

    /// Whether an object of `kind` was downloaded for program `i` (and not rejected since).
    pub fn fetched(&self, i: usize, kind: Kind) -> bool {
        self.fetched.get(&i).is_some_and(|l| l.iter().any(|(k, _, _)| *k == kind))
    }

    /// Forgets what was downloaded for program `i`: it passed the frontend's check, and will
    /// not be rejected.
    pub fn confirm(&mut self, i: usize) {
        self.fetched.remove(&i);
    }

    /// Of the objects of `kind` under `keys`, those this node quarantined and that are still the
    /// object it quarantined (same trailing checksum), in one round trip that reads only the
    /// checksums, and only when some key is quarantined. A quarantine whose object changed or
    /// went away ends here (removed from the file).
    fn quarantined(&mut self, kind: Kind, keys: &[ObjectKey]) -> Vec<bool> {
        let names: Vec<String> = keys.iter().map(|k| self.tier.object_name(kind, k)).collect();
        let listed: Vec<usize> = (0..keys.len()).filter(|&i| self.quarantine.objects.contains_key(&names[i])).collect();
        let mut out = vec![false; keys.len()];
        if listed.is_empty() {
            return out;
        }
        let Some(sums) = self.tier.checksums(kind, &listed.iter().map(|&i| keys[i]).collect::<Vec<_>>()) else {
            // The tier is off: nothing is fetched anyway.
            return out;
        };
        let mut ended = Vec::new();
        for (&i, sum) in listed.iter().zip(sums) {
            let held = sum.map(|s| quarantine::hex(&s));
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
            // Best effort: a quarantine that cannot be rewritten ends again next time.
            let _ = Quarantine::update(&self.cache_dir, |q| {
                for name in &ended {
                    q.objects.remove(name);
                }
            });
        }
        out
    }

    /// Rejects what program `i` downloaded from the shared tier (the objects of `kinds` among
    /// them) because it failed a check here, `reason`: a writer retracts each object from the
    /// server (only while it is still the object fetched, [`SharedTier::retract`]); a reader
    /// quarantines it on this node ([`quarantine`]). Counted as rejected.
    pub fn reject(&mut self, i: usize, kinds: &[Kind], reason: &str) -> Rejected {
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
        self.tier.count_rejected(objects.len() as u64);
        let mut quarantined = Vec::new();
        for (kind, key, payload) in &objects {
            let name = self.tier.object_name(*kind, key);
            let shown = format!("{kind} {name}");
            let item = [(*key, payload.as_slice())];
            if self.tier.is_writer() && self.tier.retract(*kind, &item) == [Retracted::Deleted] {
                out.retracted.push(shown);
                continue;
            }
            // A reader, or a writer that found another object under the key: quarantine what is
            // there only while it is the object fetched.
            if let [Some(sum)] = self.tier.checksums_holding(*kind, &item)[..] {
                quarantined.push((name, quarantine::hex(&sum)));
                out.quarantined.push(shown);
            }
        }
        if !quarantined.is_empty() {
            let entry = |sum: &str| Quarantined { checksum: sum.to_owned(), reason: reason.to_owned() };
            for (name, sum) in &quarantined {
                self.quarantine.objects.insert(name.clone(), entry(sum));
            }
            // Best effort: a quarantine that cannot be written costs one more fetch next time.
            let _ = Quarantine::update(&self.cache_dir, |q| {
                for (name, sum) in &quarantined {
                    q.objects.insert(name.clone(), entry(sum));
                }
            });
        }
        out
    }

    /// Hands the checked `hits` (program index, payload) of one round trip to `store` at once and
    /// records what it took: the route of each program.
    fn take_all(
        &mut self,
        kind: Kind,
        keys: &[ObjectKey],
        hits: Vec<(usize, Vec<u8>)>,
        store: &mut StoreBatch<'_, Taken>,
    ) -> Vec<(usize, Route)> {
        if hits.is_empty() {
            return Vec::new();
        }
        let batch: Vec<(usize, &[u8])> = hits.iter().map(|(i, p)| (*i, p.as_slice())).collect();
        let taken = store(&batch);
        hits.into_iter()
            .zip(taken.into_iter().chain(std::iter::repeat(Taken::Failed)))
            .map(|((i, payload), taken)| (i, self.taken(i, kind, &keys[i], payload, taken)))
            .collect()
    }

    /// Records a payload downloaded for program `i` that the frontend took: its route.
    fn taken(&mut self, i: usize, kind: Kind, key: &ObjectKey, payload: Vec<u8>, taken: Taken) -> Route {
        let writer = self.tier.is_writer();
        match taken {
            Taken::Stored => {
                self.written_locally += payload.len() as u64;
                self.fetched.entry(i).or_default().push((kind, *key, payload));
                Route::Remote
            }
            Taken::Unusable => Route::Here { upload: writer },
            Taken::Failed => Route::Here { upload: false },
        }
    }

    /// Steps 1 and 2 for the objects of `kind` under `keys` (one per program, by index), of which
    /// the local tier holds those with `local_hit`: the route of each. The checked hits of each
    /// round trip are handed to `store` at once ([`StoreBatch`]) to store locally. An object this
    /// node quarantined, and still the same, is not fetched: made here.
    pub fn plan(
        &mut self,
        kind: Kind,
        keys: &[ObjectKey],
        local_hit: &[bool],
        store: &mut StoreBatch<'_, Taken>,
    ) -> Vec<Route> {
        let writer = self.tier.is_writer();
        let mut routes: Vec<Option<Route>> = local_hit.iter().map(|&hit| hit.then_some(Route::Local)).collect();
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| routes[i].is_none()).collect();
        let missing_keys: Vec<ObjectKey> = missing.iter().map(|&i| keys[i]).collect();
        for (&i, q) in missing.iter().zip(self.quarantined(kind, &missing_keys)) {
            if q {
                routes[i] = Some(Route::Here { upload: writer && self.tier.is_on() });
            }
        }
        // 1. One look-up of every local miss.
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| routes[i].is_none()).collect();
        let missing_keys: Vec<ObjectKey> = missing.iter().map(|&i| keys[i]).collect();
        let mut hits = Vec::new();
        for (&i, found) in missing.iter().zip(self.tier.look_up(kind, &missing_keys)) {
            match found {
                Lookup::Hit(payload) => hits.push((i, payload)),
                // A bad object under the key: make it here and, as a writer, replace it; no
                // claim, which would only find the same object again.
                Lookup::Rejected(_) => routes[i] = Some(Route::Here { upload: writer && self.tier.is_on() }),
                Lookup::Absent | Lookup::Off => {}
            }
        }
        for (i, route) in self.take_all(kind, keys, hits, store) {
            routes[i] = Some(route);
        }
        // 2. Claims for the rest.
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| routes[i].is_none()).collect();
        let missing_keys: Vec<ObjectKey> = missing.iter().map(|&i| keys[i]).collect();
        let mut present = Vec::new();
        for (&i, claim) in missing.iter().zip(self.tier.claim(kind, &missing_keys)) {
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
        let present_keys: Vec<ObjectKey> = present.iter().map(|&i| keys[i]).collect();
        let mut hits = Vec::new();
        for (&i, found) in present.iter().zip(self.tier.look_up(kind, &present_keys)) {
            match found {
                Lookup::Hit(payload) => hits.push((i, payload)),
                // A bad object under the key: make it here and, as a writer, replace it.
                _ => routes[i] = Some(Route::Here { upload: writer && self.tier.is_on() }),
            }
        }
        for (i, route) in self.take_all(kind, keys, hits, store) {
            routes[i] = Some(route);
        }
        // Every key was routed by one of the steps above; a tier that answered fewer replies than
        // keys leaves the rest to be made here.
        routes.into_iter().map(|r| r.unwrap_or(Route::Here { upload: false })).collect()
    }

    /// Step 4: waits on the other writers' leases of the programs `which` (indices into `keys`,
    /// the objects of `kind`); returns their new routes. The objects that arrive are handed to
    /// `store` at once, as in [`SharedSession::plan`].
    pub fn wait(
        &mut self,
        kind: Kind,
        keys: &[ObjectKey],
        which: &[usize],
        store: &mut StoreBatch<'_, Taken>,
    ) -> Vec<Route> {
        let writer = self.tier.is_writer();
        let waited_keys: Vec<ObjectKey> = which.iter().map(|&i| keys[i]).collect();
        let waited = self.tier.wait(kind, &waited_keys);
        let mut routes = vec![Route::Here { upload: false }; which.len()];
        let mut arrived = Vec::new();
        let position: BTreeMap<usize, usize> = which.iter().enumerate().map(|(at, &i)| (i, at)).collect();
        for ((&i, end), route) in which.iter().zip(waited).zip(&mut routes) {
            *route = match end {
                WaitEnd::Arrived(payload) => {
                    arrived.push((i, payload));
                    continue;
                }
                WaitEnd::TakenOver => Route::Lease,
                WaitEnd::Rejected(_) | WaitEnd::TimedOut => Route::Here { upload: writer && self.tier.is_on() },
                WaitEnd::Gone | WaitEnd::Off => Route::Here { upload: false },
            };
        }
        for (i, route) in self.take_all(kind, keys, arrived, store) {
            routes[position[&i]] = route;
        }
        routes
    }

    /// Downloads, in one round trip, the objects of `kind` of `wanted` (program index, key) that
    /// the frontend lacks, without leases (the CLI's kernel libraries, once their translation is
    /// local), and hands each checked one to `store` (program index, payload), which says whether
    /// it stored it. One this node quarantined is not fetched: the frontend builds it.
    pub fn fetch(&mut self, kind: Kind, wanted: &[(usize, ObjectKey)], store: &mut StoreBatch<'_, bool>) {
        let keys: Vec<ObjectKey> = wanted.iter().map(|(_, k)| *k).collect();
        let quarantined = self.quarantined(kind, &keys);
        let wanted: Vec<(usize, ObjectKey)> =
            wanted.iter().zip(quarantined).filter(|(_, q)| !q).map(|(w, _)| *w).collect();
        let keys: Vec<ObjectKey> = wanted.iter().map(|(_, k)| *k).collect();
        let hits: Vec<(usize, ObjectKey, Vec<u8>)> = wanted
            .iter()
            .zip(self.tier.look_up(kind, &keys))
            .filter_map(|((i, key), found)| match found {
                Lookup::Hit(payload) => Some((*i, *key, payload)),
                _ => None,
            })
            .collect();
        let batch: Vec<(usize, &[u8])> = hits.iter().map(|(i, _, p)| (*i, p.as_slice())).collect();
        let stored = store(&batch);
        for ((i, key, payload), stored) in hits.into_iter().zip(stored) {
            // One that cannot be stored is built by the frontend instead.
            if stored {
                self.written_locally += payload.len() as u64;
                self.fetched.entry(i).or_default().push((kind, key, payload));
            }
        }
    }

    /// Step 3: uploads what the programs `done` of `domain` made here and verified, built
    /// artifacts first, then translation entries (which releases their leases), and releases the
    /// leases of the programs that failed or whose entry cannot be read. Nothing of a
    /// [`Verified::Failed`] program travels (ADR 0030). A read-only client, or a tier that is
    /// off, uploads nothing.
    pub fn upload(&self, domain: Domain, done: &[Verified]) {
        if !self.tier.is_writer() || !self.tier.is_on() {
            return;
        }
        let mut artifacts: Vec<(ObjectKey, &[u8])> = Vec::new();
        let mut entries: Vec<(ObjectKey, &[u8])> = Vec::new();
        let mut failed: Vec<ObjectKey> = Vec::new();
        for v in done {
            match v {
                Verified::Failed { key, route } => {
                    if *route == Route::Lease {
                        failed.push(*key);
                    }
                }
                Verified::Passed { key, route, translation, artifact } => {
                    if let Some((artifact_key, bytes)) = artifact {
                        artifacts.push((*artifact_key, bytes));
                    }
                    if route.uploads() {
                        match translation {
                            Some(payload) => entries.push((*key, payload)),
                            None => failed.push(*key),
                        }
                    }
                }
            }
        }
        if !artifacts.is_empty() {
            self.tier.upload(domain.artifact, &artifacts);
        }
        if !entries.is_empty() {
            self.tier.upload(domain.translation, &entries);
        }
        if !failed.is_empty() {
            self.tier.release(domain.translation, &failed);
        }
    }
}

#[cfg(test)]
mod tests;
