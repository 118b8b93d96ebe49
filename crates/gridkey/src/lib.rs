//! The gridkey application: the main job (`gridkey run`) and the grid table listing
//! (`gridkey tables`) as library functions, shared by the `gridkey` binary and `cargo xtask`.
//!
//! The main job follows the pipeline of docs/design.md "The pipeline": read the grid into a runtime offset provider,
//! convert it once to its compile-time view in the cache directory, build a
//! [`CompilationTask`] per program, run them with the chosen [`Runner`] (the frontend's compile
//! step is [`StencilHandler`]), then load each artifact and run it on the **runtime** provider,
//! checked against the plain Rust evaluation.
//!
//! [`run`] is the one entry point ([`RunOptions`] lends what the caller already holds), and the
//! run reads as its phases, each a function from a typed input to a typed output: open the
//! caches, convert (`Converted`), key (`Keyed`), plan (the routes), then per batch compile,
//! verify and publish (`Batches`), and report (`Reported`).
//!
//! # Architecture invariant
//!
//! This crate composes the others through their public APIs and does not print: the binary
//! (`src/main.rs`) is the only place that prints for people.

pub mod explain;
pub mod faults;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gridkey_fingerprint::{FingerprintError, KeyInputs, TranslationCache, TranslationKey, TranslationOptions};
use gridkey_fs::Fault;
use gridkey_grid::{read_grid, Grid, GridError};
use gridkey_jobs::{CompilationTask, NoProgress, Progress, Runner, TaskHandler, WorkerCommand};
use gridkey_offsets::{CompileTimeOffsetProvider, ConversionMemo, Entry, OffsetsError};
use gridkey_settings::SettingsError;
pub use gridkey_settings::{Settings, TaskSettings};
use gridkey_stencil::{CompileConfig, CompileOutcome, Program};
use gridkey_store::{StoreError, TableStore};
use serde::{Deserialize, Serialize};

pub mod cache;
pub mod keys;
pub mod layouts;
pub mod push;
pub mod quarantine;
pub mod retract;
pub mod shared;
pub mod site;
pub mod supported;

/// The ICON grid shipped in the repository, relative to the repository root.
pub const SHIPPED_GRID: &str = "data/grids/icon_grid_0013_R02B04_R.nc";

/// Every variable that changes what `gridkey run` does (README "Usage" lists each): those of
/// [`gridkey_settings::VARIABLES`] and the binary's `GRIDKEY_NO_PROGRESS`. Tests and
/// `cargo xtask` clear these so that the caller's environment cannot change their outcome.
pub fn environment() -> Vec<&'static str> {
    gridkey_settings::VARIABLES.iter().map(|v| v.name).chain(["GRIDKEY_NO_PROGRESS"]).collect()
}

/// Largest relative error accepted between the built kernel and the Rust evaluation (f64).
pub const TOLERANCE: f64 = 1e-12;

/// Seed of the input fields of the main job.
pub const INPUT_SEED: u64 = 20_261_129;

/// Errors of the application layer.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The grid could not be read.
    #[error(transparent)]
    Grid(Box<GridError>),
    /// A setting is not valid (the compiler is not found).
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The fault matrix's test hook (`GRIDKEY_FAULT`, `test_hooks.fault`) does not parse.
    #[error("GRIDKEY_FAULT: {0}")]
    FaultHook(#[from] gridkey_fs::FsError),
    /// The cache directory is unusable.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Converting the offset provider failed.
    #[error(transparent)]
    Offsets(#[from] OffsetsError),
    /// The translation cache could not be opened.
    #[error(transparent)]
    Cache(#[from] FingerprintError),
    /// The shared tier is misconfigured (URL, password, key files): found at start.
    #[error(transparent)]
    Remote(#[from] gridkey_remote::RemoteError),
    /// A command that needs the shared tier was run without one.
    #[error("no shared tier is configured; give --remote redis://HOST:PORT/ or set GRIDKEY_REMOTE_URL")]
    NoRemote,
    /// The shared tier could not be reached.
    #[error("{0}")]
    RemoteUnreachable(String),
    /// `gridkey cache push` refuses a cache directory that others can write: what it holds
    /// may have been planted, and push would sign it (ADR 0031).
    #[error("cannot push from {path}: {problem}; push only from a cache directory that only you can write (chmod go-w, or a cache of your own)")]
    UnsafePushCache {
        /// The cache directory or store at fault.
        path: PathBuf,
        /// Who else can write it.
        problem: String,
    },
    /// No cached key starts with the given prefix.
    #[error("no translation-cache entry in {dir} has a key starting with {prefix:?}; list keys with `gridkey run` or check --cache-dir")]
    UnknownKey {
        /// The prefix given.
        prefix: String,
        /// The translation cache directory searched.
        dir: PathBuf,
    },
    /// A key prefix that no key can start with: empty, longer than a key or not hex digits.
    #[error("key prefix {prefix:?} is not the start of a key: give 1 to 32 hex digits of one (`gridkey run` prints the keys)")]
    BadKeyPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// Several cached keys start with the given prefix.
    #[error("key prefix {prefix:?} is ambiguous: it matches {matches:?}; give more digits")]
    AmbiguousKey {
        /// The prefix given.
        prefix: String,
        /// The keys it matches.
        matches: Vec<String>,
    },
    /// A cached key has no readable record of its inputs.
    #[error("translation-cache entry {key} has no readable key-input record at {path}; it was written by another tool or damaged")]
    MissingRecord {
        /// The key.
        key: String,
        /// The expected record path.
        path: PathBuf,
    },
    /// A program name that is not one of the shipped programs.
    #[error("there is no program {name:?}; the programs are {known:?}")]
    UnknownProgram {
        /// The name given.
        name: String,
        /// The known names.
        known: Vec<String>,
    },
    /// The cache directory cannot be used (a file, not writable, read-only file system).
    #[error(
        "cache directory {path} {problem} ({source}); point GRIDKEY_CACHE_DIR (or --cache-dir) at a writable directory"
    )]
    CacheUnusable {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A store of the cache directory could not be listed or cleaned.
    #[error("cannot scan or clean cache path {path}: {source}; check its permissions")]
    CacheScan {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Translation options the frontend does not accept.
    #[error(transparent)]
    Options(Box<gridkey_stencil::StencilError>),
    /// `gridkey cache stats` or `gridkey cache gc` on a path that is not a cache directory.
    #[error("cache directory {path} {problem}; give the cache directory of a run (--cache-dir or GRIDKEY_CACHE_DIR)")]
    NoCacheDir {
        /// The path given.
        path: PathBuf,
        /// `does not exist` or `is a file, not a directory`.
        problem: &'static str,
    },
    /// A file is where a store directory (`tables-v1`, ...) or one of its shard directories belongs.
    #[error(
        "cache path {path} is a file where a store directory belongs; remove it, and gridkey makes the directory again"
    )]
    StoreNotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The read-only site cache (`--site-cache`, `GRIDKEY_SITE_CACHE`) cannot be used.
    #[error("site cache {path} {problem}; point --site-cache (or GRIDKEY_SITE_CACHE) at the cache directory of a site, or unset it")]
    SiteCache {
        /// The directory given.
        path: PathBuf,
        /// `does not exist`, `is a file, not a directory` or `cannot be read`.
        problem: &'static str,
    },
    /// The cache directory is read-only and a site cache is given too: there would be no
    /// writable cache and two read-only ones (ADR 0036).
    #[error("cache directory {cache_dir} is read-only and site cache {site_cache} is given too; give a writable --cache-dir in front of the site cache")]
    TwoReadOnlyCaches {
        /// The read-only cache directory.
        cache_dir: PathBuf,
        /// The site cache.
        site_cache: PathBuf,
    },
    /// `gridkey cache gc` on a cache directory this process cannot write.
    #[error("cache directory {path} is read-only here ({source}): `gridkey cache gc` removes files and cannot clean it; run it as the cache's owner, where it is mounted writable")]
    CacheReadOnly {
        /// The directory.
        path: PathBuf,
        /// The error of the write that was tried.
        source: std::io::Error,
    },
    /// The cache directory could not be made absolute.
    #[error("cannot resolve cache directory {path}: {source}; pass an existing, writable --cache-dir")]
    CacheDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl From<gridkey_stencil::StencilError> for AppError {
    /// Boxed, as [`AppError::Grid`].
    fn from(e: gridkey_stencil::StencilError) -> Self {
        AppError::Options(Box::new(e))
    }
}

impl From<GridError> for AppError {
    /// Boxed: a grid error carries paths and names, and would make every `Result` of this crate large.
    fn from(e: GridError) -> Self {
        AppError::Grid(Box::new(e))
    }
}

/// Who is told of a per-key lock wait that lasts, in this process ([`set_lock_notice`]).
static LOCK_NOTICE: std::sync::OnceLock<fn(&Path, Duration)> = std::sync::OnceLock::new();

/// Sets, once per process, the function [`StencilHandler`] has told of every per-key lock wait
/// that lasts ([`gridkey_fs::lock::LockWait::notice`], ADR 0033): the lock file and the time
/// waited so far. The binary prints a progress line; this crate prints nothing. A second call
/// changes nothing.
pub fn set_lock_notice(notice: fn(&Path, Duration)) {
    let _ = LOCK_NOTICE.set(notice);
}

/// The frontend's compile step for the runners: decodes the program and calls
/// [`gridkey_stencil::compile`] with the settings that travelled with the task.
#[derive(Clone, Copy, Debug, Default)]
pub struct StencilHandler;

impl TaskHandler for StencilHandler {
    type Output = CompileOutcome;

    type Error = gridkey_stencil::StencilError;

    fn handle(&self, task: &CompilationTask) -> Result<CompileOutcome, gridkey_stencil::StencilError> {
        let program = Program::decode(&task.encoding)?;
        let mut config = CompileConfig::from_settings(&task.settings)?;
        config.lock_wait.notice = LOCK_NOTICE.get().copied();
        gridkey_stencil::compile(&program, &task.provider, &task.options, &config)
    }

    /// A table found changed since it was stored ([`gridkey_stencil::StencilError::TableChanged`])
    /// is a damaged input: the run repairs it and compiles the program again (ADR 0024, ADR 0054).
    fn damaged_input(error: &gridkey_stencil::StencilError) -> bool {
        matches!(error, gridkey_stencil::StencilError::TableChanged { .. })
    }

    /// The progress line's word (README "Progress"): `hit` when both the translation and the
    /// library came from the cache, `hit, built` when only the translation did, `compiled` when
    /// the program was translated (and built) in this run.
    fn outcome_word(outcome: &CompileOutcome) -> &'static str {
        match (outcome.translated, outcome.built) {
            (false, false) => "hit",
            (false, true) => "hit, built",
            (true, _) => "compiled",
        }
    }
}

/// What the main job needs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The grid file (ICON, MPAS or UGRID; netCDF-3 or netCDF-4).
    pub grid: PathBuf,
    /// Everything the entry point parsed: build jobs, cache directory, verification switches,
    /// the compiler.
    pub settings: Settings,
    /// How to start a process-mode worker.
    pub worker: WorkerCommand,
    /// Translation options for every program.
    pub options: TranslationOptions,
}

/// The outcome of one program in the main job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramReport {
    /// Program name.
    pub program: String,
    /// Translation key (32 hex digits), when compilation got that far.
    pub key: Option<String>,
    /// Whether the translation cache had the entry.
    pub cache_hit: bool,
    /// Whether the program was translated in this run.
    pub translated: bool,
    /// Whether the shared library was built in this run (false: build-cache hit).
    pub built: bool,
    /// Seconds spent translating (0 on a hit).
    pub translate_seconds: f64,
    /// Seconds spent building.
    pub build_seconds: f64,
    /// Of `translate_seconds`: seconds computing the key inputs ([`CompileOutcome::key_seconds`]).
    #[serde(default)]
    pub key_seconds: f64,
    /// Of `translate_seconds`: seconds hashing the key and looking it up in the translation
    /// cache ([`CompileOutcome::lookup_seconds`]).
    #[serde(default)]
    pub lookup_seconds: f64,
    /// Seconds taking the per-key locks, translation and build (ADR 0025); zero when every
    /// lookup hit ([`CompileOutcome::lock_seconds`]).
    #[serde(default)]
    pub lock_seconds: f64,
    /// Of `build_seconds`: seconds checking the stored library before using it (checksum
    /// trailer, load as this program's kernel, ADR 0023; [`CompileOutcome::library_check_seconds`]).
    #[serde(default)]
    pub library_check_seconds: f64,
    /// Seconds loading the library for the run that verifies it (checksum trailer checked, a
    /// private copy loaded, ADR 0023), in the parent.
    #[serde(default)]
    pub load_seconds: f64,
    /// Largest relative error of the kernel against the Rust evaluation.
    pub max_rel_error: Option<f64>,
    /// Whether the program compiled, ran and matched within [`TOLERANCE`].
    pub verified: bool,
    /// Why it did not, if it did not.
    pub error: Option<String>,
    /// For a miss, the nearest other cached entry of the program and the inputs that differ.
    pub miss_hint: Option<String>,
    /// The tier that served the translation on a hit: `local`, `site` or `remote`; `None` on a miss.
    #[serde(default)]
    pub tier: Option<String>,
}

/// The outcome of the main job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    /// The grid file.
    pub grid: PathBuf,
    /// Runner mode.
    pub mode: String,
    /// Worker count.
    pub jobs: usize,
    /// Seconds to read the grid.
    pub read_seconds: f64,
    /// Seconds to convert the offset provider to its compile-time view.
    pub convert_seconds: f64,
    /// Seconds the parent spent computing every program's key and looking it up in the
    /// translation cache before the batch (to count hits and misses of tasks that fail).
    #[serde(default)]
    pub keys_seconds: f64,
    /// Seconds to compile all programs (the runner's batch).
    pub compile_seconds: f64,
    /// Seconds to run and verify all programs.
    pub verify_seconds: f64,
    /// One report per program, in program order.
    pub programs: Vec<ProgramReport>,
    /// Warnings about the cache directory ([`cache::check_cache_dir`]).
    #[serde(default)]
    pub warnings: Vec<cache::CacheWarning>,
    /// Abandoned temp files removed from the cache before the run ([`cache::STALE_TEMP_AGE`]).
    #[serde(default)]
    pub temps_removed: u64,
    /// The counters of each tier in this run: `local`, then `remote` when a shared tier is
    /// configured.
    #[serde(default)]
    pub tiers: Vec<cache::TierReport>,
    /// The programs the grid does not support, with the reason ([`supported::split`]).
    #[serde(default)]
    pub skipped: Vec<supported::SkippedProgram>,
}

impl RunReport {
    /// Whether every program verified.
    pub fn all_verified(&self) -> bool {
        self.programs.iter().all(|p| p.verified)
    }

    /// Number of translation-cache hits.
    pub fn hits(&self) -> usize {
        self.programs.iter().filter(|p| p.cache_hit).count()
    }

    /// Number of translation-cache misses.
    pub fn misses(&self) -> usize {
        self.programs.iter().filter(|p| p.key.is_some() && !p.cache_hit).count()
    }

    /// Number of shared libraries built in this run.
    pub fn builds(&self) -> usize {
        self.programs.iter().filter(|p| p.built).count()
    }

    /// Number of translations done in this run.
    pub fn translations(&self) -> usize {
        self.programs.iter().filter(|p| p.translated).count()
    }

    /// Number of hits the tier named `tier` (`local`, `site`, `remote`: [`ProgramReport::tier`])
    /// served in this run.
    pub fn hits_from(&self, tier: &str) -> usize {
        self.programs.iter().filter(|p| p.cache_hit && p.tier.as_deref() == Some(tier)).count()
    }

    /// Number of hits served by the shared tier.
    pub fn remote_hits(&self) -> usize {
        self.programs.iter().filter(|p| p.tier.as_deref() == Some("remote")).count()
    }
}

/// The tasks of compiling `programs` against `provider` with `options` and the task `settings`
/// of [`task_settings`] (the same value travels with every task, to every mode, ADR 0032).
pub fn tasks_for(
    programs: &[Program],
    provider: &Arc<CompileTimeOffsetProvider>,
    options: &TranslationOptions,
    settings: &Arc<TaskSettings>,
) -> Vec<CompilationTask> {
    programs
        .iter()
        .map(|p| CompilationTask {
            program: p.name().to_owned(),
            encoding: p.encode(),
            options: options.clone(),
            provider: provider.clone(),
            settings: settings.clone(),
        })
        .collect()
}

/// What a caller of [`run`] already holds and lends to the run; the run makes each one left out
/// for itself. Built from [`RunOptions::new`] with one method per part.
#[derive(Clone, Copy, Default)]
pub struct RunOptions<'a> {
    grid: Option<&'a Grid>,
    programs: Option<&'a [Program]>,
    runner: Option<&'a Runner<StencilHandler>>,
    progress: Option<&'a dyn Progress>,
    memo: Option<&'a ConversionMemo>,
}

impl<'a> RunOptions<'a> {
    /// Nothing lent: the run reads [`RunConfig::grid`] (timed as [`RunReport::read_seconds`]),
    /// runs [`gridkey_stencil::icon_programs`] with a runner of the settings' build jobs, tells
    /// no one of its progress and converts through a memo of its own.
    pub fn new() -> Self {
        Self::default()
    }

    /// The grid, already read (a run reused on one grid value); [`RunReport::read_seconds`] is
    /// then 0. [`RunConfig::grid`] still names it in the report.
    pub fn grid(self, grid: &'a Grid) -> Self {
        Self { grid: Some(grid), ..self }
    }

    /// The programs to run instead of [`gridkey_stencil::icon_programs`].
    pub fn programs(self, programs: &'a [Program]) -> Self {
        Self { programs: Some(programs), ..self }
    }

    /// The build jobs, reused across runs (a process pool keeps its workers); its mode wins over
    /// the settings' build jobs.
    pub fn runner(self, runner: &'a Runner<StencilHandler>) -> Self {
        Self { runner: Some(runner), ..self }
    }

    /// Told when each program's compilation starts and ends.
    pub fn progress(self, progress: &'a dyn Progress) -> Self {
        Self { progress: Some(progress), ..self }
    }

    /// The conversion memo: a runtime connectivity this memo converted into the run's store
    /// before, and that still lives, is not converted again, and the run uses that view
    /// ([`ConversionMemo::connectivity`]).
    pub fn memo(self, memo: &'a ConversionMemo) -> Self {
        Self { memo: Some(memo), ..self }
    }
}

/// Runs the main job: the programs (by default every program of
/// [`gridkey_stencil::icon_programs`]) on the grid, with what `options` lends. Programs that need
/// an offset the grid lacks are not run: they are listed in [`RunReport::skipped`].
///
/// Errors: an unreadable grid, an unusable cache directory ([`cache::check_cache_dir`]), a
/// misconfigured shared tier, a failed conversion. A program that fails to compile or verify
/// does not make this an error: it is reported in its [`ProgramReport`].
pub fn run(config: &RunConfig, options: RunOptions<'_>) -> Result<RunReport, AppError> {
    let read;
    let (grid, read_seconds) = match options.grid {
        Some(grid) => (grid, 0.0),
        None => {
            let t = Instant::now();
            read = read_grid(&config.grid)?;
            (&read, t.elapsed().as_secs_f64())
        }
    };
    let icon;
    let programs = match options.programs {
        Some(programs) => programs,
        None => {
            icon = gridkey_stencil::icon_programs();
            icon.as_slice()
        }
    };
    let own_runner;
    let runner = match options.runner {
        Some(runner) => runner,
        None => {
            own_runner = Runner::new(config.settings.build_jobs, Arc::new(StencilHandler), config.worker.clone());
            &own_runner
        }
    };
    let own_memo;
    let memo = match options.memo {
        Some(memo) => memo,
        None => {
            own_memo = ConversionMemo::new();
            &own_memo
        }
    };
    run_with_progress(grid, programs, runner, config, read_seconds, options.progress.unwrap_or(&NoProgress), memo)
}

/// The run, phase by phase (docs/design.md "The pipeline"): open the caches, **convert** the
/// grid's offset provider to its compile-time view, **key** every program, **plan** which tier
/// serves each, then per batch **compile**, **verify** and **publish**, and last **report**.
/// Each phase is a function from what the phases before it made to what it makes.
fn run_with_progress(
    grid: &Grid,
    programs: &[Program],
    runner: &Runner<StencilHandler>,
    config: &RunConfig,
    read_seconds: f64,
    progress: &dyn Progress,
    memo: &ConversionMemo,
) -> Result<RunReport, AppError> {
    let (programs, skipped) = supported::split(programs, grid);
    let programs = programs.as_slice();
    let mut opened = open(&config.settings)?;
    let converted = convert(grid, &opened.store, memo)?;
    opened.warnings.extend(converted.warnings);
    let keyed = key(programs, &config.options, &converted.ct, &opened)?;
    opened.warnings.extend(keyed.warnings.iter().cloned());
    // The shared tier's part of the run: its plan, its waits and its uploads (ADR 0030).
    let mut shared =
        opened.remote.take().map(|r| shared::SharedRun::new(r, opened.settings.clone(), config.options.clone()));
    let t = Instant::now();
    let routes = plan(shared.as_mut(), &opened.cache, &keyed);
    let first: Vec<usize> = (0..programs.len()).filter(|&i| routes[i] != shared::Route::Wait).collect();
    let ct = store_when_needed(converted.ct, &routes, &first, runner, &opened, memo)?;
    let mut tasks = tasks_for(programs, &ct, &config.options, &opened.settings);
    let checker = Checker {
        programs,
        grid,
        cache: &opened.cache,
        options: &config.options,
        runner,
        settings: &opened.settings,
        store: &opened.store,
        memo,
        late_repairs: std::cell::RefCell::new(Vec::new()),
    };
    let mut batches = Batches::new(programs.len(), routes, ct);
    compile(runner, &tasks, &first, progress, &mut batches.outcomes);
    batches.verify_and_publish(&checker, &first, shared.as_mut(), &keyed.inputs, &mut opened.warnings);
    let waits: Vec<usize> = (0..programs.len()).filter(|&i| batches.routes[i] == shared::Route::Wait).collect();
    if let (Some(s), false) = (shared.as_mut(), waits.is_empty()) {
        for (&i, route) in waits.iter().zip(s.wait(&opened.cache, &keyed.inputs, &waits)) {
            batches.routes[i] = route;
        }
        // A table that cannot be stored now costs the waiting programs alone: they go on with the
        // tables kept in memory (a worker refuses them, naming the offset), and the first batch's
        // reports stand.
        let ct = match store_when_needed(batches.ct.clone(), &batches.routes, &waits, runner, &opened, memo) {
            Ok(ct) => ct,
            Err(e) => {
                opened.warnings.push(cache::CacheWarning {
                    path: opened.store.dir().to_path_buf(),
                    message: format!("cannot store the tables the waiting programs need: {e}"),
                });
                batches.ct.clone()
            }
        };
        if !Arc::ptr_eq(&ct, &batches.ct) {
            tasks = tasks_for(programs, &ct, &config.options, &opened.settings);
            batches.ct = ct;
        }
        compile(runner, &tasks, &waits, progress, &mut batches.outcomes);
        batches.verify_and_publish(&checker, &waits, shared.as_mut(), &keyed.inputs, &mut opened.warnings);
    }
    // A stored table changed in place while this run held it fails the tasks that translated
    // from it, and nothing is cached from it (ADR 0024): rewrite it from the runtime table and
    // compile those programs once more; again while the retried tasks find another table
    // changed, at most `REPAIR_ROUNDS` times. A task that found a table damaged when every
    // table is whole again (another run rewrote it meanwhile) runs once more as it is (ADR 0054).
    let mut ran_again_unrepaired = vec![false; programs.len()];
    for _ in 0..REPAIR_ROUNDS {
        let failed: Vec<usize> = (0..programs.len()).filter(|&i| matches!(batches.outcomes[i], Some(Err(_)))).collect();
        if failed.is_empty() {
            break;
        }
        let (repaired, repairs) = repair_tables(grid, &batches.ct, &opened.store, memo);
        let failed = if repairs.is_empty() {
            let damaged: Vec<usize> = failed
                .into_iter()
                .filter(|&i| !ran_again_unrepaired[i])
                .filter(|&i| matches!(&batches.outcomes[i], Some(Err(e)) if e.cause.is_damaged_input()))
                .collect();
            if damaged.is_empty() {
                break;
            }
            for &i in &damaged {
                ran_again_unrepaired[i] = true;
                if let Some(Err(e)) = &batches.outcomes[i] {
                    opened.warnings.push(found_whole_again(opened.store.dir(), e));
                }
            }
            damaged
        } else {
            batches.ct = Arc::new(repaired);
            opened.warnings.extend(repairs);
            failed
        };
        let again: Vec<Program> = failed.iter().map(|&i| programs[i].clone()).collect();
        let retried =
            runner.run_all_with(&tasks_for(&again, &batches.ct, &config.options, &opened.settings), &NoProgress);
        for (&i, outcome) in failed.iter().zip(retried) {
            batches.outcomes[i] = Some(outcome);
        }
        batches.verify_and_publish(&checker, &failed, shared.as_mut(), &keyed.inputs, &mut opened.warnings);
    }
    let verify_seconds = batches.verifying.as_secs_f64();
    let compile_seconds = (t.elapsed() - batches.verifying).as_secs_f64();
    let late_repairs = checker.late_repairs.into_inner();
    let Reported { programs, warnings, tiers } =
        report(programs, batches, &keyed, &opened, late_repairs, shared.as_ref());
    Ok(RunReport {
        grid: config.grid.clone(),
        mode: runner.mode().to_string(),
        jobs: config.settings.build_jobs.jobs,
        read_seconds,
        convert_seconds: converted.seconds,
        keys_seconds: keyed.seconds,
        compile_seconds,
        verify_seconds,
        programs,
        warnings,
        temps_removed: opened.temps_removed,
        tiers,
        skipped,
    })
}

/// What the run opens before any phase: the caches of the run (ADR 0036), the task settings
/// (ADR 0032), the run's registration as live (ADR 0026), the shared tier, the table store and
/// the translation cache, and the warnings about them.
struct Opened {
    caches: site::RunCaches,
    settings: Arc<TaskSettings>,
    /// Held for the whole run; dropping it unregisters the run.
    _live: Option<cache::LiveRun>,
    remote: Option<Arc<gridkey_remote::Remote>>,
    temps_removed: u64,
    store: TableStore,
    cache: TranslationCache,
    warnings: Vec<cache::CacheWarning>,
}

/// Opens what the phases use, from the entry point's `settings`.
///
/// Errors: an unusable cache or site cache, a compiler that is not found, a misconfigured shared
/// tier (an unreachable one is off), a fault hook that does not parse, a store or translation
/// cache that cannot be opened.
fn open(settings: &Settings) -> Result<Opened, AppError> {
    // A read-only cache serves its hits, behind the writable one or alone (ADR 0036).
    let caches = site::RunCaches::open(settings)?;
    let mut warnings = caches.warnings().to_vec();
    let task = task_settings(&caches.settings(settings))?;
    // Registered for the whole run, so that `gridkey cache gc` beside it removes nothing it has
    // produced or is about to use (ADR 0026); a private directory has no collector beside it.
    let registered = if caches.is_private() { None } else { Some(cache::LiveRun::register(task.cache_dir())) };
    let live = match registered {
        None => None,
        Some(Ok(live)) => Some(live),
        Some(Err(e)) => {
            warnings.push(cache::CacheWarning {
                path: task.cache_dir().join(cache::RUNS_DIR),
                message: format!(
                    "cannot register this run as live ({e}): `gridkey cache gc` beside it may remove what it uses"
                ),
            });
            None
        }
    };
    // A misconfigured shared tier is an error here, before any work; an unreachable one is off.
    // Only the parent holds its settings: the task settings have none (ADR 0032).
    let remote = match &settings.remote {
        Some(remote) => Some(Arc::new(gridkey_remote::Remote::connect(remote)?)),
        None => None,
    };
    let temps_removed = if caches.is_private() {
        0
    } else {
        // Probed writable by `RunCaches::open` just now: the sweep alone, no second probe and no
        // scan of every entry.
        let swept = cache::sweep(task.cache_dir(), cache::STALE_TEMP_AGE)?;
        warnings.extend(swept.warnings);
        swept.temps_removed
    };
    let fault = Fault::parse_setting(task.fault())?;
    // Every translation checks the tables it read before its entry is written (ADR 0024), so a
    // table found under its name is kept after its checked open, unread (ADR 0028).
    let store = TableStore::open(task.cache_dir())?
        .with_site(task.site_cache())
        .verifying(task.verify_tables())
        .checked_by_readers(true)
        .with_fault(fault);
    let cache = TranslationCache::open(task.cache_dir())?;
    Ok(Opened { caches, settings: task, _live: live, remote, temps_removed, store, cache, warnings })
}

/// What the convert phase makes: the compile-time view, its seconds, and a warning for each
/// stored table it found changed and rewrote.
struct Converted {
    ct: Arc<CompileTimeOffsetProvider>,
    seconds: f64,
    warnings: Vec<cache::CacheWarning>,
}

/// The convert phase: the grid's runtime provider into `store`, through `memo`.
///
/// Errors: [`AppError::Offsets`] naming the offset that could not be converted.
fn convert(grid: &Grid, store: &TableStore, memo: &ConversionMemo) -> Result<Converted, AppError> {
    let t = Instant::now();
    // A new table is stored only when a translation or a worker needs it (ADR 0053).
    let ct = Arc::new(memo.provider_unstored(grid.provider(), store)?);
    let seconds = t.elapsed().as_secs_f64();
    let warnings = store.repaired().into_iter().map(cache::CacheWarning::repaired_table).collect();
    Ok(Converted { ct, seconds, warnings })
}

/// `ct` with the tables it keeps unstored stored and mapped (ADR 0053) when a task of batch
/// `which` needs their files: a worker maps every table of its task (process mode), and a
/// program whose `route` may translate, or every program when hits are translated again to
/// be compared, reads them. Otherwise `ct` itself: a run whose every program hits writes no
/// table.
///
/// Errors: [`AppError::Offsets`] naming the offset whose table could not be stored.
fn store_when_needed(
    ct: Arc<CompileTimeOffsetProvider>,
    routes: &[shared::Route],
    which: &[usize],
    runner: &Runner<StencilHandler>,
    opened: &Opened,
    memo: &ConversionMemo,
) -> Result<Arc<CompileTimeOffsetProvider>, AppError> {
    let translates = |i: &usize| matches!(routes[*i], shared::Route::Lease | shared::Route::Here { .. });
    let needed = !which.is_empty()
        && (runner.mode() == gridkey_settings::BuildJobsMode::Process
            || opened.settings.verify_cache_hits()
            || which.iter().any(translates));
    if !needed || ct.kept_tables() == 0 {
        return Ok(ct);
    }
    Ok(Arc::new(memo.store_kept(&ct, &opened.store)?))
}

/// What the key phase makes, one element per program: the key inputs and keys, the local
/// tier's payload length on a hit, the site cache's on a hit there, and whether either had it
/// before the batch; its seconds and the site cache's unreadable entries as warnings.
struct Keyed {
    inputs: Vec<KeyInputs>,
    keys: Vec<TranslationKey>,
    looked_up: Vec<Option<usize>>,
    site_hits: Vec<Option<usize>>,
    cached_before: Vec<bool>,
    seconds: f64,
    warnings: Vec<cache::CacheWarning>,
}

/// The key phase: the parent knows each key too (the same compile-time view), and whether the
/// translation cache had it before the batch, so a task that fails after translating (a compiler
/// that fails, a full disk) is still counted as the hit or miss and translation it was.
///
/// Errors: [`AppError::Options`] for translation options the frontend does not accept.
fn key(
    programs: &[Program],
    options: &TranslationOptions,
    ct: &CompileTimeOffsetProvider,
    opened: &Opened,
) -> Result<Keyed, AppError> {
    let t = Instant::now();
    let inputs: Vec<KeyInputs> =
        programs.iter().map(|p| gridkey_stencil::key_inputs(p, options, ct)).collect::<Result<_, _>>()?;
    let keys: Vec<TranslationKey> = inputs.iter().map(KeyInputs::key).collect();
    let looked_up: Vec<Option<usize>> = keys.iter().map(|k| opened.cache.get(k).ok().map(|p| p.len())).collect();
    // A key the local tier misses may be the site cache's hit (ADR 0036).
    let site = opened.settings.site_cache().map(gridkey_fingerprint::SiteCache::open);
    let site_hits: Vec<Option<usize>> = keys
        .iter()
        .zip(&looked_up)
        .map(|(k, local)| match (&site, local) {
            (Some(site), None) => site.cache().get(k).ok().map(|p| p.len()),
            _ => None,
        })
        .collect();
    let mut warnings = Vec::new();
    if let Some(site) = &site {
        let missed = keys.iter().zip(looked_up.iter().zip(&site_hits)).filter(|(_, (l, s))| l.is_none() && s.is_none());
        warnings.extend(site::unreadable_entries(site, missed.map(|(k, _)| k)));
    }
    let cached_before: Vec<bool> = looked_up.iter().zip(&site_hits).map(|(l, s)| l.is_some() || s.is_some()).collect();
    Ok(Keyed { inputs, keys, looked_up, site_hits, cached_before, seconds: t.elapsed().as_secs_f64(), warnings })
}

/// The plan phase: the route of each program, from the shared tier's plan when there is one,
/// else the local tier's hit or a compilation here.
fn plan(shared: Option<&mut shared::SharedRun>, cache: &TranslationCache, keyed: &Keyed) -> Vec<shared::Route> {
    match shared {
        Some(s) => s.plan(cache, &keyed.inputs, &keyed.cached_before),
        None => keyed
            .cached_before
            .iter()
            .map(|&hit| if hit { shared::Route::Local } else { shared::Route::Here { upload: false } })
            .collect(),
    }
}

/// What the batches of a run have made so far, one slot per program: the routes, the
/// outcomes of compilation and the reports of verification, the compile-time view (repaired
/// after a table changed) and the seconds spent verifying.
struct Batches {
    routes: Vec<shared::Route>,
    outcomes: Vec<Option<Result<CompileOutcome, gridkey_jobs::TaskError>>>,
    reports: Vec<Option<ProgramReport>>,
    ct: Arc<CompileTimeOffsetProvider>,
    verifying: Duration,
}

impl Batches {
    fn new(programs: usize, routes: Vec<shared::Route>, ct: Arc<CompileTimeOffsetProvider>) -> Self {
        Self {
            routes,
            outcomes: (0..programs).map(|_| None).collect(),
            reports: (0..programs).map(|_| None).collect(),
            ct,
            verifying: Duration::ZERO,
        }
    }

    /// The verify phase of batch `which`, then its publish phase: each batch is verified before
    /// anything of it is uploaded, so only verified artifacts travel (ADR 0030); the leases of
    /// the batch stay renewed by the heartbeat meanwhile.
    fn verify_and_publish(
        &mut self,
        checker: &Checker<'_>,
        which: &[usize],
        mut shared: Option<&mut shared::SharedRun>,
        inputs: &[KeyInputs],
        warnings: &mut Vec<cache::CacheWarning>,
    ) {
        let t = Instant::now();
        let accepted = verify_batch(
            checker,
            which,
            &self.outcomes,
            &self.routes,
            &self.ct,
            shared.as_deref_mut(),
            &mut self.reports,
            warnings,
        );
        self.verifying += t.elapsed();
        if let Some(s) = shared {
            publish(s, checker.cache, inputs, &self.routes, which, &accepted);
        }
    }
}

/// The verify phase of batch `which` ([`verify`] of each program): each program that compiled is loaded, run and checked
/// ([`Checker::check`]), and what it took from the shared tier and failed here is rejected
/// there ([`reject_fetched`]). Returns, per program of the batch, its outcome when it verified.
#[allow(clippy::too_many_arguments)]
fn verify_batch<'o>(
    checker: &Checker<'_>,
    which: &[usize],
    outcomes: &'o [Option<Result<CompileOutcome, gridkey_jobs::TaskError>>],
    routes: &[shared::Route],
    ct: &Arc<CompileTimeOffsetProvider>,
    mut shared: Option<&mut shared::SharedRun>,
    reports: &mut [Option<ProgramReport>],
    warnings: &mut Vec<cache::CacheWarning>,
) -> Vec<Option<&'o CompileOutcome>> {
    let mut accepted = Vec::with_capacity(which.len());
    for &i in which {
        let Some(Ok(outcome)) = &outcomes[i] else {
            accepted.push(None);
            continue;
        };
        let (report, rebuilt) = checker.check(i, outcome, routes[i], ct);
        let report = match shared.as_deref_mut() {
            Some(s) => reject_fetched(s, i, outcome, rebuilt, report, warnings),
            None => report,
        };
        accepted.push(report.verified.then_some(outcome));
        reports[i] = Some(report);
    }
    accepted
}

/// The publish phase of batch `which`: what verified goes to the shared tier
/// ([`shared::SharedRun::upload`]).
fn publish(
    shared: &shared::SharedRun,
    cache: &TranslationCache,
    inputs: &[KeyInputs],
    routes: &[shared::Route],
    which: &[usize],
    accepted: &[Option<&CompileOutcome>],
) {
    shared.upload(cache, inputs, routes, which, accepted);
}

/// What the report phase makes: one report per program, in program order, the run's warnings
/// and the counters of each tier.
struct Reported {
    programs: Vec<ProgramReport>,
    warnings: Vec<cache::CacheWarning>,
    tiers: Vec<cache::TierReport>,
}

/// The report phase: one report per program (from verification, or from its failed task), the
/// warnings of the run, of the compile steps and of the late repairs, and the counters of each
/// tier.
fn report(
    programs: &[Program],
    batches: Batches,
    keyed: &Keyed,
    opened: &Opened,
    late_repairs: Vec<cache::CacheWarning>,
    shared: Option<&shared::SharedRun>,
) -> Reported {
    let mut warnings = opened.warnings.clone();
    // The per-key locks the compile steps went on without, each named once (ADR 0033).
    for w in batches.outcomes.iter().flatten().flatten().flat_map(|o| &o.warnings) {
        if !warnings.iter().any(|seen| seen.path == w.path) {
            warnings.push(cache::CacheWarning { path: w.path.clone(), message: w.message.clone() });
        }
    }
    warnings.extend(late_repairs);
    let cache = &opened.cache;
    let mut reports: Vec<ProgramReport> = programs
        .iter()
        .zip(batches.outcomes)
        .zip(batches.reports)
        .zip(keyed.keys.iter().zip(&keyed.cached_before).zip(&batches.routes))
        .map(|(((program, outcome), report), ((key, &hit), route))| match (outcome, report) {
            (Some(Ok(_)), Some(report)) => report,
            (Some(Err(e)), _) => ProgramReport {
                program: program.name().to_owned(),
                key: Some(key.to_hex()),
                cache_hit: hit || *route == shared::Route::Remote,
                translated: !hit && *route != shared::Route::Remote && cache.get(key).is_ok(),
                built: false,
                translate_seconds: 0.0,
                build_seconds: 0.0,
                key_seconds: 0.0,
                lookup_seconds: 0.0,
                lock_seconds: 0.0,
                library_check_seconds: 0.0,
                load_seconds: 0.0,
                max_rel_error: None,
                verified: false,
                error: Some(e.to_string()),
                miss_hint: None,
                tier: route.tier().map(str::to_owned),
            },
            (None, _) => unreachable!("every program ran"),
            (Some(Ok(_)), None) => unreachable!("every program that compiled was verified"),
        })
        .collect();
    let mut tiers = tier_reports(opened.settings.cache_dir(), cache, &reports, &keyed.looked_up, shared);
    if let Some(site) = opened.caches.site_cache() {
        site_report(site, &mut reports, &keyed.site_hits, &mut tiers);
    }
    Reported { programs: reports, warnings, tiers }
}

/// The compile phase of batch `which`: runs those tasks of `tasks` and stores each result at its
/// index in `outcomes`; the progress reporter sees the program indices, not the batch's.
fn compile(
    runner: &Runner<StencilHandler>,
    tasks: &[CompilationTask],
    which: &[usize],
    progress: &dyn Progress,
    outcomes: &mut [Option<Result<CompileOutcome, gridkey_jobs::TaskError>>],
) {
    if which.is_empty() {
        return;
    }
    struct Mapped<'a> {
        inner: &'a dyn Progress,
        index: &'a [usize],
    }
    impl Progress for Mapped<'_> {
        fn started(&self, index: usize, program: &str) {
            self.inner.started(self.index[index], program);
        }
        fn finished(&self, index: usize, program: &str, ended: gridkey_jobs::Ended) {
            self.inner.finished(self.index[index], program, ended);
        }
    }
    let batch: Vec<CompilationTask> = which.iter().map(|&i| tasks[i].clone()).collect();
    let results = runner.run_all_with(&batch, &Mapped { inner: progress, index: which });
    for (&i, result) in which.iter().zip(results) {
        outcomes[i] = Some(result);
    }
}

/// The counters of each tier for this run (also added to the local totals, and published to
/// the shared tier's, for `gridkey cache stats`).
fn tier_reports(
    cache_dir: &Path,
    cache: &TranslationCache,
    reports: &[ProgramReport],
    looked_up: &[Option<usize>],
    shared: Option<&shared::SharedRun>,
) -> Vec<cache::TierReport> {
    let hits = looked_up.iter().filter(|l| l.is_some()).count() as u64;
    let translated_bytes: u64 = reports
        .iter()
        .filter(|r| r.translated)
        .filter_map(|r| r.key.as_ref()?.parse().ok())
        .filter_map(|k| cache.get(&k).ok())
        .map(|p| p.len() as u64)
        .sum();
    let local = gridkey_remote::TierStats {
        hits,
        misses: looked_up.len() as u64 - hits,
        bytes_in: looked_up.iter().flatten().map(|&n| n as u64).sum(),
        bytes_out: translated_bytes + shared.map_or(0, |s| s.written_locally),
        ..Default::default()
    };
    // Best effort: totals that cannot be recorded leave the run's result as it is.
    let _ = cache::record_local_stats(cache_dir, &local);
    let mut out = vec![cache::TierReport::local(cache_dir, local)];
    if let Some(s) = shared {
        let remote = s.remote();
        remote.publish_stats();
        out.push(cache::TierReport::remote(remote, remote.stats()));
    }
    out
}

/// Names the site cache as the tier of every hit it served, and adds its tier report after the
/// local one (ADR 0036): its hits, and the local tier's misses it did not serve as its misses.
fn site_report(
    site: &Path,
    reports: &mut [ProgramReport],
    site_hits: &[Option<usize>],
    tiers: &mut Vec<cache::TierReport>,
) {
    for (report, hit) in reports.iter_mut().zip(site_hits) {
        if hit.is_some() && report.cache_hit && report.tier.as_deref() == Some("local") {
            report.tier = Some("site".to_owned());
        }
    }
    let hits = site_hits.iter().flatten().count() as u64;
    let local_misses = tiers.first().map_or(0, |t| t.stats.misses);
    let stats = gridkey_remote::TierStats {
        hits,
        misses: local_misses.saturating_sub(hits),
        bytes_in: site_hits.iter().flatten().map(|&n| n as u64).sum(),
        ..Default::default()
    };
    tiers.insert(tiers.len().min(1), cache::TierReport::site(site, stats));
}

/// How many times a run repairs changed tables and compiles the programs that failed again.
const REPAIR_ROUNDS: usize = 3;

/// The warning for a task that failed because it found a table damaged (`failed`) although
/// every table of the run was whole when the run checked them afterwards: another run had
/// rewritten it in between, and the task runs once more (ADR 0054).
fn found_whole_again(store: &Path, failed: &gridkey_jobs::TaskError) -> cache::CacheWarning {
    cache::CacheWarning {
        path: store.to_path_buf(),
        message: format!(
            "({}) a table was found damaged ({}), and every table was whole again when this run checked them (another run rewrote it); the program compiled again",
            failed.program, failed.cause
        ),
    }
}

/// The compile-time view `ct` with every table whose mapped content, or the file under whose
/// name, no longer matches its digest converted again from the grid's runtime table (the stored
/// file rewritten, ADR 0024), and a warning for each (also for one that could not be rewritten).
/// Reads every table twice, through `pread`, never through a mapping: a table truncated while
/// mapped is found and rewritten here, not a `SIGBUS` of the parent (ADR 0034). Called only
/// after a task failed.
fn repair_tables(
    grid: &Grid,
    ct: &CompileTimeOffsetProvider,
    store: &TableStore,
    memo: &ConversionMemo,
) -> (CompileTimeOffsetProvider, Vec<cache::CacheWarning>) {
    let mut repaired = CompileTimeOffsetProvider::new();
    let mut warnings = Vec::new();
    let verifying = store.clone().verifying(true);
    for (name, entry) in ct.entries() {
        let entry = match entry {
            // This run's mapping changed, or the file under the name (which process-mode workers
            // open) no longer holds the table: a concurrent writer may have renamed identical
            // content over the name, and that file was changed.
            // A table kept unstored is the runtime table itself (ADR 0053): nothing to repair.
            Entry::Gather(c) if c.is_stored() && (c.verify().is_err() || verifying.open_table(c.spec()).is_err()) => {
                match grid.provider().gather(name).map(|runtime| memo.reconvert(name, runtime, store)) {
                    Some(Ok(fresh)) => {
                        warnings.push(cache::CacheWarning {
                            path: c.table_path().to_path_buf(),
                            message: format!(
                                "(table of offset {name}) was changed after it was stored; rewritten from the runtime table, and the programs that failed compiled again"
                            ),
                        });
                        Entry::Gather(fresh)
                    }
                    Some(Err(e)) => {
                        warnings.push(cache::CacheWarning {
                            path: c.table_path().to_path_buf(),
                            message: format!(
                                "(table of offset {name}) was changed after it was stored and could not be rewritten: {e}"
                            ),
                        });
                        entry.clone()
                    }
                    None => entry.clone(),
                }
            }
            other => other.clone(),
        };
        // The names are those of a provider already built: no duplicate.
        let _ = repaired.push(name.clone(), entry);
    }
    (repaired, warnings)
}

/// The task settings of one run, built once in the parent from `settings` and handed to every
/// task in every mode (ADR 0032): the cache directory made absolute (workers may run
/// elsewhere), the compiler resolved and identified once, here, so that every mode and every
/// worker runs the same program whatever its own `PATH` and keys its builds by the same identity
/// (ADR 0013, ADR 0022), the verification switches and the fault hook. The build-jobs mode and
/// the shared tier's settings stay in the parent.
///
/// Errors: [`AppError::CacheDir`] when the cache directory does not exist or cannot be made
/// absolute, [`AppError::Settings`] when the compiler is not found or the directory is not
/// valid UTF-8.
pub fn task_settings(settings: &Settings) -> Result<Arc<TaskSettings>, AppError> {
    let cache_dir = std::fs::canonicalize(&settings.cache_dir)
        .map_err(|source| AppError::CacheDir { path: settings.cache_dir.clone(), source })?;
    let cwd = std::env::current_dir().map_err(|source| AppError::CacheDir { path: ".".into(), source })?;
    let compiler = gridkey_stencil::identify_compiler(&settings.compiler, &cwd)?;
    Ok(Arc::new(TaskSettings::new(settings, cache_dir, compiler)?))
}

/// Compiles `program` alone through `runner` (in process mode: in a worker, which maps and reads
/// the tables, ADR 0034).
fn compile_one(
    runner: &Runner<StencilHandler>,
    program: &Program,
    ct: &Arc<CompileTimeOffsetProvider>,
    options: &TranslationOptions,
    settings: &Arc<TaskSettings>,
) -> Result<CompileOutcome, gridkey_jobs::TaskError> {
    runner.run_all(&tasks_for(std::slice::from_ref(program), ct, options, settings)).pop().unwrap_or_else(|| {
        Err(gridkey_jobs::TaskError {
            program: program.name().to_owned(),
            cause: gridkey_jobs::TaskFailure::Start("the build jobs returned no outcome; run it again".to_owned()),
        })
    })
}

/// What the verification of one program needs, for every batch of a run.
struct Checker<'a> {
    programs: &'a [Program],
    grid: &'a Grid,
    cache: &'a TranslationCache,
    options: &'a TranslationOptions,
    /// The build jobs: a rebuild goes through them, so that in process mode a worker, never the
    /// parent, maps and reads the tables (ADR 0034).
    runner: &'a Runner<StencilHandler>,
    settings: &'a Arc<TaskSettings>,
    store: &'a TableStore,
    /// The run's conversion memo, which a repair converts through again.
    memo: &'a ConversionMemo,
    /// Tables repaired by a rebuild in the parent (ADR 0024), reported as warnings.
    late_repairs: std::cell::RefCell<Vec<cache::CacheWarning>>,
}

impl Checker<'_> {
    /// [`verify`] of program `i` compiled as `outcome` against `ct` and served by `route`, with
    /// its miss hint and tier; and whether the parent had to build its library again because
    /// the library did not load.
    fn check(
        &self,
        i: usize,
        outcome: &CompileOutcome,
        route: shared::Route,
        ct: &Arc<CompileTimeOffsetProvider>,
    ) -> (ProgramReport, bool) {
        let program = &self.programs[i];
        let hint = if outcome.translated { explain::miss_hint(self.cache, &outcome.key) } else { None };
        let tier = if outcome.translated { None } else { route.tier().or(Some("local")).map(str::to_owned) };
        // The rebuild of a library that does not load goes through the runner, as the compile
        // phase does: in process mode a worker maps and reads the tables, never the parent (ADR
        // 0034). It repairs a table changed since the compile phase as the compile phase does
        // (ADR 0024); one that found a table damaged when every table is whole again (another run
        // rewrote it) runs once more as it is (ADR 0054).
        let rebuild = || {
            let first = compile_one(self.runner, program, ct, self.options, self.settings);
            let Err(failed) = &first else { return first.map_err(|e| e.cause.to_string()) };
            let (repaired, repairs) = repair_tables(self.grid, ct, self.store, self.memo);
            let again = if !repairs.is_empty() {
                self.late_repairs.borrow_mut().extend(repairs);
                Arc::new(repaired)
            } else if failed.cause.is_damaged_input() {
                self.late_repairs.borrow_mut().push(found_whole_again(self.store.dir(), failed));
                ct.clone()
            } else {
                return first.map_err(|e| e.cause.to_string());
            };
            compile_one(self.runner, program, &again, self.options, self.settings).map_err(|e| e.cause.to_string())
        };
        let (report, rebuilt) = verify(program, self.grid, outcome.clone(), self.cache, &rebuild);
        (ProgramReport { miss_hint: hint, tier, ..report }, rebuilt)
    }
}

/// What a program that came from the shared tier and failed a check here leaves there (ADR
/// 0030): a downloaded library that did not load (the worker or the parent built it again,
/// `rebuilt`) is rejected and reported as a warning; a kernel that fails the reference, or
/// refuses the grid, rejects the translation entry and library it was downloaded with, and says
/// so in its error. [`shared::SharedRun::reject`] retracts (a writer) or quarantines (a reader).
fn reject_fetched(
    shared: &mut shared::SharedRun,
    i: usize,
    outcome: &CompileOutcome,
    rebuilt: bool,
    mut report: ProgramReport,
    warnings: &mut Vec<cache::CacheWarning>,
) -> ProgramReport {
    if (outcome.built || rebuilt) && shared.library_fetched(i) {
        let reason = "the kernel library from the shared tier passed its object checks but did not load";
        let rejected = shared.reject(i, &[gridkey_remote::Kind::KernelLibrary], reason);
        if !rejected.is_empty() {
            warnings.push(cache::CacheWarning {
                path: outcome.artifact.clone(),
                message: format!("({}) {reason}, so it was built here; {}", report.program, rejected.describe()),
            });
        }
    }
    if !report.verified && (report.max_rel_error.is_some() || report.error.as_deref().is_some_and(is_refusal)) {
        let reason = report.error.clone().unwrap_or_default();
        let rejected =
            shared.reject(i, &[gridkey_remote::Kind::TranslationEntry, gridkey_remote::Kind::KernelLibrary], &reason);
        if !rejected.is_empty() {
            report.error = Some(format!("{reason}; {}", rejected.describe()));
        }
    }
    report
}

/// The tail of [`verify`]'s error for a kernel that refuses the grid's own tables.
const REFUSED: &str = "the kernel does not fit this grid's tables";

fn is_refusal(error: &str) -> bool {
    error.contains(REFUSED)
}

/// Loads the artifact, runs it on the runtime provider and compares with the Rust evaluation.
/// A kernel whose results do not match is removed from the build cache, and its translation
/// from the translation cache, so that neither is served again (ADR 0023). Also returns whether
/// the library did not load and was built again here.
fn verify(
    program: &Program,
    grid: &Grid,
    outcome: CompileOutcome,
    cache: &TranslationCache,
    rebuild: &dyn Fn() -> Result<CompileOutcome, String>,
) -> (ProgramReport, bool) {
    let mut outcome = outcome;
    // A library that cannot be loaded (removed or altered since it was built, ADR 0023) is
    // built again, once.
    let loading = Instant::now();
    let loaded = gridkey_stencil::Kernel::load(&outcome.artifact, program);
    let load_seconds = loading.elapsed().as_secs_f64();
    let mut rebuilt = false;
    let kernel = match loaded {
        Err(gridkey_stencil::StencilError::Load { .. }) => rebuild().and_then(|again| {
            rebuilt = true;
            outcome.built |= again.built;
            outcome.build_seconds += again.build_seconds;
            gridkey_stencil::Kernel::load(&again.artifact, program).map_err(|e| e.to_string())
        }),
        other => other.map_err(|e| e.to_string()),
    };
    let mut report = ProgramReport {
        program: outcome.program.clone(),
        key: Some(outcome.key.to_hex()),
        cache_hit: !outcome.translated,
        translated: outcome.translated,
        built: outcome.built,
        translate_seconds: outcome.translate_seconds,
        build_seconds: outcome.build_seconds,
        key_seconds: outcome.key_seconds,
        lookup_seconds: outcome.lookup_seconds,
        lock_seconds: outcome.lock_seconds,
        library_check_seconds: outcome.library_check_seconds,
        load_seconds,
        max_rel_error: None,
        verified: false,
        error: None,
        miss_hint: None,
        tier: None,
    };
    // A kernel that refuses the grid's own tables and inputs was not translated from them.
    let mut refused = None;
    let checked = kernel.and_then(|kernel| {
        let provider = grid.provider();
        let inputs = gridkey_stencil::make_inputs(program, provider, INPUT_SEED).map_err(|e| e.to_string())?;
        let got = match kernel.run(provider, &inputs) {
            Ok(got) => got,
            Err(e) => {
                refused = Some(kernel);
                return Err(e.to_string());
            }
        };
        let want = gridkey_stencil::evaluate_reference(program, provider, &inputs).map_err(|e| e.to_string())?;
        Ok((gridkey_stencil::max_relative_error(&got, &want), kernel))
    });
    match checked {
        Ok((err, kernel)) => {
            report.max_rel_error = Some(err);
            report.verified = err < TOLERANCE;
            if !report.verified {
                let removed = kernel.discard().unwrap_or(false);
                cache.remove(&outcome.key);
                report.error = Some(format!(
                    "max relative error {err:e} exceeds {TOLERANCE:e}; {} and its translation removed from the cache",
                    if removed { "the library was" } else { "the library was already gone," }
                ));
            }
        }
        // Inputs made from this grid's provider, refused by its kernel: the translation does not
        // fit this grid's tables (an entry written from a table changed and changed back while it
        // was read, the window ADR 0024 leaves, or a planted entry). Removed like a kernel that
        // fails verification (ADR 0023), so the next run translates it again.
        Err(e) if refused.is_some() => {
            let removed = refused.and_then(|k| k.discard().ok()).unwrap_or(false);
            cache.remove(&outcome.key);
            report.error = Some(format!(
                "{e}; {REFUSED}, so {} and its translation removed from the cache: the next run translates it again",
                if removed { "the library was" } else { "the library was already gone," }
            ));
        }
        Err(e) => report.error = Some(e),
    }
    (report, rebuilt)
}

/// One row of `gridkey tables`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRow {
    /// Offset name (`C2E`).
    pub offset: String,
    /// Domain dimension (`Cell`).
    pub domain: String,
    /// Codomain dimension (`Edge`).
    pub codomain: String,
    /// Shape `(n, k)`.
    pub shape: [usize; 2],
    /// NumPy typestr of the canonical table (`<i4`).
    pub dtype: String,
    /// Number of skip entries (`-1`).
    pub skip_count: usize,
    /// Table digest (format v1), 32 hex digits.
    pub digest: String,
}

/// The connectivities of a grid, with their table digests (format v1).
///
/// Errors: [`AppError::Grid`].
pub fn tables(grid_path: &Path) -> Result<Vec<TableRow>, AppError> {
    let grid = read_grid(grid_path)?;
    table_rows(&grid)
}

/// The rows of `gridkey tables` for a grid already read.
///
/// Errors: [`AppError::Offsets`] when a table cannot be read on the host (a grid's tables are
/// host tables, read in place).
pub fn table_rows(grid: &Grid) -> Result<Vec<TableRow>, AppError> {
    grid.tables()
        .iter()
        .map(|info| {
            let c = grid.provider().gather(&info.offset).expect("every table of a grid is a gather");
            let table = c.host_table(&info.offset)?;
            let digest = match &table {
                gridkey_offsets::IndexTable::I32(a) => gridkey_digest::digest_table(a.view()),
                gridkey_offsets::IndexTable::I64(a) => gridkey_digest::digest_table(a.view()),
            };
            Ok(TableRow {
                offset: info.offset.clone(),
                domain: info.domain.clone(),
                codomain: info.codomain.clone(),
                shape: info.shape,
                dtype: table_dtype(&table).to_owned(),
                skip_count: info.skip_count,
                digest: digest.to_hex(),
            })
        })
        .collect()
}

fn table_dtype(table: &gridkey_offsets::IndexTable) -> &'static str {
    table.dtype().typestr()
}
