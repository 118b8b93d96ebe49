//! Build-jobs runners: serial, thread and process (DESIGN 5, ADR 0004).
//!
//! A [`CompilationTask`] is one program to translate and build against a compile-time offset
//! provider. A [`Runner`] runs a batch of them with a [`TaskHandler`] (the frontend's compile
//! step) in the calling thread, in a thread pool, or in a pool of worker processes
//! (`gridkey worker`) that receive each task as a postcard frame referencing its tables by
//! digest ([`protocol`]) and rehydrate the memory maps themselves, inside the task.
//!
//! Settings come from the environment ([`BuildJobs::from_env`]):
//! `GRIDKEY_BUILD_JOBS_MODE` = `serial` | `thread` | `process` (default `process`),
//! `GRIDKEY_BUILD_JOBS` = worker count (default the available cores, at most 32; 0 or less
//! means serial), `GRIDKEY_CACHE_DIR` (default `.gridkey_cache` in the current directory),
//! `GRIDKEY_BUILD_TIMEOUT` (seconds a process-mode task may run before its worker is killed
//! and replaced; off by default, ADR 0010).
//!
//! # Architecture invariant
//!
//! Every mode compiles the same compile-time input: the handler sees the same
//! [`CompilationTask`] (program, options, compile-time provider, settings) in every mode, so it
//! computes the same key. One task's failure (an error, a panic, an unreadable table, a dead
//! worker) fails that task only; the other tasks finish and the runner stays usable. Results
//! come back in submission order.

#![warn(missing_docs)]

pub mod pool;
pub mod protocol;
pub mod worker;

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gridkey_fingerprint::{Excluded, TranslationOptions};
use gridkey_offsets::CompileTimeOffsetProvider;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use pool::{stop_all_workers, ProcessPool, WorkerCommand};

/// Environment variable choosing the runner mode.
pub const ENV_MODE: &str = "GRIDKEY_BUILD_JOBS_MODE";
/// Environment variable giving the worker count.
pub const ENV_JOBS: &str = "GRIDKEY_BUILD_JOBS";
/// Environment variable giving the cache directory.
pub const ENV_CACHE_DIR: &str = "GRIDKEY_CACHE_DIR";
/// Environment variable giving the per-task timeout of process mode, in seconds.
pub const ENV_TIMEOUT: &str = "GRIDKEY_BUILD_TIMEOUT";
/// Default cache directory, relative to the current directory.
pub const DEFAULT_CACHE_DIR: &str = ".gridkey_cache";
/// Largest worker count taken from the number of cores.
pub const MAX_DEFAULT_JOBS: usize = 32;

/// Errors of the runners and their settings.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// An environment variable has a value outside those accepted.
    #[error("{var}={value:?} is not valid: expected {accepted}")]
    BadSetting {
        /// The variable.
        var: &'static str,
        /// The value found.
        value: String,
        /// The accepted values.
        accepted: &'static str,
    },
    /// A worker process could not be started or did not complete its handshake.
    #[error("cannot start build worker {program}: {reason}; check that the gridkey binary is installed and runnable")]
    WorkerStart {
        /// The worker program.
        program: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// How build jobs run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BuildJobsMode {
    /// In the calling thread, one after the other.
    Serial,
    /// In a pool of threads of this process.
    Thread,
    /// In a pool of `gridkey worker` processes.
    Process,
}

impl BuildJobsMode {
    /// All modes, in the order of their names.
    pub const ALL: [BuildJobsMode; 3] = [BuildJobsMode::Serial, BuildJobsMode::Thread, BuildJobsMode::Process];

    /// `serial`, `thread` or `process`.
    pub const fn as_str(self) -> &'static str {
        match self {
            BuildJobsMode::Serial => "serial",
            BuildJobsMode::Thread => "thread",
            BuildJobsMode::Process => "process",
        }
    }
}

impl fmt::Display for BuildJobsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BuildJobsMode {
    type Err = JobsError;

    /// Parses `serial`, `thread` or `process`.
    fn from_str(value: &str) -> Result<Self, JobsError> {
        match value {
            "serial" => Ok(BuildJobsMode::Serial),
            "thread" => Ok(BuildJobsMode::Thread),
            "process" => Ok(BuildJobsMode::Process),
            _ => Err(JobsError::BadSetting {
                var: ENV_MODE,
                value: value.to_owned(),
                accepted: "serial, thread or process",
            }),
        }
    }
}

/// Mode and worker count of a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildJobs {
    /// The mode; [`BuildJobsMode::Serial`] whenever `jobs` is 0.
    pub mode: BuildJobsMode,
    /// Number of threads or worker processes (at least 1 unless serial).
    pub jobs: usize,
    /// Per-task timeout of process mode (`GRIDKEY_BUILD_TIMEOUT`); `None`: no limit. Serial and
    /// thread modes cannot stop a task and ignore it (ADR 0010).
    pub timeout: Option<Duration>,
}

impl BuildJobs {
    /// Reads `GRIDKEY_BUILD_JOBS_MODE` and `GRIDKEY_BUILD_JOBS` through `var` (pass
    /// `|k| std::env::var(k).ok()` for the process environment).
    ///
    /// Errors: [`JobsError::BadSetting`] naming the variable and the accepted values.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, JobsError> {
        let mode = match var(ENV_MODE) {
            Some(v) if !v.is_empty() => v.parse()?,
            _ => BuildJobsMode::Process,
        };
        let jobs = match var(ENV_JOBS) {
            Some(v) if !v.is_empty() => v.trim().parse::<i64>().map_err(|_| JobsError::BadSetting {
                var: ENV_JOBS,
                value: v.clone(),
                accepted: "an integer (0 or less means serial)",
            })?,
            _ => default_jobs() as i64,
        };
        let timeout = match var(ENV_TIMEOUT) {
            Some(v) if !v.trim().is_empty() => parse_timeout(&v)?,
            _ => None,
        };
        Ok(Self::new(mode, jobs).with_timeout(timeout))
    }

    /// [`Self::from_vars`] over the process environment.
    pub fn from_env() -> Result<Self, JobsError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// `mode` with `jobs` workers and no timeout; 0 or fewer workers means serial.
    pub fn new(mode: BuildJobsMode, jobs: i64) -> Self {
        if jobs <= 0 || mode == BuildJobsMode::Serial {
            Self { mode: BuildJobsMode::Serial, jobs: 1, timeout: None }
        } else {
            Self { mode, jobs: jobs as usize, timeout: None }
        }
    }

    /// The same settings with a per-task timeout (`None`: no limit).
    pub fn with_timeout(self, timeout: Option<Duration>) -> Self {
        Self { timeout, ..self }
    }
}

/// Parses `GRIDKEY_BUILD_TIMEOUT`: seconds (a decimal number); 0 means no limit.
fn parse_timeout(value: &str) -> Result<Option<Duration>, JobsError> {
    let bad = || JobsError::BadSetting {
        var: ENV_TIMEOUT,
        value: value.to_owned(),
        accepted: "a number of seconds (0 or unset: no limit)",
    };
    let seconds: f64 = value.trim().parse().map_err(|_| bad())?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(bad());
    }
    Ok((seconds > 0.0).then(|| Duration::from_secs_f64(seconds)))
}

/// Reads an on/off switch: unset, empty, `0`, `false`, `no`, `off` are off; `1`, `true`, `yes`,
/// `on` are on (any case).
///
/// Errors: [`JobsError::BadSetting`] naming the variable for any other value.
pub fn switch_from_vars(var: &'static str, value: Option<&str>) -> Result<bool, JobsError> {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "0" | "false" | "no" | "off") => Ok(false),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some(_) => Err(JobsError::BadSetting {
            var,
            value: value.unwrap_or_default().to_owned(),
            accepted: "1, true, yes or on to switch it on; 0, false, no, off or nothing to switch it off",
        }),
    }
}

/// The available cores, at most [`MAX_DEFAULT_JOBS`].
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_DEFAULT_JOBS)
}

/// The cache directory: `GRIDKEY_CACHE_DIR` if set and not empty, else `.gridkey_cache`.
pub fn cache_dir_from_env() -> PathBuf {
    match std::env::var_os(ENV_CACHE_DIR) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_CACHE_DIR),
    }
}

/// The parent's settings that shape a task and travel with it to every worker: the cache
/// directory (where the worker finds the tables and the translation cache) and the environment
/// variables the frontend declares (for example `CC`). Never part of a key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The cache directory (holds `tables-v1/`, `translation-v2/`).
    pub cache_dir: PathBuf,
    /// Declared environment variables, by name.
    pub vars: BTreeMap<String, String>,
}

impl Settings {
    /// Settings for `cache_dir`, capturing the current value of each variable in `declared`.
    pub fn capture(cache_dir: &Path, declared: &[&str]) -> Self {
        let vars = declared.iter().filter_map(|&name| std::env::var(name).ok().map(|v| (name.to_owned(), v))).collect();
        Self { cache_dir: cache_dir.to_path_buf(), vars }
    }
}

/// One program to translate and build.
#[derive(Clone, Debug)]
pub struct CompilationTask {
    /// The program's name (for messages and the key).
    pub program: String,
    /// The program's stable encoding (the frontend's format).
    pub encoding: Vec<u8>,
    /// Translation options.
    pub options: TranslationOptions,
    /// The compile-time offset provider: what translation sees.
    pub provider: Arc<CompileTimeOffsetProvider>,
    /// Where and how to build; excluded from the key.
    pub settings: Excluded<Settings>,
}

/// The frontend's compile step, run for each task in whichever mode.
pub trait TaskHandler: Send + Sync {
    /// What a task produces (serialised with postcard across the process boundary).
    type Output: Serialize + DeserializeOwned + Send;
    /// Compiles one task; the error text is reported as the task's failure.
    fn handle(&self, task: &CompilationTask) -> Result<Self::Output, String>;
}

/// Why a task failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TaskFailure {
    /// The handler returned an error.
    #[error("{0}")]
    Handler(String),
    /// The handler panicked.
    #[error("the compile step panicked: {0}")]
    Panic(String),
    /// The worker could not rehydrate the task (an unreadable or invalid table file).
    #[error("cannot rehydrate the task in the worker: {0}")]
    Rehydrate(String),
    /// The worker process died (or was killed) during the task.
    #[error("build worker (pid {pid}) died: {status}; its stderr ended with: {stderr_tail}")]
    WorkerDied {
        /// Process id of the worker.
        pid: u32,
        /// Exit status or signal, as text.
        status: String,
        /// The last bytes the worker wrote to stderr.
        stderr_tail: String,
    },
    /// The worker sent something that is not a valid frame.
    #[error("build worker (pid {pid}) broke the protocol: {reason}; its stderr ended with: {stderr_tail}")]
    Protocol {
        /// Process id of the worker.
        pid: u32,
        /// What was wrong.
        reason: String,
        /// The last bytes the worker wrote to stderr.
        stderr_tail: String,
    },
    /// The task ran past the per-task timeout; its worker was killed and replaced.
    #[error("build worker (pid {pid}) ran past the timeout of {seconds} s ({ENV_TIMEOUT}) and was killed; its stderr ended with: {stderr_tail}")]
    Timeout {
        /// Process id of the worker.
        pid: u32,
        /// The timeout, in seconds.
        seconds: f64,
        /// The last bytes the worker wrote to stderr.
        stderr_tail: String,
    },
    /// No worker could be started for the task.
    #[error("{0}")]
    Start(String),
}

/// A failed task: the program and the cause.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("program {program}: {cause}")]
pub struct TaskError {
    /// The program's name.
    pub program: String,
    /// What went wrong.
    pub cause: TaskFailure,
}

/// Told when each task of a batch starts and ends, from the threads that run (or drive) the
/// tasks, so calls may come from several threads at once. Indices are positions in the batch.
pub trait Progress: Sync {
    /// Task `index` (program `program`) started.
    fn started(&self, index: usize, program: &str);
    /// Task `index` ended; `ok` is false when it failed.
    fn finished(&self, index: usize, program: &str, ok: bool);
}

/// A [`Progress`] that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn started(&self, _: usize, _: &str) {}
    fn finished(&self, _: usize, _: &str, _: bool) {}
}

/// Runs the handler on one task in this thread, turning a panic into a failure.
pub(crate) fn run_guarded<H: TaskHandler>(handler: &H, task: &CompilationTask) -> Result<H::Output, TaskFailure> {
    match catch_unwind(AssertUnwindSafe(|| handler.handle(task))) {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(TaskFailure::Handler(e)),
        Err(panic) => Err(TaskFailure::Panic(panic_text(&panic))),
    }
}

pub(crate) fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// A build-jobs runner.
pub enum Runner<H: TaskHandler> {
    /// Runs tasks one after the other in the calling thread.
    Serial(Arc<H>),
    /// Runs tasks in `jobs` threads.
    Thread {
        /// The handler, shared by the threads.
        handler: Arc<H>,
        /// Number of threads.
        jobs: usize,
    },
    /// Runs tasks in worker processes.
    Process(ProcessPool<H::Output>),
}

impl<H: TaskHandler + 'static> Runner<H> {
    /// A runner for `jobs`: serial and thread modes use `handler`, process mode spawns
    /// `worker` processes (lazily, only as many as a batch needs).
    pub fn new(jobs: BuildJobs, handler: Arc<H>, worker: WorkerCommand) -> Self {
        match jobs.mode {
            BuildJobsMode::Serial => Runner::Serial(handler),
            BuildJobsMode::Thread => Runner::Thread { handler, jobs: jobs.jobs },
            BuildJobsMode::Process => Runner::Process(ProcessPool::new(worker, jobs.jobs).with_timeout(jobs.timeout)),
        }
    }

    /// The mode of this runner.
    pub fn mode(&self) -> BuildJobsMode {
        match self {
            Runner::Serial(_) => BuildJobsMode::Serial,
            Runner::Thread { .. } => BuildJobsMode::Thread,
            Runner::Process(_) => BuildJobsMode::Process,
        }
    }

    /// Runs every task; the results are in submission order. One task's failure does not
    /// stop the others.
    pub fn run_all(&self, tasks: &[CompilationTask]) -> Vec<Result<H::Output, TaskError>> {
        self.run_all_with(tasks, &NoProgress)
    }

    /// [`Self::run_all`], telling `progress` when each task starts and ends.
    pub fn run_all_with(
        &self,
        tasks: &[CompilationTask],
        progress: &dyn Progress,
    ) -> Vec<Result<H::Output, TaskError>> {
        let fail = |task: &CompilationTask, cause| TaskError { program: task.program.clone(), cause };
        match self {
            Runner::Serial(handler) => tasks
                .iter()
                .enumerate()
                .map(|(i, t)| observed(progress, i, t, || run_guarded(handler.as_ref(), t)).map_err(|c| fail(t, c)))
                .collect(),
            Runner::Thread { handler, jobs } => run_threads(handler.as_ref(), *jobs, tasks, progress)
                .into_iter()
                .zip(tasks)
                .map(|(r, t)| r.map_err(|c| fail(t, c)))
                .collect(),
            Runner::Process(pool) => pool.run_all_with(tasks, progress),
        }
    }
}

fn observed<T>(
    progress: &dyn Progress,
    index: usize,
    task: &CompilationTask,
    run: impl FnOnce() -> Result<T, TaskFailure>,
) -> Result<T, TaskFailure> {
    progress.started(index, &task.program);
    let result = run();
    progress.finished(index, &task.program, result.is_ok());
    result
}

fn run_threads<H: TaskHandler>(
    handler: &H,
    jobs: usize,
    tasks: &[CompilationTask],
    progress: &dyn Progress,
) -> Vec<Result<H::Output, TaskFailure>> {
    let (task_tx, task_rx) = crossbeam_channel::unbounded::<usize>();
    for i in 0..tasks.len() {
        task_tx.send(i).expect("receiver alive");
    }
    drop(task_tx);
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(tasks.len()).max(1) {
            let (task_rx, done_tx) = (task_rx.clone(), done_tx.clone());
            scope.spawn(move || {
                for i in task_rx {
                    let _ = done_tx.send((i, observed(progress, i, &tasks[i], || run_guarded(handler, &tasks[i]))));
                }
            });
        }
    });
    drop(done_tx);
    let mut results: Vec<Option<Result<H::Output, TaskFailure>>> = (0..tasks.len()).map(|_| None).collect();
    for (i, r) in done_rx {
        results[i] = Some(r);
    }
    results.into_iter().map(|r| r.expect("every task reports")).collect()
}
