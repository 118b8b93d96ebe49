//! Helpers shared by the integration tests that run the `gridkey` binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A file or directory under the repository's `data/`.
pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data").join(rel)
}

/// The `gridkey` binary with `args`, every variable of [`gridkey::ENVIRONMENT`] cleared, then
/// `env` set: the caller's environment cannot change the outcome.
pub fn gridkey_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gridkey"));
    cmd.args(args);
    for var in gridkey::ENVIRONMENT {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd
}
