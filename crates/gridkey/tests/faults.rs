//! The cache directory under faults, through the real `gridkey` binary (ADR 0009, ADR 0012):
//! a process killed in the middle of a write, a full disk, bad cache directories, tables
//! modified in place, and `gridkey cache stats` / `gridkey cache gc`. The full matrix, with real
//! tmpfs mounts and many processes, is `cargo xtask faults`.

use crate::common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use gridkey_digest::{Dtype, TableDigest};
use gridkey_store::{TableSpec, TableStore};

fn grid() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/grids/oQU480.231010.nc")
}

fn cmd(args: &[&str], env: &[(&str, &str)]) -> Command {
    common::gridkey_command(args, env)
}

/// `gridkey run` in serial mode on the MPAS grid into `cache`, with extra flags.
fn run(cache: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let grid = grid();
    let mut args =
        vec!["run", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.to_str().unwrap(), "--mode", "serial"];
    args.extend_from_slice(extra);
    cmd(&args, env).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn verified_all(o: &Output) -> bool {
    o.status.success() && text(o).contains("8/8 programs verified")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = cmd(args, &[]).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                out.extend(files(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Temp files and temp directories (a build's private directory, with what the C compiler read
/// and wrote) under `cache`.
fn temps(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(cache) {
        for e in entries.flatten() {
            let p = e.path();
            let temp = e.file_name().to_string_lossy().starts_with(".tmp-");
            match (fs::symlink_metadata(&p).unwrap().is_dir(), temp) {
                (_, true) => out.push(p),
                (true, false) => out.extend(temps(&p)),
                (false, false) => {}
            }
        }
    }
    out
}

/// The specs of the grid's tables from `gridkey tables --json` (an independent listing).
fn specs() -> Vec<TableSpec> {
    let rows = json(&["tables", "--grid", grid().to_str().unwrap(), "--json"]);
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| TableSpec {
            digest: r["digest"].as_str().unwrap().parse::<TableDigest>().unwrap(),
            dtype: if r["dtype"] == "<i4" { Dtype::I32 } else { Dtype::I64 },
            shape: [r["shape"][0].as_u64().unwrap() as usize, r["shape"][1].as_u64().unwrap() as usize],
        })
        .collect()
}

/// The single place that kills a run at a fault point and checks what is left: the killed
/// write's temp file and `scratch` other temps (the build's private directory, with the C
/// compiler's source and output, while a kernel library is written), all removed by gc.
fn check_kill(spec: &str, scratch: usize) {
    let cache = tempfile::tempdir().unwrap();
    let grid = grid();
    let args =
        ["run", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.path().to_str().unwrap(), "--mode", "serial"];
    let mut child =
        cmd(&args, &[("GRIDKEY_FAULT", spec)]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut temp = None;
    for line in BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok) {
        if let Some((_, t)) = line.split_once(" writing ") {
            temp = Some(PathBuf::from(t));
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let temp = temp.unwrap_or_else(|| panic!("{spec}: the run never reached the fault point"));
    let left = temps(cache.path());
    assert!(left.contains(&temp), "{spec}: the killed write left its temp file: {left:?}");
    assert_eq!(left.len(), 1 + scratch, "{spec}: and no other: {left:?}");
    let gc = json(&["cache", "gc", "--cache-dir", cache.path().to_str().unwrap(), "--temp-age", "0", "--json"]);
    assert_eq!(gc["temps_removed"], 1 + scratch as u64, "{spec}: {gc}");
    assert!(temps(cache.path()).is_empty(), "{spec}");
    let again = run(cache.path(), &["--verify"], &[]);
    assert!(verified_all(&again), "{spec}: {}", text(&again));
}

#[test]
fn sigkill_in_the_middle_of_a_write_leaves_only_a_temp_file_that_gc_removes() {
    check_kill("pause:partial:tables-v1", 0);
    check_kill("pause:synced:.bin", 0);
    check_kill("pause:written:.so", 1);
}

#[test]
fn an_abandoned_temp_file_is_removed_by_the_next_run() {
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().join("translation-v2/ab");
    fs::create_dir_all(&dir).unwrap();
    let old = dir.join(".tmp-crashed");
    let young = dir.join(".tmp-in-flight");
    for p in [&old, &young] {
        fs::write(p, b"partial").unwrap();
    }
    fs::File::open(&old).unwrap().set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
    let out = run(cache.path(), &["--json"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["temps_removed"], 1);
    assert!(!old.exists() && young.exists(), "only the temp file older than the minimum age goes");
}

#[test]
fn the_sweep_before_a_run_removes_what_gc_removes_without_its_size_pass() {
    // A cache a run filled, then a stale temp file, a young one, a dead lock and a stray file in
    // `locks/`: the sweep a run starts with does what `gc` without a budget does to them, and
    // leaves the entries unscanned (their bytes are `gc`'s alone).
    let cache = tempfile::tempdir().unwrap();
    assert!(run(cache.path(), &[], &[]).status.success());
    let dir = cache.path().join("build-v2");
    let (old, young) = (dir.join(".tmp-crashed"), dir.join(".tmp-in-flight"));
    for p in [&old, &young] {
        fs::write(p, b"partial").unwrap();
    }
    fs::File::open(&old).unwrap().set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
    let locks = cache.path().join("locks");
    fs::create_dir_all(&locks).unwrap();
    let dead = locks.join(format!("translation-{}.lock", "ab".repeat(16)));
    fs::write(&dead, b"").unwrap();
    fs::write(locks.join("stray.txt"), b"").unwrap();
    let before = files(cache.path()).into_iter().filter(|p| !p.starts_with(&locks)).count();

    let swept = gridkey::cache::sweep(cache.path(), gridkey::cache::STALE_TEMP_AGE).unwrap();
    assert_eq!(swept.temps_removed, 1);
    assert!(!old.exists() && young.exists() && !dead.exists());
    assert_eq!(swept.warnings.len(), 1, "{:?}", swept.warnings);
    assert!(swept.warnings[0].path.ends_with("stray.txt"), "{:?}", swept.warnings);
    assert_eq!((swept.entries_removed, swept.bytes_left), (0, 0), "the sweep does not scan entries");
    assert_eq!(files(cache.path()).into_iter().filter(|p| !p.starts_with(&locks)).count(), before - 1);

    let gc = gridkey::cache::gc(
        cache.path(),
        &gridkey::cache::GcConfig { max_size: None, temp_min_age: gridkey::cache::STALE_TEMP_AGE },
    )
    .unwrap();
    assert_eq!((gc.temps_removed, gc.entries_removed), (0, 0));
    assert!(gc.bytes_left > 0, "gc counts the entries the sweep left alone");
}

#[test]
fn a_full_disk_is_a_clear_error_and_leaves_nothing_behind() {
    for (part, code) in [("tables-v1", 2), ("translation-v2", 1), ("build-v2", 1)] {
        let cache = tempfile::tempdir().unwrap();
        let spec = format!("enospc:100:{part}");
        let out = run(cache.path(), &[], &[("GRIDKEY_FAULT", &spec)]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(code), "{part}: {t}");
        assert!(t.contains("No space left on device") && !t.contains("panicked"), "{part}: {t}");
        assert!(temps(cache.path()).is_empty(), "{part}: no temp file");
        let final_names: Vec<PathBuf> = files(&cache.path().join(part));
        assert!(final_names.is_empty(), "{part}: nothing under a final name: {final_names:?}");
    }
}

#[test]
fn bad_cache_directories_are_errors_or_warnings() {
    let base = tempfile::tempdir().unwrap();
    let file = base.path().join("cache-file");
    fs::write(&file, b"").unwrap();
    let out = run(&file, &[], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("cache-file is a file, not a directory"), "{}", text(&out));

    let open = base.path().join("everyone");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let out = run(&open, &[], &[]);
    assert!(verified_all(&out), "{}", text(&out));
    assert!(
        text(&out).contains("warning: ") && text(&out).contains(": cache directory writable by everyone"),
        "{}",
        text(&out)
    );

    let other = base.path().join("other-user");
    fs::create_dir(&other).unwrap();
    if std::os::unix::fs::chown(&other, Some(4242), None).is_ok() {
        let out = run(&other, &[], &[]);
        assert!(verified_all(&out), "{}", text(&out));
        assert!(text(&out).contains("cache directory owned by user 4242"), "{}", text(&out));
    } else {
        eprintln!("skipped the other-owner case: chown needs root here (cargo xtask faults runs it as root)");
    }

    // Root ignores mode bits: a read-only mount is the real thing; without root, mode 0555.
    let ro = base.path().join("read-only");
    fs::create_dir(&ro).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mounted = root
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,ro", "tmpfs"])
            .arg(&ro)
            .status()
            .is_ok_and(|s| s.success());
    if !root {
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
    }
    if root && !mounted {
        eprintln!("skipped the read-only case: running as root without mount permission");
        return;
    }
    let out = run(&ro, &[], &[]);
    let left = fs::read_dir(&ro).unwrap().count();
    if mounted {
        let _ = Command::new("umount").arg(&ro).status();
    }
    // It serves what it has (nothing here) and caches nothing new, with one warning (ADR 0036).
    assert!(verified_all(&out), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // (A tmpfs root is also writable by everyone, which has its own warning.)
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(": cache directory is read-only here")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("nothing new is cached"), "{stderr}");
    assert_eq!(left, 0, "nothing written to the read-only cache");
}

#[test]
fn run_verify_rebuilds_a_table_modified_in_place() {
    let cache = tempfile::tempdir().unwrap();
    assert!(verified_all(&run(cache.path(), &[], &[])));
    let store = TableStore::open(cache.path()).unwrap();
    let spec = specs()[0];
    let path = store.path_of(&spec.digest);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let len = f.metadata().unwrap().len();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(len - 4)).unwrap();
    std::io::Write::write_all(&mut f, &0i32.to_le_bytes()).unwrap();
    drop(f);
    assert!(store.open_verified(&spec).is_err(), "modified in place");
    // Every program hits: no translation reads the table, so nothing of it reaches an artifact,
    // and the run keeps the file as it found it (ADR 0028).
    let hits = run(cache.path(), &[], &[]);
    assert!(verified_all(&hits), "{}", text(&hits));
    assert!(store.open_verified(&spec).is_err(), "a run of hits reads no table");
    // The first translation that reads it finds it changed, and the run rewrites it (ADR 0024).
    fs::remove_dir_all(cache.path().join(gridkey_fingerprint::TRANSLATION_DIR)).unwrap();
    let plain = run(cache.path(), &["--json"], &[]);
    assert!(plain.status.success(), "{}", text(&plain));
    store.open_verified(&spec).expect("the translation checked the stored bytes and the run rewrote them");
    // Not without a word: the repair is a warning naming the file, on stderr and in the report.
    let stderr = String::from_utf8_lossy(&plain.stderr);
    let warning = format!("gridkey: warning: {}: (table of offset", path.display());
    assert!(stderr.contains(&warning) && stderr.contains("was changed after it was stored; rewritten"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    let warnings = report["warnings"].as_array().unwrap();
    assert!(!warnings.is_empty() && warnings.iter().all(|w| w["path"] == path.to_str().unwrap()), "{warnings:?}");
    // A clean run says nothing.
    let clean = run(cache.path(), &[], &[]);
    assert!(verified_all(&clean) && !String::from_utf8_lossy(&clean.stderr).contains("warning"), "{}", text(&clean));
    // Again in place, and a verifying run.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(len - 4)).unwrap();
    std::io::Write::write_all(&mut f, &0i32.to_le_bytes()).unwrap();
    drop(f);
    assert!(store.open_verified(&spec).is_err(), "modified in place again");
    let verify = run(cache.path(), &["--verify"], &[]);
    assert!(verified_all(&verify), "{}", text(&verify));
    store.open_verified(&spec).expect("run --verify rewrote the table");
}

#[test]
fn cache_stats_count_every_entry_and_gc_removes_least_recently_used_but_never_a_mapped_table() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    assert!(verified_all(&run(cache.path(), &[], &[])));
    let stats = json(&["cache", "stats", "--cache-dir", c, "--json"]);
    let count = |dir: &str, ext: &str| {
        files(&cache.path().join(dir)).iter().filter(|p| p.extension().is_some_and(|e| e == ext)).count() as u64
    };
    let bytes = |dir: &str| files(&cache.path().join(dir)).iter().map(|p| fs::metadata(p).unwrap().len()).sum::<u64>();
    for (i, (dir, ext)) in [("tables-v1", "npy"), ("translation-v2", "bin"), ("build-v2", "so")].iter().enumerate() {
        assert_eq!(stats["stores"][i]["store"], *dir);
        assert_eq!(stats["stores"][i]["entries"], count(dir, ext), "{dir}");
        assert_eq!(stats["stores"][i]["bytes"], bytes(dir), "{dir}");
        assert_eq!(stats["stores"][i]["temp_files"], 0, "{dir}");
    }
    assert_eq!(count("tables-v1", "npy"), specs().len() as u64);

    // The libraries were used least recently: a budget of everything else removes exactly them.
    let old = fs::FileTimes::new()
        .set_accessed(SystemTime::UNIX_EPOCH)
        .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(86_400));
    for p in files(&cache.path().join("build-v2")) {
        fs::File::open(&p).unwrap().set_times(old).unwrap();
    }
    let total = bytes("tables-v1") + bytes("translation-v2") + bytes("build-v2");
    let budget = total - bytes("build-v2");
    let gc = json(&["cache", "gc", "--cache-dir", c, "--max-size", &budget.to_string(), "--json"]);
    assert_eq!(gc["entries_removed"], 8, "{gc}");
    assert_eq!(gc["bytes_left"], budget, "{gc}");
    assert_eq!(count("build-v2", "so"), 0);
    assert_eq!(count("translation-v2", "bin"), 8);

    // A table mapped by this process is kept, whatever the budget; unmapped, it goes.
    let store = TableStore::open(cache.path()).unwrap();
    let spec = specs()[0];
    let mapped = store.open_table(&spec).unwrap();
    let gc = json(&["cache", "gc", "--cache-dir", c, "--max-size", "0", "--json"]);
    assert_eq!(gc["kept_in_use"], 1, "{gc}");
    assert_eq!(gc["bytes_left"], fs::metadata(store.path_of(&spec.digest)).unwrap().len(), "{gc}");
    drop(mapped);
    let gc = json(&["cache", "gc", "--cache-dir", c, "--max-size", "0", "--json"]);
    assert_eq!((gc["entries_removed"].as_u64(), gc["bytes_left"].as_u64()), (Some(1), Some(0)), "{gc}");
    assert!(files(cache.path())
        .iter()
        .all(|p| !p.extension().is_some_and(|e| e == "npy" || e == "bin" || e == "json" || e == "so")));
}

#[test]
fn the_fault_hook_travels_with_the_tasks_to_every_mode() {
    // The binary parses GRIDKEY_FAULT once; workers get it with each task, not from their own
    // environment, so a process-mode run meets the same full disk as a serial one.
    for mode in ["serial", "thread", "process"] {
        let cache = tempfile::tempdir().unwrap();
        let grid = grid();
        let args =
            ["run", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.path().to_str().unwrap(), "--mode", mode];
        let out = cmd(&args, &[("GRIDKEY_FAULT", "enospc:100:translation-v2")]).output().unwrap();
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "{mode}: {t}");
        assert!(t.contains("No space left on device") && !t.contains("panicked"), "{mode}: {t}");
        assert!(
            files(&cache.path().join(gridkey_fingerprint::TRANSLATION_DIR)).is_empty(),
            "{mode}: nothing under a final name"
        );
    }
}

#[test]
fn a_bad_fault_hook_is_a_clear_error_naming_the_variable() {
    let cache = tempfile::tempdir().unwrap();
    let out = run(cache.path(), &[], &[("GRIDKEY_FAULT", "pause:later")]);
    let t = text(&out);
    assert!(!out.status.success() && !t.contains("panicked"), "{t}");
    assert!(t.contains("GRIDKEY_FAULT") && t.contains("\"later\" is not a pause point"), "{t}");
    assert!(files(cache.path()).is_empty(), "nothing written: {t}");
}
