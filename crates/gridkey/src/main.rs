//! The `gridkey` command line (README "Usage"): `run`, `explain`, `tables`, `cache`, `worker`.

// First: its `println!` and `eprintln!` replace std's in every module after it.
#[macro_use]
mod output;
mod progress;
mod settings;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gridkey::{RunConfig, RunReport, StencilHandler, SHIPPED_GRID};
use gridkey_jobs::{BuildJobsMode, WorkerCommand};

#[derive(Parser)]
#[command(
    name = "gridkey",
    version,
    about = "Compile stencil programs against content-addressed compile-time views of a grid's connectivity tables"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: convert, key, translate (or hit the cache), build, run and verify every
    /// program on a grid.
    Run {
        /// ICON, MPAS or UGRID grid file, netCDF-3 or netCDF-4 (default: the ICON R02B04 grid in data/grids).
        #[arg(long)]
        grid: Option<PathBuf>,
        /// Build-jobs mode (default: GRIDKEY_BUILD_JOBS_MODE, else process).
        #[arg(long, value_parser = parse_mode)]
        mode: Option<BuildJobsMode>,
        /// Number of workers; 0 or less means serial (default: GRIDKEY_BUILD_JOBS, else the
        /// available cores, at most 32).
        #[arg(long, allow_negative_numbers = true)]
        jobs: Option<i64>,
        /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache). One this user
        /// cannot write serves its hits, and nothing new is cached (ADR 0036).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Read-only site cache, looked up after the cache directory and never written
        /// (default: GRIDKEY_SITE_CACHE, else none; ADR 0036).
        #[arg(long, value_name = "DIR")]
        site_cache: Option<PathBuf>,
        /// Translation option NAME=VALUE for every program (repeatable), e.g. opt_level=3.
        #[arg(long = "option", value_name = "NAME=VALUE", value_parser = parse_option)]
        options: Vec<(String, String)>,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Recompute the digest of every stored table on every open, here and in the workers
        /// (a table modified in place is rebuilt).
        #[arg(long)]
        verify: bool,
        #[command(flatten)]
        remote: RemoteFlags,
    },
    /// Inspect or clean the cache directory.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Convert a grid into a cache and print table digests and program keys as JSON (test use).
    #[command(hide = true)]
    Keys {
        /// ICON, MPAS or UGRID grid file, netCDF-3 or netCDF-4.
        #[arg(long)]
        grid: PathBuf,
        /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
    },
    /// Say which key inputs differ between two cached keys, or why a program misses the cache.
    Explain {
        /// Two cached keys, each given by a unique prefix of its hex digits.
        #[arg(num_args = 0..=2, value_name = "KEY")]
        keys: Vec<String>,
        /// Explain the miss of this program against the grid instead (nearest cached entry).
        #[arg(long, value_name = "PROGRAM", conflicts_with = "keys")]
        miss: Option<String>,
        /// With --miss: the grid (default: the shipped ICON grid).
        #[arg(long, requires = "miss")]
        grid: Option<PathBuf>,
        /// With --miss: translation option NAME=VALUE (repeatable).
        #[arg(long = "option", value_name = "NAME=VALUE", value_parser = parse_option, requires = "miss")]
        options: Vec<(String, String)>,
        /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print JSON (README "gridkey explain" documents the fields).
        #[arg(long)]
        json: bool,
    },
    /// List a grid's connectivities: offset, domain, codomain, shape, dtype, skip values, digest.
    Tables {
        /// ICON, MPAS or UGRID grid file, netCDF-3 or netCDF-4.
        #[arg(long)]
        grid: PathBuf,
        /// Print a JSON array of objects with exactly the fields offset, domain, codomain,
        /// shape, dtype, skip_count, digest.
        #[arg(long)]
        json: bool,
    },
    /// The process-mode build worker (started by `gridkey run`, not for people).
    #[command(hide = true)]
    Worker {
        /// The compile step: `stencil` (the real one), or `test-faults`, the fault-injection
        /// test hook of gridkey::faults (ADR 0010).
        #[arg(long, default_value = "stencil", value_parser = ["stencil", gridkey::faults::FAULT_HANDLER_NAME])]
        handler: String,
        /// Process id of the pool that started this worker; the worker stops when it dies.
        #[arg(long)]
        parent: Option<i32>,
    },
}

/// The flags of the shared tier (README "The shared tier").
#[derive(clap::Args, Clone, Debug, Default)]
struct RemoteFlags {
    /// Redis URL of the shared tier, redis://[USER][:PASSWORD@]HOST:PORT[/DB] or rediss://...
    /// for TLS (default: GRIDKEY_REMOTE_URL, else none).
    #[arg(long, value_name = "URL")]
    remote: Option<String>,
    /// Upload translations and libraries and take leases: a designated writer (default:
    /// GRIDKEY_REMOTE_WRITER, else read-only).
    #[arg(long)]
    remote_writer: bool,
}

/// The flags of the cache commands that reach both tiers (`cache stats`, `cache push`).
#[derive(clap::Args, Clone, Debug, Default)]
struct TierArgs {
    /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    remote: RemoteFlags,
}

impl TierArgs {
    /// The settings these flags give over the environment (parsed once, here at the edge).
    fn settings(self) -> Result<gridkey::Settings> {
        Ok(settings::settings(&settings::Flags {
            cache_dir: self.cache_dir,
            remote: self.remote.remote,
            remote_writer: self.remote.remote_writer,
            ..Default::default()
        })?)
    }
}

fn parse_option(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Entries and bytes per store (tables-v1, translation-v2, build-v2), temp files, and each
    /// tier's counters over all runs (hits, misses, bytes in and out, errors, lease waits).
    Stats {
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Upload every translation entry of the local cache, and the kernel library this compiler
    /// built from it, to the shared tier (needs a designated writer).
    Push {
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Delete translation entries and the kernel libraries this compiler built from them from the
    /// shared tier (needs a designated writer) and from the local cache, and print what was
    /// removed: for a kernel that computes wrong results on every node (ADR 0030).
    Retract {
        /// Translation keys, each a unique prefix of a cached key (as `gridkey explain` takes
        /// them) or all 32 hex digits.
        #[arg(value_name = "KEY", required_unless_present = "program", conflicts_with = "program")]
        keys: Vec<String>,
        /// Retract this program's key on the grid with the options instead (as `gridkey explain
        /// --miss` computes it).
        #[arg(long, value_name = "NAME")]
        program: Option<String>,
        /// With --program: the grid (default: the shipped ICON grid).
        #[arg(long, requires = "program")]
        grid: Option<PathBuf>,
        /// With --program: translation option NAME=VALUE (repeatable).
        #[arg(long = "option", value_name = "NAME=VALUE", value_parser = parse_option, requires = "program")]
        options: Vec<(String, String)>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Write a new Ed25519 signing key for a writer of the shared tier to FILE (mode 0600, never
    /// replaced) and print its public key, the line for the readers' trusted keys file.
    Keygen {
        /// The new key file.
        file: PathBuf,
    },
    /// Remove abandoned temp files and, with --max-size, least-recently-used entries beyond the
    /// budget; never an entry that a running process has mapped or loaded.
    Gc {
        /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Budget in bytes for the entries of all stores together.
        #[arg(long, value_name = "BYTES", value_parser = parse_bytes, allow_hyphen_values = true)]
        max_size: Option<u64>,
        /// Minimum age in seconds of an unlocked temp file before it is removed.
        #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, allow_hyphen_values = true,
              default_value_t = gridkey::cache::STALE_TEMP_AGE.as_secs())]
        temp_age: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_mode(s: &str) -> Result<BuildJobsMode, String> {
    s.parse().map_err(|_| format!("{s:?} is not a build-jobs mode: expected serial, thread or process"))
}

/// A whole number of bytes (`--max-size`): digits only, no unit.
fn parse_bytes(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("{s:?} is not a number of bytes: give whole bytes without a unit, e.g. 10000000000"))
}

/// A whole number of seconds (`--temp-age`).
fn parse_seconds(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("{s:?} is not a number of seconds: give whole seconds, e.g. 3600"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gridkey: error: {}", settings::name_settings(&output::error_text(&e)));
            ExitCode::from(2)
        }
    };
    output::finish(code)
}

fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Worker { handler, parent } => {
            // A worker reads no settings: they arrive with every task (ADR 0013). Its stderr
            // goes to the pool, which keeps its tail for the messages of a failed task and shows
            // its progress lines in the parent.
            gridkey::set_lock_notice(progress::worker_lock_wait_line);
            let served = if handler == gridkey::faults::FAULT_HANDLER_NAME {
                gridkey_jobs::worker::serve(&gridkey::faults::FaultHandler, parent)
            } else {
                gridkey_jobs::worker::serve(&StencilHandler, parent)
            };
            served.context("worker protocol stream failed")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tables { grid, json } => {
            let rows = gridkey::tables(&grid)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:<7} {:<7} {:<9} {:<13} {:<5} {:>5}  digest",
                    "offset", "domain", "codomain", "shape", "dtype", "skips"
                );
                for r in rows {
                    let shape = format!("({}, {})", r.shape[0], r.shape[1]);
                    println!(
                        "{:<7} {:<7} {:<9} {:<13} {:<5} {:>5}  {}",
                        r.offset, r.domain, r.codomain, shape, r.dtype, r.skip_count, r.digest
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain { keys, miss, grid, options, cache_dir, json } => {
            let cache_dir = settings::cache_dir(cache_dir);
            if let Some(program) = miss {
                let options = options.into_iter().collect();
                let e =
                    gridkey::explain::explain_miss(&cache_dir, &program, &grid.unwrap_or_else(default_grid), &options)?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&e)?);
                } else if e.cached {
                    println!("{} key {}: in the cache, no miss to explain", e.program, e.key);
                } else if let Some(nearest) = &e.nearest {
                    println!(
                        "{} key {} is not cached; nearest cached entry {nearest} ({}) differs in:",
                        e.program,
                        e.key,
                        output::count(e.candidates as u64, "candidate", "candidates")
                    );
                    print_changes(&e.differences);
                } else if e.unreadable_records > 0 {
                    let n = e.unreadable_records as u64;
                    println!(
                        "{} key {} is not cached, and no other readable entry of {} is; {} {} an unreadable \
                         key-input record and could not be compared",
                        e.program,
                        e.key,
                        e.program,
                        output::count(n, "cached entry", "cached entries"),
                        if n == 1 { "has" } else { "have" }
                    );
                } else {
                    println!(
                        "{} key {} is not cached, and no other entry of {} is: a first translation",
                        e.program, e.key, e.program
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            let [a, b] = keys.as_slice() else {
                anyhow::bail!("give two keys (unique prefixes), or --miss PROGRAM");
            };
            let e = gridkey::explain::explain_keys(&cache_dir, a, b)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&e)?);
            } else if e.identical {
                println!("{} and {}: identical inputs", e.a, e.b);
            } else {
                println!("{} -> {}:", e.a, e.b);
                print_changes(&e.differences);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Cache { command } => cache_command(command),
        Command::Keys { grid, cache_dir } => {
            let settings = settings::settings(&settings::Flags { cache_dir, ..Default::default() })?;
            let report = gridkey::keys::keys(&grid, &settings)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { grid, mode, jobs, cache_dir, site_cache, options, json, verify, remote } => {
            // Parsed once, here; a flag replaces its variable.
            let settings = settings::settings(&settings::Flags {
                mode,
                jobs,
                cache_dir,
                site_cache,
                verify,
                remote: remote.remote,
                remote_writer: remote.remote_writer,
            })?;
            let options: gridkey_fingerprint::TranslationOptions = options.into_iter().collect();
            // Bad options are a usage error, said once, not a failure of every program.
            gridkey_stencil::check_options(&options)?;
            // The fault matrix's hook travels as text in the settings; a bad one is said here, once.
            gridkey_fs::Fault::parse_setting(settings.test_hooks.fault.as_deref())
                .map_err(gridkey::AppError::FaultHook)?;
            let config = RunConfig {
                grid: grid.unwrap_or_else(default_grid),
                settings,
                worker: WorkerCommand::gridkey(std::env::current_exe().context("cannot find the gridkey executable")?),
                options,
            };
            // On Ctrl-C: stop the workers (with their C compilers) and exit 130. Every cache
            // write is an atomic rename, so whatever was not finished leaves only temp files.
            ctrlc::set_handler(|| {
                let stopped = gridkey_jobs::stop_all_workers();
                eprintln!(
                    "\ngridkey: interrupted; stopped {}",
                    output::count(stopped as u64, "build worker", "build workers")
                );
                std::process::exit(130);
            })
            .context("cannot install the Ctrl-C handler")?;
            gridkey::set_lock_notice(progress::lock_wait_line);
            gridkey_jobs::set_worker_progress(progress::worker_progress_line);
            // What the run takes from the shared tier, said before anything is taken (ADR 0031).
            if let Some(remote) = &config.settings.remote {
                // A URL the tier cannot use is the one thing said.
                gridkey_remote::check_url(remote)?;
                let statement = gridkey_remote::Trust::load(remote)?.statement(remote);
                eprintln!("gridkey: {}", settings::name_settings(&statement));
            }
            let reporter =
                progress::Reporter::for_stderr(gridkey_stencil::icon_programs().len(), settings::plain_progress());
            let report = gridkey::run(&config, gridkey::RunOptions::new().progress(&reporter));
            reporter.finish();
            let report = settings::name_settings_in(report?);
            for w in &report.warnings {
                eprintln!("gridkey: warning: {}: {}", w.path.display(), w.message);
            }
            for w in report.tiers.iter().flat_map(|t| [t.warning.as_deref(), t.rejections.as_deref()]).flatten() {
                eprintln!("gridkey: warning: {w}");
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_report(&report);
            }
            Ok(if report.all_verified() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}

fn cache_command(command: CacheCommand) -> Result<ExitCode> {
    match command {
        CacheCommand::Stats { tiers } => {
            let json = tiers.json;
            let settings = tiers.settings()?;
            let dir = settings.cache_dir.clone();
            let client = settings.remote.as_ref().map(gridkey_remote::Remote::connect).transpose()?;
            let stats = gridkey::cache::cache_stats(&dir, client.as_ref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                println!("{:<15} {:>8} {:>14} {:>10} {:>12}", "store", "entries", "bytes", "temp files", "temp bytes");
                for s in &stats.stores {
                    println!(
                        "{:<15} {:>8} {:>14} {:>10} {:>12}",
                        s.store, s.entries, s.bytes, s.temp_files, s.temp_bytes
                    );
                }
                let (n, b): (u64, u64) = stats.stores.iter().fold((0, 0), |(n, b), s| (n + s.entries, b + s.bytes));
                println!(
                    "{}, {} in {}",
                    output::count(n, "entry", "entries"),
                    output::count(b, "byte", "bytes"),
                    dir.display()
                );
                print_tiers(&stats.tiers);
                for t in stats.tiers.iter().filter(|t| !t.objects.is_empty()) {
                    for o in &t.objects {
                        println!("{} tier holds {} {} objects, {} bytes", t.tier, o.objects, o.kind, o.bytes);
                    }
                }
            }
        }
        CacheCommand::Push { tiers } => {
            let json = tiers.json;
            let settings = tiers.settings()?;
            let r = gridkey::push::push(&settings)?;
            eprintln!("gridkey: {}", r.trust);
            for s in &r.skipped_objects {
                eprintln!("gridkey: warning: not pushed: {} {}: {}", s.kind, s.name, s.reason);
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                let gt4py = if r.gt4py_translations + r.gt4py_extensions > 0 {
                    format!(
                        ", {} GT4Py translation entries and {} GT4Py extensions",
                        r.gt4py_translations, r.gt4py_extensions
                    )
                } else {
                    String::new()
                };
                println!(
                    "pushed {} translation entries and {} kernel libraries{gt4py} ({} bytes) to {}; {} skipped (an entry and \
                     its library count once; each object not pushed is in a warning above)",
                    r.entries, r.libraries, r.bytes, r.remote, r.skipped
                );
            }
        }
        CacheCommand::Retract { keys, program, grid, options, tiers } => {
            let json = tiers.json;
            let settings = tiers.settings()?;
            let target = match program {
                Some(name) => gridkey::retract::RetractTarget::Program {
                    name,
                    grid: grid.unwrap_or_else(default_grid),
                    options: options.into_iter().collect(),
                },
                None => gridkey::retract::RetractTarget::Keys(keys),
            };
            let r = gridkey::retract::retract(&settings, &target)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                for k in &r.keys {
                    let mut removed = Vec::new();
                    for (done, what) in [
                        (k.remote_entry, "shared translation entry"),
                        (k.remote_library, "shared kernel library"),
                        (k.local_entry, "local translation entry"),
                        (k.local_library, "local kernel library"),
                    ] {
                        if done {
                            removed.push(what.to_owned());
                        }
                    }
                    removed.extend(k.remote_gt4py.iter().map(|kind| format!("shared GT4Py {kind}")));
                    removed.extend(k.local_gt4py.iter().map(|kind| format!("local GT4Py {kind}")));
                    let program = k.program.as_deref().map(|p| format!(" ({p})")).unwrap_or_default();
                    let removed = if removed.is_empty() { "nothing was there".to_owned() } else { removed.join(", ") };
                    println!("retracted {}{program} from {}: {removed}", k.key, r.remote);
                    if let Some(why) = &k.library_unnamed {
                        eprintln!("gridkey: warning: {}: {why}", k.key);
                    }
                }
            }
        }
        CacheCommand::Keygen { file } => {
            let public = gridkey_remote::trust::generate_signing_key(&file)?;
            eprintln!(
                "wrote signing key {}; give it to writers as GRIDKEY_REMOTE_SIGNING_KEY and add this line to the readers' \
                 GRIDKEY_REMOTE_TRUSTED_KEYS file:",
                file.display()
            );
            println!("{public}");
        }
        CacheCommand::Gc { cache_dir, max_size, temp_age, json } => {
            let dir = settings::cache_dir(cache_dir);
            let config = gridkey::cache::GcConfig { max_size, temp_min_age: std::time::Duration::from_secs(temp_age) };
            let r = gridkey::cache::gc(&dir, &config)?;
            for w in &r.warnings {
                eprintln!("gridkey: warning: {}: {}", w.path.display(), settings::name_settings(&w.message));
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                let c = output::count;
                println!(
                    "removed {} ({}) and {} ({}); kept {} in use and {} used by {}; {} left in {}",
                    c(r.temps_removed, "temp file", "temp files"),
                    c(r.temp_bytes, "byte", "bytes"),
                    c(r.entries_removed, "entry", "entries"),
                    c(r.bytes_removed, "byte", "bytes"),
                    r.kept_in_use,
                    r.kept_for_live_runs,
                    c(r.live_runs, "live run", "live runs"),
                    c(r.bytes_left, "byte", "bytes"),
                    dir.display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The shipped ICON grid: relative to the current directory when run from the repository
/// root, else next to the sources this binary was built from.
fn default_grid() -> PathBuf {
    let here = PathBuf::from(SHIPPED_GRID);
    if here.exists() {
        return here;
    }
    let beside_sources = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(SHIPPED_GRID);
    std::fs::canonicalize(&beside_sources).unwrap_or(beside_sources)
}

/// One line per tier: hits, misses, bytes in and out, errors, lease waits.
fn print_tiers(tiers: &[gridkey::cache::TierReport]) {
    for t in tiers {
        let s = &t.stats;
        let runs = t.runs.map_or_else(String::new, |n| format!(" over {n} runs"));
        let mut line = format!(
            "{} tier {}{runs}: {} hits, {} misses, {} bytes in, {} bytes out, {} errors, {} lease waits ({:.3} s)",
            t.tier,
            t.location,
            s.hits,
            s.misses,
            s.bytes_in,
            s.bytes_out,
            s.errors,
            s.lease_waits,
            s.lease_wait_seconds
        );
        if t.tier == "remote" {
            line += &format!(
                ", {} rejected, {} uploads, {} leases, {} take-overs, {} round trips{}",
                s.rejected,
                s.uploads,
                s.leases,
                s.takeovers,
                s.round_trips,
                if t.on { "" } else { " (off)" }
            );
        }
        println!("{line}");
    }
}

fn print_changes(changes: &[gridkey_fingerprint::InputChange]) {
    for c in changes {
        println!("  {c}");
    }
}

fn print_report(report: &RunReport) {
    println!(
        "{:<12} {:<32} {:<5} {:>11} {:>9} {:>10}  result",
        "program", "key", "cache", "translate s", "build s", "max error"
    );
    for p in &report.programs {
        let err = p.max_rel_error.map_or("-".to_owned(), |e| format!("{e:.1e}"));
        let result = match (&p.error, p.verified) {
            (_, true) => "verified".to_owned(),
            (Some(e), false) => format!("FAILED: {e}"),
            (None, false) => "FAILED".to_owned(),
        };
        println!(
            "{:<12} {:<32} {:<5} {:>11.3} {:>9.3} {:>10}  {}",
            p.program,
            p.key.as_deref().unwrap_or("-"),
            if p.cache_hit { "hit" } else { "miss" },
            p.translate_seconds,
            p.build_seconds,
            err,
            result
        );
    }
    let verified = report.programs.iter().filter(|p| p.verified).count();
    let c = |n: usize, one, many| output::count(n as u64, one, many);
    println!(
        "{verified}/{} verified on {} ({} mode, {}): {}, {}, {}, {}; \
         read {:.3} s, convert {:.3} s, compile {:.3} s, verify {:.3} s",
        c(report.programs.len(), "program", "programs"),
        report.grid.display(),
        report.mode,
        c(report.jobs, "job", "jobs"),
        c(report.hits(), "cache hit", "cache hits"),
        c(report.misses(), "miss", "misses"),
        c(report.translations(), "translation", "translations"),
        c(report.builds(), "build", "builds"),
        report.read_seconds,
        report.convert_seconds,
        report.compile_seconds,
        report.verify_seconds,
    );
    for hint in report.programs.iter().filter_map(|p| p.miss_hint.as_deref()) {
        println!("hint: {hint}");
    }
    for s in &report.skipped {
        println!("skipped {}: {}", s.program, s.reason);
    }
    // With a site cache or a shared tier: where the hits came from, tier by tier, and what each did.
    if report.tiers.len() > 1 {
        let counts: Vec<String> = report
            .tiers
            .iter()
            .enumerate()
            .map(|(i, t)| {
                format!("{}{} from the {} tier", report.hits_from(&t.tier), if i == 0 { " hits" } else { "" }, t.tier)
            })
            .collect();
        println!("{}", counts.join(", "));
        print_tiers(&report.tiers);
    }
}
