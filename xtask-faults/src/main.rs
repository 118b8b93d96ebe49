//! `xtask-faults`: the drivers of the real `gridkey` binary (ADR 0042). `cargo xtask faults`,
//! `chaos`, `cluster`, `kill-demo` and `memory` forward here (`cargo run -p xtask-faults --`).
//!
//! `cargo xtask faults [--bin GRIDKEY] [--only TEXT]` is the fault matrix of ADR 0012 (see
//! `faults.rs`; the shared tier's rows in `faults/remote.rs`).
//! `cargo xtask chaos --seconds N [--seed S]` runs all three modes on one cache for N seconds
//! while it kills, collects, tampers and swaps compilers at random (see `chaos.rs`).
//! `cargo xtask cluster --nodes N`: N simulated nodes on one Redis server, cold and warm starts
//! and the server killed mid-run (see `cluster.rs`).
//! `cargo xtask kill-demo` (a worker killed in the middle of `gridkey run`, `kill_demo.rs`) and
//! `cargo xtask memory` (worker start time and per-worker memory with mapped tables,
//! `memory.rs`).
//!
//! The Redis servers these drive are `xtask-common`'s process helper; the commands sent to them
//! from outside the client under test use the `redis` crate (`redis_server.rs`).

mod chaos;
mod cluster;
mod faults;
mod kill_demo;
mod memory;
#[path = "../../crates/gridkey/tests/common/procs.rs"]
mod procs;
mod redis_server;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
pub(crate) use xtask_common::{build_gridkey, grid_arg, root, settings_for, target_dir};

const USAGE: &str = "usage: cargo xtask faults [--bin GRIDKEY] [--only TEXT]
       cargo xtask chaos [--seconds N] [--seed S] [--runs K] [--keep]
       cargo xtask cluster --nodes N [--grid FILE] [--mode M] [--jobs J] [--rounds R] [--loopback]
       cargo xtask kill-demo [--grid FILE]
       cargo xtask memory [--scale N] [--workers W] [--starts S]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("memory") => build_gridkey().and_then(|bin| memory::memory(&args[1..], &bin)),
        Some("cluster") => build_gridkey().and_then(|bin| cluster::cluster(&args[1..], &bin)),
        Some("kill-demo") => build_gridkey().and_then(|bin| kill_demo::kill_demo(&args[1..], &bin)),
        Some("chaos") => build_gridkey().and_then(|bin| chaos::chaos(&args[1..], &bin)),
        Some("faults") => faults_command(&args[1..]),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    xtask_common::exit_status(result)
}

/// `faults [--bin GRIDKEY] [--only TEXT]`: the matrix against this checkout's release build, or
/// against another build of the binary (an older commit's, to see which faults it survives).
fn faults_command(args: &[String]) -> Result<bool> {
    match args {
        [flag, bin] if flag == "--bin" => faults::faults(&root(), PathBuf::from(bin), None),
        [flag, bin, only_flag, only] if flag == "--bin" && only_flag == "--only" => {
            faults::faults(&root(), PathBuf::from(bin), Some(only.clone()))
        }
        [flag, only] if flag == "--only" => {
            build_gridkey().and_then(|bin| faults::faults(&root(), bin, Some(only.clone())))
        }
        [] => build_gridkey().and_then(|bin| faults::faults(&root(), bin, None)),
        other => Err(anyhow::anyhow!("unexpected arguments {other:?}: expected [--bin GRIDKEY] [--only TEXT]")),
    }
}
