//! `gridkey run`, `cache push` and `cache stats` with a shared tier on a real Redis server
//! (README "The shared tier"). Without `GRIDKEY_TEST_REDIS_URL` each test says that it skipped
//! and how to run it.

use crate::common;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{data, gridkey_command};
use serde_json::Value;

const URL_VAR: &str = "GRIDKEY_TEST_REDIS_URL";

fn shared_url(test: &str) -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let required = std::env::var("GRIDKEY_TEST_REQUIRE").is_ok_and(|r| r.split(',').any(|s| s == "redis"));
            assert!(!required, "a Redis server is required (GRIDKEY_TEST_REQUIRE) but {URL_VAR} is unset");
            // Past the harness's capture, so that a plain `cargo test` shows it.
            let _ = writeln!(
                std::io::stderr(),
                "gridkey: skipped {test}: no test Redis server ({URL_VAR} unset); run \
                 `cargo xtask test` or `cargo xtask with-redis -- cargo test -p gridkey --test all remote::`"
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

/// `gridkey run --json` in serial mode into `cache` with the shared tier `url` in `ns`.
fn run(cache: &Path, url: &str, ns: &str, extra: &[&str], env: &[(&str, &str)]) -> (Output, Value) {
    let grid = grid();
    let mut args = vec!["run", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.to_str().unwrap()];
    args.extend(["--mode", "serial", "--json", "--remote", url]);
    args.extend_from_slice(extra);
    let mut vars = vec![("GRIDKEY_REMOTE_NAMESPACE", ns), ("GRIDKEY_REMOTE_TIMEOUT", "0.5")];
    // The tests of hits, leases and degradation trust the ACL (ADR 0031); those of trust say
    // what they trust.
    if !env.iter().any(|(k, _)| k.starts_with("GRIDKEY_REMOTE_TRUST")) {
        vars.push(("GRIDKEY_REMOTE_TRUST", "acl"));
    }
    vars.extend_from_slice(env);
    let out = gridkey_command(&args, &vars).output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, report)
}

fn count(report: &Value, field: &str) -> usize {
    report["programs"].as_array().unwrap().iter().filter(|p| p[field] == true).count()
}

fn keys(report: &Value) -> Vec<String> {
    report["programs"].as_array().unwrap().iter().map(|p| p["key"].as_str().unwrap().to_owned()).collect()
}

fn tier<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["tiers"].as_array().unwrap().iter().find(|t| t["tier"] == name).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_fresh_node_is_warm_from_what_a_writer_uploaded() {
    let Some(url) = shared_url("a_fresh_node_is_warm_from_what_a_writer_uploaded") else { return };
    let ns = namespace("fresh");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (out, writer) = run(a.path(), &url, &ns, &["--remote-writer"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let n = writer["programs"].as_array().unwrap().len();
    assert_eq!((count(&writer, "translated"), count(&writer, "verified")), (n, n));
    let remote = tier(&writer, "remote");
    assert_eq!((remote["uploads"].as_u64(), remote["leases"].as_u64()), (Some(2 * n as u64), Some(n as u64)));
    assert_eq!(remote["errors"], 0);

    let (out, reader) = run(b.path(), &url, &ns, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(keys(&reader), keys(&writer));
    assert_eq!((count(&reader, "translated"), count(&reader, "built"), count(&reader, "verified")), (0, 0, n));
    assert!(reader["programs"].as_array().unwrap().iter().all(|p| p["tier"] == "remote"));
    let remote = tier(&reader, "remote");
    // One fetch per key and kind: the translation entry and the kernel library.
    assert_eq!((remote["hits"].as_u64(), remote["fetches"].as_u64()), (Some(2 * n as u64), Some(2 * n as u64)));
    assert_eq!((remote["uploads"].as_u64(), remote["leases"].as_u64()), (Some(0), Some(0)));
    // What came from the shared tier is a local entry with its record now: a third run is local.
    let (out, again) = run(b.path(), &url, &ns, &[], &[]);
    assert!(out.status.success());
    assert!(again["programs"].as_array().unwrap().iter().all(|p| p["tier"] == "local"));
    assert_eq!(tier(&again, "remote")["fetches"], 0);
    let explain = gridkey_command(&["explain", &keys(&writer)[0][..8], &keys(&writer)[0][..8], "--cache-dir"], &[])
        .arg(b.path())
        .output()
        .unwrap();
    assert!(explain.status.success(), "{}", stderr(&explain));
}

#[test]
fn a_read_only_node_uploads_nothing_and_takes_no_lease() {
    let Some(url) = shared_url("a_read_only_node_uploads_nothing_and_takes_no_lease") else { return };
    let ns = namespace("readonly");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (out, first) = run(a.path(), &url, &ns, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let n = first["programs"].as_array().unwrap().len();
    assert_eq!(count(&first, "translated"), n);
    let remote = tier(&first, "remote");
    assert_eq!((remote["uploads"].as_u64(), remote["leases"].as_u64()), (Some(0), Some(0)));
    let (_, second) = run(b.path(), &url, &ns, &[], &[]);
    assert_eq!(count(&second, "translated"), n, "nothing was uploaded for the second node");
    let stats = gridkey_command(
        &["cache", "stats", "--json", "--remote", &url, "--cache-dir"],
        &[("GRIDKEY_REMOTE_NAMESPACE", &ns)],
    )
    .arg(b.path())
    .output()
    .unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    let remote = &stats["tiers"][1];
    assert_eq!(remote["tier"], "remote");
    assert!(remote["objects"].as_array().unwrap().iter().all(|o| o["objects"] == 0), "{remote}");
    assert_eq!(remote["runs"], 0, "a read-only client does not even publish its counters");
}

#[test]
fn an_unreachable_shared_tier_costs_one_warning_and_changes_no_result() {
    let Some(_) = shared_url("an_unreachable_shared_tier_costs_one_warning_and_changes_no_result") else { return };
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cache = tempfile::tempdir().unwrap();
    let (out, report) = run(cache.path(), &format!("redis://127.0.0.1:{port}/"), "x", &["--remote-writer"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let n = report["programs"].as_array().unwrap().len();
    assert_eq!(count(&report, "verified"), n);
    let text = stderr(&out);
    assert_eq!(text.matches("warning: shared cache").count(), 1, "{text}");
    let remote = tier(&report, "remote");
    assert_eq!((remote["on"].as_bool(), remote["errors"].as_u64()), (Some(false), Some(1)));
}

/// A `redis-server` of this test's own, with a password or the ACL users it is given.
struct Server(Child, u16);

impl Server {
    fn start(password: &str) -> Server {
        Server::start_with(&["--requirepass", password])
    }

    fn start_with(login: &[&str]) -> Server {
        let binary = std::env::var("GRIDKEY_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(login)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(20));
        }
        Server(child, port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_wrong_password_is_an_error_at_start_naming_the_variable() {
    let Some(_) = shared_url("a_wrong_password_is_an_error_at_start_naming_the_variable") else { return };
    let server = Server::start("s3cret");
    let cache = tempfile::tempdir().unwrap();
    for url in [format!("redis://:wrong@127.0.0.1:{}/", server.1), format!("redis://127.0.0.1:{}/", server.1)] {
        let (out, _) = run(cache.path(), &url, "x", &[], &[]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let text = stderr(&out);
        assert!(text.contains("refused the connection") && text.contains("GRIDKEY_REMOTE_URL"), "{text}");
        assert!(!text.contains(".;"), "one sentence runs into the fix without a doubled stop: {text}");
        assert!(!text.contains("wrong@"), "the password is not shown: {text}");
        assert!(!cache.path().join(gridkey_fingerprint::TRANSLATION_DIR).exists(), "nothing ran");
    }
    let (out, _) = run(cache.path(), &format!("redis://:s3cret@127.0.0.1:{}/", server.1), "x", &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_missing_key_file_and_a_bad_url_are_errors_at_start() {
    let Some(url) = shared_url("a_missing_key_file_and_a_bad_url_are_errors_at_start") else { return };
    let cache = tempfile::tempdir().unwrap();
    let (out, _) = run(cache.path(), &url, "x", &[], &[("GRIDKEY_REMOTE_TRUSTED_KEYS", "/nonexistent/trusted")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/nonexistent/trusted"), "{}", stderr(&out));
    let (out, _) = run(cache.path(), "redis//127.0.0.1", "x", &[], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot be used"), "{}", stderr(&out));
}

#[test]
fn cache_push_seeds_the_shared_tier_from_a_local_cache() {
    let Some(url) = shared_url("cache_push_seeds_the_shared_tier_from_a_local_cache") else { return };
    let ns = namespace("push");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let grid = grid();
    let local = gridkey_command(&["run", "--mode", "serial", "--grid", grid.to_str().unwrap(), "--cache-dir"], &[])
        .arg(a.path())
        .output()
        .unwrap();
    assert!(local.status.success());
    let push = |extra: &[&str]| {
        let mut args = vec!["cache", "push", "--json", "--remote", &url, "--cache-dir", a.path().to_str().unwrap()];
        args.extend_from_slice(extra);
        gridkey_command(&args, &[("GRIDKEY_REMOTE_NAMESPACE", &ns), ("GRIDKEY_REMOTE_TRUST", "acl")]).output().unwrap()
    };
    let refused = push(&[]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("designated writer"), "{}", stderr(&refused));
    let pushed = push(&["--remote-writer"]);
    assert!(pushed.status.success(), "{}", stderr(&pushed));
    let pushed: Value = serde_json::from_slice(&pushed.stdout).unwrap();
    let (_, fresh) = run(b.path(), &url, &ns, &[], &[]);
    let n = fresh["programs"].as_array().unwrap().len() as u64;
    assert_eq!((pushed["entries"].as_u64(), pushed["libraries"].as_u64()), (Some(n), Some(n)));
    assert_eq!((count(&fresh, "translated"), count(&fresh, "built")), (0, 0));
    assert_eq!(count(&fresh, "verified") as u64, n);
}

#[test]
fn cache_push_as_a_user_that_may_not_write_stops_and_says_what_to_do() {
    let Some(_) = shared_url("cache_push_as_a_user_that_may_not_write_stops_and_says_what_to_do") else { return };
    // The README's reader: it may look objects up, not write them.
    let server = Server::start_with(&[
        "--user",
        "default",
        "off",
        "--user",
        "reader",
        "on",
        ">R-s3cret",
        "~gridkey:*",
        "+@read",
        "+ping",
        "+exists",
        "+eval_ro",
    ]);
    let cache = filled_cache();
    let url = format!("redis://reader:R-s3cret@127.0.0.1:{}/", server.1);
    let out = gridkey_command(
        &["cache", "push", "--remote", &url, "--remote-writer", "--cache-dir", cache.path().to_str().unwrap()],
        &[("GRIDKEY_REMOTE_TRUST", "acl")],
    )
    .output()
    .unwrap();
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("uploading objects failed") && text.contains("cache push stopped there"), "{text}");
    assert!(text.contains("as a Redis user that may write"), "{text}");
    assert!(!text.contains("goes on with the local cache"), "push is not a run: {text}");
    assert!(!text.contains("R-s3cret"), "the password is not shown: {text}");
}

/// A fresh cache filled by one serial run without a shared tier.
fn filled_cache() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let grid = grid();
    let local = gridkey_command(&["run", "--mode", "serial", "--grid", grid.to_str().unwrap(), "--cache-dir"], &[])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(local.status.success(), "{}", stderr(&local));
    dir
}

#[test]
fn a_default_reader_takes_no_remote_code_and_says_so() {
    let Some(url) = shared_url("a_default_reader_takes_no_remote_code_and_says_so") else { return };
    let ns = namespace("default-trust");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // An unsigned writer fills the tier, as any client with the password could.
    let (out, _) = run(a.path(), &url, &ns, &["--remote-writer"], &[("GRIDKEY_REMOTE_TRUST", "signed")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (out, reader) = run(b.path(), &url, &ns, &[], &[("GRIDKEY_REMOTE_TRUST", "signed")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let n = reader["programs"].as_array().unwrap().len();
    let remote = tier(&reader, "remote");
    assert_eq!((remote["hits"].as_u64(), remote["bytes_in"].as_u64()), (Some(0), Some(0)));
    assert_eq!((count(&reader, "translated"), count(&reader, "built"), count(&reader, "verified")), (n, n, n));
    let first = stderr(&out).lines().next().unwrap_or_default().to_owned();
    assert!(first.starts_with("gridkey: shared tier redis://"), "{first}");
    assert!(first.contains("no trusted keys: nothing is taken from the shared tier"), "{first}");
    // With the opt-in the same objects are hits, and the start line says why.
    let c = tempfile::tempdir().unwrap();
    let (out, opted) = run(c.path(), &url, &ns, &[], &[("GRIDKEY_REMOTE_TRUST", "acl")]);
    assert!(stderr(&out).contains("trusting every object the Redis ACL lets in"), "{}", stderr(&out));
    assert_eq!(count(&opted, "translated"), 0);
}

#[test]
fn cache_push_refuses_tampered_libraries_and_a_cache_others_can_write() {
    use std::os::unix::fs::PermissionsExt;
    let Some(url) = shared_url("cache_push_refuses_tampered_libraries_and_a_cache_others_can_write") else { return };
    let ns = namespace("push-checks");
    let a = filled_cache();
    let build = a.path().join("build-v2");
    let mut libs: Vec<PathBuf> = std::fs::read_dir(&build).unwrap().map(|e| e.unwrap().path()).collect();
    libs.retain(|p| p.extension().is_some_and(|e| e == "so"));
    libs.sort();
    // One library changed in place, same size: its trailer no longer matches.
    let mut bytes = std::fs::read(&libs[0]).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x01;
    std::fs::write(&libs[0], &bytes).unwrap();
    let push = |dir: &Path| {
        let args =
            ["cache", "push", "--json", "--remote", &url, "--remote-writer", "--cache-dir", dir.to_str().unwrap()];
        gridkey_command(&args, &[("GRIDKEY_REMOTE_NAMESPACE", &ns)]).output().unwrap()
    };
    let out = push(a.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["libraries"].as_u64(), Some(libs.len() as u64 - 1), "{report}");
    assert_eq!(report["entries"].as_u64(), Some(libs.len() as u64 - 1), "{report}");
    assert_eq!(report["skipped"].as_u64(), Some(1));
    assert!(stderr(&out).contains(&libs[0].display().to_string()), "names the library: {}", stderr(&out));
    assert!(stderr(&out).contains("checksum"), "{}", stderr(&out));
    // A cache others can write: refused before anything is pushed.
    let open = filled_cache();
    for (dir, mode) in [(open.path().to_path_buf(), 0o777), (open.path().join("build-v2"), 0o775)] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = push(open.path());
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("cannot push from") && stderr(&out).contains(&dir.display().to_string()));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn no_output_of_a_run_shows_the_password_of_the_url() {
    let Some(url) = shared_url("no_output_of_a_run_shows_the_password_of_the_url") else { return };
    // The test server has no password: a URL with a user and one is refused, and says so
    // without the password; the one unreachable is reported without it too.
    let password = "pw-Zr9-never-shown";
    let with_password = url.replacen("redis://", &format!("redis://gkuser:{password}@"), 1);
    let cache = tempfile::tempdir().unwrap();
    let (out, _) = run(cache.path(), &with_password, "x", &[], &[]);
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("gkuser:***@"), "{all}");
    assert!(!all.contains(password), "{all}");
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (out, report) = run(cache.path(), &format!("redis://gkuser:{password}@127.0.0.1:{port}/"), "x", &[], &[]);
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(out.status.success(), "{all}");
    assert!(!all.contains(password) && tier(&report, "remote")["location"].as_str().unwrap().contains("***"), "{all}");
}

/// The objects of `kind` (`GT4Py translation entry`, ...) the shared tier `url` holds in `ns`,
/// as `cache stats` counts them on the server.
fn remote_objects(url: &str, ns: &str, kind: &str) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let out = gridkey_command(
        &["cache", "stats", "--json", "--remote", url, "--cache-dir"],
        &[("GRIDKEY_REMOTE_NAMESPACE", ns)],
    )
    .arg(dir.path())
    .output()
    .unwrap();
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let remote = stats["tiers"].as_array().unwrap().iter().find(|t| t["tier"] == "remote").unwrap();
    remote["objects"].as_array().unwrap().iter().find(|o| o["kind"] == kind).unwrap()["objects"].as_u64().unwrap()
}

#[test]
fn cache_push_and_retract_carry_gt4py_objects_and_leave_out_a_bad_one() {
    use gridkey_fingerprint::gt4py::{encode_bundle, Gt4pyKind, Gt4pyStore};
    use gridkey_fingerprint::TranslationKey;
    let Some(url) = shared_url("cache_push_and_retract_carry_gt4py_objects_and_leave_out_a_bad_one") else { return };
    let ns = namespace("push-gt4py");
    // A cache directory holding what the GT4Py adapter stores: two translation entries (one
    // then corrupted on disk) and one extension of two files.
    let cache = tempfile::tempdir().unwrap();
    let store = Gt4pyStore::open(cache.path()).unwrap();
    let key = |n: u8| -> TranslationKey { gridkey_digest::hex(&[n; 16]).parse().unwrap() };
    store.put(Gt4pyKind::Translation, &key(0xa1), b"a pickled translation").unwrap();
    let bad = store.put(Gt4pyKind::Translation, &key(0xb2), b"another pickled translation").unwrap();
    let bundle =
        encode_bundle(&[("build/bin/div.so".into(), b"\x7fELF...".to_vec()), ("gt4py.json".into(), b"{}".to_vec())]);
    store.put(Gt4pyKind::Extension, &key(0xc3), &bundle).unwrap();
    let mut bytes = std::fs::read(&bad).unwrap();
    let i = bytes.len() - 12;
    bytes[i] ^= 0x01;
    std::fs::set_permissions(&bad, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(&bad, &bytes).unwrap();

    let env = [("GRIDKEY_REMOTE_NAMESPACE", ns.as_str()), ("GRIDKEY_REMOTE_TRUST", "acl")];
    let dir = cache.path().to_str().unwrap();
    let out =
        gridkey_command(&["cache", "push", "--json", "--remote", &url, "--remote-writer", "--cache-dir", dir], &env)
            .output()
            .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["gt4py_translations"].as_u64(), report["gt4py_extensions"].as_u64()),
        (Some(1), Some(1)),
        "{report}"
    );
    assert_eq!((report["entries"].as_u64(), report["skipped"].as_u64()), (Some(0), Some(1)), "{report}");
    assert!(
        stderr(&out).contains("not pushed: GT4Py translation entry")
            && stderr(&out).contains(&bad.display().to_string()),
        "{}",
        stderr(&out)
    );
    assert_eq!(remote_objects(&url, &ns, "GT4Py translation entry"), 1);
    assert_eq!(remote_objects(&url, &ns, "GT4Py extension"), 1);

    // Retracted by a prefix of its key, as an operator names it: gone from both tiers.
    let prefix = &key(0xc3).to_hex()[..10];
    let out = gridkey_command(
        &["cache", "retract", prefix, "--json", "--remote", &url, "--remote-writer", "--cache-dir", dir],
        &env,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &r["keys"][0];
    assert_eq!(row["key"].as_str(), Some(key(0xc3).to_hex().as_str()), "{r:#}");
    assert_eq!(
        (row["remote_gt4py"].clone(), row["local_gt4py"].clone()),
        (serde_json::json!(["extension"]), serde_json::json!(["extension"])),
        "{r:#}"
    );
    assert!(!store.entry_path(Gt4pyKind::Extension, &key(0xc3)).exists());
    assert_eq!(remote_objects(&url, &ns, "GT4Py extension"), 0);
    assert_eq!(remote_objects(&url, &ns, "GT4Py translation entry"), 1, "the other key stays");
}
