//! Helpers shared by the integration tests that run the `gridkey` binary.

#![allow(dead_code)]

pub mod procs;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A file or directory under the repository's `data/`.
pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data").join(rel)
}

/// The `gridkey` binary with `args`, every variable of [`gridkey::environment()`] cleared, then
/// `env` set: the caller's environment cannot change the outcome.
pub fn gridkey_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gridkey"));
    cmd.args(args);
    for var in gridkey::environment() {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd
}

/// The settings a test runs with: the cache directory `cache`, the caller's compiler (`CC` and
/// the variables that reach it) and nothing else from the environment.
pub fn run_settings(cache: &Path) -> gridkey::Settings {
    let compiler_vars = |name: &str| {
        (name == gridkey_settings::ENV_CC || gridkey_settings::COMPILER_ENV.contains(&name))
            .then(|| std::env::var(name).ok())
            .flatten()
    };
    gridkey::Settings {
        cache_dir: cache.to_path_buf(),
        ..gridkey::Settings::from_vars(compiler_vars).expect("the test environment's compiler settings parse")
    }
}

/// [`run_settings`] as they travel with the tasks of a run ([`gridkey::task_settings`]:
/// directory absolute, compiler resolved and identified).
pub fn settings(cache: &Path) -> std::sync::Arc<gridkey::TaskSettings> {
    gridkey::task_settings(&run_settings(cache)).expect("the test cache and compiler are usable")
}
