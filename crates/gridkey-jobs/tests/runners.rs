//! Serial and thread runners, and the build-jobs settings (DESIGN 5). Process-mode tests run
//! real `gridkey worker` processes: crates/gridkey/tests/process_runner.rs.

use std::sync::Arc;

use gridkey_fingerprint::{Excluded, TranslationOptions};
use gridkey_jobs::{BuildJobs, BuildJobsMode, CompilationTask, JobsError, Runner, Settings, TaskFailure, TaskHandler, WorkerCommand};
use gridkey_offsets::CompileTimeOffsetProvider;

/// Echoes the program name; fails on `bad`, panics on `boom`; sleeps a little to interleave.
struct Echo;

impl TaskHandler for Echo {
    type Output = String;
    fn handle(&self, task: &CompilationTask) -> Result<String, String> {
        std::thread::sleep(std::time::Duration::from_millis((task.encoding[0] % 5) as u64));
        match task.program.as_str() {
            "bad" => Err("no such stencil".into()),
            "boom" => panic!("index out of bounds in the compile step"),
            name => Ok(format!("{name}@{}", task.settings.0.vars["CC"])),
        }
    }
}

fn tasks(names: &[&str]) -> Vec<CompilationTask> {
    let provider = Arc::new(CompileTimeOffsetProvider::new());
    names
        .iter()
        .enumerate()
        .map(|(i, n)| CompilationTask {
            program: (*n).to_owned(),
            encoding: vec![(names.len() - i) as u8],
            options: TranslationOptions::new(),
            provider: provider.clone(),
            settings: Excluded(Settings { cache_dir: "/nonexistent".into(), vars: [("CC".to_owned(), "gcc".to_owned())].into() }),
        })
        .collect()
}

#[test]
fn failures_are_per_task_results_keep_submission_order() {
    let names = ["a", "bad", "b", "boom", "c", "d", "e", "f"];
    for jobs in [BuildJobs::new(BuildJobsMode::Serial, 1), BuildJobs::new(BuildJobsMode::Thread, 3)] {
        let runner = Runner::new(jobs, Arc::new(Echo), WorkerCommand::gridkey("/unused".into()));
        for _ in 0..2 {
            let results = runner.run_all(&tasks(&names));
            assert_eq!(results.len(), names.len());
            for (name, r) in names.iter().zip(&results) {
                match (*name, r) {
                    ("bad", Err(e)) => assert_eq!(e.cause, TaskFailure::Handler("no such stencil".into())),
                    ("boom", Err(e)) => {
                        assert_eq!(e.program, "boom");
                        assert!(matches!(&e.cause, TaskFailure::Panic(p) if p.contains("index out of bounds")), "{e}");
                    }
                    (n, Ok(out)) => assert_eq!(out, &format!("{n}@gcc")),
                    (n, other) => panic!("{n}: {other:?}"),
                }
            }
        }
    }
}

/// The single place that parses settings and checks the outcome.
fn check(mode: Option<&str>, jobs: Option<&str>, expect: Result<(BuildJobsMode, usize), &str>) {
    let got = BuildJobs::from_vars(|k| match k {
        "GRIDKEY_BUILD_JOBS_MODE" => mode.map(str::to_owned),
        "GRIDKEY_BUILD_JOBS" => jobs.map(str::to_owned),
        _ => None,
    });
    match (got, expect) {
        (Ok(j), Ok((m, n))) => assert_eq!((j.mode, j.jobs), (m, n), "{mode:?} {jobs:?}"),
        (Err(e), Err(text)) => {
            assert!(matches!(e, JobsError::BadSetting { .. }));
            assert!(e.to_string().contains(text), "{e}");
        }
        (got, expect) => panic!("{mode:?} {jobs:?}: got {got:?}, expected {expect:?}"),
    }
}

#[test]
fn settings_from_the_environment() {
    let cores = gridkey_jobs::default_jobs();
    check(None, None, Ok((BuildJobsMode::Process, cores)));
    check(Some("thread"), Some("3"), Ok((BuildJobsMode::Thread, 3)));
    check(Some("process"), Some("0"), Ok((BuildJobsMode::Serial, 1)));
    check(Some("thread"), Some("-2"), Ok((BuildJobsMode::Serial, 1)));
    check(Some("serial"), Some("8"), Ok((BuildJobsMode::Serial, 1)));
    check(Some("processes"), None, Err("GRIDKEY_BUILD_JOBS_MODE=\"processes\" is not valid: expected serial, thread or process"));
    check(Some("thread"), Some("many"), Err("GRIDKEY_BUILD_JOBS=\"many\" is not valid"));
}
