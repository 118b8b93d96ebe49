//! Advisory file locks (`flock(2)`) that protect cache files in use from `gridkey cache gc`
//! (ADR 0009).
//!
//! A process holds a **shared** lock on every file it uses in place (a mapped table, a loaded
//! kernel library: [`open_shared`]) for as long as it uses it; a writer holds an **exclusive**
//! lock on its temp file while it writes ([`crate::write_atomic`]). The collector removes a file
//! only while it holds an exclusive lock taken without waiting ([`try_lock_exclusive`],
//! [`crate::remove_if_unlocked`]), so it never removes a file that a live process uses or is
//! writing. The kernel drops `flock` locks when the process dies, so a killed process never
//! leaves a file locked.
//!
//! [`KeyLocks`] are the per-key locks under which one process produces a translation or a build
//! while the others wait for it (ADR 0025), at most [`LockWait::limit`] (ADR 0033).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::same_file;

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

/// Opens the cache file `path` read-only for use in place and takes a shared lock on it, held
/// until the returned file is closed: how a table is mapped and a kernel library loaded.
///
/// The open does not follow a symlink (`O_NOFOLLOW`) and does not block on a FIFO
/// (`O_NONBLOCK`). The collector removes a file while holding an exclusive lock, and concurrent
/// writers of one entry rename identical content over it: once the shared lock is held, `path`
/// must still name the file held, else it is opened again (replaced) or is `ENOENT` (removed).
/// After 16 replacements in a row the last file held is returned: it was renamed into place
/// whole and holds the same content.
///
/// Errors: the `open(2)` error (`ELOOP` for a symlink, `ENOENT` when the file is missing or was
/// removed while being opened), the `flock(2)` error.
pub fn open_shared(path: &Path) -> io::Result<File> {
    let mut last = None;
    for _ in 0..16 {
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
        lock_shared(&file)?;
        match fs::symlink_metadata(path) {
            Ok(m) if same_file(&m, &file) => return Ok(file),
            Ok(_) => last = Some(file),
            Err(_) => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }
    last.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// Whether `e` says that the file system has no locks (`ENOLCK`): work then goes on without
/// them, as it did before ADR 0025, without a warning per key.
pub fn is_no_locks(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOLCK)
}

/// Per-key locks of a cache directory: one lock file per key under `<cache>/locks/`, locked
/// exclusively by whoever produces the key's artifact (a translation, a build), so that processes
/// sharing a cache produce each artifact once while the others wait and then hit (ADR 0025).
///
/// A lock is released when its holder drops it or dies (`flock` locks die with their process), so
/// a killed holder never blocks the others. The holder removes its lock file while still holding
/// the lock; a waiter that then gets the lock on the removed file sees that the path no longer
/// names it and takes the lock again on a new file, so that lock files do not pile up and a lock
/// file can be removed by [`crate::remove_if_unlocked`] (the collector) at any time.
///
/// A wait is bounded ([`LockWait`], ADR 0033): a holder that is stopped (`SIGSTOP`, a debugger)
/// or slow (a compiler that hangs) keeps its lock, and the waiter goes on without it once the
/// bound has passed ([`Acquired::GaveUp`]); the work is then done twice, which the atomic
/// writers make harmless (ADR 0025).
#[derive(Clone, Debug)]
pub struct KeyLocks {
    dir: PathBuf,
    wait: LockWait,
}

/// Name of the lock directory under the cache directory.
pub const LOCKS_DIR: &str = crate::CacheBucket::Locks.name();

/// The bound of a per-key lock wait when none is given: 60 seconds, as the shared tier's lease
/// wait (ADR 0033).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(60);

/// How long a wait lasts before [`LockWait::notice`] is first told of it, and then between two
/// notices.
pub const LOCK_NOTICE_EVERY: Duration = Duration::from_secs(2);

/// How long a per-key lock is waited for, and who hears of a wait that lasts (ADR 0033).
#[derive(Clone, Copy, Debug)]
pub struct LockWait {
    /// The longest wait; past it the caller goes on without the lock. Zero: never wait.
    pub limit: Duration,
    /// Told the lock file and the time waited so far, every [`LOCK_NOTICE_EVERY`] while a wait
    /// lasts: how a command line shows a progress line (this crate never prints). `None`: nobody.
    pub notice: Option<fn(&Path, Duration)>,
}

impl Default for LockWait {
    /// [`DEFAULT_LOCK_WAIT`], no notice.
    fn default() -> Self {
        Self { limit: DEFAULT_LOCK_WAIT, notice: None }
    }
}

impl PartialEq for LockWait {
    /// Equal when the bounds are: the notice only shows a wait, it changes nothing done.
    fn eq(&self, other: &Self) -> bool {
        self.limit == other.limit
    }
}

impl Eq for LockWait {}

/// What [`KeyLocks::lock`] got.
#[derive(Debug)]
pub enum Acquired {
    /// The lock, held until dropped.
    Held(KeyLock),
    /// Another process held the lock for the whole bound of [`LockWait::limit`]: the caller
    /// goes on without it.
    GaveUp {
        /// The lock file.
        path: PathBuf,
    },
}

impl KeyLocks {
    /// The per-key locks of `cache_dir` (`<cache_dir>/locks/`, created on first use), waited for
    /// at most [`DEFAULT_LOCK_WAIT`].
    pub fn new(cache_dir: &Path) -> Self {
        Self { dir: cache_dir.join(LOCKS_DIR), wait: LockWait::default() }
    }

    /// The same locks with the wait bound and notice `wait`.
    pub fn with_wait(self, wait: LockWait) -> Self {
        Self { wait, ..self }
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The lock file of the lock named `name`: `<cache>/locks/<name>.lock`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.lock"))
    }

    /// Takes the lock named `name` (for example `translation-<key>`), waiting while another
    /// process or thread holds it, at most [`LockWait::limit`]: [`Acquired::Held`], held until
    /// the guard is dropped, or [`Acquired::GaveUp`]; with the time waited (zero when the lock
    /// was free at the first try).
    ///
    /// The wait polls `flock(LOCK_EX | LOCK_NB)` with sleeps growing from 1 ms to 50 ms:
    /// `flock(2)` has no time-out, and interrupting a blocking one with a timer signal is
    /// process-wide, which thread mode cannot share (ADR 0033).
    ///
    /// Errors: the I/O error of creating the directory or the lock file (`EISDIR` when a
    /// directory is in its place), or of `flock(2)` (`ENOLCK` on a file system without locks).
    pub fn lock(&self, name: &str) -> io::Result<(Acquired, Duration)> {
        let path = self.path(name);
        let started = Instant::now();
        let mut next_notice = LOCK_NOTICE_EVERY;
        let mut pause = Duration::from_millis(1);
        let mut contended = false;
        loop {
            let file = match open_lock_file(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    crate::create_private_dir_all(&self.dir)?;
                    open_lock_file(&path)?
                }
                Err(e) => return Err(e),
            };
            loop {
                if try_lock_exclusive(&file)? {
                    break;
                }
                contended = true;
                let waited = started.elapsed();
                if waited >= self.wait.limit {
                    return Ok((Acquired::GaveUp { path }, waited));
                }
                if waited >= next_notice {
                    if let Some(notice) = self.wait.notice {
                        notice(&path, waited);
                    }
                    next_notice += LOCK_NOTICE_EVERY;
                }
                std::thread::sleep(pause.min(self.wait.limit - waited));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            if crate::names_file(&path, &file) {
                let waited = if contended { started.elapsed() } else { Duration::ZERO };
                return Ok((Acquired::Held(KeyLock { file, path }), waited));
            }
            // The previous holder removed the file after we opened it: lock the new one.
        }
    }
}

/// Opens (creating, mode `0644`, never through a symlink) the lock file `path`; one created by
/// another user of a shared cache is opened read-only, which is enough for `flock`. The one way a
/// lock file of a cache is opened: the per-key locks here, the stats and quarantine locks.
///
/// Errors: the I/O error of the open (`ELOOP` for a symlink, `ENOENT` for a missing directory).
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    let created =
        OpenOptions::new().read(true).write(true).create(true).mode(0o644).custom_flags(libc::O_NOFOLLOW).open(path);
    match created {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)
        }
        other => other,
    }
}

/// A held per-key lock ([`Acquired::Held`]); dropping it removes the lock file and releases it.
#[derive(Debug)]
pub struct KeyLock {
    file: File,
    path: PathBuf,
}

impl KeyLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        // Removed while held: waiters that opened it retry on a new file (see `KeyLocks::lock`).
        if crate::names_file(&self.path, &self.file) {
            let _ = fs::remove_file(&self.path);
        }
    }
}
