//! What every `cargo xtask` crate shares (ADR 0042): where the workspace and its target
//! directory are, the release build of the `gridkey` binary that the drivers run, the settings
//! a driver runs with, and a real Redis server process on loopback ([`redis_server`]).
//!
//! # Architecture invariant
//!
//! No Redis client and no wire format here: the test command depends on this crate, and pulls in
//! neither for its own sake. **API boundary:** no; nothing here ships.

pub mod redis_server;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use gridkey::Settings;
use gridkey_jobs::BuildJobs;

/// The workspace root: the parent of this crate's directory (every xtask crate sits in the root).
pub fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The cargo target directory: `CARGO_TARGET_DIR`, or `target/` in the workspace root.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// The grid of a `[--grid FILE]` command line: `FILE`, or the shipped ICON grid.
///
/// Errors: any other arguments.
pub fn grid_arg(args: &[String]) -> Result<PathBuf> {
    match args {
        [] => Ok(root().join(gridkey::SHIPPED_GRID)),
        [flag, path] if flag == "--grid" => Ok(PathBuf::from(path)),
        _ => bail!("unexpected arguments {args:?}: expected [--grid FILE]"),
    }
}

/// The variables `cargo run` sets for the binary it runs (the Cargo book, "Environment variables
/// Cargo sets for crates"), which an xtask binary therefore sees.
fn is_set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(name, "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR")
}

/// Takes off `cmd` the variables that `cargo run` set for this xtask binary, so that a cargo the
/// command starts (directly, or through pip and maturin) sees the caller's environment.
///
/// A build script that declares `rerun-if-env-changed=CARGO_PKG_NAME` (ring's does, and with it
/// rustls, redis and everything above them) would otherwise be run again, and its dependants
/// rebuilt, by every cargo started here and then again by the next `cargo xtask`: about 80
/// seconds of a release build each time on 2 cores.
pub fn without_cargo_run_vars(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_set_by_cargo_run) {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// A `cargo` command (the `CARGO` that runs this binary, else `cargo` on `PATH`) in the workspace
/// root, without the variables of [`without_cargo_run_vars`].
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    without_cargo_run_vars(&mut cmd).current_dir(root());
    cmd
}

/// Builds the `gridkey` binary (release) and returns its path: process-mode workers and the
/// drivers run it.
///
/// Errors: cargo cannot be run or the build fails.
pub fn build_gridkey() -> Result<PathBuf> {
    let status = cargo()
        .args(["build", "--release", "--quiet", "--package", "gridkey", "--bin", "gridkey"])
        .current_dir(root())
        .status()
        .context("cannot run cargo to build the gridkey binary")?;
    if !status.success() {
        bail!("building the gridkey binary failed ({status})");
    }
    Ok(target_dir().join("release").join("gridkey"))
}

/// The settings of an xtask driver: the caller's compiler (`CC` and the variables that reach
/// it), `cache_dir` and `jobs`, nothing else from the environment.
///
/// # Panics
///
/// When the caller's `CC` does not parse: a driver cannot run without a compiler.
pub fn settings_for(cache_dir: &Path, jobs: BuildJobs) -> Settings {
    let compiler_vars = |name: &str| {
        (name == gridkey_settings::ENV_CC || gridkey_settings::COMPILER_ENV.contains(&name))
            .then(|| std::env::var(name).ok())
            .flatten()
    };
    let settings = Settings::from_vars(compiler_vars).expect("the caller's CC parses");
    Settings { cache_dir: cache_dir.to_path_buf(), build_jobs: jobs, ..settings }
}

/// The exit status of a driver command: 0 when it passed (`Ok(true)`), 1 when it ran and found a
/// failure (`Ok(false)`), 2 when it could not run (`Err`, printed as `xtask: error: ...`).
pub fn exit_status(result: Result<bool>) -> std::process::ExitCode {
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
