//! Advisory file locks (`flock(2)`) that protect cache files in use from `gridkey cache gc`
//! (ADR 0009).
//!
//! A process holds a **shared** lock on every table file it has mapped ([`crate::MappedTable`])
//! and on every kernel library it has loaded, for as long as the mapping lives; a writer holds an
//! **exclusive** lock on its temp file while it writes. The collector removes a file only while
//! it holds an exclusive lock taken without waiting ([`try_lock_exclusive`]), so it never removes
//! a file that a live process has mapped or is writing. The kernel drops `flock` locks when the
//! process dies, so a killed process never leaves a file locked.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: flock on a file descriptor we own for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Takes a shared lock on `file`, waiting while an exclusive one is held (the collector holds
/// it only for the time of one `unlink`). Held until `file` is closed.
///
/// Errors: the `flock(2)` error (`ENOLCK` on file systems without locks).
pub fn lock_shared(file: &File) -> io::Result<()> {
    flock(file, libc::LOCK_SH)
}

/// Takes an exclusive lock on `file`, waiting while another lock is held. Held until `file` is
/// closed.
///
/// Errors: the `flock(2)` error.
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    flock(file, libc::LOCK_EX)
}

/// Tries to take an exclusive lock on `file` without waiting: `Ok(false)` when another open
/// file (in this or another process) holds a lock on it.
///
/// Errors: the `flock(2)` error other than `EWOULDBLOCK`.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match flock(file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}
