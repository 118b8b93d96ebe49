//! The fault matrix's row of ADR 0034: a stored table truncated while a process-mode run's
//! parent and worker have it mapped. The parent reads tables only through `pread`, so it ends
//! with a report of every program, the failed ones naming the table, and the next run rewrites
//! the table and verifies every program.

use std::os::unix::fs::PermissionsExt;

use anyhow::{bail, Context, Result};
use gridkey_store::TableStore;

use super::{check_final_files, s, Matrix, Run, Seen};

/// The rows of this file.
pub(super) fn rows(m: &mut Matrix) {
    m.row(
        "truncated mapped table in process mode",
        "parent reports all; next run repairs, 8/8",
        truncated_while_mapped,
    );
}

/// A compiler that truncates the ICON grid's C2E table to 0 bytes before every build, then runs
/// `cc`, so the table is cut while the building worker and the parent have it mapped.
fn truncated_while_mapped(m: &mut Matrix) -> Result<Seen> {
    let cache = m.fresh("truncated-map");
    std::fs::create_dir_all(&cache)?;
    let grid = gridkey_grid::read_grid(&m.icon)?;
    let row = gridkey::table_rows(&grid)?.into_iter().find(|r| r.offset == "C2E").context("ICON has C2E")?;
    let table = TableStore::open(&cache)?.path_of(&row.digest.parse()?);
    let cc = cache.with_extension("cc");
    std::fs::write(
        &cc,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" -shared \"*) [ -s '{t}' ] && chmod u+w '{t}' && truncate -s 0 '{t}' ;; esac\nexec cc \"$@\"\n",
            t = table.display()
        ),
    )?;
    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755))?;
    let run = |env: &[(&str, &str)]| -> Result<Run> {
        let args =
            ["run", "--grid", s(&m.icon), "--cache-dir", s(&cache), "--mode", "process", "--jobs", "1", "--json"];
        Run::of(m.gridkey(&args, env)?)
    };
    let first = run(&[("CC", s(&cc))])?;
    let report: gridkey::RunReport = match serde_json::from_str(&first.stdout) {
        Ok(report) => report,
        Err(_) => return Ok(Seen::new(false, &[], format!("no report from the parent: {}", first.why()))),
    };
    let failed: Vec<_> = report.programs.iter().filter(|p| !p.verified).collect();
    let named =
        failed.iter().all(|p| p.error.as_deref().is_some_and(|e| e.contains(s(&table)) || e.contains("SIGBUS")));
    let second = run(&[])?;
    let problems = check_final_files(&cache);
    if !table.exists() {
        bail!("the next run left no table at {}", table.display());
    }
    let survived = first.code == Some(1) && report.programs.len() == 8 && named && second.ok();
    Ok(Seen::new(
        survived,
        &problems,
        format!(
            "parent exit {:?}, {} reported, {} failed naming the table; next run {}/{} verified",
            first.code,
            report.programs.len(),
            failed.len(),
            second.verified,
            second.programs
        ),
    ))
}
