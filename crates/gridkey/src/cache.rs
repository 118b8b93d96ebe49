//! The cache directory as a whole: checks before use, `gridkey cache stats` and
//! `gridkey cache gc` (ADR 0009, ADR 0012). No printing: the binary reports.
//!
//! A cache directory holds three stores, each named with its format version:
//! `tables-v1/` (`<hex[0..2]>/<hex>.npy`, gridkey-store), `translation-v2/`
//! (`<hex[0..2]>/<hex>.bin` with its record `<hex>.json`, gridkey-fingerprint) and `build-v2/`
//! (`<hex>.so`, gridkey-stencil). Files named `.tmp-*` are unfinished writes.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use gridkey_fs::{remove_if_unlocked, remove_if_unused, remove_stale_temps, Removal, TEMP_PREFIX};
use serde::{Deserialize, Serialize};

use crate::AppError;

/// The stores of a cache directory with the extension of their entries, in report order.
pub const STORES: [(&str, &str); 3] = [
    (gridkey_store::TABLES_DIR, "npy"),
    (gridkey_fingerprint::TRANSLATION_DIR, "bin"),
    (gridkey_stencil::BUILD_DIR, "so"),
];

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
/// `cannot be created`, `is read-only or not writable`).
pub fn check_cache_dir(cache_dir: &Path) -> Result<Vec<CacheWarning>, AppError> {
    let unusable = |problem: &'static str| {
        move |source| AppError::CacheUnusable { path: cache_dir.to_path_buf(), problem, source }
    };
    match fs::metadata(cache_dir) {
        Ok(meta) if !meta.is_dir() => {
            return Err(unusable("is a file, not a directory")(io::Error::from_raw_os_error(libc::ENOTDIR)))
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(cache_dir).map_err(unusable("cannot be created"))?
        }
        Err(e) => return Err(unusable("cannot be read")(e)),
    }
    // A uniquely named probe, removed when dropped: threads and processes may check at once.
    tempfile::Builder::new()
        .prefix(&format!("{TEMP_PREFIX}probe-"))
        .tempfile_in(cache_dir)
        .map_err(unusable("is read-only or not writable"))?;

    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut warnings = Vec::new();
    let dirs = std::iter::once(cache_dir.to_path_buf()).chain(STORES.iter().map(|(d, _)| cache_dir.join(d)));
    for dir in dirs {
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
        if meta.mode() & 0o002 != 0 {
            warnings.push(CacheWarning {
                path: dir.clone(),
                message: "cache directory writable by everyone: any user can plant tables and kernel libraries that this run loads; chmod o-w it or use a cache directory of your own".to_owned(),
            });
        }
    }
    Ok(warnings)
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
pub const RUNS_DIR: &str = "runs";

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
#[derive(Debug)]
pub struct LiveRun {
    path: PathBuf,
    _lock: fs::File,
}

impl LiveRun {
    /// Registers a live run in `cache_dir` (created if needed).
    ///
    /// Errors: the I/O error of creating, locking or naming the registration.
    pub fn register(cache_dir: &Path) -> io::Result<LiveRun> {
        let dir = cache_dir.join(RUNS_DIR);
        fs::create_dir_all(&dir)?;
        // Locked before it is visible under its final name, so that the collector never sees
        // it unlocked while the run lives.
        let temp = tempfile::Builder::new().prefix(TEMP_PREFIX).tempfile_in(&dir)?;
        gridkey_fs::lock::lock_exclusive(temp.as_file())?;
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

/// The live runs of `cache_dir`: their number and the start of the oldest (the modification
/// time of its registration). Registrations whose run died (unlocked) are removed on the way.
///
/// Errors: the I/O error of listing `<cache_dir>/runs` (a missing directory is no live run).
pub fn live_runs(cache_dir: &Path) -> io::Result<(u64, Option<SystemTime>)> {
    let dir = cache_dir.join(RUNS_DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, None)),
        Err(e) => return Err(e),
    };
    let (mut live, mut oldest) = (0, None::<SystemTime>);
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "run") {
            continue;
        }
        // A registration nobody holds is a dead run's: removed on the way.
        if gridkey_fs::remove_if_unused(&path, || Ok(None))? == gridkey_fs::Removal::Locked {
            live += 1;
            if let Ok(start) = fs::symlink_metadata(&path).and_then(|m| m.modified()) {
                oldest = Some(oldest.map_or(start, |o| o.min(start)));
            }
        }
    }
    Ok((live, oldest))
}

/// Entries and bytes of one store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    /// Store directory name (`tables-v1`, `translation-v2`, `build-v2`).
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
pub const LOCAL_STATS_FILE: &str = "tier-stats-v1";

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
            objects: Vec::new(),
            runs: None,
        }
    }

    /// The shared tier of `remote` with `stats`.
    pub fn remote(remote: &gridkey_remote::Remote, stats: gridkey_remote::TierStats) -> Self {
        TierReport {
            tier: "remote".to_owned(),
            location: remote.shown_url().to_owned(),
            on: remote.is_on(),
            stats,
            warning: remote.warning(),
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
    let lock =
        fs::OpenOptions::new().create(true).truncate(false).write(true).open(cache_dir.join("tier-stats-v1.lock"))?;
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
/// [`AppError::CacheScan`] as [`stats`], and [`AppError::CacheScan`] when a file cannot be
/// removed.
pub fn gc(cache_dir: &Path, config: &GcConfig) -> Result<GcReport, AppError> {
    existing_cache_dir(cache_dir)?;
    let scan_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| scan_error(path, source)
    };
    let mut report = GcReport::default();
    for dir in STORES.iter().map(|(store, _)| cache_dir.join(store)).chain([cache_dir.join(RUNS_DIR)]) {
        let sweep = remove_stale_temps(&dir, config.temp_min_age).map_err(scan_err(&dir))?;
        report.temps_removed += sweep.removed.len() as u64;
        report.temp_bytes += sweep.bytes;
    }
    remove_dead_locks(&cache_dir.join(gridkey_fs::lock::LOCKS_DIR)).map_err(scan_err(cache_dir))?;
    let runs_dir = cache_dir.join(RUNS_DIR);
    report.live_runs = live_runs(cache_dir).map_err(scan_err(&runs_dir))?.0;
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
                let (live, oldest) = live_runs(cache_dir)?;
                report.live_runs = live;
                Ok(oldest.map(|start| start.checked_sub(LIVE_RUN_MARGIN).unwrap_or(SystemTime::UNIX_EPOCH)))
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

/// Removes the per-key lock files that no process holds (left by a holder that was killed); a
/// held one is kept, and a waiter on a removed one takes a new one ([`gridkey_fs::lock::KeyLocks`]).
fn remove_dead_locks(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "lock") {
            remove_if_unlocked(&path)?;
        }
    }
    Ok(())
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
