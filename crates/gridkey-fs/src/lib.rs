//! The one filesystem layer of gridkey: every persistent file of a cache directory (stored
//! tables, translation entries and their records, kernel libraries) is written, locked and swept
//! here (ADR 0002, ADR 0009, ADR 0012).
//!
//! - [`write_atomic`] (and its halves [`write_temp`] and [`PendingFile::commit`]): temp file in
//!   the final directory, locked exclusively while written, `sync_all`, read-only, rename
//!   (the directory is not synced: a rename lost to a power cut is a miss, ADR 0047);
//!   [`write_atomic_all`] does the same for a batch of files, each step for all of them before
//!   the next, and [`commit_all`] commits a batch of temp files so (ADR 0049);
//! - [`lock`]: `flock(2)` locks, shared on a file used in place ([`lock::open_shared`]),
//!   exclusive on a temp file being written, tried without waiting by the collector;
//! - [`remove_stale_temps`], [`remove_if_unlocked`] and [`remove_if_unused`]: the sweep of
//!   abandoned temp files and the ways the collector removes a file; [`touch`] marks a use;
//! - [`lock::KeyLocks`]: the per-key locks under which one process produces an artifact;
//! - [`fault`]: the fault hook of the fault matrix, a typed [`Fault`] the caller passes in.
//!
//! # Architecture invariant
//!
//! No file ever appears partially written under a final name: a writer killed at any point
//! leaves at most a temp file named [`TEMP_PREFIX`]`*`, which no reader opens and which
//! [`remove_stale_temps`] removes once no process holds its lock. A file is removed only under
//! an exclusive lock taken without waiting, so a file that a live process has open in place
//! (shared lock) or is writing (exclusive lock) is never removed. This crate never reads the
//! environment: the fault hook is an argument.
//!
//! ```
//! use std::io::Write;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("ab").join("entry.bin");
//! let bytes = gridkey_fs::write_atomic(&path, None, |out| out.write_all(b"payload"))?;
//! assert_eq!((bytes, std::fs::read(&path)?), (7, b"payload".to_vec()));
//! assert!(std::fs::metadata(&path)?.permissions().readonly());
//!
//! // A used file is kept by the collector; an unused one is removed.
//! let in_use = gridkey_fs::lock::open_shared(&path)?;
//! assert!(!gridkey_fs::remove_if_unlocked(&path)?);
//! drop(in_use);
//! assert!(gridkey_fs::remove_if_unlocked(&path)?);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub mod bucket;
pub mod fault;
pub mod lock;

pub use bucket::CacheBucket;
pub use fault::{Fault, FaultKind, PausePoint};
use fault::{FaultWriter, Plan};

/// Prefix of temp files in a cache directory; anything with it is an unfinished write.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Name of the lock file inside a temp directory (a directory named [`TEMP_PREFIX`]`*`, such as a
/// build's private directory): its writer holds an exclusive lock on it while the directory is
/// in use, and [`remove_stale_temps`] removes the directory only once that lock is free.
pub const TEMP_DIR_LOCK: &str = "lock";

/// Errors of the filesystem layer that are not the I/O error of one file operation (those are
/// returned as [`io::Error`] for the caller to name its file).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The text form of a fault hook does not parse ([`Fault::parse`]).
    #[error("fault hook {value:?} is not valid: {reason}; write pause:<created|partial|written|synced>[:<path part>] or enospc:<bytes>[:<path part>]")]
    Fault {
        /// The text given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Writes a file atomically: `write` fills a temp file (prefix [`TEMP_PREFIX`]) in the directory
/// of `path` (created if needed), which is `sync_all`ed, made read-only and renamed to `path`.
/// Returns the number of bytes written. The directory is not synced (ADR 0047): the file's
/// bytes are on disk before its name is, so a power cut leaves either the whole file under
/// `path` or no file there (a cache miss), never a partial one.
///
/// The temp file is locked exclusively while it is written ([`lock`]), so that
/// [`remove_stale_temps`] can tell a live write from one whose process died. On any error the
/// temp file is removed and nothing appears under `path`. A process killed in the middle leaves
/// only a temp file, which no reader ever opens. This is the one writer of every persistent
/// file of gridkey (tables in gridkey-store, translation entries in gridkey-fingerprint, kernel
/// libraries in gridkey-stencil). `fault` (the fault matrix's hook, `None` in normal use) can
/// stop or fail it at chosen points when it applies to `path`.
///
/// Errors: the I/O error of the first step that failed (`ENOSPC` for a full disk, `EROFS` for
/// a read-only file system).
pub fn write_atomic(
    path: &Path,
    fault: Option<&Fault>,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<u64> {
    let (temp, len) = write_temp_for(path, fault, write)?;
    temp.commit(path, fault)?;
    Ok(len)
}

/// [`write_atomic`] of several files at once, as one batch (ADR 0049): every temp file is
/// written first, then each is made read-only and its write-back started
/// (`sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE` on Linux), then each is `sync_all`ed,
/// then each is renamed to its final name, in the order of `files`. A file's bytes are durable
/// before its name is, as for [`write_atomic`] (ADR 0047); the batch only lets the block layer
/// take the writes together, and lets the inode blocks the files share be written once instead
/// of once per file. `files` holds the final path and the bytes of each file.
///
/// Returns, in the order of `files`, the number of bytes written under each path or the I/O
/// error of the first step that failed for that file (its temp file is removed then, and
/// nothing appears under its path); the other files of the batch are written all the same.
/// `fault` applies to each file as in [`write_atomic`].
pub fn write_atomic_all(files: &[(&Path, &[u8])], fault: Option<&Fault>) -> Vec<io::Result<u64>> {
    let mut lens = Vec::with_capacity(files.len());
    let mut pending = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        match write_temp_for(path, fault, |out| out.write_all(bytes)) {
            Ok((temp, len)) => {
                lens.push(Ok(len));
                pending.push((temp, *path));
            }
            Err(e) => lens.push(Err(e)),
        }
    }
    let mut committed = commit_all(pending, fault).into_iter();
    lens.into_iter()
        .map(|len| len.and_then(|len| committed.next().expect("one result per temp file").map(|()| len)))
        .collect()
}

/// The second half of [`write_atomic_all`], for temp files already written ([`write_temp`],
/// [`write_temp_for`]): each is made read-only and its write-back started, then each is
/// `sync_all`ed, then each is renamed to its path, in the order given (ADR 0049). A file's bytes
/// are durable before its name is, as for [`PendingFile::commit`]; a batch lets the block layer
/// take the writes together.
///
/// Returns, in the order of `files`, `Ok` or the I/O error of the first step that failed for
/// that file (its temp file is removed then, nothing appears under its path); the other files
/// are committed all the same. `fault` applies to each file as in [`PendingFile::commit`].
pub fn commit_all(files: Vec<(PendingFile, &Path)>, fault: Option<&Fault>) -> Vec<io::Result<()>> {
    let mut pending: Vec<io::Result<(PendingFile, &Path)>> = files.into_iter().map(Ok).collect();
    for p in pending.iter_mut() {
        if let Ok((temp, _)) = p {
            if let Err(e) = temp.start_sync() {
                *p = Err(e);
            }
        }
    }
    sync_together(&mut pending);
    pending
        .into_iter()
        .map(|p| {
            let (temp, path) = p?;
            temp.rename_synced(path, fault)
        })
        .collect()
}

/// At most how many threads [`commit_all`] syncs the files of a batch on (the caller's included).
pub const SYNC_THREADS: usize = 8;

/// `sync_all` of every temp file of `pending` still `Ok`, an error replacing its entry. The
/// files are synced on up to [`SYNC_THREADS`] threads at once, so that their syncs are pending
/// together: the block layer then answers many with one flush of the device's write cache
/// instead of one flush per file (and a journalling file system commits them together), while
/// each file is still synced by its own `fsync` before its rename (ADR 0049).
fn sync_together(pending: &mut [io::Result<(PendingFile, &Path)>]) {
    let files: Vec<std::sync::Mutex<&mut io::Result<(PendingFile, &Path)>>> =
        pending.iter_mut().filter(|p| p.is_ok()).map(std::sync::Mutex::new).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Each thread syncs the next file not taken yet, until none is left.
    let work = || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(file) = files.get(i) else { break };
        let mut p = file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Ok((temp, _)) = &**p {
            if let Err(e) = temp.temp.as_file().sync_all() {
                **p = Err(e);
            }
        }
    };
    let helpers = files.len().min(SYNC_THREADS).saturating_sub(1);
    std::thread::scope(|scope| {
        for _ in 0..helpers {
            // A thread the system cannot start (EAGAIN, a pids limit) leaves its share to the others.
            let _ = std::thread::Builder::new().spawn_scoped(scope, work);
        }
        work();
    });
}

/// A temp file written by [`write_temp`], locked exclusively, not yet under its final name;
/// removed when dropped.
#[derive(Debug)]
pub struct PendingFile {
    temp: tempfile::NamedTempFile,
}

/// First half of [`write_atomic`], for a writer that chooses the final name after the write
/// (the table store names a table by the digest computed while its bytes are written): a
/// flushed temp file in `dir` (created if needed), locked exclusively while it lives, holding
/// what `write` wrote, and its length in bytes. `fault` applies when `dir` contains its path
/// part.
///
/// Errors: the I/O error of creating, locking or writing the temp file; it is removed then.
pub fn write_temp(
    dir: &Path,
    fault: Option<&Fault>,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<(PendingFile, u64)> {
    write_temp_planned(dir, Plan::of(fault, dir), write)
}

/// [`write_temp`] of a file whose final path is already known: the temp file in the directory
/// of `path` (created if needed), with `fault` applying when `path` contains its path part, as
/// in [`write_atomic`], whose first half it is. Commit it with [`PendingFile::commit`] or
/// [`commit_all`].
///
/// Errors: as [`write_temp`].
pub fn write_temp_for(
    path: &Path,
    fault: Option<&Fault>,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<(PendingFile, u64)> {
    write_temp_planned(parent_of(path), Plan::of(fault, path), write)
}

fn write_temp_planned(
    dir: &Path,
    plan: Plan,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<(PendingFile, u64)> {
    // The directory is made only when it is missing: a `mkdir` that finds it there costs a
    // failed system call and a `stat` per file of a batch.
    let temp = match tempfile::Builder::new().prefix(TEMP_PREFIX).tempfile_in(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            create_private_dir_all(dir)?;
            tempfile::Builder::new().prefix(TEMP_PREFIX).tempfile_in(dir)?
        }
        made => made?,
    };
    lock::lock_exclusive(temp.as_file())?;
    plan.pause_at(PausePoint::Created, temp.path());
    let len = {
        let mut sink = FaultWriter { file: temp.as_file(), temp: temp.path(), plan, written: 0 };
        let mut out = BufWriter::with_capacity(1 << 20, &mut sink);
        write(&mut out)?;
        out.flush()?;
        drop(out);
        sink.written
    };
    plan.pause_at(PausePoint::Written, temp.path());
    Ok((PendingFile { temp }, len))
}

impl PendingFile {
    /// The temp file's path (`<dir>/.tmp-*`).
    pub fn path(&self) -> &Path {
        self.temp.path()
    }

    /// Second half of [`write_atomic`]: `sync_all`, read-only, rename to `path` (its directory
    /// created if needed, on the same file system as the temp file); the directory is not synced
    /// (ADR 0047). `fault`
    /// applies when `path` contains its path part.
    ///
    /// Errors: the I/O error of the first step that failed; the temp file is removed then.
    pub fn commit(self, path: &Path, fault: Option<&Fault>) -> io::Result<()> {
        let file = self.temp.as_file();
        file.sync_all()?;
        self.make_read_only()?;
        self.rename_synced(path, fault)
    }

    /// Makes the temp file read-only and starts writing its bytes back without waiting for
    /// them (the first step of [`write_atomic_all`]'s sync).
    fn start_sync(&self) -> io::Result<()> {
        self.make_read_only()?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a plain system call on a file descriptor this value owns; it reads no
            // memory of this process.
            // Only a hint, its answer unused: a file system that cannot start write-back early
            // is synced in full by the `sync_all` that follows.
            let _ =
                unsafe { libc::sync_file_range(self.temp.as_file().as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        }
        Ok(())
    }

    fn make_read_only(&self) -> io::Result<()> {
        let file = self.temp.as_file();
        let mut perms = file.metadata()?.permissions();
        perms.set_readonly(true);
        file.set_permissions(perms)
    }

    /// The last step of a commit, once the temp file is synced and read-only: the rename to
    /// `path` (its directory created if needed).
    fn rename_synced(self, path: &Path, fault: Option<&Fault>) -> io::Result<()> {
        let plan = Plan::of(fault, path);
        let parent = parent_of(path);
        // A temp file written in the final directory needs no second `mkdir` of it.
        if self.temp.path().parent() != Some(parent) {
            create_private_dir_all(parent)?;
        }
        plan.pause_at(PausePoint::Synced, self.temp.path());
        self.temp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Creates `dir` and every missing directory above it with mode `0700` (the owner alone, whatever
/// the umask), as every directory of a cache is made (README "Site cache": files `0400`,
/// directories `0700`); a directory that exists is left as it is.
///
/// Errors: the I/O error of the first directory that cannot be created (`ENOTDIR` where a file
/// is in the way, `EACCES`, `EROFS`).
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// The directory `path` is in (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Temp files removed by [`remove_stale_temps`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TempSweep {
    /// The files removed.
    pub removed: Vec<PathBuf>,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// Removes, under `dir` (recursively), every regular file named [`TEMP_PREFIX`]`*` that is at
/// least `min_age` old (by modification time) and that no process holds a lock on: the remains
/// of a writer that was killed or lost power (ADR 0012). A live writer holds an exclusive lock
/// on its temp file, so it is never removed; `min_age` also covers the instant between the
/// creation of a temp file and its lock. A directory named [`TEMP_PREFIX`]`*` (a build's private
/// directory) is removed whole under the same rule, its lock being its [`TEMP_DIR_LOCK`] file.
/// A missing `dir` is an empty sweep.
///
/// Errors: the I/O error of listing a directory (a file that vanished meanwhile is skipped).
pub fn remove_stale_temps(dir: &Path, min_age: Duration) -> io::Result<TempSweep> {
    let mut sweep = TempSweep::default();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(sweep),
        Err(e) => return Err(e),
    };
    let now = SystemTime::now();
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        let is_temp = entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX);
        let age = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).unwrap_or_default();
        if meta.is_dir() && is_temp {
            if age >= min_age {
                if let Some(bytes) = remove_temp_dir_if_unlocked(&path)? {
                    sweep.bytes += bytes;
                    sweep.removed.push(path);
                }
            }
            continue;
        }
        if meta.is_dir() {
            let inner = remove_stale_temps(&path, min_age)?;
            sweep.removed.extend(inner.removed);
            sweep.bytes += inner.bytes;
            continue;
        }
        if !is_temp || !meta.is_file() || age < min_age {
            continue;
        }
        if remove_if_unlocked(&path)? {
            sweep.bytes += meta.len();
            sweep.removed.push(path);
        }
    }
    Ok(sweep)
}

/// Removes the temp directory `dir` when no process holds a lock on its [`TEMP_DIR_LOCK`] file
/// (or it has none), holding that lock while removing; returns the bytes of the files removed.
fn remove_temp_dir_if_unlocked(dir: &Path) -> io::Result<Option<u64>> {
    let _held = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(dir.join(TEMP_DIR_LOCK)) {
        Ok(lock) if !lock::try_lock_exclusive(&lock)? => return Ok(None),
        Ok(lock) => Some(lock),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut bytes = 0;
    for entry in fs::read_dir(dir)?.flatten() {
        bytes += entry.metadata().map_or(0, |m| if m.is_file() { m.len() } else { 0 });
    }
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `path` (not followed if a symlink) names the very file `file` is open on (same
/// device and inode): how a process that locked a cache file checks that nobody removed or
/// replaced it meanwhile (ADR 0009).
pub fn names_file(path: &Path, file: &File) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| same_file(&m, file))
}

/// Sets the access time of `file` to now, best effort (a file of another user is left as it
/// is): how a run marks a cache entry it uses, for the collector's live-run rule (ADR 0026),
/// since `relatime` updates access times only now and then.
pub fn touch(file: &File) {
    let _ = file.set_times(fs::FileTimes::new().set_accessed(SystemTime::now()));
}

/// What [`remove_if_unused`] did with a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// The file was removed.
    Removed,
    /// A process holds a lock on it (it is mapped, loaded or being written): kept.
    Locked,
    /// It was used (accessed or modified) at or after the time it had to be older than: kept.
    Recent,
    /// It is gone (or was replaced meanwhile): nothing removed.
    Gone,
}

/// [`remove_if_unlocked`], and only when the file's last use (the later of its access and
/// modification times) is before the time `used_before` returns, asked while the exclusive lock is
/// held (`None`: any time). A process that marks a file it uses ([`touch`]) under a shared lock
/// therefore either sees it removed (its path no longer names the file it locked) or has it
/// kept: how `gridkey cache gc` spares what live runs use (ADR 0026).
///
/// Errors: the I/O error of opening, locking, checking or removing other than `NotFound`, and
/// the error of `used_before`.
pub fn remove_if_unused(
    path: &Path,
    used_before: impl FnOnce() -> io::Result<Option<SystemTime>>,
) -> io::Result<Removal> {
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removal::Gone),
        Err(e) => return Err(e),
    };
    if !lock::try_lock_exclusive(&file)? {
        return Ok(Removal::Locked);
    }
    if !names_file(path, &file) {
        return Ok(Removal::Gone);
    }
    if let Some(limit) = used_before()? {
        let meta = file.metadata()?;
        let last_use = meta.modified()?.max(meta.accessed()?);
        if last_use >= limit {
            return Ok(Removal::Recent);
        }
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(Removal::Removed),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Removal::Gone),
        Err(e) => Err(e),
    }
}

/// Removes the regular file at `path` while holding an exclusive lock on it taken without
/// waiting; `Ok(false)` when a process holds a lock on it (it is mapped, loaded or being
/// written) or when it is gone. The lock is held across the `unlink`, so a reader that opens the
/// file meanwhile sees afterwards that its path is gone ([`lock::open_shared`] says `ENOENT`)
/// (ADR 0009).
///
/// Errors: the I/O error of opening, locking or removing other than `NotFound`.
pub fn remove_if_unlocked(path: &Path) -> io::Result<bool> {
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !lock::try_lock_exclusive(&file)? {
        return Ok(false);
    }
    // The path may have been renamed over since it was opened: remove only what is locked.
    let same = fs::symlink_metadata(path).is_ok_and(|m| same_file(&m, &file));
    if !same {
        return Ok(false);
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// [`remove_if_unlocked`], tried again every 10 ms for at most `within` while a lock keeps the
/// file: for a caller whose own last use of the file has ended (a kernel dropped, a table
/// unmapped). A process that another thread of this process forks meanwhile holds a copy of
/// every descriptor, and so of its lock, until it executes its program (`O_CLOEXEC` closes them
/// only then); this waits that moment out. `Ok(false)` when the file is gone or still locked
/// after `within` (another process uses it).
///
/// Errors: those of [`remove_if_unlocked`].
pub fn remove_once_unlocked(path: &Path, within: Duration) -> io::Result<bool> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if remove_if_unlocked(path)? {
            return Ok(true);
        }
        if !path.exists() || std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `file` is the file `meta` describes (same device and inode).
pub(crate) fn same_file(meta: &fs::Metadata, file: &File) -> bool {
    file.metadata().is_ok_and(|f| f.dev() == meta.dev() && f.ino() == meta.ino())
}
