//! The settings that shape a translation travel with each task (DESIGN 5, ADR 0010): a declared
//! variable changed in the parent after the pool started reaches the running workers. This test
//! sets the process environment, so it lives alone in its own test binary.

use std::path::PathBuf;
use std::sync::Arc;

use gridkey::faults::FaultReport;
use gridkey::tasks_for;
use gridkey_fingerprint::TranslationOptions;
use gridkey_jobs::{ProcessPool, WorkerCommand};
use gridkey_offsets::CompileTimeOffsetProvider;
use gridkey_stencil::icon_programs;

#[test]
fn a_setting_changed_after_the_pool_started_reaches_the_workers() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Arc::new(CompileTimeOffsetProvider::new());
    let programs = icon_programs();
    let worker = WorkerCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_gridkey")),
        args: vec!["worker".into(), "--handler".into(), "test-faults".into()],
    };
    let pool: ProcessPool<FaultReport> = ProcessPool::new(worker, 2);

    std::env::set_var("CC", "cc-when-the-pool-started");
    let first: Vec<FaultReport> = pool
        .run_all(&tasks_for(&programs, &provider, &TranslationOptions::new(), cache.path()))
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let started = pool.workers_started();

    std::env::set_var("CC", "cc-changed-later");
    let second: Vec<FaultReport> = pool
        .run_all(&tasks_for(&programs, &provider, &TranslationOptions::new(), cache.path()))
        .into_iter()
        .map(Result::unwrap)
        .collect();

    assert_eq!(pool.workers_started(), started, "the same workers ran the second batch");
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a.task_vars["CC"], "cc-when-the-pool-started");
        assert_eq!(b.task_vars["CC"], "cc-changed-later", "{}", b.program);
        // The worker's own environment still has the old value: the new one came with the task.
        assert_eq!(b.worker_env["CC"].as_deref(), Some("cc-when-the-pool-started"));
    }
}
