//! `cargo xtask`: project automation, split by job as cargo's own xtasks are (ADR 0042). This
//! crate holds the test command and what it needs; the drivers of the real binary and the
//! benchmarks are crates of their own, which the commands below forward to with
//! `cargo run --release -p CRATE -- COMMAND ARGS`, so that the test command builds neither.
//!
//! `cargo xtask test` is the README's test command: it sets up the virtual environment and the
//! Redis server the tests need and runs every test with them required (see `test.rs`).
//!
//! `cargo xtask modes [--grid FILE]` prints the mode matrix of README "The proof"
//! (`gridkey_tests::mode_matrix`, the one the test `tests/tests/mode_equivalence.rs` asserts on):
//! 1. the key of every program is identical across the three build-jobs modes, and across
//!    runtime tables given in C order, Fortran order, as int64 and through the host-copy source;
//! 2. for each of the six ordered pairs of modes (A, B), a cache filled in mode A serves mode B
//!    with 0 translations;
//! 3. the C source translated against the compile-time view is byte-identical to the source
//!    translated directly against each runtime variant of the tables.
//!
//! Every stored table is opened with the verifying open (digest recomputed) along the way.
//!
//! `cargo xtask with-redis -- CMD ARGS...` runs CMD with a real Redis server of its own on loopback
//! (`GRIDKEY_TEST_REDIS_URL`), installing Debian's `redis-server` when missing
//! (`xtask-common/src/redis_server.rs`).
//! `cargo xtask py-test` and `cargo xtask py-bench` test and measure the Python package (see
//! `py.rs`).
//! `cargo xtask gt4py [--reduced | --warm-only REPEATS]` is the proof on GT4Py 1.2.3 with
//! `gridkey.gt4py` (see `gt4py.rs`); `cargo xtask gt4py --icon4py` runs icon4py 0.4.1's own
//! programs on GT4Py 1.2.1 as its client (see `icon4py.rs`).
//!
//! Forwarded to `xtask-faults` (the drivers of the real `gridkey` binary): `faults` (the fault
//! matrix of ADR 0012), `chaos`, `cluster`, `kill-demo`, `memory`. Forwarded to `xtask-bench`:
//! `bench [--quick]`.

mod gt4py;
mod icon4py;
mod py;
mod test;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use gridkey_tests::mode_matrix::{mode_matrix, ModeMatrix};
pub(crate) use xtask_common::redis_server;
use xtask_common::{build_gridkey, grid_arg};
pub(crate) use xtask_common::{root, target_dir};

/// The commands of `xtask-faults`, which this binary forwards.
const FAULTS_COMMANDS: [&str; 5] = ["faults", "chaos", "cluster", "kill-demo", "memory"];

const USAGE: &str = "usage: cargo xtask test
       cargo xtask modes [--grid FILE]
       cargo xtask bench [--quick]
       cargo xtask faults [--bin GRIDKEY] [--only TEXT]
       cargo xtask chaos [--seconds N] [--seed S] [--runs K] [--keep]
       cargo xtask memory [--scale N] [--workers W] [--starts S]
       cargo xtask kill-demo [--grid FILE]
       cargo xtask py-test [--python PYTHON] [--fresh]
       cargo xtask py-bench [--python PYTHON] [--quick]
       cargo xtask gt4py [--reduced | --warm-only REPEATS | --icon4py | --nodes N] [--python PYTHON]
       cargo xtask cluster --nodes N [--grid FILE] [--mode M] [--jobs J] [--rounds R] [--loopback]
       cargo xtask with-redis -- CMD ARGS...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") if args.len() == 1 => test::test(&root(), &target_dir()),
        Some("modes") => modes(&args[1..]),
        Some("py-test") => py::py_test_command(&args[1..]),
        Some("py-bench") => py::py_bench(&args[1..]),
        Some("gt4py") => gt4py::gt4py(&args[1..]),
        Some("with-redis") => return exit_code(redis_server::with_redis(&args[1..])),
        Some("bench") => return exit_code(forward("xtask-bench", &args)),
        Some(command) if FAULTS_COMMANDS.contains(&command) => return exit_code(forward("xtask-faults", &args)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    xtask_common::exit_status(result)
}

/// A command's exit code, or 2 after printing its error.
fn exit_code(result: Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|e| {
        eprintln!("xtask: error: {e:#}");
        ExitCode::from(2)
    })
}

/// Runs `args` (the command and its arguments) with the release build of `package`'s binary
/// (`cargo run --release --quiet -p PACKAGE -- ARGS`) and exits with its status.
///
/// Errors: cargo cannot be run.
fn forward(package: &str, args: &[String]) -> Result<ExitCode> {
    let status = xtask_common::cargo()
        .args(["run", "--release", "--quiet", "--package", package, "--"])
        .args(args)
        .status()
        .with_context(|| format!("cannot run cargo to start {package}"))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(code.clamp(1, 255) as u8),
        None => ExitCode::FAILURE,
    })
}

/// `cargo xtask modes [--grid FILE]`: runs the mode matrix and prints it; `Ok(true)` when the
/// proof holds ([`ModeMatrix::passed`]).
///
/// Errors: the grid cannot be read, the binary cannot be built, a run fails as a whole.
fn modes(args: &[String]) -> Result<bool> {
    let grid_path: PathBuf = grid_arg(args)?;
    let gridkey_bin = build_gridkey()?;
    let jobs = gridkey_settings::default_jobs().max(2) as i64;
    let m = mode_matrix(&grid_path, &gridkey_bin, jobs)?;
    println!("grid: {} ({} programs)", grid_path.display(), m.programs);
    for line in &m.unverified {
        println!("  {line}");
    }
    print_keys(&m);
    print_pairs(&m);
    for differs in &m.sources_differ {
        println!("C source differs for {differs}");
    }
    println!(
        "\n(3) C source from the compile-time view equals the source from the runtime tables: {}/{}",
        m.source_checks - m.sources_differ.len(),
        m.source_checks
    );
    println!(
        "\nmode equivalence: {}/6 pairs hit, {} re-translations, keys identical for {} programs",
        m.pairs_hit(),
        m.retranslations(),
        m.identical_programs()
    );
    Ok(m.passed())
}

/// Part (1) of `modes`: each program's key, and every source's when they differ.
fn print_keys(m: &ModeMatrix) {
    println!("\n(1) translation keys per program across modes and runtime table layouts");
    for (program, by_source) in &m.keys {
        let same = gridkey_tests::mode_matrix::keys_agree(by_source);
        let key = by_source.values().next().map_or("-", String::as_str);
        println!("  {program:<12} {key}  {} sources, {}", by_source.len(), if same { "identical" } else { "DIFFER" });
        if !same {
            for (source, key) in by_source {
                println!("      {source:<18} {key}");
            }
        }
    }
}

/// Part (2) of `modes`: the six ordered pairs of modes.
fn print_pairs(m: &ModeMatrix) {
    println!("\n(2) fill a fresh cache in mode A, run a copy in mode B");
    println!("  {:<8} {:<8} {:>14} {:>14} {:>8}", "A", "B", "A translated", "B translated", "B hits");
    for p in &m.pairs {
        println!(
            "  {:<8} {:<8} {:>14} {:>14} {:>8}",
            p.a.as_str(),
            p.b.as_str(),
            p.fill_translations,
            p.translations,
            p.hits
        );
    }
}
