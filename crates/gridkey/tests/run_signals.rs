//! `gridkey run --mode process` against signals from outside (ADR 0010): the parent killed with
//! SIGKILL, Ctrl-C (SIGINT) on the parent, and one worker killed by its process id. The C
//! compiler is a script that sleeps before running `cc`, so that the workers are busy when the
//! signal arrives.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::procs::{children, descendants, exited};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data").join(rel)
}

/// A C compiler command that sleeps `seconds` before each build (not before the identity probes
/// `--version` and `-dumpmachine`), then runs `cc`.
fn slow_cc(dir: &Path, seconds: u32) -> String {
    let path = dir.join(format!("slow-cc-{seconds}.sh"));
    let script = format!("#!/bin/sh\ncase \" $* \" in *\" -shared \"*) sleep {seconds};; esac\nexec cc \"$@\"\n");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_owned()
}

fn gridkey_run(cache: &Path, cc: Option<&str>, json: bool) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gridkey"));
    let grid = data("grids/oQU480.231010.nc");
    cmd.args([
        "run",
        "--grid",
        grid.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--mode",
        "process",
        "--jobs",
        "2",
    ]);
    if json {
        cmd.arg("--json");
    }
    for var in gridkey::environment() {
        cmd.env_remove(var);
    }
    if let Some(cc) = cc {
        cmd.env("CC", cc);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// Waits until `run` has `n` workers that each run a child (the C compiler): busy workers.
fn busy_workers(run: &Child, n: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let busy: Vec<u32> = children(run.id()).into_iter().filter(|&w| !children(w).is_empty()).collect();
        if busy.len() >= n {
            return busy;
        }
        assert!(Instant::now() < deadline, "no {n} busy workers under gridkey run (pid {})", run.id());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asserts that every process of `pids` exits within `limit`.
fn all_exit_within(pids: &[u32], limit: Duration, what: &str) {
    let start = Instant::now();
    while !pids.iter().all(|&p| exited(p)) {
        let left: Vec<_> = pids.iter().filter(|&&p| !exited(p)).collect();
        assert!(start.elapsed() < limit, "{what}: {left:?} still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a process this test started (or one of its workers).
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn sigkill_of_the_parent_stops_every_busy_worker_within_a_second() {
    let cache = tempfile::tempdir().unwrap();
    let cc = slow_cc(cache.path(), 60);
    let mut run = gridkey_run(cache.path(), Some(&cc), false).spawn().unwrap();
    let workers = busy_workers(&run, 2);
    let mut everything = workers.clone();
    for &w in &workers {
        everything.extend(descendants(w));
    }
    signal(run.id(), libc::SIGKILL);
    run.wait().unwrap();
    all_exit_within(&workers, Duration::from_secs(1), "workers of a killed parent");
    all_exit_within(&everything, Duration::from_secs(1), "the workers' C compilers");
}

#[test]
fn ctrl_c_stops_the_workers_exits_130_and_leaves_a_consistent_cache() {
    let cache = tempfile::tempdir().unwrap();
    let cc = slow_cc(cache.path(), 60);
    let run = gridkey_run(cache.path(), Some(&cc), false).spawn().unwrap();
    let workers = busy_workers(&run, 2);
    let mut everything = workers.clone();
    for &w in &workers {
        everything.extend(descendants(w));
    }
    signal(run.id(), libc::SIGINT);
    let out = run.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(stderr.contains("interrupted; stopped 2 build workers"), "{stderr}");
    all_exit_within(&everything, Duration::from_secs(1), "workers after Ctrl-C");

    // The cache is consistent: the next run completes every program, and, stderr not being a
    // terminal, shows progress as plain lines.
    let out = gridkey_run(cache.path(), None, false).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("8/8 programs verified"), "{stdout}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("gridkey: [")).collect();
    assert_eq!(lines.len(), 8, "{stderr}");
    assert!(lines.last().unwrap().starts_with("gridkey: [8/8] "), "{stderr}");
    let word = |l: &str| ["hit", "hit, built", "compiled"].into_iter().find(|w| l.contains(&format!(" {w} (")));
    assert!(lines.iter().all(|l| word(l).is_some() && l.ends_with(" s elapsed)")), "{stderr}");
    assert!(lines.iter().any(|l| word(l) == Some("compiled")), "the interrupted programs are compiled now: {stderr}");
    assert!(!stderr.contains('\r') && !stderr.contains('\x1b'), "no bar, no escapes: {stderr:?}");

    // And the run after it takes every program from the cache, which its lines say.
    let out = gridkey_run(cache.path(), None, false).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stdout.contains("8/8 programs verified"), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("gridkey: [")).collect();
    assert_eq!(lines.len(), 8, "{stderr}");
    assert!(lines.iter().all(|l| word(l) == Some("hit")), "{stderr}");
}

#[test]
fn a_worker_killed_from_outside_fails_one_program_and_the_next_run_hits_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    let cc = slow_cc(cache.path(), 1);
    let run = gridkey_run(cache.path(), Some(&cc), true).spawn().unwrap();
    let victim = busy_workers(&run, 1)[0];
    signal(victim, libc::SIGKILL);
    let out = run.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let programs = report["programs"].as_array().unwrap();
    let failed: Vec<_> = programs.iter().filter(|p| p["verified"] != true).collect();
    assert_eq!(failed.len(), 1, "{stdout}");
    assert_eq!(programs.len() - failed.len(), 7);
    let error = failed[0]["error"].as_str().unwrap();
    let name = failed[0]["program"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("program {name}: build worker (pid {victim}) died: killed by signal 9 (SIGKILL)")),
        "{error}"
    );

    let out = gridkey_run(cache.path(), None, false).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Every translation comes from the cache; the libraries are built again because the
    // compiler command (part of the build cache's key) changed from the sleeping script to cc.
    assert!(
        stdout.contains("8/8 programs verified") && stdout.contains("8 cache hits, 0 misses, 0 translations"),
        "{stdout}"
    );
}

#[test]
fn the_build_timeout_kills_hung_compilations_and_fails_each_program() {
    let cache = tempfile::tempdir().unwrap();
    let cc = slow_cc(cache.path(), 60);
    let mut cmd = gridkey_run(cache.path(), Some(&cc), true);
    cmd.env("GRIDKEY_BUILD_TIMEOUT", "0.5");
    let run = cmd.spawn().unwrap();
    let run_pid = run.id();
    let out = run.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    for p in report["programs"].as_array().unwrap() {
        let error = p["error"].as_str().unwrap();
        assert!(
            error.contains("ran past the per-task timeout (GRIDKEY_BUILD_TIMEOUT) of 0.5 s and was killed"),
            "{error}"
        );
    }
    assert!(children(run_pid).is_empty());
    // No sleeping compiler is left behind: each was killed with its worker's process group (a
    // process killed just before the run exited may take a moment to be scheduled and die on a
    // loaded machine, so the check is repeated for up to two seconds).
    let left = || -> Vec<_> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| !exited(e.file_name().to_str().and_then(|s| s.parse().ok()).unwrap_or(0)))
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|cmd| String::from_utf8_lossy(cmd).contains(&cc))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while !left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(left().is_empty(), "{} compiler processes left", left().len());
}
