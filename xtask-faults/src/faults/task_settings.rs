//! The worker-handshake row of the fault matrix (ADR 0032): a restarted worker that never sends
//! its handshake must cost its own program only, within the deadline, and leave nothing running.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use gridkey::{RunConfig, StencilHandler};
use gridkey_jobs::{BuildJobs, BuildJobsMode, ProcessPool, Runner, WorkerCommand};

use super::{check_final_files, s, Matrix, Seen};

/// The handshake deadline of the row's pool.
const DEADLINE: Duration = Duration::from_secs(5);

/// The rows of this file, called from the matrix.
pub(super) fn rows(m: &mut Matrix) -> Result<()> {
    m.row(
        "silent worker: no handshake (process mode)",
        "its program fails naming it; group killed; rerun ok",
        silent_worker,
    );
    Ok(())
}

/// A worker command that, on its first start, leaves a sleeping child and waits without a
/// handshake (writing both pids to `dir/silent.pids`), and is the real `gridkey worker` after.
/// "First" is decided by an atomic `mkdir`, so that two workers started at once are never
/// both silent.
fn silent_once(dir: &Path, bin: &Path) -> Result<WorkerCommand> {
    let pids = dir.join("silent.pids");
    let script = dir.join("silent-once-worker");
    let body = format!(
        "#!/bin/sh\nif mkdir '{}' 2>/dev/null; then\n  sleep 600 &\n  echo \"$$ $!\" > '{}'\n  wait\nfi\nexec '{}' worker \"$@\"\n",
        s(&dir.join("silent.once")),
        s(&pids),
        s(bin)
    );
    std::fs::write(&script, body)?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok(WorkerCommand { program: script, args: Vec::new() })
}

fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

fn silent_worker(m: &mut Matrix) -> Result<Seen> {
    let cache = m.fresh("silent-worker");
    std::fs::create_dir_all(&cache)?;
    let worker = silent_once(m.work.path(), &m.bin)?;
    let program = worker.program.clone();
    let runner: Runner<StencilHandler> =
        Runner::Process(ProcessPool::new(worker.clone(), 2).with_handshake_deadline(DEADLINE));
    let config = RunConfig {
        grid: m.grid.clone(),
        settings: crate::settings_for(&cache, BuildJobs::new(BuildJobsMode::Process, 2)),
        worker,
        options: Default::default(),
    };
    let grid = gridkey_grid::read_grid(&m.grid)?;
    let started = Instant::now();
    let report = gridkey::run(
        &config,
        gridkey::RunOptions::new().grid(&grid).programs(&gridkey_stencil::icon_programs()).runner(&runner),
    )?;
    let took = started.elapsed();
    drop(runner);
    let pids: Vec<u32> = std::fs::read_to_string(m.work.path().join("silent.pids"))
        .context("the silent worker never started")?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    let failed: Vec<&gridkey::ProgramReport> = report.programs.iter().filter(|p| !p.verified).collect();
    let expected = format!("sent no handshake within {} s", DEADLINE.as_secs_f64());
    let named = failed.len() == 1
        && failed[0].error.as_deref().is_some_and(|e| {
            e.contains(&expected) && e.contains(s(&program)) && e.contains(&format!("pid {}", pids[0]))
        });
    let killed = pids.len() == 2 && pids.iter().all(|&pid| gone(pid));
    let rerun = m.run(&cache, &[], &[])?;
    let mut problems = check_final_files(&cache);
    if !killed {
        problems.push(format!("the silent worker or its child is still running: {pids:?}"));
    }
    let text = format!(
        "{}/{} verified in {:.1} s ({}); rerun {}",
        report.programs.len() - failed.len(),
        report.programs.len(),
        took.as_secs_f64(),
        failed.first().and_then(|p| p.error.as_deref()).unwrap_or("no program failed"),
        rerun.summary()
    );
    Ok(Seen::new(named && killed && rerun.ok(), &problems, text))
}
