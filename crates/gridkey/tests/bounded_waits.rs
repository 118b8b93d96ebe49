//! Bounded waits and stray files (ADR 0033) with real processes: a run stopped (`SIGSTOP`) while
//! it holds a per-key lock delays another run on the cache by at most `GRIDKEY_LOCK_WAIT`, in
//! every mode, with a warning naming the lock; stray entries in `locks/` and `runs/` are skipped
//! with warnings naming them and stop neither a run nor `cache gc`; and `cache gc` works while a
//! process that is not a live run holds a lock on a file of `runs/`.
//!
//! Every wait for a child has a limit of its own, so that code that waits without end fails here
//! instead of hanging the test.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{data, gridkey_command};

/// The bound of the lock waits of these tests, seconds: past the first progress line (2 s).
const WAIT: &str = "3";

/// Longest a run of these tests may take before it counts as hung.
const HUNG: Duration = Duration::from_secs(150);

/// `gridkey run --json` on the small MPAS grid into `cache`, in `mode` with 2 jobs, with `env`.
fn spawn_run(cache: &Path, mode: &str, env: &[(&str, &str)]) -> Child {
    let grid = data("grids/oQU480.231010.nc");
    let args = ["run", "--mode", mode, "--jobs", "2", "--json", "--grid", grid.to_str().unwrap(), "--cache-dir"];
    gridkey_command(&args, env).arg(cache).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Waits for `child` at most `limit`; kills it and fails past it (the code before ADR 0033
/// waits without end).
fn finish(mut child: Child, limit: Duration, what: &str) -> (Output, Duration) {
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), started.elapsed());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{what}: still running after {limit:?}, killed; stderr:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The report of a run that exited 0 with every program verified.
fn verified(out: &Output, what: &str) -> gridkey::RunReport {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout));
    let report: gridkey::RunReport = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert!(report.all_verified(), "{what}: {:?}", report.programs.iter().map(|p| &p.error).collect::<Vec<_>>());
    report
}

/// A C compiler command that, while the file `<dir>/slow` exists, sleeps `seconds` before each
/// build (not before the identity probes), then runs `cc`. One script for every run, so that
/// all runs have one compiler identity and so one build key per program (ADR 0022).
fn slow_cc(dir: &Path, seconds: u32) -> String {
    let path = dir.join(format!("slow-cc-{seconds}.sh"));
    let slow = dir.join("slow");
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in *\" -shared \"*) [ -e '{}' ] && sleep {seconds};; esac\nexec cc \"$@\"\n",
        slow.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Child processes of `pid` (from every thread's `children` list).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out
}

/// `pid` and every process under it.
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut next = children(pid);
    while let Some(p) = next.pop() {
        next.extend(children(p));
        all.push(p);
    }
    all
}

fn signal(pids: &[u32], sig: i32) {
    for &pid in pids {
        // SAFETY: kill(2) on a process this test started, or one under it.
        unsafe { libc::kill(pid as i32, sig) };
    }
}

/// A process that takes an exclusive `flock` on `path` (created if needed) and then stops
/// itself: a holder that never lets go while stopped. Returns once the lock is held.
fn stopped_holder(path: &Path) -> Child {
    let script = format!("exec 9<>'{}' && flock 9 && kill -STOP $$ && exec sleep 600", path.display());
    let child = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Command::new("flock").arg("-n").arg(path).arg("true").status().unwrap().success() {
        assert!(Instant::now() < deadline, "the holder of {} did not take its lock", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The translation keys of the main job on the small grid, by program, from a run into `cache`.
fn keys(cache: &Path) -> Vec<(String, String)> {
    let (out, _) = finish(spawn_run(cache, "serial", &[]), HUNG, "the run that learns the keys");
    let report = verified(&out, "the run that learns the keys");
    report.programs.iter().map(|p| (p.program.clone(), p.key.clone().expect("a key"))).collect()
}

fn locks_dir(cache: &Path) -> PathBuf {
    cache.join(gridkey_fs::lock::LOCKS_DIR)
}

fn warned<'a>(report: &'a gridkey::RunReport, path: &Path) -> Option<&'a gridkey::cache::CacheWarning> {
    report.warnings.iter().find(|w| w.path == path)
}

#[test]
fn a_run_stopped_while_it_builds_delays_another_run_by_at_most_the_lock_wait() {
    let work = tempfile::tempdir().unwrap();
    let cc = slow_cc(work.path(), 600);
    // Its own work: a cold run in process mode on a cache of its own.
    let alone = spawn_run(&work.path().join("alone"), "process", &[("CC", &cc)]);
    let (out, own_work) = finish(alone, HUNG, "the run alone");
    verified(&out, "the run alone");

    let cache = work.path().join("cache");
    std::fs::write(work.path().join("slow"), b"").unwrap();
    let holder = spawn_run(&cache, "serial", &[("CC", &cc)]);
    // Once its compiler runs, the serial run holds the build lock of its first program.
    let deadline = Instant::now() + Duration::from_secs(60);
    let build_lock = loop {
        let held = std::fs::read_dir(locks_dir(&cache))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("build-")));
        if let (Some(lock), true) = (held, tree(holder.id()).len() > 2) {
            break lock;
        }
        assert!(Instant::now() < deadline, "the slow run never started a build");
        std::thread::sleep(Duration::from_millis(20));
    };
    let stopped = tree(holder.id());
    signal(&stopped, libc::SIGSTOP);
    std::fs::remove_file(work.path().join("slow")).unwrap();

    let waiter = spawn_run(&cache, "process", &[("GRIDKEY_LOCK_WAIT", WAIT), ("CC", &cc)]);
    let result = std::panic::catch_unwind(|| finish(waiter, HUNG, "the run beside a stopped lock holder"));
    signal(&stopped, libc::SIGKILL);
    let mut holder = holder;
    let _ = holder.wait();
    let (out, took) = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
    let report = verified(&out, "the run beside a stopped lock holder");
    let warning = warned(&report, &build_lock)
        .unwrap_or_else(|| panic!("no warning naming {build_lock:?}: {:?}", report.warnings));
    assert!(warning.message.contains("held by another process"), "{}", warning.message);
    assert!(warning.message.contains("3.0 s"), "{}", warning.message);
    let bound = Duration::from_secs(3) + own_work * 2 + Duration::from_secs(10);
    assert!(took >= Duration::from_secs(3) && took < bound, "took {took:?}; alone {own_work:?}");
}

#[test]
fn in_every_mode_a_stopped_holder_of_a_translation_lock_costs_one_bounded_wait_with_a_warning() {
    let work = tempfile::tempdir().unwrap();
    let keys = keys(&work.path().join("keys"));
    let (program, key) = &keys[0];
    for mode in ["serial", "thread", "process"] {
        let cache = work.path().join(mode);
        let lock = locks_dir(&cache).join(format!("translation-{key}.lock"));
        std::fs::create_dir_all(locks_dir(&cache)).unwrap();
        let mut holder = stopped_holder(&lock);
        let result =
            std::panic::catch_unwind(|| finish(spawn_run(&cache, mode, &[("GRIDKEY_LOCK_WAIT", WAIT)]), HUNG, mode));
        holder.kill().unwrap();
        holder.wait().unwrap();
        let (out, took) = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
        let report = verified(&out, mode);
        let warning = warned(&report, &lock)
            .unwrap_or_else(|| panic!("{mode}: no warning naming {lock:?}: {:?}", report.warnings));
        assert!(warning.message.contains(&format!("translation key {key}")), "{mode}: {}", warning.message);
        assert!(took >= Duration::from_secs(3), "{mode}: {took:?}");
        let p = report.programs.iter().find(|p| &p.program == program).unwrap();
        assert!(p.translated && p.lock_seconds >= 3.0, "{mode}: {p:?}");
        // The progress reporter shows the wait while it lasts, in process mode too (the worker
        // marks the line, the pool shows it in the parent), once and unmarked.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = format!("gridkey: waiting for the lock {}", lock.display());
        assert!(stderr.contains(&line), "{mode}: no progress line {line:?} in\n{stderr}");
        assert!(!stderr.contains(gridkey_jobs::protocol::PROGRESS_MARK), "{mode}: a marked line in\n{stderr}");
    }
}

#[test]
fn stray_entries_in_locks_and_runs_are_skipped_with_warnings_naming_them() {
    let work = tempfile::tempdir().unwrap();
    let keys = keys(&work.path().join("keys"));
    let cache = work.path().join("cache");
    let (locks, runs) = (locks_dir(&cache), cache.join(gridkey::cache::RUNS_DIR));
    std::fs::create_dir_all(&locks).unwrap();
    std::fs::create_dir_all(&runs).unwrap();
    // A directory where a program's lock file is expected, a file of a foreign name, a symlink
    // and a socket (which no open can read) in `locks/`; the same kinds in `runs/`.
    let in_place = locks.join(format!("translation-{}.lock", keys[0].1));
    std::fs::create_dir(&in_place).unwrap();
    let strays = [
        in_place.clone(),
        locks.join("notes.txt"),
        locks.join("build-00ff.lock"),
        locks.join("translation-0123.lock"),
        runs.join("old.run"),
        runs.join("notes.txt"),
        runs.join("link.run"),
        runs.join("socket.run"),
    ];
    std::fs::write(&strays[1], b"not a lock").unwrap();
    std::os::unix::fs::symlink("/nonexistent/lock", &strays[2]).unwrap();
    let _lock_socket = std::os::unix::net::UnixListener::bind(&strays[3]).unwrap();
    std::fs::create_dir(&strays[4]).unwrap();
    std::fs::write(&strays[5], b"not a run").unwrap();
    std::os::unix::fs::symlink("/nonexistent/run", &strays[6]).unwrap();
    let _run_socket = std::os::unix::net::UnixListener::bind(&strays[7]).unwrap();

    for mode in ["serial", "process"] {
        let (out, _) = finish(spawn_run(&cache, mode, &[]), HUNG, mode);
        let report = verified(&out, mode);
        for stray in &strays {
            assert!(warned(&report, stray).is_some(), "{mode}: no warning naming {stray:?}: {:?}", report.warnings);
        }
        // No warning names anything else: the path named is the stray entry's.
        for w in &report.warnings {
            assert!(strays.contains(&w.path), "{mode}: warning about {:?}: {}", w.path, w.message);
        }
    }
    let out = gridkey_command(&["cache", "gc", "--max-size", "0", "--json", "--cache-dir"], &[])
        .arg(&cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let gc: gridkey::cache::GcReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(gc.bytes_left, 0, "{gc:?}");
    for stray in &strays {
        assert!(gc.warnings.iter().any(|w| &w.path == stray), "gc: no warning naming {stray:?}: {:?}", gc.warnings);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&format!("gridkey: warning: {}: ", stray.display())), "{stderr}");
    }
}

#[test]
fn gc_works_while_a_process_that_is_not_a_live_run_holds_a_lock_on_a_file_of_runs() {
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let (out, _) = finish(spawn_run(&cache, "serial", &[]), HUNG, "the run that fills the cache");
    verified(&out, "the run that fills the cache");
    let runs = cache.join(gridkey::cache::RUNS_DIR);
    // A file that is no registration, and the registration of a run that has ended (the pid of
    // a child that was reaped), both locked by a foreign process and dated before every entry.
    let foreign = runs.join("foreign.run");
    std::fs::write(&foreign, b"").unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let stale = runs.join(format!("{pid}-stale.run"));
    let host = String::from_utf8(Command::new("hostname").output().unwrap().stdout).unwrap();
    let registration = serde_json::json!({
        "format": gridkey::cache::REGISTRATION_FORMAT,
        "pid": pid,
        "process_start": 1,
        "host": host.trim(),
    });
    std::fs::write(&stale, registration.to_string()).unwrap();
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    let mut holders = Vec::new();
    for path in [&foreign, &stale] {
        std::fs::File::options().write(true).open(path).unwrap().set_modified(an_hour_ago).unwrap();
        holders.push(stopped_holder(path));
    }
    let out = gridkey_command(&["cache", "gc", "--max-size", "0", "--json", "--cache-dir"], &[]).arg(&cache).output();
    for mut h in holders {
        h.kill().unwrap();
        h.wait().unwrap();
    }
    let out = out.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let gc: gridkey::cache::GcReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((gc.live_runs, gc.kept_for_live_runs, gc.bytes_left), (0, 0, 0), "{gc:?}");
    assert!(gc.entries_removed > 0, "{gc:?}");
    for (path, says) in [(&foreign, "not a gridkey run"), (&stale, "which has ended")] {
        let w = gc
            .warnings
            .iter()
            .find(|w| &w.path == path)
            .unwrap_or_else(|| panic!("no warning naming {path:?}: {gc:?}"));
        assert!(w.message.contains(says), "{}", w.message);
    }
}
