//! Serial and thread runners and their build-jobs settings. Process-mode tests run
//! real `gridkey worker` processes: crates/gridkey/tests/process_runner.rs.

use std::sync::Arc;

use gridkey_jobs::{
    BuildJobs, BuildJobsMode, CompilationTask, Runner, Settings, TaskFailure, TaskHandler, TaskSettings, WorkerCommand,
};
use gridkey_offsets::CompileTimeOffsetProvider;
use gridkey_settings::{CompilerSettings, IdentifiedCompiler, ResolvedCompiler};

/// Echoes the program name; fails on `bad` and on `damaged` (a damaged input), panics on
/// `boom`; sleeps a little to interleave.
struct Echo;

/// Echo's failures: the program's, or its input's.
#[derive(Debug, thiserror::Error)]
enum NoSuchStencil {
    #[error("no such stencil")]
    Program,
    #[error("its table was found damaged")]
    Input,
    /// An error that names a program itself, as `gridkey-stencil`'s do.
    #[error("program {0}: its offset has no neighbour table")]
    Named(String),
}

impl TaskHandler for Echo {
    type Output = String;
    type Error = NoSuchStencil;
    fn handle(&self, task: &CompilationTask) -> Result<String, NoSuchStencil> {
        std::thread::sleep(std::time::Duration::from_millis((task.encoding[0] % 5) as u64));
        match task.program.as_str() {
            "bad" => Err(NoSuchStencil::Program),
            "damaged" => Err(NoSuchStencil::Input),
            "named" => Err(NoSuchStencil::Named("named".into())),
            // Names another program, whose name begins with this one's.
            "nam" => Err(NoSuchStencil::Named("named".into())),
            "boom" => panic!("index out of bounds in the compile step"),
            name => Ok(format!("{name}@{}", task.settings.compiler().command_line())),
        }
    }

    fn damaged_input(error: &NoSuchStencil) -> bool {
        matches!(error, NoSuchStencil::Input)
    }

    fn outcome_word(output: &String) -> &'static str {
        if output.starts_with('a') {
            "hit"
        } else {
            "compiled"
        }
    }
}

fn tasks(names: &[&str]) -> Vec<CompilationTask> {
    let provider = Arc::new(CompileTimeOffsetProvider::new());
    let mut compiler = CompilerSettings::from_command("gcc", |_| None).unwrap();
    compiler.resolved = Some(ResolvedCompiler { program: "/usr/bin/gcc".into() });
    let compiler = IdentifiedCompiler::new(&compiler, "gcc's identity".into()).unwrap();
    let settings = Arc::new(TaskSettings::new(&Settings::default(), "/nonexistent".into(), compiler).unwrap());
    names
        .iter()
        .enumerate()
        .map(|(i, n)| CompilationTask {
            program: (*n).to_owned(),
            encoding: vec![(names.len() - i) as u8],
            options: Default::default(),
            provider: provider.clone(),
            settings: settings.clone(),
        })
        .collect()
}

#[test]
fn failures_are_per_task_results_keep_submission_order() {
    let names = ["a", "bad", "b", "boom", "c", "damaged", "d", "e", "f"];
    for jobs in [BuildJobs::new(BuildJobsMode::Serial, 1), BuildJobs::new(BuildJobsMode::Thread, 3)] {
        let runner = Runner::new(jobs, Arc::new(Echo), WorkerCommand::gridkey("/unused".into()));
        for _ in 0..2 {
            let results = runner.run_all(&tasks(&names));
            assert_eq!(results.len(), names.len());
            for (name, r) in names.iter().zip(&results) {
                match (*name, r) {
                    ("bad", Err(e)) => {
                        assert_eq!(e.cause, TaskFailure::Handler("no such stencil".into()));
                        assert!(!e.cause.is_damaged_input());
                    }
                    ("damaged", Err(e)) => {
                        assert_eq!(e.cause, TaskFailure::DamagedInput("its table was found damaged".into()));
                        assert!(e.cause.is_damaged_input());
                    }
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

#[test]
fn a_failed_task_names_its_program_once() {
    let names = ["bad", "named", "nam", "boom"];
    for jobs in [BuildJobs::new(BuildJobsMode::Serial, 1), BuildJobs::new(BuildJobsMode::Thread, 2)] {
        let runner = Runner::new(jobs, Arc::new(Echo), WorkerCommand::gridkey("/unused".into()));
        let shown: Vec<String> =
            runner.run_all(&tasks(&names)).into_iter().map(|r| r.expect_err("every task fails").to_string()).collect();
        assert_eq!(shown[0], "program bad: no such stencil");
        assert_eq!(shown[1], "program named: its offset has no neighbour table");
        assert_eq!(shown[2], "program nam: program named: its offset has no neighbour table");
        assert!(shown[3].starts_with("program boom: the compile step panicked: "), "{}", shown[3]);
    }
}

/// The single place that parses settings and checks the outcome.
fn check(mode: Option<&str>, jobs: Option<&str>, expect: Result<(BuildJobsMode, usize), &str>) {
    let got = Settings::from_vars(|k| match k {
        "GRIDKEY_BUILD_JOBS_MODE" => mode.map(str::to_owned),
        "GRIDKEY_BUILD_JOBS" => jobs.map(str::to_owned),
        _ => None,
    })
    .map(|s| s.build_jobs);
    match (got, expect) {
        (Ok(j), Ok((m, n))) => assert_eq!((j.mode, j.jobs), (m, n), "{mode:?} {jobs:?}"),
        (Err(e), Err(text)) => {
            assert!(matches!(e, gridkey_settings::SettingsError::BadSetting { .. }));
            assert!(e.to_string().contains(text), "{e}");
        }
        (got, expect) => panic!("{mode:?} {jobs:?}: got {got:?}, expected {expect:?}"),
    }
}

#[test]
fn settings_from_the_environment() {
    let cores = gridkey_settings::default_jobs();
    check(None, None, Ok((BuildJobsMode::Process, cores)));
    check(Some("thread"), Some("3"), Ok((BuildJobsMode::Thread, 3)));
    check(Some("process"), Some("0"), Ok((BuildJobsMode::Serial, 1)));
    check(Some("thread"), Some("-2"), Ok((BuildJobsMode::Serial, 1)));
    check(Some("serial"), Some("8"), Ok((BuildJobsMode::Serial, 1)));
    check(
        Some("processes"),
        None,
        Err("GRIDKEY_BUILD_JOBS_MODE=\"processes\" is not valid: expected serial, thread or process"),
    );
    check(Some("thread"), Some("many"), Err("GRIDKEY_BUILD_JOBS=\"many\" is not valid"));
}

/// The single place that parses `GRIDKEY_BUILD_TIMEOUT` and checks the outcome.
fn check_timeout(value: &str, expect: Result<Option<f64>, &str>) {
    let got = Settings::from_vars(|k| (k == "GRIDKEY_BUILD_TIMEOUT").then(|| value.to_owned())).map(|s| s.build_jobs);
    match (got, expect) {
        (Ok(j), Ok(seconds)) => {
            assert_eq!(j.timeout.map(|d| d.as_secs_f64()), seconds, "{value:?}")
        }
        (Err(e), Err(text)) => assert!(e.to_string().contains(text), "{e}"),
        (got, expect) => panic!("{value:?}: got {got:?}, expected {expect:?}"),
    }
}

#[test]
fn timeout_from_the_environment() {
    check_timeout("", Ok(None));
    check_timeout("0", Ok(None));
    check_timeout("30", Ok(Some(30.0)));
    check_timeout(" 2.5 ", Ok(Some(2.5)));
    check_timeout("-1", Err("GRIDKEY_BUILD_TIMEOUT=\"-1\" is not valid: expected a number of seconds"));
    check_timeout("ten", Err("GRIDKEY_BUILD_TIMEOUT=\"ten\" is not valid"));
    check_timeout("inf", Err("GRIDKEY_BUILD_TIMEOUT=\"inf\" is not valid"));
}

/// Records every progress event.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<(usize, String, Option<gridkey_jobs::Ended>)>>);

impl gridkey_jobs::Progress for Recorder {
    fn started(&self, index: usize, program: &str) {
        self.0.lock().unwrap().push((index, program.to_owned(), None));
    }
    fn finished(&self, index: usize, program: &str, ended: gridkey_jobs::Ended) {
        self.0.lock().unwrap().push((index, program.to_owned(), Some(ended)));
    }
}

#[test]
fn progress_sees_each_task_start_then_end_with_its_outcome() {
    let names = ["a", "bad", "b", "boom", "c"];
    for jobs in [BuildJobs::new(BuildJobsMode::Serial, 1), BuildJobs::new(BuildJobsMode::Thread, 3)] {
        let runner = Runner::new(jobs, Arc::new(Echo), WorkerCommand::gridkey("/unused".into()));
        let recorder = Recorder::default();
        let results = runner.run_all_with(&tasks(&names), &recorder);
        let events = recorder.0.into_inner().unwrap();
        assert_eq!(events.len(), 2 * names.len());
        for (i, name) in names.iter().enumerate() {
            let mine: Vec<_> = events.iter().filter(|(j, _, _)| *j == i).collect();
            assert_eq!(mine.len(), 2, "{name}");
            assert_eq!((mine[0].1.as_str(), mine[0].2), (*name, None), "started first");
            // The handler's own word for what a task did, failed for an error.
            let expected = match (&results[i], *name) {
                (Err(_), _) => gridkey_jobs::Ended::Failed,
                (Ok(_), "a") => gridkey_jobs::Ended::Done("hit"),
                (Ok(_), _) => gridkey_jobs::Ended::Done("compiled"),
            };
            assert_eq!(mine[1].2, Some(expected), "{name}: the outcome");
        }
    }
}
