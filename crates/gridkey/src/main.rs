//! The `gridkey` command line (README "Usage"): `run`, `tables`, `cache`, `worker`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gridkey::{RunConfig, RunReport, StencilHandler, SHIPPED_GRID};
use gridkey_jobs::{BuildJobs, BuildJobsMode, WorkerCommand};

#[derive(Parser)]
#[command(name = "gridkey", version, about = "Compile stencil programs against content-addressed compile-time views of a grid's connectivity tables")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: convert, key, translate (or hit the cache), build, run and verify every
    /// program on a grid.
    Run {
        /// ICON or MPAS netCDF-3 grid file (default: the ICON R02B04 grid shipped in data/grids).
        #[arg(long)]
        grid: Option<PathBuf>,
        /// Build-jobs mode (default: GRIDKEY_BUILD_JOBS_MODE, else process).
        #[arg(long, value_parser = parse_mode)]
        mode: Option<BuildJobsMode>,
        /// Number of workers (default: GRIDKEY_BUILD_JOBS, else the available cores, at most 32).
        #[arg(long)]
        jobs: Option<i64>,
        /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Recompute the digest of every stored table on every open, here and in the workers
        /// (a table modified in place is rebuilt).
        #[arg(long)]
        verify: bool,
    },
    /// Inspect or clean the cache directory.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Convert a grid into a cache and print table digests and program keys as JSON (test use).
    #[command(hide = true)]
    Keys {
        /// ICON or MPAS netCDF-3 grid file.
        #[arg(long)]
        grid: PathBuf,
        /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
    },
    /// List a grid's connectivities: offset, domain, codomain, shape, dtype, skip values, digest.
    Tables {
        /// ICON or MPAS netCDF-3 grid file.
        #[arg(long)]
        grid: PathBuf,
        /// Print a JSON array of objects with exactly the fields offset, domain, codomain,
        /// shape, dtype, skip_count, digest.
        #[arg(long)]
        json: bool,
    },
    /// The process-mode build worker (started by `gridkey run`, not for people).
    #[command(hide = true)]
    Worker,
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Entries and bytes per store (tables-v1, translation-v1, build-v1), and temp files.
    Stats {
        /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove abandoned temp files and, with --max-size, least-recently-used entries beyond the
    /// budget; never an entry that a running process has mapped or loaded.
    Gc {
        /// Cache directory (default: GRIDKEY_CACHE_DIR, else .gridkey_cache).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Budget in bytes for the entries of all stores together.
        #[arg(long)]
        max_size: Option<u64>,
        /// Minimum age in seconds of an unlocked temp file before it is removed.
        #[arg(long, default_value_t = gridkey::cache::STALE_TEMP_AGE.as_secs())]
        temp_age: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_mode(s: &str) -> Result<BuildJobsMode, String> {
    s.parse().map_err(|_| format!("{s:?} is not a build-jobs mode: expected serial, thread or process"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gridkey: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Worker => {
            gridkey_jobs::worker::serve(&StencilHandler).context("worker protocol stream failed")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tables { grid, json } => {
            let rows = gridkey::tables(&grid)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!("{:<7} {:<7} {:<9} {:<13} {:<5} {:>5}  digest", "offset", "domain", "codomain", "shape", "dtype", "skips");
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
        Command::Cache { command } => cache_command(command),
        Command::Keys { grid, cache_dir } => {
            let report = gridkey::keys::keys(&grid, &cache_dir.unwrap_or_else(gridkey_jobs::cache_dir_from_env))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { grid, mode, jobs, cache_dir, json, verify } => {
            if verify {
                // Read by every table store opened here and in the workers, which inherit it.
                std::env::set_var(gridkey_store::ENV_VERIFY_TABLES, "1");
            }
            let env = BuildJobs::from_env()?;
            let jobs = BuildJobs::new(mode.unwrap_or(env.mode), jobs.unwrap_or(env.jobs as i64));
            let config = RunConfig {
                grid: grid.unwrap_or_else(default_grid),
                cache_dir: cache_dir.unwrap_or_else(gridkey_jobs::cache_dir_from_env),
                jobs,
                worker: WorkerCommand::gridkey(std::env::current_exe().context("cannot find the gridkey executable")?),
                options: Default::default(),
            };
            let report = gridkey::run(&config)?;
            for w in &report.warnings {
                eprintln!("gridkey: warning: cache directory {} {}", w.path.display(), w.message);
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
        CacheCommand::Stats { cache_dir, json } => {
            let dir = cache_dir.unwrap_or_else(gridkey_jobs::cache_dir_from_env);
            let stats = gridkey::cache::stats(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                println!("{:<15} {:>8} {:>14} {:>10} {:>12}", "store", "entries", "bytes", "temp files", "temp bytes");
                for s in &stats {
                    println!("{:<15} {:>8} {:>14} {:>10} {:>12}", s.store, s.entries, s.bytes, s.temp_files, s.temp_bytes);
                }
                let (n, b): (u64, u64) = stats.iter().fold((0, 0), |(n, b), s| (n + s.entries, b + s.bytes));
                println!("{n} entries, {b} bytes in {}", dir.display());
            }
        }
        CacheCommand::Gc { cache_dir, max_size, temp_age, json } => {
            let dir = cache_dir.unwrap_or_else(gridkey_jobs::cache_dir_from_env);
            let config = gridkey::cache::GcConfig { max_size, temp_min_age: std::time::Duration::from_secs(temp_age) };
            let r = gridkey::cache::gc(&dir, &config)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "removed {} temp files ({} bytes) and {} entries ({} bytes); kept {} in use; {} bytes left in {}",
                    r.temps_removed, r.temp_bytes, r.entries_removed, r.bytes_removed, r.kept_in_use, r.bytes_left, dir.display()
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
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(SHIPPED_GRID)
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
    let built = report.programs.iter().filter(|p| p.built).count();
    println!(
        "{verified}/{} programs verified on {} ({} mode, {} jobs): {} cache hits, {} translations, {} builds; \
         read {:.3} s, convert {:.3} s, compile {:.3} s, verify {:.3} s",
        report.programs.len(),
        report.grid.display(),
        report.mode,
        report.jobs,
        report.hits(),
        report.translations(),
        built,
        report.read_seconds,
        report.convert_seconds,
        report.compile_seconds,
        report.verify_seconds,
    );
}
