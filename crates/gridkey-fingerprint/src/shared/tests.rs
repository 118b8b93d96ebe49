//! The protocol against a second implementation of [`SharedTier`]: an in-memory server shared by
//! several clients, with leases, checksums and a log of every batch, so that each test can
//! assert what travelled and in which order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::*;

#[derive(Default)]
struct Server {
    /// Objects by kind and key; `Err` is an object that fails the tier's checks.
    objects: BTreeMap<(Kind, ObjectKey), Result<Vec<u8>, String>>,
    /// Lease holders by kind and key.
    leases: BTreeMap<(Kind, ObjectKey), usize>,
    /// Every batch, `op kind n`.
    log: Vec<String>,
    rejected: u64,
}

#[derive(Clone)]
struct Client {
    server: Arc<Mutex<Server>>,
    id: usize,
    writer: bool,
    on: bool,
}

fn sum(payload: &[u8]) -> ObjectChecksum {
    xxhash_rust::xxh3::xxh3_128(payload).to_le_bytes()
}

impl Client {
    fn log(&self, op: &str, kind: Kind, n: usize) {
        self.server.lock().unwrap().log.push(format!("{op} {} {n}", kind.tag()));
    }
}

impl SharedTier for Client {
    fn is_writer(&self) -> bool {
        self.writer
    }

    fn is_on(&self) -> bool {
        self.on
    }

    fn object_name(&self, kind: Kind, key: &ObjectKey) -> String {
        format!("mem:{}:{}", kind.tag(), quarantine::hex(key))
    }

    fn look_up(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Lookup> {
        if !self.on {
            return vec![Lookup::Off; keys.len()];
        }
        self.log("get", kind, keys.len());
        let server = self.server.lock().unwrap();
        keys.iter()
            .map(|k| match server.objects.get(&(kind, *k)) {
                Some(Ok(p)) => Lookup::Hit(p.clone()),
                Some(Err(why)) => Lookup::Rejected(why.clone()),
                None => Lookup::Absent,
            })
            .collect()
    }

    fn claim(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Claim> {
        if !self.on {
            return vec![Claim::Off; keys.len()];
        }
        self.log("claim", kind, keys.len());
        let mut server = self.server.lock().unwrap();
        keys.iter()
            .map(|k| {
                if server.objects.contains_key(&(kind, *k)) {
                    return Claim::Present;
                }
                match server.leases.entry((kind, *k)) {
                    std::collections::btree_map::Entry::Occupied(_) => Claim::Held,
                    std::collections::btree_map::Entry::Vacant(lease) if self.writer => {
                        lease.insert(self.id);
                        Claim::Won
                    }
                    std::collections::btree_map::Entry::Vacant(_) => Claim::Free,
                }
            })
            .collect()
    }

    /// No clock: the object is there, the lease went away, or the wait cap passed.
    fn wait(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<WaitEnd> {
        if !self.on {
            return vec![WaitEnd::Off; keys.len()];
        }
        self.log("wait", kind, keys.len());
        let mut server = self.server.lock().unwrap();
        keys.iter()
            .map(|k| match server.objects.get(&(kind, *k)) {
                Some(Ok(p)) => WaitEnd::Arrived(p.clone()),
                Some(Err(why)) => WaitEnd::Rejected(why.clone()),
                None if server.leases.contains_key(&(kind, *k)) => WaitEnd::TimedOut,
                None if self.writer => {
                    server.leases.insert((kind, *k), self.id);
                    WaitEnd::TakenOver
                }
                None => WaitEnd::Gone,
            })
            .collect()
    }

    fn upload(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) {
        if !self.writer || !self.on {
            return;
        }
        self.log("put", kind, items.len());
        let mut server = self.server.lock().unwrap();
        for (k, p) in items {
            server.objects.insert((kind, *k), Ok(p.to_vec()));
            if server.leases.get(&(kind, *k)) == Some(&self.id) {
                server.leases.remove(&(kind, *k));
            }
        }
    }

    fn release(&self, kind: Kind, keys: &[ObjectKey]) {
        self.log("release", kind, keys.len());
        let mut server = self.server.lock().unwrap();
        for k in keys {
            if server.leases.get(&(kind, *k)) == Some(&self.id) {
                server.leases.remove(&(kind, *k));
            }
        }
    }

    fn retract(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Retracted> {
        if !self.writer {
            return vec![Retracted::ReadOnly; items.len()];
        }
        self.log("retract", kind, items.len());
        let mut server = self.server.lock().unwrap();
        items
            .iter()
            .map(|(k, p)| match server.objects.get(&(kind, *k)) {
                Some(Ok(held)) if held == p => {
                    server.objects.remove(&(kind, *k));
                    Retracted::Deleted
                }
                _ => Retracted::NotThere,
            })
            .collect()
    }

    fn checksums(&self, kind: Kind, keys: &[ObjectKey]) -> Option<Vec<Option<ObjectChecksum>>> {
        if !self.on {
            return None;
        }
        self.log("sums", kind, keys.len());
        let server = self.server.lock().unwrap();
        Some(
            keys.iter()
                .map(|k| server.objects.get(&(kind, *k)).and_then(|o| o.as_ref().ok()).map(|p| sum(p)))
                .collect(),
        )
    }

    fn checksums_holding(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Option<ObjectChecksum>> {
        let server = self.server.lock().unwrap();
        items
            .iter()
            .map(|(k, p)| match server.objects.get(&(kind, *k)) {
                Some(Ok(held)) if held == p => Some(sum(held)),
                _ => None,
            })
            .collect()
    }

    fn count_rejected(&self, n: u64) {
        self.server.lock().unwrap().rejected += n;
    }
}

/// A node: its client, its cache directory (the quarantine) and its local tier.
struct Node {
    session: SharedSession<Client>,
    local: BTreeMap<(Kind, ObjectKey), Vec<u8>>,
    _dir: tempfile::TempDir,
}

fn node(server: &Arc<Mutex<Server>>, id: usize, writer: bool) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let client = Client { server: server.clone(), id, writer, on: true };
    Node { session: SharedSession::new(client, dir.path()), local: BTreeMap::new(), _dir: dir }
}

const KEYS: [ObjectKey; 3] = [[1; 16], [2; 16], [3; 16]];

fn source(key: &ObjectKey) -> Vec<u8> {
    format!("int kernel_{}(void);", key[0]).into_bytes()
}

fn library(key: &ObjectKey) -> (ObjectKey, Vec<u8>) {
    let mut k = *key;
    k[15] = 0xAA;
    (k, format!("ELF {}", key[0]).into_bytes())
}

impl Node {
    /// The routes of [`KEYS`] in `domain`, every program a local miss, storing what arrives.
    fn plan(&mut self, kind: Kind) -> Vec<Route> {
        let local = &mut self.local;
        let mut store = each(|i: usize, p: &[u8]| {
            local.insert((kind, KEYS[i]), p.to_vec());
            Taken::Stored
        });
        self.session.plan(kind, &KEYS, &[false; 3], &mut store)
    }

    fn wait(&mut self, kind: Kind, which: &[usize]) -> Vec<Route> {
        let local = &mut self.local;
        let mut store = each(|i: usize, p: &[u8]| {
            local.insert((kind, KEYS[i]), p.to_vec());
            Taken::Stored
        });
        self.session.wait(kind, &KEYS, which, &mut store)
    }

    /// Every program of `routes` translated and built here and verified.
    fn upload_all(&self, domain: Domain, routes: &[Route]) {
        let done: Vec<Verified> = KEYS
            .iter()
            .zip(routes)
            .map(|(k, &route)| Verified::Passed {
                key: *k,
                route,
                translation: Some(source(k)),
                artifact: Some(library(k)),
            })
            .collect();
        self.session.upload(domain, &done);
    }
}

fn log(server: &Arc<Mutex<Server>>) -> Vec<String> {
    std::mem::take(&mut server.lock().unwrap().log)
}

#[test]
fn two_writers_make_each_key_once_and_the_second_takes_it_from_the_first() {
    let server = Arc::new(Mutex::new(Server::default()));
    let (mut a, mut b) = (node(&server, 1, true), node(&server, 2, true));
    let cli = Domain::CLI;
    assert_eq!(a.plan(cli.translation), vec![Route::Lease; 3]);
    assert_eq!(b.plan(cli.translation), vec![Route::Wait; 3]);
    log(&server);
    a.upload_all(cli, &[Route::Lease; 3]);
    // Artifacts first, so that a reader that finds an entry finds its artifact too; the entries
    // release the leases.
    assert_eq!(log(&server), ["put kl 3", "put te 3"]);
    assert!(server.lock().unwrap().leases.is_empty());
    assert_eq!(b.wait(cli.translation, &[0, 1, 2]), vec![Route::Remote; 3]);
    for k in &KEYS {
        assert_eq!(b.local[&(Kind::TranslationEntry, *k)], source(k));
    }
    let total: usize = KEYS.iter().map(|k| source(k).len()).sum();
    assert_eq!(b.session.written_locally(), total as u64);
    assert!(b.session.fetched(0, Kind::TranslationEntry));
    // The artifact travels without a lease once the entry is local.
    let wanted: Vec<(usize, ObjectKey)> = KEYS.iter().enumerate().map(|(i, k)| (i, library(k).0)).collect();
    let mut got = Vec::new();
    b.session.fetch(
        cli.artifact,
        &wanted,
        &mut each(|i, p| {
            got.push((i, p.to_vec()));
            true
        }),
    );
    assert_eq!(got, KEYS.iter().enumerate().map(|(i, k)| (i, library(k).1)).collect::<Vec<_>>());
    assert!(b.session.fetched(2, Kind::KernelLibrary));
}

#[test]
fn a_reader_makes_what_is_missing_here_and_uploads_nothing() {
    let server = Arc::new(Mutex::new(Server::default()));
    let mut r = node(&server, 1, false);
    let routes = r.plan(Kind::TranslationEntry);
    assert_eq!(routes, vec![Route::Here { upload: false }; 3]);
    log(&server);
    r.upload_all(Domain::CLI, &routes);
    assert_eq!(log(&server), Vec::<String>::new());
    assert!(server.lock().unwrap().objects.is_empty());
}

#[test]
fn a_failed_program_travels_not_and_frees_its_lease() {
    let server = Arc::new(Mutex::new(Server::default()));
    let (mut a, mut b) = (node(&server, 1, true), node(&server, 2, true));
    let routes = a.plan(Kind::TranslationEntry);
    let done = vec![
        Verified::Failed { key: KEYS[0], route: routes[0] },
        // Verified, but its entry cannot be read back: its lease is released too.
        Verified::Passed { key: KEYS[1], route: routes[1], translation: None, artifact: None },
        Verified::Passed {
            key: KEYS[2],
            route: routes[2],
            translation: Some(source(&KEYS[2])),
            artifact: Some(library(&KEYS[2])),
        },
    ];
    a.session.upload(Domain::CLI, &done);
    let held = server.lock().unwrap().objects.keys().cloned().collect::<Vec<_>>();
    assert_eq!(held, vec![(Kind::TranslationEntry, KEYS[2]), (Kind::KernelLibrary, library(&KEYS[2]).0)]);
    assert!(server.lock().unwrap().leases.is_empty());
    assert_eq!(b.plan(Kind::TranslationEntry), vec![Route::Lease, Route::Lease, Route::Remote]);
}

#[test]
fn a_frontends_objects_are_never_another_frontends() {
    let server = Arc::new(Mutex::new(Server::default()));
    let (mut gt, mut cli) = (node(&server, 1, true), node(&server, 2, true));
    let routes = gt.plan(Domain::GT4PY.translation);
    gt.upload_all(Domain::GT4PY, &routes);
    let kinds: Vec<Kind> = server.lock().unwrap().objects.keys().map(|(k, _)| *k).collect();
    assert_eq!(kinds, [[Kind::Gt4pyTranslation; 3], [Kind::Gt4pyExtension; 3]].concat());
    // The CLI's look-up of the same keys finds nothing: it translates them itself.
    assert_eq!(cli.plan(Domain::CLI.translation), vec![Route::Lease; 3]);
    assert!(cli.local.is_empty());
    // And a fresh GT4Py node finds them all.
    let mut fresh = node(&server, 3, false);
    assert_eq!(fresh.plan(Domain::GT4PY.translation), vec![Route::Remote; 3]);
}

#[test]
fn what_the_frontend_cannot_use_or_store_is_made_here() {
    let server = Arc::new(Mutex::new(Server::default()));
    let mut a = node(&server, 1, true);
    let routes = a.plan(Kind::TranslationEntry);
    a.upload_all(Domain::CLI, &routes);
    let mut b = node(&server, 2, true);
    let answers = [Taken::Unusable, Taken::Failed, Taken::Stored];
    let routes = b.session.plan(Kind::TranslationEntry, &KEYS, &[false; 3], &mut each(|i, _| answers[i]));
    assert_eq!(routes, vec![Route::Here { upload: true }, Route::Here { upload: false }, Route::Remote]);
    assert!(!b.session.fetched(0, Kind::TranslationEntry));
    assert!(b.session.fetched(2, Kind::TranslationEntry));
    // A bad object under a key is replaced by a writer, without a claim.
    server.lock().unwrap().objects.insert((Kind::TranslationEntry, KEYS[0]), Err("checksum mismatch".into()));
    let mut c = node(&server, 3, true);
    assert_eq!(c.plan(Kind::TranslationEntry)[0], Route::Here { upload: true });
}

#[test]
fn local_hits_and_an_off_tier_ask_nothing() {
    let server = Arc::new(Mutex::new(Server::default()));
    let mut a = node(&server, 1, true);
    let routes = a.session.plan(Kind::TranslationEntry, &KEYS, &[true; 3], &mut each(|_, _| Taken::Stored));
    assert_eq!(routes, vec![Route::Local; 3]);
    assert_eq!(log(&server), ["get te 0", "claim te 0", "get te 0"]);
    let dir = tempfile::tempdir().unwrap();
    let off = Client { server: server.clone(), id: 2, writer: true, on: false };
    let mut session = SharedSession::new(off, dir.path());
    let routes = session.plan(Kind::TranslationEntry, &KEYS, &[false; 3], &mut each(|_, _| Taken::Stored));
    assert_eq!(routes, vec![Route::Here { upload: false }; 3]);
    assert!(log(&server).is_empty());
}

#[test]
fn a_writer_retracts_what_failed_here_and_a_reader_quarantines_it_until_it_changes() {
    let server = Arc::new(Mutex::new(Server::default()));
    let mut a = node(&server, 1, true);
    let routes = a.plan(Kind::TranslationEntry);
    a.upload_all(Domain::CLI, &routes);

    // A reader fetches key 0, and it fails its check here: quarantined, not retracted.
    let mut r = node(&server, 2, false);
    assert_eq!(r.plan(Kind::TranslationEntry), vec![Route::Remote; 3]);
    let rejected = r.session.reject(0, &[Kind::TranslationEntry], "kernel differs from the reference");
    assert_eq!(rejected.retracted, Vec::<String>::new());
    assert_eq!(rejected.quarantined, [format!("translation entry mem:te:{}", quarantine::hex(&KEYS[0]))]);
    assert!(rejected.describe().starts_with("quarantined on this node"));
    assert!(server.lock().unwrap().objects.contains_key(&(Kind::TranslationEntry, KEYS[0])));
    assert_eq!(server.lock().unwrap().rejected, 1);
    // Rejected once: nothing is left to reject.
    assert!(r.session.reject(0, &[Kind::TranslationEntry], "again").is_empty());

    // The same node, later: the quarantined object is not fetched, the others are.
    let mut again = Node {
        session: SharedSession::new(r.session.tier().clone(), r._dir.path()),
        local: BTreeMap::new(),
        _dir: r._dir,
    };
    log(&server);
    assert_eq!(again.plan(Kind::TranslationEntry), vec![Route::Here { upload: false }, Route::Remote, Route::Remote]);
    assert_eq!(log(&server), ["sums te 1", "get te 2", "claim te 0", "get te 0"]);
    assert!(!again.local.contains_key(&(Kind::TranslationEntry, KEYS[0])));

    // A writer replaces the object: the quarantine ends, and the new object is fetched.
    server.lock().unwrap().objects.insert((Kind::TranslationEntry, KEYS[0]), Ok(b"int fixed;".to_vec()));
    let mut third = Node {
        session: SharedSession::new(again.session.tier().clone(), again._dir.path()),
        local: BTreeMap::new(),
        _dir: again._dir,
    };
    assert_eq!(third.plan(Kind::TranslationEntry), vec![Route::Remote; 3]);
    assert_eq!(third.local[&(Kind::TranslationEntry, KEYS[0])], b"int fixed;");
    assert!(Quarantine::load(third._dir.path()).objects.is_empty());

    // A writer that fetched it retracts it instead: the object is gone from the server.
    let mut w = node(&server, 4, true);
    assert_eq!(w.plan(Kind::TranslationEntry), vec![Route::Remote; 3]);
    let rejected = w.session.reject(1, &[Kind::TranslationEntry, Kind::KernelLibrary], "kernel differs");
    assert_eq!(rejected.retracted.len(), 1);
    assert!(rejected.quarantined.is_empty());
    assert!(!server.lock().unwrap().objects.contains_key(&(Kind::TranslationEntry, KEYS[1])));
}

#[test]
fn a_quarantined_artifact_is_not_fetched() {
    let server = Arc::new(Mutex::new(Server::default()));
    let mut a = node(&server, 1, true);
    let routes = a.plan(Kind::Gt4pyTranslation);
    a.upload_all(Domain::GT4PY, &routes);
    let mut r = node(&server, 2, false);
    let (key, bytes) = library(&KEYS[0]);
    let mut stored = 0;
    r.session.fetch(
        Kind::Gt4pyExtension,
        &[(0, key)],
        &mut each(|_, p| {
            assert_eq!(p, bytes);
            stored += 1;
            true
        }),
    );
    assert_eq!(stored, 1);
    assert_eq!(r.session.reject(0, &[Kind::Gt4pyExtension], "the module does not load").quarantined.len(), 1);
    r.session.fetch(
        Kind::Gt4pyExtension,
        &[(0, key)],
        &mut each(|_, _| -> bool { panic!("a quarantined object was fetched") }),
    );
    // A confirmed fetch is forgotten: nothing is left to reject.
    r.session.fetch(Kind::Gt4pyExtension, &[(1, library(&KEYS[1]).0)], &mut each(|_, _| true));
    r.session.confirm(1);
    assert!(r.session.reject(1, &[Kind::Gt4pyExtension], "late").is_empty());
}

#[test]
fn a_dead_holder_is_taken_over_and_a_reader_gives_up_on_it() {
    let server = Arc::new(Mutex::new(Server::default()));
    let mut a = node(&server, 1, true);
    a.plan(Kind::TranslationEntry);
    let mut b = node(&server, 2, true);
    let mut r = node(&server, 3, false);
    assert_eq!(b.plan(Kind::TranslationEntry), vec![Route::Wait; 3]);
    assert_eq!(r.plan(Kind::TranslationEntry), vec![Route::Wait; 3]);
    // Still held: past the wait cap, a writer makes it and uploads it.
    assert_eq!(b.wait(Kind::TranslationEntry, &[0]), vec![Route::Here { upload: true }]);
    // The holder died: its leases expire.
    server.lock().unwrap().leases.clear();
    assert_eq!(b.wait(Kind::TranslationEntry, &[1]), vec![Route::Lease]);
    assert_eq!(r.wait(Kind::TranslationEntry, &[2]), vec![Route::Here { upload: false }]);
}

#[test]
fn kinds_have_distinct_codes_and_tags() {
    for (i, a) in Kind::ALL.iter().enumerate() {
        assert_eq!(Kind::from_code(a.code()), Some(*a));
        for b in &Kind::ALL[i + 1..] {
            assert_ne!(a.tag(), b.tag());
            assert_ne!(a.code(), b.code());
        }
    }
    assert_eq!(Kind::from_code(0), None);
    assert_eq!(Kind::from_code(5), None);
}
