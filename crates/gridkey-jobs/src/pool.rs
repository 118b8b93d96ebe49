//! The process pool: `gridkey worker` processes fed one task at a time (ADR 0010, ADR 0013).
//!
//! A batch starts at most `min(jobs, tasks)` workers, reusing idle ones from earlier batches.
//! Each worker is driven by one thread of the batch that pulls the next task from a shared
//! queue as soon as its worker is free, so a task always goes to a live worker with nothing to
//! do (the least busy one: a worker holds at most one task). A worker that dies, answers with
//! anything but a valid frame, or runs past the per-task timeout fails the task it held (with
//! its exit status or signal and the tail of its stderr), is reaped with its process group and
//! replaced for the next task. A fresh worker that sends no handshake within
//! [`HANDSHAKE_DEADLINE`] is treated the same way: killed with its process group, and only the
//! task it was started for fails ([`TaskFailure::Handshake`], ADR 0032).
//!
//! Every worker runs in its own process group, so that killing a worker also kills the C
//! compiler it started. The pool keeps a process-wide list of its live workers, so that an
//! interrupt handler can stop them all ([`stop_all_workers`]); a worker whose parent dies stops
//! itself ([`crate::worker`]).

use std::collections::{BTreeSet, VecDeque};
use std::io::{BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::de::DeserializeOwned;

use crate::protocol::{
    read_frame, write_frame, FromWorker, ToWorker, WireError, WireFailure, WireTask, PROGRESS_MARK, PROTOCOL_VERSION,
};
use crate::{CompilationTask, Ended, NoProgress, Progress, TaskError, TaskFailure};

/// Bytes of a worker's stderr kept for error messages.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// How long a fresh worker may take from its spawn to its handshake before it is killed with
/// its process group and its task fails ([`TaskFailure::Handshake`], ADR 0032). A constant, not
/// a setting: a worker's start does not grow with the grid or the programs (about 1 to 5 ms,
/// `cargo xtask memory`), so one generous bound serves every run; an embedder or a test can set
/// another with [`ProcessPool::with_handshake_deadline`].
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// Argument the pool appends to a worker's command line, followed by its own process id; the
/// worker stops when its parent changes (the parent died).
pub const PARENT_ARG: &str = "--parent";

/// Process ids (equal to their process-group ids) of the live workers of every pool in this
/// process.
static LIVE_WORKERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Kills every live worker of every pool of this process, with its process group (SIGKILL),
/// and returns how many there were. Meant for an interrupt handler that then exits: the pools
/// see their workers die and fail the tasks they held. Persistent files stay consistent
/// because every cache write is an atomic rename (ADR 0002).
pub fn stop_all_workers() -> usize {
    let live = std::mem::take(&mut *LIVE_WORKERS.lock().unwrap_or_else(|p| p.into_inner()));
    for &pid in &live {
        // SAFETY: kill(2) on a process group this process created; no memory is involved.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    live.len()
}

/// How to start a worker: the program (the `gridkey` binary) and its arguments (`worker`); the
/// pool appends [`PARENT_ARG`] and its process id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    /// Path of the program (the `gridkey` binary; tests use `CARGO_BIN_EXE_gridkey`).
    pub program: PathBuf,
    /// Arguments, e.g. `["worker"]`.
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// `program worker`.
    pub fn gridkey(program: PathBuf) -> Self {
        Self { program, args: vec!["worker".to_owned()] }
    }
}

/// A pool of worker processes producing outputs of type `O`.
pub struct ProcessPool<O> {
    command: WorkerCommand,
    jobs: usize,
    timeout: Option<Duration>,
    handshake: Duration,
    idle: Mutex<Vec<Worker>>,
    started: Mutex<u64>,
    word: fn(&O) -> &'static str,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    frames: Receiver<std::io::Result<Option<FromWorker>>>,
    tail: Arc<Mutex<VecDeque<u8>>>,
    stderr_reader: Option<JoinHandle<()>>,
    pid: u32,
}

impl<O: DeserializeOwned + Send> ProcessPool<O> {
    /// A pool of at most `jobs` workers started with `command` (none started yet), without a
    /// per-task timeout.
    pub fn new(command: WorkerCommand, jobs: usize) -> Self {
        Self {
            command,
            jobs: jobs.max(1),
            timeout: None,
            handshake: HANDSHAKE_DEADLINE,
            idle: Mutex::new(Vec::new()),
            started: Mutex::new(0),
            word: |_| "done",
        }
    }

    /// The same pool telling [`Progress::finished`] `word(output)` for a task that produced
    /// `output` ([`crate::TaskHandler::outcome_word`]; `done` unless given).
    pub fn with_outcome_word(mut self, word: fn(&O) -> &'static str) -> Self {
        self.word = word;
        self
    }

    /// The same pool with a per-task timeout (seconds of wall time from sending the task to its
    /// answer; `None`: wait for ever). A worker past it is killed with its process group and
    /// replaced; its task fails with [`TaskFailure::Timeout`] (ADR 0010).
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same pool with another handshake deadline than [`HANDSHAKE_DEADLINE`]: a fresh worker
    /// that sends no handshake within `deadline` is killed with its process group and fails the
    /// task it was started for with [`TaskFailure::Handshake`] (ADR 0032).
    pub fn with_handshake_deadline(mut self, deadline: Duration) -> Self {
        self.handshake = deadline;
        self
    }

    /// Number of worker processes this pool has started so far (replacements included).
    pub fn workers_started(&self) -> u64 {
        *self.started.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Process ids of the idle workers.
    pub fn idle_pids(&self) -> Vec<u32> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|w| w.pid).collect()
    }

    /// Runs every task in the workers; results in submission order, one per task.
    ///
    /// Errors: none for the batch; each failed task is a [`TaskError`] (a worker that could not
    /// start, died, broke the protocol or ran past the timeout fails only the task it held).
    pub fn run_all(&self, tasks: &[CompilationTask]) -> Vec<Result<O, TaskError>> {
        self.run_all_with(tasks, &NoProgress)
    }

    /// [`Self::run_all`], telling `progress` when each task starts and ends (from the threads
    /// that drive the workers).
    pub fn run_all_with(&self, tasks: &[CompilationTask], progress: &dyn Progress) -> Vec<Result<O, TaskError>> {
        let wires: Vec<Result<WireTask, WireError>> = tasks.iter().map(WireTask::from_task).collect();
        let (task_tx, task_rx) = crossbeam_channel::unbounded::<usize>();
        for (i, w) in wires.iter().enumerate() {
            if w.is_ok() {
                task_tx.send(i).expect("receiver alive");
            }
        }
        drop(task_tx);
        let queued = wires.iter().filter(|w| w.is_ok()).count();
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        for (i, w) in wires.iter().enumerate() {
            if w.is_err() {
                progress.started(i, &tasks[i].program);
                progress.finished(i, &tasks[i].program, Ended::Failed);
            }
        }
        std::thread::scope(|scope| {
            for _ in 0..self.jobs.min(queued) {
                let (task_rx, done_tx, wires) = (task_rx.clone(), done_tx.clone(), &wires);
                scope.spawn(move || {
                    let mut worker = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
                    for i in task_rx {
                        let wire = wires[i].as_ref().expect("only valid tasks are queued");
                        progress.started(i, &tasks[i].program);
                        let result = self.run_one(&mut worker, i as u64, wire);
                        progress.finished(i, &tasks[i].program, Ended::of(&result, self.word));
                        let _ = done_tx.send((i, result));
                    }
                    if let Some(w) = worker {
                        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(w);
                    }
                });
            }
        });
        drop(done_tx);
        let mut results: Vec<Option<Result<O, TaskFailure>>> =
            wires.iter().map(|w| w.as_ref().err().map(|e| Err(TaskFailure::Start(e.to_string())))).collect();
        for (i, r) in done_rx {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .zip(tasks)
            .map(|(r, t)| {
                r.expect("every task reports").map_err(|cause| TaskError { program: t.program.clone(), cause })
            })
            .collect()
    }

    /// Runs one task on `slot`'s worker (starting one if empty); on a worker fault the worker is
    /// reaped and `slot` left empty so the next task starts a fresh one.
    fn run_one(&self, slot: &mut Option<Worker>, id: u64, wire: &WireTask) -> Result<O, TaskFailure> {
        if slot.is_none() {
            *self.started.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            *slot = Some(Worker::spawn(&self.command, self.handshake)?);
        }
        let worker = slot.as_mut().expect("just filled");
        match worker.exchange(id, wire, self.timeout) {
            Ok(Ok(bytes)) => postcard::from_bytes(&bytes)
                .map_err(|e| TaskFailure::Handler(format!("the worker's output does not decode: {e}"))),
            Ok(Err(WireFailure::Handler(e))) => Err(TaskFailure::Handler(e)),
            Ok(Err(WireFailure::Panic(p))) => Err(TaskFailure::Panic(p)),
            Ok(Err(WireFailure::Rehydrate(e))) => Err(TaskFailure::Rehydrate(e)),
            Ok(Err(WireFailure::Damaged(e))) => Err(TaskFailure::DamagedInput(e)),
            Err(fault) => {
                let worker = slot.take().expect("just used");
                Err(worker.reap(fault))
            }
        }
    }
}

impl<O> Drop for ProcessPool<O> {
    fn drop(&mut self) {
        let workers = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|p| p.into_inner()));
        for mut w in workers {
            let _ = write_frame(&mut w.stdin, &ToWorker::Shutdown);
            let Worker { mut child, stdin, pid, .. } = w;
            drop(stdin);
            exit_unreaped(pid, Duration::from_secs(2));
            kill_group(pid);
            forget_live(pid);
            let _ = child.wait();
        }
    }
}

/// A worker that stopped answering: what the parent saw.
enum Fault {
    /// End of stream or an I/O error: the worker died.
    Died,
    /// Something that is not a frame of this protocol.
    Garbage(String),
    /// No answer within the per-task timeout.
    Timeout(Duration),
    /// No handshake within the deadline; the worker program is named in the failure.
    Handshake(Duration, PathBuf),
}

/// How long the start of a worker whose executable is busy (`ETXTBSY`: a file just written, still open
/// in a process another thread forked before it execs) is tried again before it fails.
const BUSY_RETRY: Duration = Duration::from_secs(2);

fn kill_group(pid: u32) {
    // SAFETY: kill(2) on the process group of a worker this process started and has not
    // reaped yet (the group id is the worker's pid, which cannot be reused before the wait).
    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
}

fn forget_live(pid: u32) {
    LIVE_WORKERS.lock().unwrap_or_else(|p| p.into_inner()).remove(&(pid as i32));
}

impl Worker {
    /// Starts a worker and waits at most `deadline` for its handshake.
    fn spawn(command: &WorkerCommand, deadline: Duration) -> Result<Worker, TaskFailure> {
        let start_err = |reason: String| {
            format!(
                "cannot start build worker {}: {reason}; check that the gridkey binary is installed and runnable",
                command.program.display()
            )
        };
        let mut start = Command::new(&command.program);
        start
            .args(&command.args)
            .arg(PARENT_ARG)
            .arg(std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let asked = Instant::now();
        let mut child = loop {
            match start.spawn() {
                Ok(child) => break child,
                // An executable just written is busy while a process forked meanwhile still holds it open, until
                // that process execs: moments, not an error of the worker.
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && asked.elapsed() < BUSY_RETRY => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(TaskFailure::Start(start_err(e.to_string()))),
            }
        };
        let pid = child.id();
        LIVE_WORKERS.lock().unwrap_or_else(|p| p.into_inner()).insert(pid as i32);
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut stderr = child.stderr.take().expect("piped");
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL_BYTES)));
        let sink = tail.clone();
        let stderr_reader = std::thread::spawn(move || {
            let keep = |bytes: &[u8]| {
                let mut t = sink.lock().unwrap_or_else(|p| p.into_inner());
                t.extend(bytes);
                let excess = t.len().saturating_sub(STDERR_TAIL_BYTES);
                t.drain(..excess);
            };
            let mut buf = [0u8; 1024];
            // The bytes of a line not yet ended, when they may be a progress line.
            let mut line: Vec<u8> = Vec::new();
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                for part in buf[..n].split_inclusive(|&b| b == b'\n') {
                    line.extend_from_slice(part);
                    let mark = PROGRESS_MARK.as_bytes();
                    if !line.ends_with(b"\n")
                        && (line.len() < mark.len() && mark.starts_with(&line) || line.starts_with(mark))
                    {
                        // Perhaps a progress line, not yet whole.
                        continue;
                    }
                    match line.strip_prefix(mark) {
                        Some(text) => {
                            let text = String::from_utf8_lossy(text);
                            if let Some(show) = crate::worker_progress() {
                                show(text.trim_end_matches('\n'));
                            }
                            keep(text.as_bytes());
                        }
                        None => keep(&line),
                    }
                    line.clear();
                }
            }
            keep(&line);
        });
        // Frames are read by their own thread, so that waiting for an answer can time out.
        let (frame_tx, frames) = crossbeam_channel::unbounded();
        std::thread::spawn(move || loop {
            let frame = read_frame::<FromWorker, _>(&mut stdout);
            let last = !matches!(frame, Ok(Some(_)));
            if frame_tx.send(frame).is_err() || last {
                break;
            }
        });
        let worker = Worker { child, stdin, frames, tail, stderr_reader: Some(stderr_reader), pid };
        let first = match worker.frames.recv_timeout(deadline) {
            Ok(frame) => frame,
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => {
                return Err(worker.reap(Fault::Handshake(deadline, command.program.clone())));
            }
        };
        match first {
            Ok(Some(FromWorker::Hello { protocol, .. })) if protocol == PROTOCOL_VERSION => Ok(worker),
            Ok(Some(FromWorker::Hello { protocol, .. })) => {
                let reason = format!("it speaks protocol {protocol}, this gridkey speaks {PROTOCOL_VERSION}");
                let _ = worker.reap(Fault::Garbage(reason.clone()));
                Err(TaskFailure::Start(start_err(reason)))
            }
            other => {
                let fault = match other {
                    Ok(Some(_)) => Fault::Garbage("its first frame is not a handshake".into()),
                    Err(e) => Fault::Garbage(e.to_string()),
                    Ok(None) => Fault::Died,
                };
                Err(TaskFailure::Start(start_err(worker.reap(fault).to_string())))
            }
        }
    }

    /// Sends one task and waits for its answer, at most `timeout`.
    fn exchange(
        &mut self,
        id: u64,
        wire: &WireTask,
        timeout: Option<Duration>,
    ) -> Result<Result<Vec<u8>, WireFailure>, Fault> {
        write_frame(&mut self.stdin, &ToWorker::Task { id, task: Box::new(wire.clone()) }).map_err(|_| Fault::Died)?;
        let frame = match timeout {
            None => self.frames.recv().map_err(|_| Fault::Died)?,
            Some(limit) => match self.frames.recv_timeout(limit) {
                Ok(frame) => frame,
                Err(RecvTimeoutError::Timeout) => return Err(Fault::Timeout(limit)),
                Err(RecvTimeoutError::Disconnected) => return Err(Fault::Died),
            },
        };
        match frame {
            Ok(Some(FromWorker::Done { id: got, result })) if got == id => Ok(result),
            Ok(Some(other)) => Err(Fault::Garbage(format!("unexpected frame {other:?}"))),
            Ok(None) => Err(Fault::Died),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(Fault::Garbage(e.to_string())),
            Err(_) => Err(Fault::Died),
        }
    }

    /// Kills (if still alive) and waits for the worker and its process group; the failure to
    /// report for its task.
    fn reap(mut self, fault: Fault) -> TaskFailure {
        if let Fault::Died = fault {
            // A dead worker has exited or is about to: give it a moment before killing it, so
            // that its own exit status is what gets reported.
            exit_unreaped(self.pid, Duration::from_millis(500));
        }
        // Whatever the worker left running (a C compiler) goes with it. The worker is not
        // reaped yet, so its pid (the group id) cannot have been reused.
        kill_group(self.pid);
        forget_live(self.pid);
        let status = self.child.wait().unwrap_or_else(|_| ExitStatus::from_raw(0));
        drop(self.stdin);
        if let Some(reader) = self.stderr_reader.take() {
            // The stderr pipe closes when the worker and its children are gone; do not wait
            // for a child that escaped the process group.
            let deadline = Instant::now() + Duration::from_millis(300);
            while !reader.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let stderr_tail = {
            let t = self.tail.lock().unwrap_or_else(|p| p.into_inner());
            String::from_utf8_lossy(&t.iter().copied().collect::<Vec<u8>>()).trim().to_owned()
        };
        let stderr_tail = if stderr_tail.is_empty() { "(nothing)".to_owned() } else { stderr_tail };
        match fault {
            Fault::Died => TaskFailure::WorkerDied { pid: self.pid, status: describe(status), stderr_tail },
            Fault::Garbage(reason) => TaskFailure::Protocol { pid: self.pid, reason, stderr_tail },
            Fault::Timeout(limit) => TaskFailure::Timeout { pid: self.pid, seconds: limit.as_secs_f64(), stderr_tail },
            Fault::Handshake(limit, program) => TaskFailure::Handshake {
                pid: self.pid,
                program: program.display().to_string(),
                seconds: limit.as_secs_f64(),
                stderr_tail,
            },
        }
    }
}

/// Waits up to `limit` for the child `pid` to exit, without reaping it (`WNOWAIT`), so its pid
/// stays reserved for a following `kill_group`. Returns whether it exited.
fn exit_unreaped(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        // SAFETY: waitid(2) on our own child, writing into a zeroed siginfo_t we own.
        let exited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc =
                libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
            rc == 0 && info.si_pid() != 0
        };
        if exited || Instant::now() >= deadline {
            return exited;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `exit status 3`, or `killed by signal 9 (SIGKILL)`.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig} ({})", signal_name(sig)),
        (None, None) => "ended without a status".to_owned(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}
