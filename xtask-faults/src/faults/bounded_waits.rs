//! The fault matrix's rows of ADR 0033: a run stopped (`SIGSTOP`) while it holds a per-key lock
//! inside a build, beside another run that must finish within `GRIDKEY_LOCK_WAIT` plus its own
//! work; and stray entries in `locks/` and `runs/` that must stop neither a run nor `cache gc`.
//!
//! A row is **lost** when a file under a final name is not what its name says afterwards.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{check_final_files, s, Matrix, Run, Seen};

/// The bound of the rows' lock waits, seconds.
const LOCK_WAIT: &str = "2";

/// Longest a run of these rows may take before it counts as hung (the code before ADR 0033
/// waits without end).
const HUNG: Duration = Duration::from_secs(180);

pub(super) fn rows(m: &mut Matrix) {
    m.row(
        "stopped lock holder (SIGSTOP run inside a build)",
        "other run done in wait + own work, warns the lock",
        stopped_holder,
    );
    m.row("stray entries in locks/ and runs/", "run and gc ok, a warning names each entry", stray_entries);
}

/// `pid` and every process under it.
fn tree(pid: u32) -> Vec<u32> {
    let children = |pid: u32| -> Vec<u32> {
        let mut out = Vec::new();
        for task in fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let text = fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        out
    };
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
        // SAFETY: kill(2) on a process this row started, or one under it.
        unsafe { libc::kill(pid as i32, sig) };
    }
}

/// Waits for `child` at most [`HUNG`]; kills it past that.
fn finish(mut child: Child) -> Result<(Run, Duration)> {
    let started = Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > HUNG {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the run was still waiting after {} s", HUNG.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((Run::of(child.wait_with_output()?)?, started.elapsed()))
}

fn spawn(m: &Matrix, cache: &Path, env: &[(&str, &str)]) -> Result<Child> {
    let args = ["run", "--grid", s(&m.grid), "--cache-dir", s(cache), "--mode", "process", "--jobs", "2", "--json"];
    m.cmd(&args, env).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("cannot start gridkey run")
}

/// The warnings of a run's JSON report.
fn warnings(run: &Run) -> Vec<gridkey::cache::CacheWarning> {
    serde_json::from_str::<gridkey::RunReport>(&run.stdout).map(|r| r.warnings).unwrap_or_default()
}

fn stopped_holder(m: &mut Matrix) -> Result<Seen> {
    let cache = m.fresh("lock-stopped");
    fs::create_dir_all(&cache)?;
    // One compiler for both runs (one build key per program), slow only while `slow` exists.
    let (cc, slow) = (cache.join("slow-cc.sh"), cache.join("slow"));
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in *\" -shared \"*) [ -e '{}' ] && sleep 600;; esac\nexec cc \"$@\"\n",
        slow.display()
    );
    fs::write(&cc, script)?;
    fs::set_permissions(&cc, fs::Permissions::from_mode(0o755))?;
    let (_, own_work) = finish(spawn(m, &m.fresh("lock-alone"), &[("CC", s(&cc))])?)?;
    fs::write(&slow, b"")?;
    let args = ["run", "--grid", s(&m.grid), "--cache-dir", s(&cache), "--mode", "serial"];
    let mut holder = m.cmd(&args, &[("CC", s(&cc))]).stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
    let locks = cache.join(gridkey_fs::lock::LOCKS_DIR);
    let deadline = Instant::now() + Duration::from_secs(60);
    let lock = loop {
        let held = fs::read_dir(&locks)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("build-")));
        match held {
            Some(lock) if tree(holder.id()).len() > 2 => break lock,
            _ if Instant::now() > deadline => {
                let _ = holder.kill();
                bail!("the slow run never started a build");
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let stopped = tree(holder.id());
    signal(&stopped, libc::SIGSTOP);
    fs::remove_file(&slow)?;
    let waited = spawn(m, &cache, &[("GRIDKEY_LOCK_WAIT", LOCK_WAIT), ("CC", s(&cc))]).and_then(finish);
    signal(&stopped, libc::SIGKILL);
    let _ = holder.wait();
    let (run, took) = waited?;
    let named = warnings(&run).iter().any(|w| w.path == lock && w.message.contains("held by another process"));
    let bound = Duration::from_secs(2) + own_work * 2 + Duration::from_secs(10);
    Ok(Seen::new(
        run.ok() && named && took < bound,
        &check_final_files(&cache),
        format!(
            "run {} in {:.1} s (alone {:.1} s), warning names {}: {named}",
            run.summary(),
            took.as_secs_f64(),
            own_work.as_secs_f64(),
            lock.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        ),
    ))
}

fn stray_entries(m: &mut Matrix) -> Result<Seen> {
    let cache = m.filled("strays")?;
    let (locks, runs) = (cache.join(gridkey_fs::lock::LOCKS_DIR), cache.join(gridkey::cache::RUNS_DIR));
    fs::create_dir_all(&locks)?;
    fs::create_dir_all(&runs)?;
    let strays: Vec<PathBuf> = vec![
        locks.join("translation-00000000000000000000000000000000.lock"),
        locks.join("notes.txt"),
        locks.join("build-00ff.lock"),
        runs.join("old.run"),
        runs.join("notes.txt"),
        runs.join("link.run"),
    ];
    fs::create_dir(&strays[0])?;
    fs::write(&strays[1], b"not a lock")?;
    std::os::unix::fs::symlink("/nonexistent/lock", &strays[2])?;
    fs::create_dir(&strays[3])?;
    fs::write(&strays[4], b"not a run")?;
    std::os::unix::fs::symlink("/nonexistent/run", &strays[5])?;
    let run = m.run(&cache, &[], &[])?;
    let run_warned = warnings(&run);
    let gc = m.gridkey(&["cache", "gc", "--cache-dir", s(&cache), "--max-size", "0", "--json"], &[])?;
    let gc_report: gridkey::cache::GcReport = serde_json::from_slice(&gc.stdout).unwrap_or_default();
    let named =
        |ws: &[gridkey::cache::CacheWarning]| strays.iter().filter(|p| ws.iter().any(|w| &w.path == *p)).count();
    let (in_run, in_gc) = (named(&run_warned), named(&gc_report.warnings));
    for stray in &strays {
        let _ = fs::remove_dir(stray).or_else(|_| fs::remove_file(stray));
    }
    Ok(Seen::new(
        run.ok() && gc.status.success() && in_run == strays.len() && in_gc == strays.len() && gc_report.bytes_left == 0,
        &check_final_files(&cache),
        format!(
            "run {}; {in_run}/{n} named in the run, {in_gc}/{n} by gc, which left {} bytes",
            run.summary(),
            gc_report.bytes_left,
            n = strays.len()
        ),
    ))
}
