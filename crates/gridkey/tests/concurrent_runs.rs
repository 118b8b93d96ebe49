//! Many processes, one cache (ADR 0025, ADR 0026): concurrent runs on one empty cache translate
//! and build each program once in all, and `gridkey cache gc --max-size 0` in a loop beside a run
//! harms none of its programs.

use crate::common;

use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

#[test]
fn gc_to_size_zero_in_a_loop_beside_a_run_harms_none_of_its_programs() {
    for mode in ["process", "serial"] {
        let cache = tempfile::tempdir().unwrap();
        let run = spawn_run(cache.path(), mode);
        let done = Arc::new(AtomicBool::new(false));
        let looping = {
            let (done, dir) = (done.clone(), cache.path().to_path_buf());
            std::thread::spawn(move || {
                let mut loops = 0u32;
                while !done.load(Ordering::SeqCst) {
                    let out = gridkey_command(&["cache", "gc", "--max-size", "0", "--json", "--cache-dir"], &[])
                        .arg(&dir)
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    loops += 1;
                }
                loops
            })
        };
        let r = report(run);
        done.store(true, Ordering::SeqCst);
        let loops = looping.join().unwrap();
        assert!(r.all_verified(), "{mode}: {:?}", r.programs.iter().map(|p| &p.error).collect::<Vec<_>>());
        assert!(loops > 0);
        // Once the run is over, the same collection removes everything: it was not idle.
        let out = gridkey_command(&["cache", "gc", "--max-size", "0", "--json", "--cache-dir"], &[])
            .arg(cache.path())
            .output()
            .unwrap();
        let after: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(after["bytes_left"], 0, "{mode}: {after}");
        assert_eq!(after["live_runs"], 0, "{mode}: {after}");
    }
}
