//! Only verified artifacts travel, and what fails its check after it came from the shared tier
//! is retracted (a writer) or quarantined (a reader), ADR 0030; `gridkey cache retract`. Against
//! a real Redis server: without `GRIDKEY_TEST_REDIS_URL` each test says that it skipped and how
//! to run it.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{data, gridkey_command};
use serde_json::Value;

const URL_VAR: &str = "GRIDKEY_TEST_REDIS_URL";

fn shared_url(test: &str) -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let required = std::env::var("GRIDKEY_TEST_REQUIRE").is_ok_and(|r| r.split(',').any(|s| s == "redis"));
            assert!(!required, "a Redis server is required (GRIDKEY_TEST_REQUIRE) but {URL_VAR} is unset");
            let _ = writeln!(
                std::io::stderr(),
                "gridkey: skipped {test}: no test Redis server ({URL_VAR} unset); run \
                 `cargo xtask test` or `cargo xtask with-redis -- cargo test -p gridkey --test all verified_travel::`"
            );
            None
        }
    }
}

fn namespace(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("gktest-{test}-{}-{nanos}", std::process::id())
}

fn grid() -> PathBuf {
    data("grids/oQU480.231010.nc")
}

/// One node: its cache directory and the variables of its runs.
struct Node {
    cache: tempfile::TempDir,
    env: Vec<(String, String)>,
    writer: bool,
}

impl Node {
    fn new(url: &str, ns: &str, cc: &Path, writer: bool, trust: &[(&str, &Path)]) -> Self {
        let mut env = vec![
            ("GRIDKEY_REMOTE_URL".to_owned(), url.to_owned()),
            ("GRIDKEY_REMOTE_NAMESPACE".to_owned(), ns.to_owned()),
            ("GRIDKEY_REMOTE_TIMEOUT".to_owned(), "2".to_owned()),
            ("CC".to_owned(), cc.display().to_string()),
        ];
        env.extend(trust.iter().map(|(k, v)| (k.to_string(), v.display().to_string())));
        // A node given no trusted keys takes the planted, unsigned objects only when it trusts
        // the Redis ACL (ADR 0031), as these tests' readers must.
        if !trust.iter().any(|(k, _)| *k == "GRIDKEY_REMOTE_TRUSTED_KEYS") {
            env.push(("GRIDKEY_REMOTE_TRUST".to_owned(), "acl".to_owned()));
        }
        Node { cache: tempfile::tempdir().unwrap(), env, writer }
    }

    fn command(&self, args: &[&str]) -> Output {
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut args = args.to_vec();
        args.extend(["--cache-dir", self.cache.path().to_str().unwrap()]);
        if self.writer {
            args.push("--remote-writer");
        }
        gridkey_command(&args, &env).output().unwrap()
    }

    /// `gridkey run --json` in serial mode.
    fn run(&self) -> Value {
        run_warned(self).0
    }
}

fn programs(report: &Value) -> &Vec<Value> {
    report["programs"].as_array().unwrap()
}

fn verified(report: &Value) -> usize {
    programs(report).iter().filter(|p| p["verified"] == true).count()
}

fn program<'a>(report: &'a Value, name: &str) -> &'a Value {
    programs(report).iter().find(|p| p["program"] == name).unwrap()
}

fn remote_stat(report: &Value, field: &str) -> u64 {
    report["tiers"].as_array().unwrap().iter().find(|t| t["tier"] == "remote").unwrap()[field].as_u64().unwrap()
}

fn remote_hits(report: &Value) -> Vec<String> {
    programs(report)
        .iter()
        .filter(|p| p["tier"] == "remote")
        .map(|p| p["program"].as_str().unwrap().to_owned())
        .collect()
}

fn error(p: &Value) -> &str {
    p["error"].as_str().unwrap_or_default()
}

/// A compiler script (`gcc` behind it) that miscompiles the first kernel it builds while the
/// file `mark` exists, then removes it: the first accumulation `acc += ` becomes `acc -= `, a
/// kernel that loads and runs and computes wrong numbers (as `cargo xtask chaos`'s wrong
/// compiler). The script's text does not change, so its compiler identity is the same before
/// and after the fault.
fn flaky_compiler(dir: &Path, mark: &Path) -> PathBuf {
    let path = dir.join("cc-flaky");
    let body = format!(
        "#!/bin/sh\nif [ -f '{m}' ] && [ -f kernel.c ] && grep -q 'acc += ' kernel.c; then\n  rm -f '{m}'\n  sed -i '0,/acc += /s//acc -= /' kernel.c\nfi\nexec gcc \"$@\"\n",
        m = mark.display()
    );
    std::fs::write(&path, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A writer's signing key and a readers' trusted-keys file naming it (`gridkey cache keygen`).
fn keys(dir: &Path) -> (PathBuf, PathBuf) {
    let signing = dir.join("writer.key");
    let out = gridkey_command(&["cache", "keygen", signing.to_str().unwrap()], &[]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trusted = dir.join("trusted");
    std::fs::write(&trusted, &out.stdout).unwrap();
    (signing, trusted)
}

#[test]
fn a_writer_whose_compiler_miscompiles_once_uploads_nothing_of_that_program() {
    let Some(url) = shared_url("a_writer_whose_compiler_miscompiles_once_uploads_nothing_of_that_program") else {
        return;
    };
    let ns = namespace("miscompile");
    let tools = tempfile::tempdir().unwrap();
    let mark = tools.path().join("miscompile-once");
    let cc = flaky_compiler(tools.path(), &mark);
    let (signing, trusted) = keys(tools.path());
    let writer = Node::new(&url, &ns, &cc, true, &[("GRIDKEY_REMOTE_SIGNING_KEY", &signing)]);
    let reader = |trusted: &Path| Node::new(&url, &ns, &cc, false, &[("GRIDKEY_REMOTE_TRUSTED_KEYS", trusted)]);

    std::fs::write(&mark, b"").unwrap();
    let first = writer.run();
    assert!(!mark.exists(), "the compiler miscompiled one kernel");
    let n = programs(&first).len();
    assert_eq!(verified(&first), n - 1, "{first:#}");
    let lost = programs(&first).iter().find(|p| p["verified"] == false).unwrap();
    let lost_name = lost["program"].as_str().unwrap().to_owned();
    assert!(error(lost).contains("exceeds"), "{}", error(lost));
    // Only the verified programs travelled: a library and an entry each.
    assert_eq!(remote_stat(&first, "uploads"), 2 * (n as u64 - 1), "{first:#}");

    // A reader fetches the others, translates the lost one itself: every kernel verifies.
    let a = reader(&trusted);
    let seen = a.run();
    assert_eq!(verified(&seen), n, "{seen:#}");
    assert_eq!(remote_hits(&seen).len(), n - 1);
    assert!(!remote_hits(&seen).contains(&lost_name));

    // The fault is gone: the writer's next run translates the program again and shares it, and
    // every later run on every node verifies every kernel, the lost one from the shared tier.
    let again = writer.run();
    assert_eq!(verified(&again), n, "{again:#}");
    assert_eq!(program(&again, &lost_name)["translated"], true);
    for node in [reader(&trusted), reader(&trusted)] {
        let report = node.run();
        assert_eq!(verified(&report), n, "{report:#}");
        assert_eq!(remote_hits(&report).len(), n, "{report:#}");
        assert_eq!(remote_stat(&report, "rejected"), 0);
    }
    assert_eq!(verified(&a.run()), n);
    assert_eq!(verified(&writer.run()), n);
}

/// Plants, under the key of program `name`, a translation entry whose source computes wrong
/// numbers (the first `acc += ` turned into `acc -= `): an object that passes every object check
/// and fails the kernel check against the reference.
fn plant_wrong_translation(url: &str, ns: &str, key: &str, source: &[u8]) {
    let text = String::from_utf8(source.to_vec()).unwrap();
    assert!(text.contains("acc += "), "the planted program accumulates");
    let wrong = text.replacen("acc += ", "acc -= ", 1);
    let mut settings = gridkey_remote::RemoteSettings::new(url);
    settings.role = gridkey_remote::Role::Writer;
    settings.namespace = ns.to_owned();
    let remote = gridkey_remote::Remote::connect(&settings).unwrap();
    let key: gridkey_fingerprint::TranslationKey = key.parse().unwrap();
    let stored = remote.put(gridkey_remote::Kind::TranslationEntry, key.as_bytes(), wrong.as_bytes());
    assert!(matches!(stored, gridkey_remote::Stored::Uploaded(_)), "{stored:?}");
}

fn quarantine(cache: &Path) -> Value {
    std::fs::read(cache.join(gridkey::quarantine::QUARANTINE_FILE))
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap_or(Value::Null)
}

#[test]
fn a_planted_object_that_fails_verification_is_retracted_by_a_writer_and_quarantined_by_a_reader() {
    let Some(url) =
        shared_url("a_planted_object_that_fails_verification_is_retracted_by_a_writer_and_quarantined_by_a_reader")
    else {
        return;
    };
    let ns = namespace("planted");
    let tools = tempfile::tempdir().unwrap();
    let cc = flaky_compiler(tools.path(), &tools.path().join("never"));
    // The good translations, from a node of its own (no shared tier written).
    let seed = Node::new(&url, &ns, &cc, false, &[]);
    let good = seed.run();
    let n = programs(&good).len();
    assert_eq!(verified(&good), n);
    let local = gridkey_fingerprint::TranslationCache::open(seed.cache.path()).unwrap();
    let (name, key, source) = programs(&good)
        .iter()
        .map(|p| (p["program"].as_str().unwrap().to_owned(), p["key"].as_str().unwrap().to_owned()))
        .map(|(name, key)| {
            let source = local.get(&key.parse().unwrap()).unwrap();
            (name, key, source)
        })
        .find(|(_, _, source)| String::from_utf8_lossy(source).contains("acc += "))
        .unwrap();
    plant_wrong_translation(&url, &ns, &key, &source);

    // A reader fetches it once, fails the kernel check, quarantines it on this node.
    let reader = Node::new(&url, &ns, &cc, false, &[]);
    let first = reader.run();
    let p = program(&first, &name);
    assert_eq!((p["verified"].as_bool(), p["tier"].as_str()), (Some(false), Some("remote")), "{p:#}");
    assert!(error(p).contains("quarantined on this node"), "{}", error(p));
    assert_eq!(remote_stat(&first, "fetches"), 1, "one translation entry, no library: {first:#}");
    assert_eq!(quarantine(reader.cache.path())["objects"].as_object().map(|o| o.len()), Some(1));
    // Its next run does not download it again: it translates the program itself.
    let second = reader.run();
    assert_eq!(verified(&second), n, "{second:#}");
    assert_eq!(remote_stat(&second, "fetches"), 0, "{second:#}");
    assert_eq!(program(&second, &name)["translated"], true);

    // A writer fetches it, fails, and retracts it from the server: the writer's next run
    // translates it again and uploads the good one, which a fresh reader then verifies.
    let writer = Node::new(&url, &ns, &cc, true, &[]);
    let w = writer.run();
    let p = program(&w, &name);
    assert_eq!(p["verified"], false);
    assert!(error(p).contains("retracted from the shared tier"), "{}", error(p));
    let fresh = Node::new(&url, &ns, &cc, false, &[]);
    let f = fresh.run();
    assert!(!remote_hits(&f).contains(&name), "the retracted object is gone: {f:#}");
    assert_eq!(remote_stat(&f, "rejected"), 0);
    let w2 = writer.run();
    assert_eq!(verified(&w2), n, "{w2:#}");
    let later = Node::new(&url, &ns, &cc, false, &[]).run();
    assert_eq!((verified(&later), remote_hits(&later).len()), (n, n), "{later:#}");

    // The quarantine ends when the object under the key changed: the reader, without its own
    // copy, fetches the good object and verifies it.
    gridkey_fingerprint::TranslationCache::open(reader.cache.path()).unwrap().remove(&key.parse().unwrap());
    let third = reader.run();
    let p = program(&third, &name);
    assert_eq!((p["verified"].as_bool(), p["tier"].as_str()), (Some(true), Some("remote")), "{p:#}");
    assert_eq!(quarantine(reader.cache.path())["objects"].as_object().map(|o| o.len()), Some(0));
}

#[test]
fn cache_retract_removes_an_entry_and_its_library_from_both_tiers_by_key_and_by_program() {
    let Some(url) = shared_url("cache_retract_removes_an_entry_and_its_library_from_both_tiers_by_key_and_by_program")
    else {
        return;
    };
    let ns = namespace("retract");
    let tools = tempfile::tempdir().unwrap();
    let cc = flaky_compiler(tools.path(), &tools.path().join("never"));
    let writer = Node::new(&url, &ns, &cc, true, &[]);
    let report = writer.run();
    let n = programs(&report).len();
    assert_eq!(verified(&report), n);
    let (a, b) = (&programs(&report)[0], &programs(&report)[1]);
    let (a_name, a_key) = (a["program"].as_str().unwrap(), a["key"].as_str().unwrap());
    let (b_name, b_key) = (b["program"].as_str().unwrap(), b["key"].as_str().unwrap());

    // A read-only client may not retract.
    let reader = Node::new(&url, &ns, &cc, false, &[]);
    let out = reader.command(&["cache", "retract", &a_key[..12]]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a designated writer"));

    let out = writer.command(&["cache", "retract", &a_key[..12], "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &r["keys"][0];
    assert_eq!((row["key"].as_str(), row["program"].as_str()), (Some(a_key), Some(a_name)), "{r:#}");
    for field in ["remote_entry", "remote_library", "local_entry", "local_library"] {
        assert_eq!(row[field], true, "{field}: {r:#}");
    }
    let grid = grid();
    let out = writer.command(&["cache", "retract", "--program", b_name, "--grid", grid.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(b_key) && text.contains("shared translation entry, shared kernel library"), "{text}");

    // A fresh node finds neither on the shared tier; the writer translates and builds both again.
    let fresh = reader.run();
    let hits = remote_hits(&fresh);
    assert_eq!(hits.len(), n - 2, "{fresh:#}");
    assert!(!hits.iter().any(|h| h == a_name || h == b_name));
    let again = writer.run();
    for name in [a_name, b_name] {
        let p = program(&again, name);
        assert_eq!((p["translated"].as_bool(), p["built"].as_bool()), (Some(true), Some(true)), "{p:#}");
    }
    // The writer shared it again; a second retraction removes it again.
    let out = writer.command(&["cache", "retract", a_key, "--json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["keys"][0]["remote_entry"], true, "the writer's second run shared it again: {r:#}");
}

/// Two writers' signing keys, each with a trusted-keys file naming it alone
/// (`gridkey cache keygen`), on a namespace of their own, with a compiler that never
/// miscompiles.
struct TwoSigners {
    url: String,
    ns: String,
    cc: PathBuf,
    /// Writer A's signing key and trusted-keys file.
    a: (PathBuf, PathBuf),
    /// Writer B's.
    b: (PathBuf, PathBuf),
    /// Holds the keys and the compiler; never read.
    _tools: tempfile::TempDir,
}

impl TwoSigners {
    fn new(url: &str, test: &str) -> Self {
        let tools = tempfile::tempdir().unwrap();
        let cc = flaky_compiler(tools.path(), &tools.path().join("never"));
        let (a, b) = (tools.path().join("a"), tools.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let (a, b) = (keys(&a), keys(&b));
        TwoSigners { url: url.to_owned(), ns: namespace(test), cc, a, b, _tools: tools }
    }

    /// A writer signing with `signing` that trusts the keys of `trusted`, on a cache of its own.
    fn writer(&self, signing: &Path, trusted: &Path) -> Node {
        Node::new(
            &self.url,
            &self.ns,
            &self.cc,
            true,
            &[("GRIDKEY_REMOTE_SIGNING_KEY", signing), ("GRIDKEY_REMOTE_TRUSTED_KEYS", trusted)],
        )
    }
}

/// The JSON report of a node's `gridkey run --json` in serial mode, and the shared tier's
/// warnings of that run (`gridkey: warning: shared tier ...`).
fn run_warned(node: &Node) -> (Value, Vec<String>) {
    let grid = grid();
    let out = node.command(&["run", "--grid", grid.to_str().unwrap(), "--mode", "serial", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let warned =
        stderr.lines().filter(|l| l.starts_with("gridkey: warning: shared tier ")).map(str::to_owned).collect();
    (report, warned)
}

#[test]
fn a_writer_that_meets_objects_signed_by_a_key_it_does_not_trust_says_so_once() {
    let Some(url) = shared_url("a_writer_that_meets_objects_signed_by_a_key_it_does_not_trust_says_so_once") else {
        return;
    };
    let two = TwoSigners::new(&url, "untrusted-signer");
    let ((key_a, trusted_a), (key_b, trusted_b)) = (two.a.clone(), two.b.clone());
    let writer = |signing: &Path, trusted: &Path| two.writer(signing, trusted);

    // Writer A fills the namespace: nothing it looked up failed a check, no warning.
    let (first, warned) = run_warned(&writer(&key_a, &trusted_a));
    let n = programs(&first).len();
    assert_eq!(verified(&first), n, "{first:#}");
    assert!(warned.is_empty(), "{warned:?}");
    let remote = |r: &Value| r["tiers"].as_array().unwrap().iter().find(|t| t["tier"] == "remote").unwrap().clone();
    assert!(remote(&first).get("rejections").is_none(), "{first:#}");

    // Writer B signs with its own key and trusts only it: A's translation entries are rejected
    // and each program made again here (its library then built here, not looked up), and the
    // run says so once, naming the signer and what to check.
    let (second, warned) = run_warned(&writer(&key_b, &trusted_b));
    assert_eq!(verified(&second), n, "{second:#}");
    assert_eq!(remote_stat(&second, "rejected"), n as u64, "{second:#}");
    assert_eq!(warned.len(), 1, "{warned:?}");
    let said = &warned[0];
    let public_a = std::fs::read_to_string(&trusted_a).unwrap();
    assert!(said.contains(&format!("{n} objects looked up failed a check here")), "{said}");
    assert!(said.contains("a writer uploads its own over them"), "{said}");
    assert!(said.contains(&format!("signed by {}, which is not a trusted key", public_a.trim())), "{said}");
    assert!(said.contains("trusted keys (GRIDKEY_REMOTE_TRUSTED_KEYS)"), "{said}");
    // A planted object names its planter's key just as well: the sentence does not invite trusting it.
    assert!(said.contains("trust a key only once you know whose it is"), "{said}");
    assert_eq!(remote(&second)["rejections"].as_str(), Some(&said["gridkey: warning: ".len()..]), "{second:#}");

    // B's own objects now: a fresh node of B's takes them, with no warning.
    let (third, warned) = run_warned(&writer(&key_b, &trusted_b));
    assert_eq!(remote_hits(&third).len(), n, "{third:#}");
    assert!(warned.is_empty(), "{warned:?}");
}

/// A writer that retracts a key its local cache does not hold, whose shared entry is signed by a
/// key it does not trust, deletes the entry but cannot name the library built from it (the
/// entry's source names it, and that source is not trusted here): it says so, in the row and as
/// a warning, instead of reporting the key retracted as if nothing else were there.
#[test]
fn a_retraction_that_cannot_name_the_library_says_so() {
    let Some(url) = shared_url("a_retraction_that_cannot_name_the_library_says_so") else {
        return;
    };
    let two = TwoSigners::new(&url, "retract-unnamed");
    let ((key_a, trusted_a), (key_b, trusted_b)) = (two.a.clone(), two.b.clone());
    let writer = |signing: &Path, trusted: &Path| two.writer(signing, trusted);
    let filled = writer(&key_a, &trusted_a).run();
    assert_eq!(verified(&filled), programs(&filled).len(), "{filled:#}");
    let key = programs(&filled)[0]["key"].as_str().unwrap().to_owned();

    let out = writer(&key_b, &trusted_b).command(&["cache", "retract", &key, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &r["keys"][0];
    assert_eq!((row["remote_entry"].as_bool(), row["remote_library"].as_bool()), (Some(true), Some(false)), "{r:#}");
    let why = row["library_unnamed"].as_str().unwrap_or_else(|| panic!("no word of the library: {r:#}"));
    let public_a = std::fs::read_to_string(&trusted_a).unwrap();
    assert!(why.contains(&format!("signed by {}", public_a.trim())), "{why}");
    assert!(why.contains("retract the key from a writer whose local cache holds the entry"), "{why}");

    // Without --json the same words reach the operator as a warning.
    let filled_again = writer(&key_a, &trusted_a).run();
    assert_eq!(verified(&filled_again), programs(&filled_again).len());
    let out = writer(&key_b, &trusted_b).command(&["cache", "retract", &key]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("gridkey: warning: {key}: the shared tier's translation entry failed a check")),
        "{stderr}"
    );

    // A writer that trusts no key reads no shared entry: of a key the shared tier does not hold
    // it has nothing to say; of one it holds, that it did not read it.
    let mut blind = Node::new(&url, &two.ns, &two.cc, true, &[("GRIDKEY_REMOTE_SIGNING_KEY", &key_b)]);
    blind.env.retain(|(k, _)| k != "GRIDKEY_REMOTE_TRUST");
    let absent = "0".repeat(32);
    let present = programs(&filled_again)[1]["key"].as_str().unwrap().to_owned();
    let out = blind.command(&["cache", "retract", &absent, &present, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (none, some) = (&r["keys"][0], &r["keys"][1]);
    assert_eq!((none["remote_entry"].as_bool(), none.get("library_unnamed")), (Some(false), None), "{r:#}");
    assert_eq!(some["remote_entry"].as_bool(), Some(true), "{r:#}");
    let why = some["library_unnamed"].as_str().unwrap_or_else(|| panic!("no word of the library: {r:#}"));
    assert!(why.starts_with("this writer trusts no key (GRIDKEY_REMOTE_TRUSTED_KEYS is not set)"), "{why}");
}

#[test]
fn a_writer_that_trusts_no_key_leaves_the_signed_objects_it_cannot_check() {
    let Some(url) = shared_url("a_writer_that_trusts_no_key_leaves_the_signed_objects_it_cannot_check") else {
        return;
    };
    let two = TwoSigners::new(&url, "blind-writer");
    let (key_a, trusted_a) = two.a.clone();
    let filled = two.writer(&key_a, &trusted_a).run();
    let n = programs(&filled).len();
    assert_eq!((verified(&filled), remote_stat(&filled, "uploads")), (n, 2 * n as u64));
    // A writer without trusted keys (signing or not) takes nothing, makes every program, and
    // leaves the objects under its keys as they are.
    for signing in [None, Some(&two.b.0)] {
        let trust: Vec<(&str, &Path)> =
            signing.map(|k| ("GRIDKEY_REMOTE_SIGNING_KEY", k.as_path())).into_iter().collect();
        let mut blind = Node::new(&url, &two.ns, &two.cc, true, &trust);
        blind.env.retain(|(k, _)| k != "GRIDKEY_REMOTE_TRUST");
        let made = blind.run();
        assert_eq!((verified(&made), remote_stat(&made, "hits")), (n, 0));
        assert_eq!(remote_stat(&made, "uploads"), 0, "it replaced objects it could not check");
        // Nor does `cache push` of what it made: each object is listed as skipped, saying why.
        let out = blind.command(&["cache", "push", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let pushed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((pushed["entries"].as_u64(), pushed["libraries"].as_u64()), (Some(0), Some(0)), "{pushed:#}");
        // Each entry is counted with its library; both are listed.
        assert_eq!(pushed["skipped"].as_u64(), Some(n as u64), "{pushed:#}");
        assert_eq!(pushed["skipped_objects"].as_array().unwrap().len(), 2 * n, "{pushed:#}");
        let why = pushed["skipped_objects"][0]["reason"].as_str().unwrap();
        assert!(why.contains("this writer takes nothing from the shared tier"), "{why}");
    }
    // A reader that trusts the first writer still takes every program from the shared tier.
    let reader = Node::new(&url, &two.ns, &two.cc, false, &[("GRIDKEY_REMOTE_TRUSTED_KEYS", &trusted_a)]);
    let (warm, warned) = run_warned(&reader);
    assert_eq!((remote_hits(&warm).len(), remote_stat(&warm, "rejected")), (n, 0), "{warned:?}");
    assert!(warned.is_empty(), "{warned:?}");
}
