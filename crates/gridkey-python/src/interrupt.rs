//! Long work without the GIL that still answers Ctrl-C (ADR 0035).
//!
//! Python runs its signal handlers only on the main thread and only when that thread is
//! attached to the interpreter, so a table hashed and written with the GIL released would
//! ignore SIGINT until it is done. [`run`] does the work on a scoped thread while the calling
//! thread waits without the GIL and attaches every [`POLL`] to call `Python::check_signals`;
//! when that raises (`KeyboardInterrupt` from the default SIGINT handler), it sets the
//! [`Cancel`] flag, which the work polls between blocks of at most [`CHECK_BYTES`] and answers
//! by failing with [`interrupted`], so that the store removes its temp file. The exception of
//! the handler is then raised in place of the work's result.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use pyo3::prelude::*;

/// How often the waiting thread checks for signals: 50 ms, well inside the second a user
/// waits for Ctrl-C to answer, and a negligible cost (one attach of the thread) per check.
pub const POLL: Duration = Duration::from_millis(50);

/// Bytes of a table read between two looks at the [`Cancel`] flag: 1 MiB, about a tenth of a
/// millisecond of hashing.
pub const CHECK_BYTES: usize = 1 << 20;

/// Work on a table of fewer bytes than this runs on the calling thread, without a signal check:
/// it takes milliseconds, less than the thread [`run`] would start (16 MiB).
pub const INLINE_BYTES: usize = 16 << 20;

/// Set once the work should stop: a pending signal raised its exception.
#[derive(Debug, Default)]
pub struct Cancel(AtomicBool);

impl Cancel {
    /// A flag that is never set, for work that is not interruptible.
    pub fn never() -> Self {
        Self::default()
    }

    /// Whether the work should stop.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Ok while the work may go on.
    ///
    /// Errors: [`interrupted`] once the flag is set.
    pub fn check(&self) -> io::Result<()> {
        if self.is_set() {
            Err(interrupted())
        } else {
            Ok(())
        }
    }
}

/// The error work returns when it stops for a set [`Cancel`] flag.
pub fn interrupted() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "stopped by a signal (Ctrl-C)")
}

/// Set by the work thread when it is done, waited for by the calling thread.
#[derive(Default)]
struct Latch {
    done: Mutex<bool>,
    changed: Condvar,
}

impl Latch {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.changed.notify_all();
    }

    /// Whether the latch was set within `timeout`.
    fn wait(&self, timeout: Duration) -> bool {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        let (done, _) = self.changed.wait_timeout_while(done, timeout, |d| !*d).unwrap_or_else(|p| p.into_inner());
        *done
    }
}

/// Sets the latch when dropped: when the work returns and when it panics.
struct SetOnDrop<'a>(&'a Latch);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.set();
    }
}

/// Runs `work` without the GIL and returns its result, or the exception of a signal handler
/// that raised while it ran (`KeyboardInterrupt` for Ctrl-C), once `work` has seen its
/// [`Cancel`] flag and returned. Work on fewer than [`INLINE_BYTES`] (`bytes`, the table's
/// size) runs on the calling thread with a flag never set. Called from a thread other than the
/// main one, no signal is ever seen (Python handles them on the main thread), and the work
/// runs to its end.
///
/// A panic of `work` is resumed on the calling thread (where `errors::guard` turns it into
/// `InternalError`).
///
/// Errors: the exception a signal handler raised.
pub fn run<T: Send>(py: Python<'_>, bytes: usize, work: impl FnOnce(&Cancel) -> T + Send) -> PyResult<T> {
    if bytes < INLINE_BYTES {
        return Ok(py.detach(|| work(&Cancel::never())));
    }
    let cancel = Cancel::default();
    let latch = Latch::default();
    std::thread::scope(|scope| {
        let (cancel, latch) = (&cancel, &latch);
        let handle = scope.spawn(move || {
            let _done = SetOnDrop(latch);
            work(cancel)
        });
        let mut raised = None;
        while !py.detach(|| latch.wait(POLL)) {
            if raised.is_some() {
                // Cancelled: waiting for the work to see the flag (one block).
                continue;
            }
            if let Err(e) = py.check_signals() {
                cancel.0.store(true, Ordering::Relaxed);
                raised = Some(e);
            }
        }
        // The latch is set as the work returns: the join does not wait.
        let out = handle.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        match raised {
            Some(e) => Err(e),
            None => Ok(out),
        }
    })
}
