//! `cargo xtask`: project automation.
//!
//! `cargo xtask test` is the README's test command: it sets up the virtual environment and the
//! Redis server the tests need and runs every test with them required (see `test.rs`).
//!
//! `cargo xtask modes [--grid FILE]` is the mode-equivalence proof of README "The proof":
//! 1. the key of every program is identical across the three build-jobs modes, and across
//!    runtime tables given in C order, Fortran order, as int64 and through the host-copy source;
//! 2. for each of the six ordered pairs of modes (A, B), a cache filled in mode A serves mode B
//!    with 0 translations;
//! 3. the C source translated against the compile-time view is byte-identical to the source
//!    translated directly against each runtime variant of the tables.
//!
//! Every stored table is opened with the verifying open (digest recomputed) along the way.
//!
//! `cargo xtask memory` (worker start time and per-worker memory with mapped tables) and
//! `cargo xtask kill-demo` (a worker killed in the middle of `gridkey run`): see their modules.
//! `cargo xtask faults` is the fault matrix of ADR 0012 (see `faults.rs`).
//! `cargo xtask cluster --nodes N`: N simulated nodes on one Redis server, cold and warm starts
//! and the server killed mid-run (see `cluster.rs`).
//! `cargo xtask with-redis -- CMD ARGS...` runs CMD with a real Redis server of its own on loopback
//! (`GRIDKEY_TEST_REDIS_URL`), installing Debian's `redis-server` when missing (see `redis_server.rs`).
//! `cargo xtask chaos --seconds N [--seed S]` runs all three modes on one cache for N seconds
//! while it kills, collects, tampers and swaps compilers at random (see `chaos.rs`).
//! `cargo xtask py-test` and `cargo xtask py-bench` test and measure the Python package (see
//! `py.rs`).
//! `cargo xtask bench [--quick]` measures digest, compile-time views, keys, payload, build jobs
//! and what the integrity checks cost (a warm conversion in a fresh process, per-key locks, the
//! parts of a warm run, concurrent runs) against their limits and writes
//! `target/gridkey-bench.json` (see `bench.rs`).
//! `cargo xtask gt4py [--reduced | --warm-only REPEATS]` is the proof on GT4Py 1.2.3 with
//! `gridkey.gt4py` (see `gt4py.rs`); `cargo xtask gt4py --icon4py` runs icon4py 0.4.1's own
//! programs on GT4Py 1.2.1 as its client (see `icon4py.rs`).

mod bench;
mod chaos;
mod cluster;
mod faults;
mod gt4py;
mod icon4py;
mod kill_demo;
mod memory;
mod py;
mod redis_server;
mod test;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use gridkey::{RunConfig, RunReport, Settings, StencilHandler};
use gridkey_fingerprint::TranslationOptions;
use gridkey_grid::{read_grid, Grid};
use gridkey_jobs::{BuildJobs, BuildJobsMode, Runner, WorkerCommand};
use gridkey_offsets::{compile_time_offset_provider, Entry};
use gridkey_stencil::Program;
use gridkey_store::TableStore;

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace root").to_path_buf()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") if args.len() == 1 => test::test(&root(), &target_dir()),
        Some("modes") => modes(&args[1..]),
        Some("bench") => bench::bench(&args[1..]),
        Some("py-test") => py::py_test_command(&args[1..]),
        Some("py-bench") => py::py_bench(&args[1..]),
        Some("gt4py") => gt4py::gt4py(&args[1..]),
        Some("memory") => build_gridkey().and_then(|bin| memory::memory(&args[1..], &bin)),
        Some("cluster") => build_gridkey().and_then(|bin| cluster::cluster(&args[1..], &bin)),
        Some("with-redis") => {
            return redis_server::with_redis(&args[1..]).unwrap_or_else(|e| {
                eprintln!("xtask: error: {e:#}");
                ExitCode::from(2)
            })
        }
        Some("kill-demo") => build_gridkey().and_then(|bin| kill_demo::kill_demo(&args[1..], &bin)),
        Some("chaos") => build_gridkey().and_then(|bin| chaos::chaos(&args[1..], &bin)),
        Some("faults") => match &args[1..] {
            // Another build of the binary, e.g. an older commit's, to see which faults it survives.
            [flag, bin] if flag == "--bin" => faults::faults(&root(), PathBuf::from(bin), None),
            [flag, bin, only_flag, only] if flag == "--bin" && only_flag == "--only" => {
                faults::faults(&root(), PathBuf::from(bin), Some(only.clone()))
            }
            [flag, only] if flag == "--only" => {
                build_gridkey().and_then(|bin| faults::faults(&root(), bin, Some(only.clone())))
            }
            [] => build_gridkey().and_then(|bin| faults::faults(&root(), bin, None)),
            other => Err(anyhow::anyhow!("unexpected arguments {other:?}: expected [--bin GRIDKEY] [--only TEXT]")),
        },
        _ => {
            eprintln!(
                "usage: cargo xtask test\n       cargo xtask modes [--grid FILE]\n       cargo xtask bench [--quick]\n       cargo xtask faults [--bin GRIDKEY] [--only TEXT]\n       cargo xtask chaos [--seconds N] [--seed S] [--runs K] [--keep]\n       cargo xtask memory [--scale N] [--workers W] [--starts S]\n       cargo xtask kill-demo [--grid FILE]\n       cargo xtask py-test [--python PYTHON] [--fresh]\n       cargo xtask py-bench [--python PYTHON] [--quick]\n       cargo xtask gt4py [--reduced | --warm-only REPEATS | --icon4py | --nodes N] [--python PYTHON]\n       cargo xtask cluster --nodes N [--grid FILE] [--mode M] [--jobs J] [--rounds R] [--loopback]\n       cargo xtask with-redis -- CMD ARGS..."
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

pub(crate) fn grid_arg(args: &[String]) -> Result<PathBuf> {
    match args {
        [] => Ok(root().join(gridkey::SHIPPED_GRID)),
        [flag, path] if flag == "--grid" => Ok(PathBuf::from(path)),
        _ => bail!("unexpected arguments {args:?}: expected [--grid FILE]"),
    }
}

/// Builds the `gridkey` binary (release) and returns its path: process-mode workers run it.
fn build_gridkey() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--package", "gridkey", "--bin", "gridkey"])
        .current_dir(root())
        .status()
        .context("cannot run cargo to build the gridkey binary")?;
    if !status.success() {
        bail!("building the gridkey binary failed ({status})");
    }
    Ok(target_dir().join("release").join("gridkey"))
}

/// The cargo target directory: `CARGO_TARGET_DIR`, or `target/` in the workspace root.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

fn modes(args: &[String]) -> Result<bool> {
    let grid_path = grid_arg(args)?;
    let gridkey_bin = build_gridkey()?;
    let grid = read_grid(&grid_path)?;
    let programs = gridkey_stencil::icon_programs();
    let options = TranslationOptions::new();
    let jobs = gridkey_settings::default_jobs().max(2) as i64;
    let runners: Vec<Runner<StencilHandler>> = BuildJobsMode::ALL
        .iter()
        .map(|&mode| {
            Runner::new(
                BuildJobs::new(mode, jobs),
                Arc::new(StencilHandler),
                WorkerCommand::gridkey(gridkey_bin.clone()),
            )
        })
        .collect();
    let mut ok = true;
    println!("grid: {} ({} programs, {} offsets)", grid_path.display(), programs.len(), grid.provider().len());

    // (1) Keys across modes, each on a fresh cache.
    let mut keys: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for runner in &runners {
        let cache = tempfile::tempdir()?;
        let report = run_mode(&grid, &programs, runner, cache.path(), &grid_path, &options)?;
        ok &= check_verified(&report);
        for p in &report.programs {
            keys.entry(p.program.clone())
                .or_default()
                .insert(format!("mode {}", report.mode), p.key.clone().unwrap_or_default());
        }
    }

    // (1) Keys across runtime layouts, and (3) C source against the runtime tables.
    let mut sources_identical = 0;
    let mut source_checks = 0;
    for (variant, provider) in gridkey::layouts::runtime_layouts(grid.provider())? {
        let cache = tempfile::tempdir()?;
        let store = TableStore::open(cache.path())?.verifying(true);
        let ct = compile_time_offset_provider(&provider, &store)?;
        for (_, entry) in ct.entries() {
            if let Entry::Gather(c) = entry {
                store.open_verified(c.spec()).context("verifying open of a stored table")?;
            }
        }
        for program in &programs {
            let key = gridkey_stencil::key_inputs(program, &options, &ct)?.key();
            keys.entry(program.name().to_owned()).or_default().insert(format!("tables {variant}"), key.to_hex());
            let compiled = gridkey_stencil::translate(program, &ct, &options)?;
            let direct = gridkey_stencil::emit_c(
                program,
                &gridkey_stencil::infer_domains_runtime(program, &provider)?,
                &options,
            );
            source_checks += 1;
            if compiled.as_bytes() == direct.as_bytes() {
                sources_identical += 1;
            } else {
                ok = false;
                println!("C source differs for {} with {variant} runtime tables", program.name());
            }
        }
    }
    let mut identical_programs = 0;
    println!("\n(1) translation keys per program across modes and runtime table layouts");
    for (program, by_source) in &keys {
        let distinct: std::collections::BTreeSet<&String> = by_source.values().collect();
        let same = distinct.len() == 1 && !by_source.values().any(String::is_empty);
        identical_programs += usize::from(same);
        ok &= same;
        let key = by_source.values().next().map_or("-", String::as_str);
        println!("  {program:<12} {key}  {} sources, {}", by_source.len(), if same { "identical" } else { "DIFFER" });
        if !same {
            for (source, key) in by_source {
                println!("      {source:<18} {key}");
            }
        }
    }

    // (2) Six ordered pairs of modes.
    println!("\n(2) fill a fresh cache in mode A, run in mode B");
    println!("  {:<8} {:<8} {:>14} {:>14} {:>8}", "A", "B", "A translated", "B translated", "B hits");
    let mut pairs_hit = 0;
    let mut retranslations = 0;
    for a in &runners {
        for b in &runners {
            if a.mode() == b.mode() {
                continue;
            }
            let cache = tempfile::tempdir()?;
            let fill = run_mode(&grid, &programs, a, cache.path(), &grid_path, &options)?;
            let warm = run_mode(&grid, &programs, b, cache.path(), &grid_path, &options)?;
            ok &= check_verified(&fill) & check_verified(&warm);
            let n = warm.translations();
            retranslations += n;
            if n == 0 && warm.hits() == programs.len() {
                pairs_hit += 1;
            }
            println!(
                "  {:<8} {:<8} {:>14} {:>14} {:>8}",
                a.mode().as_str(),
                b.mode().as_str(),
                fill.translations(),
                n,
                warm.hits()
            );
        }
    }
    println!("\n(3) C source from the compile-time view equals the source from the runtime tables: {sources_identical}/{source_checks}");

    ok &= pairs_hit == 6 && retranslations == 0 && identical_programs == programs.len();
    println!(
        "\nmode equivalence: {pairs_hit}/6 pairs hit, {retranslations} re-translations, keys identical for {identical_programs} programs"
    );
    Ok(ok)
}

fn run_mode(
    grid: &Grid,
    programs: &[Program],
    runner: &Runner<StencilHandler>,
    cache_dir: &Path,
    grid_path: &Path,
    options: &TranslationOptions,
) -> Result<RunReport> {
    // Every table's digest is recomputed before translating, in every mode (ADR 0012).
    let settings = Settings { verify_tables: true, ..settings_for(cache_dir, BuildJobs::new(runner.mode(), 2)) };
    let config = RunConfig {
        grid: grid_path.to_path_buf(),
        settings,
        worker: WorkerCommand::gridkey(PathBuf::new()),
        options: options.clone(),
    };
    Ok(gridkey::run(&config, gridkey::RunOptions::new().grid(grid).programs(programs).runner(runner))?)
}

/// The settings of an xtask driver: the caller's compiler (`CC` and the variables that reach
/// it), `cache_dir` and `jobs`, nothing else from the environment.
pub fn settings_for(cache_dir: &Path, jobs: BuildJobs) -> Settings {
    let compiler_vars = |name: &str| {
        (name == gridkey_settings::ENV_CC || gridkey_settings::COMPILER_ENV.contains(&name))
            .then(|| std::env::var(name).ok())
            .flatten()
    };
    let settings = Settings::from_vars(compiler_vars).expect("the caller's CC parses");
    Settings { cache_dir: cache_dir.to_path_buf(), build_jobs: jobs, ..settings }
}

fn check_verified(report: &RunReport) -> bool {
    for p in report.programs.iter().filter(|p| !p.verified) {
        println!("  {} mode: {} did not verify: {}", report.mode, p.program, p.error.as_deref().unwrap_or("-"));
    }
    report.all_verified()
}
