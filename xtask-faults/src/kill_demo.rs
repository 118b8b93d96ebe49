//! `cargo xtask kill-demo [--grid FILE]` (ADR 0010): `gridkey run --mode process` on the ICON
//! grid with one worker killed from outside, by its process id, in the middle of a task (while
//! its C compiler runs). The run must report exactly that program as failed with the signal and
//! verify the others; a second run on the same cache must verify every program with every
//! translation served from the cache.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gridkey::RunReport;

use crate::procs::{children, exited};

/// Runs the demo with `gridkey_bin`; `Ok(true)` when the killed worker failed only its program
/// and the second run verified everything from the cache.
///
/// Errors: the runs cannot be started or print no report.
pub fn kill_demo(args: &[String], gridkey_bin: &Path) -> Result<bool> {
    let grid = crate::grid_arg(args)?;
    let cache = tempfile::Builder::new().prefix("gridkey-kill-demo-").tempdir_in(crate::root().join("target"))?;
    let run = |json: bool| -> Command {
        let mut cmd = Command::new(gridkey_bin);
        cmd.args(["run", "--mode", "process", "--jobs", "2", "--grid"]).arg(&grid).arg("--cache-dir").arg(cache.path());
        if json {
            cmd.arg("--json");
        }
        cmd.env_remove("GRIDKEY_BUILD_TIMEOUT").stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    };

    let first = run(true).spawn().context("cannot start gridkey run")?;
    let victim = busy_worker(&first)?;
    // SAFETY: kill(2) on a worker process of the run this command started.
    if unsafe { libc::kill(victim as i32, libc::SIGKILL) } != 0 {
        bail!("cannot kill worker {victim}: {}", std::io::Error::last_os_error());
    }
    println!("killed worker pid {victim} with SIGKILL while its C compiler ran");
    let out = first.wait_with_output()?;
    let report: RunReport = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("the first run printed no report: {}", String::from_utf8_lossy(&out.stderr)))?;
    let failed: Vec<_> = report.programs.iter().filter(|p| !p.verified).collect();
    println!(
        "first run: exit status {}, {}/{} programs verified",
        out.status.code().unwrap_or(-1),
        report.programs.len() - failed.len(),
        report.programs.len()
    );
    for p in &failed {
        println!("  FAILED {}: {}", p.program, p.error.as_deref().unwrap_or("-"));
    }
    let signal_named = failed.len() == 1
        && failed[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains(&format!("pid {victim}")) && e.contains("killed by signal 9 (SIGKILL)"));

    let out = run(false).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    print!("second run:\n{text}");
    let second_ok = out.status.success()
        && text.contains(&format!("{n}/{n} programs verified", n = report.programs.len()))
        && text.contains(&format!("{} cache hits, 0 misses, 0 translations", report.programs.len()));
    let ok = out.status.code().is_some() && signal_named && second_ok;
    println!(
        "\nkill demo: {} (one program failed with the signal: {signal_named}; second run all verified from the cache: {second_ok})",
        if ok { "passed" } else { "FAILED" }
    );
    Ok(ok)
}

/// A worker of `run` that has a child process (its C compiler): a worker in the middle of a task.
fn busy_worker(run: &Child) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        if let Some(w) = children(run.id()).into_iter().find(|&w| !children(w).is_empty()) {
            return Ok(w);
        }
        if exited(run.id()) {
            bail!("gridkey run (pid {}) ended before a worker could be caught running its C compiler", run.id());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    bail!("no worker of gridkey run (pid {}) ever ran a C compiler", run.id())
}
