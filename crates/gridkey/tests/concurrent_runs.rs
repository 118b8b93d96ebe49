//! Many processes, one cache (ADR 0017): concurrent runs on one empty cache translate and build
//! each program once in all.

mod common;

use std::process::{Child, Stdio};

use common::{data, gridkey_command};

fn spawn_run(cache: &std::path::Path, mode: &str) -> Child {
    let grid = data("grids/oQU480.231010.nc");
    let args = ["run", "--mode", mode, "--jobs", "2", "--json", "--grid", grid.to_str().unwrap(), "--cache-dir"];
    gridkey_command(&args, &[]).arg(cache).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn report(child: Child) -> gridkey::RunReport {
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", String::from_utf8_lossy(&out.stdout));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

#[test]
fn eight_concurrent_runs_on_one_empty_cache_translate_and_build_each_program_once() {
    let cache = tempfile::tempdir().unwrap();
    let runs: Vec<Child> = (0..8).map(|_| spawn_run(cache.path(), "serial")).collect();
    let reports: Vec<gridkey::RunReport> = runs.into_iter().map(report).collect();
    let programs = reports[0].programs.len();
    for r in &reports {
        assert!(r.all_verified(), "{:?}", r.programs.iter().map(|p| &p.error).collect::<Vec<_>>());
    }
    let translations: usize = reports.iter().map(|r| r.translations()).sum();
    let builds: usize = reports.iter().map(|r| r.builds()).sum();
    assert_eq!((translations, builds), (programs, programs), "one translation and one build per program in all");
}
