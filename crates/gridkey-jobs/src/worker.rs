//! The worker side of the protocol: what `gridkey worker` runs (ADR 0010, ADR 0013).
//!
//! The worker keeps the real stdout for frames only: before anything else runs it moves its
//! stdout to a private descriptor and points descriptor 1 at stderr, so a stray print of the
//! handler or of a child process (the C compiler) lands in the log, never in the protocol.
//! Each task is decoded and rehydrated inside the task, so an unreadable table fails that task
//! only; a panic fails that task only. A closed stdin (the parent died) ends an idle worker;
//! a watchdog thread ends a busy one: it checks every [`WATCHDOG_PERIOD`] whether the parent
//! is still the process that started the worker (the `parent` argument of [`serve`], which the
//! pool passes as `--parent PID`, else the parent at start) and, when it is not, kills the
//! worker's process group, C compiler included (ADR 0010). The worker reads nothing from its
//! own environment: every setting arrives in the task frame.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use crate::protocol::{read_frame, write_frame, FromWorker, ToWorker, WireFailure, PROTOCOL_VERSION};
use crate::{run_guarded, TaskFailure, TaskHandler};

/// Serves tasks on stdin/stdout until stdin closes or a shutdown frame arrives. `parent` is the
/// process id of the pool that started this worker (`--parent`); `None`: the parent at start.
///
/// Errors: an I/O error on the protocol streams (the parent is gone), or a frame that does not
/// decode (the parent broke the protocol).
pub fn serve<H: TaskHandler>(handler: &H, parent: Option<i32>) -> io::Result<()> {
    start_watchdog(parent);
    let frames_out = private_stdout()?;
    FRAMES_FD.store(frames_out.as_raw_fd(), Ordering::SeqCst);
    let mut out = BufWriter::new(File::from(frames_out));
    let mut input = BufReader::new(io::stdin().lock());
    write_frame(&mut out, &FromWorker::Hello { protocol: PROTOCOL_VERSION, pid: std::process::id() })?;
    loop {
        let (id, wire) = match read_frame::<ToWorker, _>(&mut input)? {
            None | Some(ToWorker::Shutdown) => return Ok(()),
            Some(ToWorker::Task { id, task }) => (id, task),
        };
        let result = match wire.rehydrate() {
            Err(e) => Err(WireFailure::Rehydrate(e.to_string())),
            Ok(task) => match run_guarded(handler, &task) {
                Ok(output) => postcard::to_stdvec(&output)
                    .map_err(|e| WireFailure::Handler(format!("cannot encode the task's output: {e}"))),
                Err(TaskFailure::Panic(p)) => Err(WireFailure::Panic(p)),
                Err(TaskFailure::DamagedInput(e)) => Err(WireFailure::Damaged(e)),
                Err(other) => Err(WireFailure::Handler(other.to_string())),
            },
        };
        write_frame(&mut out, &FromWorker::Done { id, result })?;
    }
}

/// How often the watchdog checks that the parent is alive: a worker outlives a killed parent
/// by at most this long (plus scheduling delay).
pub const WATCHDOG_PERIOD: Duration = Duration::from_millis(50);

static FRAMES_FD: AtomicI32 = AtomicI32::new(-1);

/// The descriptor the worker writes its frames to, once [`serve`] has started. Only for a
/// fault-injection handler that breaks the protocol on purpose (`gridkey worker --handler
/// test-faults`, ADR 0010); anything else written there corrupts the stream.
pub fn protocol_descriptor() -> Option<RawFd> {
    let fd = FRAMES_FD.load(Ordering::SeqCst);
    (fd >= 0).then_some(fd)
}

/// Starts the thread that ends the worker when its parent dies (the worker is then re-parented,
/// so `getppid` changes).
fn start_watchdog(parent: Option<i32>) {
    // SAFETY: getppid, getpid and getpgrp cannot fail and touch no memory.
    let parent = parent.unwrap_or_else(|| unsafe { libc::getppid() });
    std::thread::spawn(move || loop {
        // SAFETY: as above.
        if unsafe { libc::getppid() } != parent {
            // Kill the whole group (the worker and its C compiler) only when the worker leads
            // it, as the pool arranges; a worker started by hand just exits.
            // SAFETY: kill(2) and _exit(2) on this process; nothing runs after them.
            unsafe {
                if libc::getpgrp() == libc::getpid() {
                    libc::kill(0, libc::SIGKILL);
                }
                libc::_exit(1);
            }
        }
        std::thread::sleep(WATCHDOG_PERIOD);
    });
}

/// Moves stdout to a new descriptor (close-on-exec) for frames, and makes descriptor 1 a copy
/// of stderr.
fn private_stdout() -> io::Result<OwnedFd> {
    let frames = io::stdout().as_fd().try_clone_to_owned()?;
    // SAFETY: dup2 on two descriptors this process owns (2 and 1); it only replaces what
    // descriptor 1 refers to, which from now on nothing in this process uses for frames.
    let rc = unsafe { libc::dup2(2, 1) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // Make sure no frame-bound data is buffered in std's stdout handle.
    io::stdout().flush()?;
    Ok(frames)
}
