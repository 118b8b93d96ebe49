//! The cache protocol over tiers: lookup order, write-back, read-only tiers, hit verification,
//! the frontend's payload check and the key-input record (ADR 0013).

use std::collections::BTreeMap;
use std::sync::Mutex;

use gridkey_fingerprint::{
    translate_cached, CacheProtocolError, Cached, FingerprintError, Frontend, KeyInputs, Miss, Request, SiteCache,
    Tier, Tiers, TranslationCache, TranslationKey,
};
use gridkey_offsets::CompileTimeOffsetProvider;

/// A tier in memory, for the order and write-back rules; the local tier is the real directory.
struct Memory {
    name: &'static str,
    writable: bool,
    /// Stands for a shared remote ([`Tier::shared`]).
    shared: bool,
    entries: Mutex<BTreeMap<TranslationKey, Vec<u8>>>,
}

impl Memory {
    fn new(name: &'static str, writable: bool) -> Box<Self> {
        Box::new(Self { name, writable, shared: false, entries: Mutex::default() })
    }

    fn shared(name: &'static str) -> Box<Self> {
        Box::new(Self { name, writable: true, shared: true, entries: Mutex::default() })
    }
}

impl Tier for Memory {
    fn name(&self) -> &str {
        self.name
    }
    fn get(&self, key: &TranslationKey) -> Result<Vec<u8>, Miss> {
        self.entries.lock().unwrap().get(key).cloned().ok_or(Miss::Absent)
    }
    fn put(&self, inputs: &KeyInputs, payload: &[u8]) -> Result<(), FingerprintError> {
        assert!(self.writable, "{} is read-only and must not be written", self.name);
        self.entries.lock().unwrap().insert(inputs.key(), payload.to_vec());
        Ok(())
    }
    fn writable(&self) -> bool {
        self.writable
    }
    fn shared(&self) -> bool {
        self.shared
    }
}

#[derive(Debug, thiserror::Error)]
#[error("translation failed")]
struct Failed;

fn inputs(program: &str) -> KeyInputs {
    let frontend = Frontend { name: "test".into(), version: "1".into(), fingerprint: "f".repeat(32) };
    KeyInputs::new(&frontend, program, b"encoding", &BTreeMap::new(), &CompileTimeOffsetProvider::new())
}

/// The single place that runs the protocol: `translations` counts calls of the translate
/// function, which returns `fresh`.
fn check(
    tiers: &Tiers,
    inputs: &KeyInputs,
    verify: bool,
    fresh: &[u8],
) -> (Result<Cached, CacheProtocolError<Failed>>, usize) {
    let mut translations = 0;
    let accept = |p: &[u8]| if p.starts_with(b"bad") { Err("rejected by the frontend".to_owned()) } else { Ok(()) };
    let request = Request { inputs, verify_hits: verify, accept: &accept };
    let result = translate_cached(tiers, &request, || {
        translations += 1;
        Ok::<_, Failed>(fresh.to_vec())
    });
    (result, translations)
}

#[test]
fn a_miss_translates_once_and_every_writable_tier_gets_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut tiers = Tiers::local(dir.path()).unwrap();
    tiers.push(Memory::new("shared", true));
    tiers.push(Memory::new("site", false));
    let p = inputs("div");
    let (r, n) = check(&tiers, &p, false, b"source");
    let cached = r.unwrap();
    assert_eq!((n, cached.translated(), cached.payload.as_slice()), (1, true, &b"source"[..]));
    assert!(cached.miss_reason.unwrap().contains("local: no translation entry"));
    let local = TranslationCache::open(dir.path()).unwrap();
    assert_eq!(local.get(&p.key()).unwrap(), b"source");
    assert_eq!(local.record(&p.key()), Some(p.clone()));
    let (again, n) = check(&tiers, &p, false, b"never");
    assert_eq!((n, again.unwrap().hit.as_deref()), (0, Some("local")));
}

#[test]
fn a_hit_in_a_later_tier_is_written_back_to_the_earlier_writable_ones_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = inputs("grad");
    let site = Memory::new("site", false);
    site.entries.lock().unwrap().insert(p.key(), b"from the site".to_vec());
    let mut tiers = Tiers::local(dir.path()).unwrap();
    tiers.push(site);
    let (r, n) = check(&tiers, &p, false, b"fresh");
    let cached = r.unwrap();
    assert_eq!((n, cached.hit.as_deref(), cached.payload.as_slice()), (0, Some("site"), &b"from the site"[..]));
    assert_eq!(TranslationCache::open(dir.path()).unwrap().get(&p.key()).unwrap(), b"from the site");
}

#[test]
fn a_payload_the_frontend_rejects_is_a_miss_and_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let p = inputs("rot");
    let tiers = Tiers::local(dir.path()).unwrap();
    TranslationCache::open(dir.path()).unwrap().put(&p, b"bad bytes").unwrap();
    let (r, n) = check(&tiers, &p, false, b"good");
    let cached = r.unwrap();
    assert_eq!(n, 1);
    assert!(cached.miss_reason.unwrap().contains("rejected by the frontend"));
    assert_eq!(TranslationCache::open(dir.path()).unwrap().get(&p.key()).unwrap(), b"good");
}

#[test]
fn verify_hits_translates_again_and_names_the_first_difference() {
    let dir = tempfile::tempdir().unwrap();
    let p = inputs("lap");
    let tiers = Tiers::local(dir.path()).unwrap();
    TranslationCache::open(dir.path()).unwrap().put(&p, b"abcXef").unwrap();
    let (same, n) = check(&tiers, &p, true, b"abcXef");
    assert_eq!((n, same.unwrap().hit.as_deref()), (1, Some("local")));
    match check(&tiers, &p, true, b"abcdef").0 {
        Err(CacheProtocolError::VerifyMismatch { key, tier, first_difference }) => {
            assert_eq!((key, tier.as_str(), first_difference), (p.key(), "local", 3));
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

#[test]
fn a_hit_rewrites_a_deleted_key_input_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = inputs("avg");
    let local = TranslationCache::open(dir.path()).unwrap();
    local.put(&p, b"c source").unwrap();
    std::fs::remove_file(local.record_path(&p.key())).unwrap();
    assert_eq!(local.record(&p.key()), None);
    let (r, n) = check(&Tiers::local(dir.path()).unwrap(), &p, false, b"unused");
    assert_eq!((n, r.unwrap().translated()), (0, false));
    assert_eq!(local.record(&p.key()), Some(p));
}

#[test]
fn a_translation_failure_is_the_frontends_error_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = inputs("div");
    let tiers = Tiers::local(dir.path()).unwrap();
    let accept = |_: &[u8]| Ok(());
    let request = Request { inputs: &p, verify_hits: false, accept: &accept };
    let r = translate_cached(&tiers, &request, || Err::<Vec<u8>, _>(Failed));
    assert!(matches!(r, Err(CacheProtocolError::Translate(Failed))));
    assert!(!tiers.contains(&p.key()));
}

/// Every file under `dir` with its bytes.
fn files(dir: &std::path::Path) -> BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().unwrap().is_dir() {
            out.extend(files(&entry.path()));
        } else {
            out.insert(entry.path(), std::fs::read(entry.path()).unwrap());
        }
    }
    out
}

#[test]
fn a_site_tier_serves_in_place_and_is_never_written() {
    // A site cache filled by someone else: one good entry, one damaged (ADR 0036).
    let site = tempfile::tempdir().unwrap();
    let (hit, damaged, absent) = (inputs("div"), inputs("grad"), inputs("lap"));
    let filler = TranslationCache::open(site.path()).unwrap();
    filler.put(&hit, b"site source").unwrap();
    filler.put(&damaged, b"site source of grad").unwrap();
    let entry = filler.entry_path(&damaged.key());
    let mut bytes = std::fs::read(&entry).unwrap();
    let last = bytes.len() - 9;
    bytes[last] ^= 1;
    std::fs::remove_file(&entry).unwrap();
    std::fs::write(&entry, &bytes).unwrap();
    let before = files(site.path());

    let local = tempfile::tempdir().unwrap();
    let mut tiers = Tiers::local(local.path()).unwrap();
    tiers.push(Box::new(SiteCache::open(site.path())));
    assert_eq!(format!("{tiers:?}"), r#"["local", "site"]"#);

    let (r, n) = check(&tiers, &hit, false, b"fresh");
    let cached = r.unwrap();
    assert_eq!((n, cached.hit.as_deref(), cached.payload.as_slice()), (0, Some("site"), &b"site source"[..]));
    // Served in place: the local tier holds only what is new.
    assert!(TranslationCache::open(local.path()).unwrap().get(&hit.key()).is_err());

    for (p, why) in [(&damaged, "site: unusable translation entry"), (&absent, "site: no translation entry")] {
        let (r, n) = check(&tiers, p, false, b"fresh");
        let cached = r.unwrap();
        assert_eq!((n, cached.translated()), (1, true), "{why}");
        assert!(cached.miss_reason.as_deref().unwrap_or_default().contains(why), "{:?}", cached.miss_reason);
        assert_eq!(TranslationCache::open(local.path()).unwrap().get(&p.key()).unwrap(), b"fresh");
    }
    assert_eq!(files(site.path()), before, "nothing written to the site cache");

    // A site cache without a translation directory is a cache in which every key misses.
    let empty = tempfile::tempdir().unwrap();
    let tiers = Tiers::new(vec![Box::new(SiteCache::open(&empty.path().join("none")))]);
    assert_eq!(check(&tiers, &hit, false, b"fresh").1, 1);
    assert!(!empty.path().join("none").exists(), "opening a site cache creates nothing");
}

#[test]
fn only_read_only_tiers_translate_without_storing() {
    let p = inputs("div");
    let tiers = Tiers::new(vec![Memory::new("site", false)]);
    let (r, n) = check(&tiers, &p, false, b"fresh");
    assert_eq!((n, r.unwrap().translated()), (1, true));
    assert!(!tiers.contains(&p.key()));
}

#[test]
fn a_miss_waits_for_the_key_lock_and_hits_what_its_holder_put() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let translations = AtomicUsize::new(0);
    let inputs = inputs("p");
    let accept = |_: &[u8]| Ok(());
    let run = |delay: Duration| {
        std::thread::sleep(delay);
        let tiers = Tiers::local(dir.path()).unwrap();
        let request = Request { inputs: &inputs, verify_hits: false, accept: &accept };
        translate_cached(&tiers, &request, || {
            translations.fetch_add(1, Ordering::SeqCst);
            // Long enough for the other thread to miss and wait for the key's lock.
            std::thread::sleep(Duration::from_millis(400));
            Ok::<_, Failed>(b"source".to_vec())
        })
        .unwrap()
    };
    let (first, second) = std::thread::scope(|s| {
        let first = s.spawn(|| run(Duration::ZERO));
        let second = s.spawn(|| run(Duration::from_millis(100)));
        (first.join().unwrap(), second.join().unwrap())
    });
    assert_eq!(translations.load(Ordering::SeqCst), 1, "one translation for both");
    assert!(first.translated() && !first.waited);
    assert_eq!((second.hit.as_deref(), second.waited), (Some("local"), true), "{second:?}");
    assert_eq!(second.payload, b"source");
    let locks = dir.path().join(gridkey_fs::lock::LOCKS_DIR);
    assert_eq!(std::fs::read_dir(&locks).unwrap().count(), 0, "no lock file left");
}

/// A tier that reaches other nodes (ADR 0030).
struct Remote(std::sync::Arc<Memory>);

impl Tier for Remote {
    fn name(&self) -> &str {
        self.0.name
    }
    fn get(&self, key: &TranslationKey) -> Result<Vec<u8>, Miss> {
        self.0.get(key)
    }
    fn put(&self, inputs: &KeyInputs, payload: &[u8]) -> Result<(), FingerprintError> {
        self.0.put(inputs, payload)
    }
    fn shared(&self) -> bool {
        true
    }
}

#[test]
fn a_shared_tier_gets_a_translation_only_once_the_frontend_accepted_it() {
    let dir = tempfile::tempdir().unwrap();
    let remote = std::sync::Arc::new(*Memory::shared("remote"));
    let mut tiers = Tiers::local(dir.path()).unwrap();
    tiers.push(Box::new(Remote(remote.clone())));
    let p = inputs("div");
    let (r, n) = check(&tiers, &p, false, b"source");
    let cached = r.unwrap();
    assert_eq!((n, cached.translated()), (1, true));
    // The local tier has it at once; the shared one not before the frontend's check passed.
    assert_eq!(TranslationCache::open(dir.path()).unwrap().get(&p.key()).unwrap(), b"source");
    assert!(remote.get(&p.key()).is_err(), "a translation not yet accepted travelled");
    // Accepted (the frontend's check passed): now it travels.
    assert_eq!(tiers.accept(&p, &cached), Vec::<String>::new());
    assert_eq!(remote.get(&p.key()).unwrap(), b"source");

    // A hit from the shared tier is written back locally, and not put into the shared tier again.
    let fresh = tempfile::tempdir().unwrap();
    let mut reader = Tiers::local(fresh.path()).unwrap();
    reader.push(Box::new(Remote(remote.clone())));
    let (r, n) = check(&reader, &p, false, b"other");
    let hit = r.unwrap();
    assert_eq!((n, hit.hit.as_deref(), hit.payload.as_slice()), (0, Some("remote"), &b"source"[..]));
    assert_eq!(TranslationCache::open(fresh.path()).unwrap().get(&p.key()).unwrap(), b"source");
}
