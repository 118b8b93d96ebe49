//! The cache directory as a whole: checks before use, `gridkey cache stats` and
//! `gridkey cache gc` (ADR 0009, ADR 0012). No printing: the binary reports.
//!
//! A cache directory holds four stores, each named with its format version:
//! `tables-v1/` (`<hex[0..2]>/<hex>.npy`, gridkey-store), `translation-v2/`
//! (`<hex[0..2]>/<hex>.bin` with its record `<hex>.json`, gridkey-fingerprint), `build-v2/`
//! (`<hex>.so`, gridkey-stencil) and `gt4py-v1/` (GT4Py's translation entries and built
//! extensions, `{translation,extension}/<hex[0..2]>/<hex>.bin`, written by the Python package,
//! ADR 0040). Files named `.tmp-*` are unfinished writes.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use gridkey_fs::{remove_if_unlocked, remove_if_unused, remove_stale_temps, CacheBucket, Removal, TEMP_PREFIX};
use serde::{Deserialize, Serialize};

use crate::AppError;

/// The stores of a cache directory with the extension of their entries, in report order: the
/// names of [`CacheBucket::STORES`] (ADR 0043).
pub const STORES: [(&str, &str); 4] = {
    let s = CacheBucket::STORES;
    [(s[0].0.name(), s[0].1), (s[1].0.name(), s[1].1), (s[2].0.name(), s[2].1), (s[3].0.name(), s[3].1)]
};

/// How old (modification time, seconds) an unlocked temp file must be before `gridkey run`
/// and, by default, `gridkey cache gc` remove it: longer than any write takes between creating
/// its temp file and locking it, and than a C compiler writing a library (ADR 0009).
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(60);

/// A reason to distrust a cache directory, or a file in it, that does not stop its use, as pip
/// and ccache warn about shared caches. Printed as `gridkey: warning: <path>: <message>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheWarning {
    /// The directory or file.
    pub path: PathBuf,
    /// What is wrong and what to do, one sentence without a final period, naming what the path
    /// is (`cache directory ...`, `table file ...`).
    pub message: String,
}

impl CacheWarning {
    /// The warning for a stored table file that did not hold the table its name says and was
    /// replaced during conversion ([`gridkey_store::TableStore::repaired`]).
    pub fn repaired_table(path: PathBuf) -> Self {
        Self {
            path,
            message: "table file did not hold the table its name says (damaged, or modified after it was stored) and \
                      was rewritten from the runtime table; if this repeats, find what writes into the cache directory"
                .to_owned(),
        }
    }
}

/// Checks `cache_dir` before use, creating it if needed: it must be a directory (not a file),
/// and writable (a probe file is created and removed). Returns warnings when it, or one of its
/// stores, is owned by another user or writable by everyone: whoever can write there can plant
/// tables and kernel libraries that this process loads.
///
/// Errors: [`AppError::CacheUnusable`] naming the directory and the problem (`is a file`,
/// `cannot be created`, `cannot be read`, `is read-only or not writable`, `is not writable`).
/// `gridkey run` uses [`probe_cache_dir`] instead, for which a read-only directory is a site
/// cache (ADR 0036).
pub fn check_cache_dir(cache_dir: &Path) -> Result<Vec<CacheWarning>, AppError> {
    match probe_cache_dir(cache_dir)? {
        CacheAccess::Writable(warnings) => Ok(warnings),
        CacheAccess::ReadOnly(source) => Err(AppError::CacheUnusable {
            path: cache_dir.to_path_buf(),
            problem: "is read-only or not writable",
            source,
        }),
    }
}

/// What this process can do in a cache directory, found by trying to write in it (ADR 0036).
#[derive(Debug)]
pub enum CacheAccess {
    /// It can write there; the warnings of [`check_cache_dir`].
    Writable(Vec<CacheWarning>),
    /// It cannot: creating a file failed with this error (`EROFS`, `EACCES` or `EPERM`). Its
    /// entries can still be served, as a site cache's.
    ReadOnly(io::Error),
}

/// Whether `error`, from creating a file in a directory, says that this process may not write
/// there (a read-only mount, a directory of another user without write permission), rather than
/// that something else is wrong (a full disk).
fn is_read_only(error: &io::Error) -> bool {
    // By kind: the temp file's error carries its path and no longer its raw OS error.
    matches!(error.kind(), io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::PermissionDenied)
}

/// [`check_cache_dir`], with a directory that exists but cannot be written (tried, not read
/// from its mode bits: root writes through mode 0555 but not to a read-only mount) reported as
/// [`CacheAccess::ReadOnly`] instead of an error (ADR 0036).
///
/// Errors: [`AppError::CacheUnusable`] naming the directory and the problem (`is a file`,
/// `cannot be created`, `cannot be read`, `is not writable` for another failure of the probe).
pub fn probe_cache_dir(cache_dir: &Path) -> Result<CacheAccess, AppError> {
    let unusable = |problem: &'static str| {
        move |source| AppError::CacheUnusable { path: cache_dir.to_path_buf(), problem, source }
    };
    match fs::metadata(cache_dir) {
        Ok(meta) if !meta.is_dir() => {
            return Err(unusable("is a file, not a directory")(io::Error::from_raw_os_error(libc::ENOTDIR)))
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            gridkey_fs::create_private_dir_all(cache_dir).map_err(unusable("cannot be created"))?
        }
        Err(e) => return Err(unusable("cannot be read")(e)),
    }
    // A uniquely named probe, removed when dropped: threads and processes may check at once.
    match tempfile::Builder::new().prefix(&format!("{TEMP_PREFIX}probe-")).tempfile_in(cache_dir) {
        Ok(_) => {}
        Err(e) if is_read_only(&e) => return Ok(CacheAccess::ReadOnly(e)),
        Err(e) => return Err(unusable("is not writable")(e)),
    }

    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut warnings = Vec::new();
    for dir in cache_dirs(cache_dir) {
        let Ok(meta) = fs::metadata(&dir) else {
            continue;
        };
        if meta.uid() != me {
            warnings.push(CacheWarning {
                path: dir.clone(),
                message: format!(
                    "cache directory owned by user {}, not by you (user {me}): that user can replace the tables and kernel libraries this run loads; use a cache directory of your own",
                    meta.uid()
                ),
            });
        }
        warnings.extend(writable_by_everyone(&dir, &meta));
    }
    Ok(CacheAccess::Writable(warnings))
}

/// The cache directory and its store directories.
fn cache_dirs(cache_dir: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    std::iter::once(cache_dir.to_path_buf()).chain(STORES.iter().map(|(d, _)| cache_dir.join(d)))
}

/// The warning for a cache directory `dir` that everyone may write, if it is one.
fn writable_by_everyone(dir: &Path, meta: &fs::Metadata) -> Option<CacheWarning> {
    (meta.mode() & 0o002 != 0).then(|| CacheWarning {
        path: dir.to_path_buf(),
        message: "cache directory writable by everyone: any user can plant tables and kernel libraries that this run loads; chmod o-w it or use a cache directory of your own".to_owned(),
    })
}

/// Checks a read-only site cache before use (ADR 0036): it must be an existing directory, and
/// nothing is created in it. Owned by another user is what a site cache is and is not warned
/// about; writable by everyone is (anyone could plant kernel libraries this run loads).
///
/// Errors: [`AppError::SiteCache`] naming the directory and the problem (`does not exist`,
/// `is a file, not a directory`, `cannot be read`).
pub fn check_site_cache(site: &Path) -> Result<Vec<CacheWarning>, AppError> {
    let problem = match fs::metadata(site) {
        Ok(meta) if meta.is_dir() => None,
        Ok(_) => Some("is a file, not a directory"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some("does not exist"),
        Err(_) => Some("cannot be read"),
    };
    if let Some(problem) = problem {
        return Err(AppError::SiteCache { path: site.to_path_buf(), problem });
    }
    Ok(cache_dirs(site)
        .filter_map(|dir| fs::metadata(&dir).ok().and_then(|m| writable_by_everyone(&dir, &m)))
        .collect())
}

/// Who besides this user can write `cache_dir` or one of its stores (ADR 0031): one line per
/// directory that is owned by another user (root included), or writable by group or others;
/// empty when only this user can. A missing store is skipped. `gridkey cache push` refuses
/// such a cache, as `gridkey run` warns about it ([`check_cache_dir`]).
pub fn others_can_write(cache_dir: &Path) -> Vec<(PathBuf, String)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let dirs = std::iter::once(cache_dir.to_path_buf()).chain(STORES.iter().map(|(d, _)| cache_dir.join(d)));
    let mut out = Vec::new();
    for dir in dirs {
        // Not followed: a store that is a symlink is someone else's directory as far as push knows.
        let meta = if dir == cache_dir { fs::metadata(&dir) } else { fs::symlink_metadata(&dir) };
        let Ok(meta) = meta else {
            continue;
        };
        if meta.file_type().is_symlink() {
            out.push((dir, "it is a symlink, so its target decides who can write it".to_owned()));
        } else if meta.uid() != me {
            out.push((dir, format!("it is owned by user {}, not by you (user {me})", meta.uid())));
        } else if meta.mode() & 0o022 != 0 {
            out.push((dir, format!("it has mode {:03o}, writable by group or others", meta.mode() & 0o7777)));
        }
    }
    out
}

/// Directory of the live-run registrations under the cache directory (ADR 0026).
pub const RUNS_DIR: &str = CacheBucket::Runs.name();

/// How much earlier than the oldest live run's start an entry must have been last used for
/// `gridkey cache gc` to remove it while runs are live: covers time stamps of coarse
/// granularity and clocks of a file server and its clients that differ a little (ADR 0026).
pub const LIVE_RUN_MARGIN: Duration = Duration::from_secs(2);

/// A run registered as live in a cache directory for as long as this value lives (ADR 0026):
/// a file `<cache>/runs/<pid>-<random>.run` whose modification time is the run's start, locked
/// exclusively by the run. `gridkey cache gc` removes, while a run is live, only entries last
/// used before the oldest live run started; a run marks what it uses ([`gridkey_fs::touch`])
/// and what it writes is newer than its start, so nothing a live run has produced or is about
/// to use is removed. A killed run's lock dies with it; the collector then removes its file.
///
/// The file holds a [`Registration`] (the run's process id, the process's start time and the
/// host), so that the collector tells a live run from a process that merely holds a lock on a
/// file of `runs/` (ADR 0033).
#[derive(Debug)]
pub struct LiveRun {
    path: PathBuf,
    _lock: fs::File,
}

/// What a live run's registration file holds (JSON, ADR 0033).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// Always [`REGISTRATION_FORMAT`].
    pub format: String,
    /// The run's process id.
    pub pid: u32,
    /// The process's start, in clock ticks after boot (`/proc/<pid>/stat`, field 22); `None`
    /// where `/proc` cannot be read. With `pid` and `host` it names one process, whatever pids
    /// are reused.
    pub process_start: Option<u64>,
    /// The host name of the machine the run runs on (a cache directory may be shared over NFS).
    pub host: String,
}

/// The `format` of a [`Registration`].
pub const REGISTRATION_FORMAT: &str = "gridkey-run-v1";

impl Registration {
    /// The registration of this process.
    pub fn this_process() -> Self {
        let pid = std::process::id();
        Self { format: REGISTRATION_FORMAT.to_owned(), pid, process_start: process_start(pid), host: host_name() }
    }

    /// Whether the process it names is alive: always `true` for a run on another host (its lock
    /// is all there is to go by), else whether a process `pid` exists with that start time.
    pub fn is_alive(&self) -> bool {
        if self.host != host_name() {
            return true;
        }
        match (process_start(self.pid), self.process_start) {
            (Some(now), Some(then)) => now == then,
            (Some(_), None) => true,
            // No such process, unless `/proc` itself cannot be read: then the lock decides.
            (None, _) => !Path::new("/proc/self/stat").exists(),
        }
    }
}

/// The start of process `pid` in clock ticks after boot, field 22 of `/proc/<pid>/stat`; `None`
/// when there is no such process or `/proc` cannot be read.
fn process_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This machine's host name (`gethostname(2)`); empty when it cannot be read.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl LiveRun {
    /// Registers a live run in `cache_dir` (created if needed): its [`Registration`], readable by
    /// every user of the cache (`0644`), whose collectors must read it.
    ///
    /// Errors: the I/O error of creating, writing, locking or naming the registration.
    pub fn register(cache_dir: &Path) -> io::Result<LiveRun> {
        use std::io::Write as _;
        use std::os::unix::fs::PermissionsExt;
        let dir = cache_dir.join(RUNS_DIR);
        gridkey_fs::create_private_dir_all(&dir)?;
        // Locked and written before it is visible under its final name, so that the collector
        // never sees it unlocked or empty while the run lives.
        let mut temp = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .permissions(fs::Permissions::from_mode(0o644))
            .tempfile_in(&dir)?;
        gridkey_fs::lock::lock_exclusive(temp.as_file())?;
        let text = serde_json::to_vec(&Registration::this_process()).map_err(io::Error::other)?;
        temp.write_all(&text)?;
        temp.flush()?;
        let name = format!(
            "{}-{}.run",
            std::process::id(),
            temp.path()
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().trim_start_matches(TEMP_PREFIX).to_owned())
        );
        let path = dir.join(name);
        let file = temp.persist(&path).map_err(|e| e.error)?;
        Ok(LiveRun { path, _lock: file })
    }

    /// The registration file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// The live runs of a cache directory ([`live_runs`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveRuns {
    /// How many runs are live.
    pub count: u64,
    /// The start of the oldest (the modification time of its registration); `None` without one.
    pub oldest: Option<SystemTime>,
    /// The entries of `runs/` that were skipped (not a registration, or one held by a process
    /// that is not its run), each naming the entry (ADR 0033).
    pub skipped: Vec<CacheWarning>,
}

/// Largest registration file read; a registration is about 100 bytes.
const MAX_REGISTRATION_BYTES: u64 = 4096;

/// The live runs of `cache_dir`. A registration is live when its file is locked, holds a
/// [`Registration`] and names a live process ([`Registration::is_alive`]); one nobody holds is a
/// dead run's and is removed on the way. Anything else in `runs/` is skipped with a warning
/// naming it, and counts as no run (ADR 0033): a directory or a symlink, a file of a foreign
/// name, one that cannot be read, a locked file that holds no registration (a process that is
/// not a gridkey run holds a lock on it) or the registration of a run that is gone (a process
/// that inherited its lock holds it). Temp files (`.tmp-*`, a registration being made) are
/// left alone.
///
/// Errors: the I/O error of listing `<cache_dir>/runs` other than its absence or its being a
/// file (a missing directory or a file in its place is no live run, the latter with a warning).
pub fn live_runs(cache_dir: &Path) -> io::Result<LiveRuns> {
    let dir = cache_dir.join(RUNS_DIR);
    let mut runs = LiveRuns::default();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(runs),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            runs.skipped.push(CacheWarning {
                path: dir,
                message: "run-registration directory is not a directory, so no run can register as live: remove it"
                    .to_owned(),
            });
            return Ok(runs);
        }
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(TEMP_PREFIX) {
            continue;
        }
        let mut skip = |message: String| runs.skipped.push(CacheWarning { path: path.clone(), message });
        let kind = match fs::symlink_metadata(&path) {
            Ok(meta) => meta.file_type(),
            Err(_) => continue,
        };
        if !kind.is_file() {
            skip(format!(
                "{} in the run-registration directory, not a run registration: skipped; remove it",
                if kind.is_dir() {
                    "directory"
                } else if kind.is_symlink() {
                    "symlink"
                } else {
                    "special file"
                }
            ));
            continue;
        }
        if !name.ends_with(".run") {
            skip(
                "file of a foreign name in the run-registration directory, not a run registration: skipped; remove it"
                    .to_owned(),
            );
            continue;
        }
        // A registration nobody holds is a dead run's: removed on the way.
        match gridkey_fs::remove_if_unused(&path, || Ok(None)) {
            Ok(gridkey_fs::Removal::Locked) => {}
            Ok(_) => continue,
            Err(e) => {
                skip(format!(
                    "run registration cannot be checked ({e}): skipped, not counted as a live run; remove it"
                ));
                continue;
            }
        }
        let registration = read_registration(&path);
        match registration {
            Some(r) if r.is_alive() => {
                runs.count += 1;
                if let Ok(start) = fs::symlink_metadata(&path).and_then(|m| m.modified()) {
                    runs.oldest = Some(runs.oldest.map_or(start, |o| o.min(start)));
                }
            }
            Some(r) => skip(format!(
                "registration of run {} on {}, which has ended, is held locked by another process (one that \
                 inherited its lock): not counted as a live run; remove it once that process is gone",
                r.pid, r.host
            )),
            None => skip(
                "locked by a process that is not a gridkey run (the file holds no run registration): not counted \
                 as a live run; remove it, or stop what holds it"
                    .to_owned(),
            ),
        }
    }
    Ok(runs)
}

/// The [`Registration`] in `path`, read without following a symlink or blocking on a FIFO;
/// `None` when it cannot be read or does not parse.
fn read_registration(path: &Path) -> Option<Registration> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).ok()?;
    let mut text = Vec::new();
    file.take(MAX_REGISTRATION_BYTES).read_to_end(&mut text).ok()?;
    serde_json::from_slice::<Registration>(&text).ok().filter(|r| r.format == REGISTRATION_FORMAT)
}

/// Entries and bytes of one store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    /// Store directory name (`tables-v1`, `translation-v2`, `build-v2`, `gt4py-v1`).
    pub store: String,
    /// Number of entries (tables, translation entries, libraries).
    pub entries: u64,
    /// Bytes of the entries (a translation entry counts with its record).
    pub bytes: u64,
    /// Number of temp files (`.tmp-*`): unfinished or abandoned writes.
    pub temp_files: u64,
    /// Bytes of the temp files.
    pub temp_bytes: u64,
}

/// `gridkey cache stats`: one [`StoreStats`] per store of [`STORES`], in that order.
///
/// Errors: [`AppError::NoCacheDir`] when `cache_dir` does not exist or is not a directory (a
/// mistyped path is not an empty cache); [`AppError::StoreNotADirectory`] and
/// [`AppError::CacheScan`] when a store directory cannot be listed.
pub fn stats(cache_dir: &Path) -> Result<Vec<StoreStats>, AppError> {
    existing_cache_dir(cache_dir)?;
    let mut out = Vec::new();
    for (store, ext) in STORES {
        let mut s = StoreStats { store: store.to_owned(), ..Default::default() };
        for f in scan(&cache_dir.join(store))? {
            if f.temp {
                s.temp_files += 1;
                s.temp_bytes += f.bytes;
            } else if f.path.extension().is_some_and(|e| e == ext) {
                s.entries += 1;
                s.bytes += f.bytes + sidecar(&f.path).map_or(0, |p| fs::metadata(p).map_or(0, |m| m.len()));
            }
        }
        out.push(s);
    }
    Ok(out)
}

/// File of the local tier's counters, summed over runs, in the cache directory.
pub const LOCAL_STATS_FILE: &str = CacheBucket::TierStats.name();

/// The counters of one tier, for a run (`gridkey run --json`, `tiers`) or summed over runs
/// (`gridkey cache stats`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierReport {
    /// `local` or `remote`.
    pub tier: String,
    /// The cache directory, or the shared tier's URL with its password hidden.
    pub location: String,
    /// Whether the tier was usable (a shared tier that could not be reached is off).
    pub on: bool,
    /// Hits, misses, bytes in (read from the tier) and out (written to it), errors, lease waits
    /// and the shared tier's round trips, leases and take-overs.
    #[serde(flatten)]
    pub stats: gridkey_remote::TierStats,
    /// Why the tier went off, if it did.
    pub warning: Option<String>,
    /// The shared tier's warning about the objects its lookups found failing a check here in
    /// this run, if any ([`gridkey_remote::Remote::rejections`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejections: Option<String>,
    /// `cache stats` of the shared tier: the objects of each kind on the server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<gridkey_remote::KindStats>,
    /// `cache stats`: the runs whose counters are summed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
}

impl TierReport {
    /// The local tier of `cache_dir` with `stats`.
    pub fn local(cache_dir: &Path, stats: gridkey_remote::TierStats) -> Self {
        TierReport {
            tier: "local".to_owned(),
            location: cache_dir.display().to_string(),
            on: true,
            stats,
            warning: None,
            rejections: None,
            objects: Vec::new(),
            runs: None,
        }
    }

    /// The read-only site cache `site_cache` with `stats` (its hits; it is never written,
    /// ADR 0036).
    pub fn site(site_cache: &Path, stats: gridkey_remote::TierStats) -> Self {
        TierReport { tier: "site".to_owned(), ..TierReport::local(site_cache, stats) }
    }

    /// The shared tier of `remote` with `stats`.
    pub fn remote(remote: &gridkey_remote::Remote, stats: gridkey_remote::TierStats) -> Self {
        TierReport {
            tier: "remote".to_owned(),
            location: remote.shown_url().to_owned(),
            on: remote.is_on(),
            stats,
            warning: remote.warning(),
            rejections: remote.rejections(),
            objects: Vec::new(),
            runs: None,
        }
    }
}

/// The local tier's counters summed over runs, with the number of runs ([`LOCAL_STATS_FILE`]);
/// zero when there are none yet or the file is unreadable.
pub fn local_stats(cache_dir: &Path) -> (gridkey_remote::TierStats, u64) {
    #[derive(Default, Deserialize)]
    struct Totals {
        #[serde(default)]
        runs: u64,
        #[serde(default)]
        stats: gridkey_remote::TierStats,
    }
    let totals: Totals = fs::read(cache_dir.join(LOCAL_STATS_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    (totals.stats, totals.runs)
}

/// Adds one run's counters of the local tier to [`LOCAL_STATS_FILE`], under an exclusive lock
/// of `tier-stats-v1.lock` so that concurrent runs add up, written atomically.
///
/// Errors: the lock or the file cannot be written.
pub fn record_local_stats(cache_dir: &Path, run: &gridkey_remote::TierStats) -> io::Result<()> {
    let lock = gridkey_fs::lock::open_lock_file(&cache_dir.join(format!("{LOCAL_STATS_FILE}.lock")))?;
    gridkey_fs::lock::lock_exclusive(&lock)?;
    let (mut stats, runs) = local_stats(cache_dir);
    stats.add(run);
    let text = serde_json::to_vec_pretty(&serde_json::json!({ "runs": runs + 1, "stats": stats }))
        .expect("counters serialise");
    gridkey_fs::write_atomic(&cache_dir.join(LOCAL_STATS_FILE), None, |out| out.write_all(&text))?;
    Ok(())
}

/// `gridkey cache stats`: the stores, then each tier's counters summed over runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheStats {
    /// One [`StoreStats`] per store of [`STORES`], in that order.
    pub stores: Vec<StoreStats>,
    /// `local`, then `remote` when a shared tier is configured.
    pub tiers: Vec<TierReport>,
}

/// [`stats`] and the tiers' totals: the local tier's ([`local_stats`]) and, with `remote`, the
/// shared tier's (every client's published counters and the objects on the server).
///
/// Errors: as [`stats`]; [`AppError::RemoteUnreachable`] when the shared tier is off.
pub fn cache_stats(cache_dir: &Path, remote: Option<&gridkey_remote::Remote>) -> Result<CacheStats, AppError> {
    let stores = stats(cache_dir)?;
    let (local, runs) = local_stats(cache_dir);
    let mut tiers = vec![TierReport { runs: Some(runs), ..TierReport::local(cache_dir, local) }];
    if let Some(remote) = remote {
        let server = remote.server_stats().ok_or_else(|| {
            AppError::RemoteUnreachable(remote.warning().unwrap_or_else(|| "the shared tier is off".to_owned()))
        })?;
        tiers.push(TierReport {
            objects: server.kinds,
            runs: Some(server.runs),
            ..TierReport::remote(remote, server.totals)
        });
    }
    Ok(CacheStats { stores, tiers })
}

/// What `gridkey cache gc` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcConfig {
    /// Remove least-recently-used entries until the entries take at most this many bytes;
    /// `None`: remove only stale temp files.
    pub max_size: Option<u64>,
    /// Minimum age of an unlocked temp file before it is removed ([`STALE_TEMP_AGE`] by default).
    pub temp_min_age: Duration,
}

/// What `gridkey cache gc` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    /// Stale temp files removed.
    pub temps_removed: u64,
    /// Their bytes.
    pub temp_bytes: u64,
    /// Entries removed, least recently used first.
    pub entries_removed: u64,
    /// Their bytes (with records).
    pub bytes_removed: u64,
    /// Entries over the budget that were kept because a process holds a lock on them (mapped
    /// tables, loaded kernels).
    pub kept_in_use: u64,
    /// Entries over the budget that were kept because they were used since the oldest live run
    /// started (ADR 0026).
    #[serde(default)]
    pub kept_for_live_runs: u64,
    /// Runs that were live in the cache directory when the collector looked last.
    #[serde(default)]
    pub live_runs: u64,
    /// Bytes of the entries left.
    pub bytes_left: u64,
    /// Entries of `locks/` and `runs/` that were skipped, each naming the entry and what to do
    /// (ADR 0033): a directory, symlink or file of a foreign name, a file that cannot be read or
    /// removed, a lock held by a process that is not a live run.
    #[serde(default)]
    pub warnings: Vec<CacheWarning>,
}

/// `gridkey cache gc`: removes stale temp files ([`remove_stale_temps`]) in every store, the
/// locks of dead holders and the registrations of dead runs, then, with a `max_size`, the
/// least-recently-used entries (by the later of access and modification time) until the entries
/// of all stores take at most `max_size` bytes. An entry is removed only under an exclusive lock
/// taken without waiting, so an entry that a running process has mapped or loaded (it holds a
/// shared lock) is kept and counted in [`GcReport::kept_in_use`] (ADR 0009); and while runs are
/// live ([`LiveRun`]), only entries last used before the oldest live run started (less
/// [`LIVE_RUN_MARGIN`]), checked under that lock, so that nothing a live run has produced or is
/// about to use is removed; the others are counted in [`GcReport::kept_for_live_runs`]
/// (ADR 0026). Files that are not entries of a known store are left alone.
///
/// Errors: [`AppError::NoCacheDir`], [`AppError::StoreNotADirectory`] and
/// [`AppError::CacheScan`] as [`stats`], [`AppError::CacheReadOnly`] when this process cannot
/// write in `cache_dir` (a site cache, ADR 0036), and [`AppError::CacheScan`] when a file cannot
/// be removed.
pub fn gc(cache_dir: &Path, config: &GcConfig) -> Result<GcReport, AppError> {
    existing_cache_dir(cache_dir)?;
    if let CacheAccess::ReadOnly(source) = probe_cache_dir(cache_dir)? {
        return Err(AppError::CacheReadOnly { path: cache_dir.to_path_buf(), source });
    }
    let mut report = sweep(cache_dir, config.temp_min_age)?;
    let mut entries = Vec::new();
    for (store, ext) in STORES {
        for f in scan(&cache_dir.join(store))? {
            if !f.temp && f.path.extension().is_some_and(|e| e == ext) {
                let side = sidecar(&f.path).and_then(|p| fs::metadata(&p).ok().map(|m| (p, m.len())));
                entries.push((f.last_use, f.bytes + side.as_ref().map_or(0, |s| s.1), f.path, side.map(|s| s.0)));
            }
        }
    }
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    if let Some(max) = config.max_size {
        entries.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
        for (_, bytes, path, side) in &entries {
            if total <= max {
                break;
            }
            // The live runs are looked up again under the entry's lock: a run that registered
            // before it marked this entry as used is seen (ADR 0026).
            let used_before = || {
                let runs = live_runs(cache_dir)?;
                report.live_runs = runs.count;
                Ok(runs.oldest.map(|start| start.checked_sub(LIVE_RUN_MARGIN).unwrap_or(SystemTime::UNIX_EPOCH)))
            };
            match remove_if_unused(path, used_before).map_err(scan_err(path))? {
                Removal::Removed => {
                    if let Some(side) = side {
                        let _ = fs::remove_file(side);
                    }
                    report.entries_removed += 1;
                    report.bytes_removed += bytes;
                    total -= bytes;
                }
                Removal::Locked => report.kept_in_use += 1,
                Removal::Recent => report.kept_for_live_runs += 1,
                Removal::Gone => {}
            }
        }
    }
    report.bytes_left = total;
    Ok(report)
}

/// What `gridkey run` does before its first phase, in a cache directory it has just probed
/// writable ([`probe_cache_dir`]): the first half of [`gc`] without its probe and without the
/// scan of every entry, which only a size budget needs. Removes the unlocked temp files older
/// than `temp_min_age` from every store and from `runs/`, and the per-key lock files no process
/// holds; reports the live runs and a warning for each stray file of `locks/` and `runs/`
/// (ADR 0033). The [`GcReport`]'s entry counts are zero.
///
/// Errors: [`AppError::StoreNotADirectory`] or [`AppError::CacheScan`] naming the directory that
/// cannot be listed or the file that cannot be removed.
pub fn sweep(cache_dir: &Path, temp_min_age: Duration) -> Result<GcReport, AppError> {
    let mut report = GcReport::default();
    for dir in STORES.iter().map(|(store, _)| cache_dir.join(store)).chain([cache_dir.join(RUNS_DIR)]) {
        let swept = remove_stale_temps(&dir, temp_min_age).map_err(scan_err(&dir))?;
        report.temps_removed += swept.removed.len() as u64;
        report.temp_bytes += swept.bytes;
    }
    let locks_dir = cache_dir.join(gridkey_fs::lock::LOCKS_DIR);
    report.warnings = remove_dead_locks(&locks_dir).map_err(scan_err(&locks_dir))?;
    let runs_dir = cache_dir.join(RUNS_DIR);
    let runs = live_runs(cache_dir).map_err(scan_err(&runs_dir))?;
    report.live_runs = runs.count;
    report.warnings.extend(runs.skipped);
    Ok(report)
}

/// Removes the per-key lock files that no process holds (left by a holder that was killed); a
/// held one is kept, and a waiter on a removed one takes a new one ([`gridkey_fs::lock::KeyLocks`]).
/// Anything else in `dir` is skipped with a warning naming it (ADR 0033): a directory, symlink or
/// special file, a file whose name is not `translation-<key>.lock` or `build-<key>.lock`, a lock
/// file that cannot be opened or removed.
///
/// Errors: the I/O error of listing `dir` other than its absence.
fn remove_dead_locks(dir: &Path) -> io::Result<Vec<CacheWarning>> {
    let mut warnings = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(warnings),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            warnings.push(CacheWarning {
                path: dir.to_path_buf(),
                message: "lock directory is not a directory, so no per-key lock can be taken (every run translates \
                          and builds for itself): remove it"
                    .to_owned(),
            });
            return Ok(warnings);
        }
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let mut skip = |message: String| warnings.push(CacheWarning { path: path.clone(), message });
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let kind = meta.file_type();
        if !kind.is_file() {
            skip(format!(
                "{} in the lock directory, not a lock file: skipped (its key is translated and built without a \
                 lock); remove it",
                if kind.is_dir() {
                    "directory"
                } else if kind.is_symlink() {
                    "symlink"
                } else {
                    "special file"
                }
            ));
            continue;
        }
        if !is_key_lock_name(&entry.file_name().to_string_lossy()) {
            skip("file of a foreign name in the lock directory, not a per-key lock: skipped; remove it".to_owned());
            continue;
        }
        if let Err(e) = remove_if_unlocked(&path) {
            skip(format!("lock file cannot be checked or removed ({e}): skipped; remove it"));
        }
    }
    Ok(warnings)
}

/// Whether `name` is the name of a per-key lock file: `translation-<hex>.lock` or
/// `build-<hex>.lock` (ADR 0025).
fn is_key_lock_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".lock") else {
        return false;
    };
    let hex = stem.strip_prefix("translation-").or_else(|| stem.strip_prefix("build-"));
    hex.is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `Ok` when `cache_dir` is a directory.
fn existing_cache_dir(cache_dir: &Path) -> Result<(), AppError> {
    match fs::metadata(cache_dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(AppError::NoCacheDir { path: cache_dir.to_path_buf(), problem: "is a file, not a directory" }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(AppError::NoCacheDir { path: cache_dir.to_path_buf(), problem: "does not exist" })
        }
        Err(source) => Err(AppError::CacheScan { path: cache_dir.to_path_buf(), source }),
    }
}

/// [`scan_error`] of `path`, for `map_err`.
fn scan_err(path: &Path) -> impl FnOnce(io::Error) -> AppError {
    let path = path.to_path_buf();
    move |source| scan_error(path, source)
}

/// The error of listing or cleaning `path`: [`AppError::StoreNotADirectory`] when it is a file
/// where a store directory belongs (permissions are not the problem then), else
/// [`AppError::CacheScan`].
fn scan_error(path: PathBuf, source: io::Error) -> AppError {
    // Listing a file as a directory: the store itself, or a shard directory inside it.
    if source.raw_os_error() == Some(libc::ENOTDIR) {
        return AppError::StoreNotADirectory { path };
    }
    AppError::CacheScan { path, source }
}

/// A regular file found under a store.
struct Found {
    path: PathBuf,
    bytes: u64,
    temp: bool,
    last_use: SystemTime,
}

/// Every regular file under `dir` (recursively; symlinks are not followed); a missing `dir` is
/// empty. Files named [`TEMP_PREFIX`]`*`, and every file under a directory so named (a build's
/// private directory), are temp files.
fn scan(dir: &Path) -> Result<Vec<Found>, AppError> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(source) => return Err(scan_error(dir.to_path_buf(), source)),
    };
    for entry in entries {
        let entry = entry.map_err(|source| AppError::CacheScan { path: dir.to_path_buf(), source })?;
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            let inner = scan(&path)?;
            let temp_dir = entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX);
            out.extend(inner.into_iter().map(|f| Found { temp: f.temp || temp_dir, ..f }));
        } else if meta.is_file() {
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let accessed = meta.accessed().unwrap_or(SystemTime::UNIX_EPOCH);
            out.push(Found {
                temp: entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX),
                bytes: meta.len(),
                last_use: modified.max(accessed),
                path,
            });
        }
    }
    Ok(out)
}

/// The record beside a translation entry (`<hex>.json` for `<hex>.bin`).
fn sidecar(entry: &Path) -> Option<PathBuf> {
    entry.extension().is_some_and(|e| e == "bin").then(|| entry.with_extension("json"))
}
