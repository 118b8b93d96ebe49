//! Build-jobs runners: serial, thread and process (docs/design.md "Build jobs", ADR 0013).
//!
//! A [`CompilationTask`] is one program to translate and build against a compile-time offset
//! provider. A [`Runner`] runs a batch of them with a [`TaskHandler`] (the frontend's compile
//! step) in the calling thread, in a thread pool, or in a pool of worker processes
//! (`gridkey worker`) that receive each task as a postcard frame referencing its tables by
//! digest ([`protocol`]) and rehydrate the memory maps themselves, inside the task.
//!
//! The runner is chosen by [`BuildJobs`] (mode, worker count, per-task timeout) from the typed
//! [`Settings`] an entry point parsed once (`gridkey-settings`); this crate reads no
//! environment. Every task carries the [`TaskSettings`] the parent built once from them (what
//! the compile step uses, nothing more, ADR 0032), and process workers receive them in the task
//! frame (protocol v5), so the handler sees the same task settings in every mode, also in a pool
//! reused after a setting changed.
//!
//! # Example
//!
//! What a frontend does: wrap its compile step in a [`TaskHandler`], make one
//! [`CompilationTask`] per program over the compile-time view, and run the batch in the mode the
//! settings ask for. Process mode starts `gridkey worker` processes (the binary's
//! [`WorkerCommand`]); serial and thread mode, shown here, run in this process, and every mode
//! hands the handler the same input.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use gridkey_jobs::{BuildJobs, BuildJobsMode, CompilationTask, Runner, Settings, TaskHandler, TaskSettings, WorkerCommand};
//! use gridkey_settings::{IdentifiedCompiler, ResolvedCompiler};
//! use gridkey_offsets::{compile_time_offset_provider, Connectivity, Dimension, Entry, IndexTable, OffsetProvider, TableStore};
//!
//! /// The frontend's compile step; this one reports what it sees of the compile-time view.
//! struct Describe;
//!
//! /// Its one failure: an input it cannot compile.
//! #[derive(Debug, thiserror::Error)]
//! #[error("program {0}: the offset provider has no C2E; give the grid's C2E table")]
//! struct NoC2e(String);
//!
//! impl TaskHandler for Describe {
//!     type Output = String;
//!     type Error = NoC2e;
//!     fn handle(&self, task: &CompilationTask) -> Result<String, NoC2e> {
//!         let c2e = task.provider.gather("C2E").ok_or_else(|| NoC2e(task.program.clone()))?;
//!         Ok(format!("{}: C2E {:?} {}", task.program, c2e.shape(), c2e.digest()))
//!     }
//! }
//!
//! let c2e = IndexTable::from_vec_i32(2, 3, vec![0, 1, 2, 2, 3, 4])?;
//! let c2e = Connectivity::from_host(Dimension::horizontal("Cell"), Dimension::local("C2EDim"), Dimension::horizontal("Edge"), None, c2e)?;
//! let mut provider = OffsetProvider::new();
//! provider.push("C2E", Entry::Gather(Arc::new(c2e)))?;
//! let cache = tempfile::tempdir()?;
//! let view = Arc::new(compile_time_offset_provider(&provider, &TableStore::open(cache.path())?)?);
//! // What the parent of a run does once: the compiler resolved and identified, the cache
//! // directory absolute (`gridkey::task_settings` computes the identity with the frontend).
//! let mut cc = Settings::default().compiler;
//! cc.resolved = Some(ResolvedCompiler { program: "/usr/bin/cc".into() });
//! let cc = IdentifiedCompiler::new(&cc, "the compiler's identity".into())?;
//! let settings = Arc::new(TaskSettings::new(&Settings::default(), cache.path().canonicalize()?, cc)?);
//! let tasks: Vec<CompilationTask> = ["div", "grad_n"]
//!     .iter()
//!     .map(|name| CompilationTask {
//!         program: name.to_string(),
//!         encoding: name.as_bytes().to_vec(),
//!         options: BTreeMap::new(),
//!         provider: view.clone(),
//!         settings: settings.clone(),
//!     })
//!     .collect();
//!
//! let worker = WorkerCommand::gridkey("gridkey".into());
//! let serial = Runner::new(BuildJobs::new(BuildJobsMode::Serial, 1), Arc::new(Describe), worker.clone());
//! let thread = Runner::new(BuildJobs::new(BuildJobsMode::Thread, 2), Arc::new(Describe), worker);
//! let a = serial.run_all(&tasks).into_iter().collect::<Result<Vec<String>, _>>()?;
//! let b = thread.run_all(&tasks).into_iter().collect::<Result<Vec<String>, _>>()?;
//! assert_eq!(a, b); // the same input in every mode, results in submission order
//! assert!(a[0].starts_with("div: C2E [2, 3] ") && a[1].starts_with("grad_n: "));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Architecture invariant
//!
//! Every mode compiles the same compile-time input: the handler sees the same
//! [`CompilationTask`] (program, options, compile-time provider, task settings) in every mode,
//! so it computes the same key. One task's failure (an error, a panic, an unreadable table, a dead
//! worker) fails that task only; the other tasks finish and the runner stays usable. Results
//! come back in submission order.

pub mod pool;
pub mod protocol;
pub mod worker;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use gridkey_offsets::CompileTimeOffsetProvider;
pub use gridkey_settings::{BuildJobs, BuildJobsMode, Settings, TaskSettings};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use pool::{stop_all_workers, ProcessPool, WorkerCommand};

/// One program to translate and build: what the handler sees, the same in every mode (in
/// process mode it crosses as a [`protocol::WireTask`], tables by digest).
#[derive(Clone, Debug)]
pub struct CompilationTask {
    /// The program's name (for messages and the key).
    pub program: String,
    /// The program's stable encoding (the frontend's format).
    pub encoding: Vec<u8>,
    /// Translation options, by name (key inputs, ADR 0003).
    pub options: BTreeMap<String, String>,
    /// The compile-time offset provider: what translation sees.
    pub provider: Arc<CompileTimeOffsetProvider>,
    /// Where and how to build: the task settings the parent built once, the same value in
    /// every mode (they travel in the task frame to process workers, ADR 0032). Never part of a
    /// key.
    pub settings: Arc<TaskSettings>,
}

/// The frontend's compile step, run for each task in whichever mode.
pub trait TaskHandler: Send + Sync {
    /// What a task produces (serialised with postcard across the process boundary).
    type Output: Serialize + DeserializeOwned + Send;
    /// Why a task fails: the frontend's own error enum. The runner reports its message as
    /// [`TaskFailure::Handler`], the same in every mode, since a worker's error reaches the
    /// parent as the text of its frame (ADR 0010).
    type Error: std::error::Error;
    /// Compiles one task.
    ///
    /// Errors: [`Self::Error`], whatever the frontend's compile step returns.
    fn handle(&self, task: &CompilationTask) -> Result<Self::Output, Self::Error>;

    /// Whether `error` says that an input of the task, a compile-time table it read, was found
    /// damaged (changed since it was stored, or no longer a valid table file) rather than that
    /// the program cannot be compiled: the runner reports it as [`TaskFailure::DamagedInput`],
    /// which a caller may repair and run again (ADR 0024, ADR 0054). `false` unless the
    /// frontend says more.
    fn damaged_input(_error: &Self::Error) -> bool {
        false
    }

    /// The word a progress line gives a task that produced `output` ([`Ended::Done`]): the
    /// frontend's own account of what the task did, such as `hit` or `compiled` (README
    /// "Progress"); `done` unless the frontend says more. Called in the parent, on the output
    /// as it came back, in every mode.
    fn outcome_word(_output: &Self::Output) -> &'static str {
        "done"
    }
}

/// Why a task failed (ADR 0010): the handler's own failure, or what happened to its worker.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TaskFailure {
    /// The handler returned an error.
    #[error("{0}")]
    Handler(String),
    /// The handler returned an error that says a table the task read was found damaged
    /// ([`TaskHandler::damaged_input`]): not the program's failure, but its input's, which the
    /// parent repairs before it runs the task again (ADR 0054).
    #[error("{0}")]
    DamagedInput(String),
    /// The handler panicked.
    #[error("the compile step panicked: {0}")]
    Panic(String),
    /// The worker could not rehydrate the task (an unreadable or invalid table file): a damaged
    /// input too ([`TaskFailure::is_damaged_input`]).
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
    /// A fresh worker sent no handshake within the deadline (ADR 0032); it was killed with its
    /// process group, and the next task starts another.
    #[error("build worker (pid {pid}) sent no handshake within {seconds} s of its start and was killed with its process group; check that {program} is a gridkey worker that starts; its stderr ended with: {stderr_tail}")]
    Handshake {
        /// Process id of the worker.
        pid: u32,
        /// The worker program.
        program: String,
        /// The deadline, in seconds ([`pool::HANDSHAKE_DEADLINE`] unless the pool was given
        /// another).
        seconds: f64,
        /// The last bytes the worker wrote to stderr.
        stderr_tail: String,
    },
    /// The task ran past the per-task timeout; its worker was killed and replaced.
    #[error("build worker (pid {pid}) ran past the per-task timeout of {seconds} s and was killed; its stderr ended with: {stderr_tail}")]
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

impl TaskFailure {
    /// Whether the task failed because a table it read was found damaged
    /// ([`TaskFailure::DamagedInput`]) or could not be opened in its worker
    /// ([`TaskFailure::Rehydrate`]), not because of the program or its worker: once the table is
    /// whole again under its name (repaired by this run or another), the same task may succeed
    /// (ADR 0054).
    pub fn is_damaged_input(&self) -> bool {
        matches!(self, TaskFailure::DamagedInput(_) | TaskFailure::Rehydrate(_))
    }
}

/// A failed task: the program and the cause; a task's failure is data, not a crash of the pool
/// (ADR 0005).
///
/// Shown as `program <name>: <cause>`, or as the cause alone when the cause already begins with
/// `program <name>` (a handler's error that names its program, as `gridkey-stencil`'s do), so that
/// the program is named once.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{}", self.message())]
pub struct TaskError {
    /// The program's name.
    pub program: String,
    /// What went wrong.
    pub cause: TaskFailure,
}

impl TaskError {
    /// The text of [`TaskError`]'s `Display`: the program named once.
    fn message(&self) -> String {
        let cause = self.cause.to_string();
        let named = cause
            .strip_prefix("program ")
            .and_then(|rest| rest.strip_prefix(self.program.as_str()))
            .is_some_and(|rest| rest.starts_with([':', ' ']));
        if named {
            cause
        } else {
            format!("program {}: {cause}", self.program)
        }
    }
}

static WORKER_PROGRESS: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Sets, once per process, the function the pool tells each progress line of its workers
/// ([`protocol::progress_line`]), from the thread that reads the worker's stderr, at once: a
/// process-mode parent shows what a serial or thread run shows in its own process (a lock
/// wait, ADR 0033). Without it such lines only join the stderr tail. A second call changes
/// nothing.
pub fn set_worker_progress(show: fn(&str)) {
    let _ = WORKER_PROGRESS.set(show);
}

/// The hook of [`set_worker_progress`], if set.
pub(crate) fn worker_progress() -> Option<fn(&str)> {
    WORKER_PROGRESS.get().copied()
}

/// How a task ended, as [`Progress::finished`] is told it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It produced its output; the word is the handler's [`TaskHandler::outcome_word`] for it
    /// (`hit`, `compiled`, ...).
    Done(&'static str),
    /// It failed (its [`TaskError`] is in the batch's results).
    Failed,
}

impl Ended {
    /// `Done(word(output))` for a result holding an output, `Failed` for an error.
    pub fn of<T, E>(result: &Result<T, E>, word: fn(&T) -> &'static str) -> Self {
        match result {
            Ok(output) => Ended::Done(word(output)),
            Err(_) => Ended::Failed,
        }
    }
}

/// Told when each task of a batch starts and ends, from the threads that run (or drive) the
/// tasks, so calls may come from several threads at once. Indices are positions in the batch.
pub trait Progress: Sync {
    /// Task `index` (program `program`) started.
    fn started(&self, index: usize, program: &str);
    /// Task `index` ended, as `ended` says (with the handler's word for what it did).
    fn finished(&self, index: usize, program: &str, ended: Ended);
}

/// A [`Progress`] that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn started(&self, _: usize, _: &str) {}
    fn finished(&self, _: usize, _: &str, _: Ended) {}
}

/// Runs the handler on one task in this thread, turning a panic into a failure.
pub(crate) fn run_guarded<H: TaskHandler>(handler: &H, task: &CompilationTask) -> Result<H::Output, TaskFailure> {
    match catch_unwind(AssertUnwindSafe(|| handler.handle(task))) {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) if H::damaged_input(&e) => Err(TaskFailure::DamagedInput(e.to_string())),
        Ok(Err(e)) => Err(TaskFailure::Handler(e.to_string())),
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

/// A build-jobs runner in one of the three modes of [`BuildJobsMode`] (docs/design.md "Build jobs").
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
            BuildJobsMode::Process => Runner::Process(
                ProcessPool::new(worker, jobs.jobs).with_timeout(jobs.timeout).with_outcome_word(H::outcome_word),
            ),
        }
    }

    /// The mode of this runner (serial, thread or process).
    pub fn mode(&self) -> BuildJobsMode {
        match self {
            Runner::Serial(_) => BuildJobsMode::Serial,
            Runner::Thread { .. } => BuildJobsMode::Thread,
            Runner::Process(_) => BuildJobsMode::Process,
        }
    }

    /// Runs every task; the results are in submission order, one per task. One task's failure
    /// does not stop the others.
    ///
    /// Errors: none for the batch; each failed task is a [`TaskError`] naming its program and
    /// the [`TaskFailure`].
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
                .map(|(i, t)| {
                    observed(progress, i, t, H::outcome_word, || run_guarded(handler.as_ref(), t))
                        .map_err(|c| fail(t, c))
                })
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
    word: fn(&T) -> &'static str,
    run: impl FnOnce() -> Result<T, TaskFailure>,
) -> Result<T, TaskFailure> {
    progress.started(index, &task.program);
    let result = run();
    progress.finished(index, &task.program, Ended::of(&result, word));
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
                    let run = || run_guarded(handler, &tasks[i]);
                    let _ = done_tx.send((i, observed(progress, i, &tasks[i], H::outcome_word, run)));
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
