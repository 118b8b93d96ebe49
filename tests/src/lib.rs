//! Support of the cross-crate integration tests in `tests/tests/`: where the repository's data
//! is, the `gridkey` binary their process workers run, the settings a test runs with, and the
//! mode matrix ([`mode_matrix`]) that both the mode-equivalence test and `cargo xtask modes` use.
//!
//! # Architecture invariant
//!
//! Tests here use the crates only through their public APIs, as a frontend would; nothing here
//! ships. **API boundary:** no.

pub mod mode_matrix;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey_settings::Settings;

/// A file or directory under the repository's `data/`.
pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data").join(rel)
}

/// The `gridkey` binary of this build (`target/<profile>/gridkey`, beside the directory of the
/// test executable), which process-mode workers run. `cargo test --workspace` builds it with the
/// `gridkey` package's own tests.
///
/// # Panics
///
/// When the binary is not there, with the command that builds it.
pub fn gridkey_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let bin = profile_dir.join("gridkey");
    assert!(
        bin.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (or `cargo build -p gridkey` first)",
        bin.display()
    );
    bin
}

/// The settings a test runs with: `cache` and the caller's compiler (`CC` and the variables that
/// reach it), nothing else from the environment.
///
/// # Panics
///
/// When the caller's `CC` does not parse.
pub fn run_settings(cache: &Path) -> Settings {
    let compiler_vars = |name: &str| {
        (name == gridkey_settings::ENV_CC || gridkey_settings::COMPILER_ENV.contains(&name))
            .then(|| std::env::var(name).ok())
            .flatten()
    };
    Settings {
        cache_dir: cache.to_path_buf(),
        ..Settings::from_vars(compiler_vars).expect("the caller's compiler settings parse")
    }
}

/// [`run_settings`] as they travel with the tasks of a run ([`gridkey::task_settings`]).
///
/// # Panics
///
/// When the caller's `CC` does not parse or the compiler is not found.
pub fn settings(cache: &Path) -> Arc<gridkey::TaskSettings> {
    gridkey::task_settings(&run_settings(cache)).expect("the test cache and compiler are usable")
}
