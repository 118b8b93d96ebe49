//! A stored table truncated while a process-mode run has it mapped (ADR 0034): the parent and
//! its worker both map the table, the C compiler truncates it in the middle of the run, and the
//! parent must end with a report of every program (it reads the tables only through `pread`,
//! never through its mapping), the failed ones naming the table, and the next run repairs the
//! table and verifies every program. Before ADR 0034 the parent read its mapping when it
//! repaired the table and died of `SIGBUS`, without a report.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use gridkey_digest::{Dtype, TableDigest};
use gridkey_store::{TableSpec, TableStore};

/// How far the compiler script truncates the table.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// To 0 bytes.
    Empty,
    /// To half its length (the header and half the element data stay).
    Half,
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The spec of the ICON grid's C2E table, from `gridkey tables --json` (its digest names its file).
fn c2e_spec(grid: &Path) -> TableSpec {
    let out = common::gridkey_command(&["tables", "--grid", grid.to_str().unwrap(), "--json"], &[]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["offset"] == "C2E").expect("ICON has C2E");
    assert_eq!(row["dtype"], "<i4");
    let digest: TableDigest = row["digest"].as_str().unwrap().parse().unwrap();
    let shape = [row["shape"][0].as_u64().unwrap() as usize, row["shape"][1].as_u64().unwrap() as usize];
    TableSpec { digest, dtype: Dtype::I32, shape }
}

/// A C compiler that truncates `table` (when it is not empty) before every build, then runs `cc`:
/// the table is truncated while the worker that builds and the parent have it mapped.
fn truncating_compiler(dir: &Path, table: &Path, cut: Cut) -> PathBuf {
    let size = match cut {
        Cut::Empty => "0".to_owned(),
        Cut::Half => "$(( $(stat -c %s \"$table\") / 2 ))".to_owned(),
    };
    let script = dir.join("cc-truncating");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntable='{}'\ncase \" $* \" in\n  *\" -shared \"*)\n    if [ -s \"$table\" ]; then\n      chmod u+w \"$table\"\n      truncate -s {size} \"$table\"\n    fi ;;\nesac\nexec cc \"$@\"\n",
            table.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn check(cut: Cut) {
    let cache = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let grid = common::data("grids/icon_grid_0013_R02B04_R.nc");
    let spec = c2e_spec(&grid);
    let table = TableStore::open(cache.path()).unwrap().path_of(&spec.digest);
    let cc = truncating_compiler(bin.path(), &table, cut);
    let run = |env: &[(&str, &str)]| {
        let args = [
            "run",
            "--grid",
            grid.to_str().unwrap(),
            "--cache-dir",
            cache.path().to_str().unwrap(),
            "--mode",
            "process",
            "--jobs",
            "1",
            "--json",
        ];
        common::gridkey_command(&args, env).output().unwrap()
    };

    let first = run(&[("CC", cc.to_str().unwrap())]);
    // One worker: the first program's build truncates C2E after its own translation, so the
    // programs after it find the table cut. Every repair rewrites it and the next build cuts it
    // again, so some programs fail and some verify; the parent reports all of them.
    assert_eq!(first.status.code(), Some(1), "{cut:?}: the parent ends with its report: {}", text(&first));
    let report: gridkey::RunReport = serde_json::from_slice(&first.stdout)
        .unwrap_or_else(|e| panic!("{cut:?}: a report on stdout ({e}): {}", text(&first)));
    assert_eq!(report.programs.len(), 8, "{cut:?}: every program is reported");
    let failed: Vec<_> = report.programs.iter().filter(|p| !p.verified).collect();
    assert!(!failed.is_empty() && failed.len() < 8, "{cut:?}: {:?}", report.programs);
    for p in &failed {
        let error = p.error.as_deref().unwrap_or_default();
        assert!(
            error.contains(&table.display().to_string()) || error.contains("SIGBUS"),
            "{cut:?}: {} fails naming the table or the signal: {error}",
            p.program
        );
    }
    assert!(
        report.warnings.iter().any(|w| w.path == table && w.message.contains("changed after it was stored")),
        "{cut:?}: the repair is said: {:?}",
        report.warnings
    );

    // The next run, with the plain compiler, finds the table cut under its name, rewrites it and
    // verifies every program.
    let second = run(&[]);
    let out = text(&second);
    assert!(second.status.success(), "{cut:?}: {out}");
    let report: gridkey::RunReport = serde_json::from_slice(&second.stdout).unwrap();
    assert!(report.all_verified() && report.programs.len() == 8, "{cut:?}: {:?}", report.programs);
    assert!(report.warnings.iter().any(|w| w.path == table), "{cut:?}: the rewrite is said: {:?}", report.warnings);
    assert!(TableStore::open(cache.path()).unwrap().open_verified(&spec).is_ok(), "{cut:?}: the file is whole");
}

#[test]
fn a_table_truncated_to_nothing_while_mapped_costs_a_process_run_only_the_programs_that_read_it() {
    check(Cut::Empty);
}

#[test]
fn a_table_truncated_to_half_while_mapped_costs_a_process_run_only_the_programs_that_read_it() {
    check(Cut::Half);
}
