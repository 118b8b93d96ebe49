//! The process runner with real `gridkey worker` processes (docs/design.md "Build jobs", ADR 0010, ADR 0013).

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey::{tasks_for, StencilHandler};
use gridkey_fingerprint::TranslationOptions;
use gridkey_jobs::{BuildJobs, BuildJobsMode, ProcessPool, Runner, TaskFailure, WorkerCommand};
use gridkey_offsets::{compile_time_offset_provider, Entry};
use gridkey_stencil::{icon_programs, CompileOutcome};
use gridkey_store::TableStore;

fn grid_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/grids").join(name)
}

fn worker() -> WorkerCommand {
    WorkerCommand::gridkey(PathBuf::from(env!("CARGO_BIN_EXE_gridkey")))
}

#[test]
fn workers_compile_every_program_and_the_pool_is_reused() {
    let grid = gridkey_grid::read_grid(&grid_path("oQU480.231010.nc")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let ct = Arc::new(compile_time_offset_provider(grid.provider(), &TableStore::open(cache.path()).unwrap()).unwrap());
    let programs = icon_programs();
    let tasks = tasks_for(&programs, &ct, &TranslationOptions::new(), &common::settings(cache.path()));
    let pool: ProcessPool<CompileOutcome> = ProcessPool::new(worker(), 2);

    let first = pool.run_all(&tasks);
    assert_eq!(pool.workers_started(), 2);
    let second = pool.run_all(&tasks);
    assert_eq!(pool.workers_started(), 2, "the second batch reuses the idle workers");
    for ((p, a), b) in programs.iter().zip(first).zip(second) {
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.program, p.name(), "submission order");
        assert!(a.translated, "{}: fresh cache", p.name());
        assert!(!b.translated && !b.built, "{}: cache hit in the second batch", p.name());
        assert_eq!(a.key, b.key);
    }
}

#[test]
fn only_the_workers_a_batch_needs_are_started() {
    let grid = gridkey_grid::read_grid(&grid_path("oQU480.231010.nc")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let ct = Arc::new(compile_time_offset_provider(grid.provider(), &TableStore::open(cache.path()).unwrap()).unwrap());
    let tasks = tasks_for(&icon_programs()[..1], &ct, &TranslationOptions::new(), &common::settings(cache.path()));
    let pool: ProcessPool<CompileOutcome> = ProcessPool::new(worker(), 8);
    assert!(pool.run_all(&tasks)[0].is_ok());
    assert_eq!(pool.workers_started(), 1);
}

#[test]
fn an_unreadable_table_fails_that_task_only() {
    let grid = gridkey_grid::read_grid(&grid_path("oQU480.231010.nc")).unwrap();
    let (good, bad) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let programs = icon_programs();
    let mut tasks = Vec::new();
    for dir in [good.path(), bad.path()] {
        let ct = Arc::new(compile_time_offset_provider(grid.provider(), &TableStore::open(dir).unwrap()).unwrap());
        tasks.extend(tasks_for(&programs[..2], &ct, &TranslationOptions::new(), &common::settings(dir)));
    }
    // Truncate C2E's table in the second cache after conversion.
    let store = TableStore::open(bad.path()).unwrap();
    let Some(Entry::Gather(c2e)) = tasks[2].provider.get("C2E") else { panic!("C2E is a gather") };
    let path = store.path_of(&c2e.digest());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();

    let runner = Runner::new(BuildJobs::new(BuildJobsMode::Process, 2), Arc::new(StencilHandler), worker());
    let results = runner.run_all(&tasks);
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    for r in &results[2..] {
        let e = r.as_ref().unwrap_err();
        match &e.cause {
            TaskFailure::Rehydrate(why) => {
                assert!(why.contains("offset C2E") && why.contains(&path.display().to_string()), "{why}")
            }
            other => panic!("expected a rehydration failure, got {other:?}"),
        }
    }
}

#[test]
fn a_worker_that_dies_or_talks_garbage_fails_its_tasks_with_the_cause() {
    let cache = tempfile::tempdir().unwrap();
    let ct = Arc::new(gridkey_offsets::CompileTimeOffsetProvider::new());
    let tasks = tasks_for(&icon_programs()[..2], &ct, &TranslationOptions::new(), &common::settings(cache.path()));
    let cases = [
        ("echo 'worker: cannot map tables' >&2; exit 3", "exit status 3", "cannot map tables"),
        ("kill -9 $$", "killed by signal 9 (SIGKILL)", "(nothing)"),
        ("echo 'hello, I am not a frame'", "stream ended inside a frame", "(nothing)"),
    ];
    for (script, status, tail) in cases {
        let command = WorkerCommand { program: "sh".into(), args: vec!["-c".into(), script.into()] };
        let runner = Runner::new(BuildJobs::new(BuildJobsMode::Process, 2), Arc::new(StencilHandler), command);
        for r in runner.run_all(&tasks) {
            let e = r.unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e.cause, TaskFailure::Start(_)), "{msg}");
            assert!(msg.contains(status) && msg.contains(tail), "{script}: {msg}");
        }
    }
}

#[test]
fn a_task_whose_program_does_not_decode_fails_alone() {
    let grid = gridkey_grid::read_grid(&grid_path("oQU480.231010.nc")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let ct = Arc::new(compile_time_offset_provider(grid.provider(), &TableStore::open(cache.path()).unwrap()).unwrap());
    let mut tasks = tasks_for(&icon_programs()[..3], &ct, &TranslationOptions::new(), &common::settings(cache.path()));
    tasks[1].encoding = vec![0xff; 7];
    let runner = Runner::new(BuildJobs::new(BuildJobsMode::Process, 2), Arc::new(StencilHandler), worker());
    let results = runner.run_all(&tasks);
    assert!(results[0].is_ok() && results[2].is_ok());
    let e = results[1].as_ref().unwrap_err();
    assert!(matches!(e.cause, TaskFailure::Handler(_)), "{e}");
}
