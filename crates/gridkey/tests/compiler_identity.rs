//! The build key holds what the compiler is, not where it is (ADR 0022): another compiler behind
//! the same command words gets other build keys and really runs; the same compiler at two paths
//! shares its builds.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{data, gridkey_command};

/// `dir` holding a `cc` wrapper script that appends a line to `marker` (when given) and runs the
/// real C compiler.
fn wrapper(dir: &Path, marker: Option<&Path>) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let real = which::which("cc").expect("a C compiler on PATH");
    let log = marker.map_or_else(String::new, |m| format!("echo \"$*\" >> '{}'\n", m.display()));
    let script = dir.join("cc");
    std::fs::write(&script, format!("#!/bin/sh\n{log}exec '{}' \"$@\"\n", real.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir.to_path_buf()
}

/// `gridkey run --json` (serial, MPAS grid) on `cache` with `CC=cc` found first in `dir`.
fn run_with_cc_in(cache: &Path, dir: &Path) -> gridkey::RunReport {
    let grid = data("grids/oQU480.231010.nc");
    let path = format!("{}:/usr/bin:/bin", dir.display());
    let args = ["run", "--mode", "serial", "--json", "--grid", grid.to_str().unwrap(), "--cache-dir"];
    let out = gridkey_command(&args, &[("CC", "cc"), ("PATH", &path)]).arg(cache).output().unwrap();
    assert!(
        out.status.success(),
        "run with cc from {}: {}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn another_compiler_behind_the_same_words_gets_other_build_keys_and_is_run() {
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let first = run_with_cc_in(&cache, &wrapper(&work.path().join("a"), None));
    assert_eq!(first.builds(), first.programs.len());
    // A new PATH entry: the same words `cc`, another program behind them.
    let marker = work.path().join("ran");
    let second = run_with_cc_in(&cache, &wrapper(&work.path().join("b"), Some(&marker)));
    assert_eq!(second.translations(), 0, "translation does not depend on the compiler");
    assert_eq!(second.builds(), second.programs.len(), "every library is built by the other compiler");
    // Each build links with -shared; the identity probes (--version, -dumpmachine) do not.
    let builds = std::fs::read_to_string(&marker).unwrap_or_default().lines().filter(|l| l.contains("-shared")).count();
    assert_eq!(builds, second.programs.len(), "the other compiler really ran, once per program");
}

#[test]
fn the_same_compiler_at_two_paths_shares_its_builds() {
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let first = run_with_cc_in(&cache, &wrapper(&work.path().join("a"), None));
    assert_eq!(first.builds(), first.programs.len());
    let second = run_with_cc_in(&cache, &wrapper(&work.path().join("elsewhere/bin"), None));
    assert_eq!(second.builds(), 0, "identical compiler bytes at another path: every build is a hit");
}

#[test]
fn the_identity_follows_the_executable_not_its_path() {
    let work = tempfile::tempdir().unwrap();
    let resolved = |dir: &Path| {
        let compiler = gridkey_settings::CompilerSettings::from_command("cc", |name| {
            (name == "PATH").then(|| format!("{}:/usr/bin:/bin", dir.display()))
        })
        .unwrap();
        gridkey_stencil::identify_compiler(&compiler, work.path()).unwrap()
    };
    let a = resolved(&wrapper(&work.path().join("a"), None));
    let b = resolved(&wrapper(&work.path().join("b"), None));
    let c = resolved(&wrapper(&work.path().join("c"), Some(&work.path().join("m"))));
    assert_ne!(a.program(), b.program());
    assert_eq!(a.identity().len(), 32);
    assert_eq!(a.identity(), b.identity(), "same bytes, same version, another path");
    assert_ne!(a.identity(), c.identity(), "other bytes behind the same words");
    // A wrapper is keyed by its words and the compiler it runs.
    let wrapped = |words: &str| {
        let compiler = gridkey_settings::CompilerSettings::from_command(words, |name| {
            (name == "PATH").then(|| "/usr/bin:/bin".to_owned())
        })
        .unwrap();
        gridkey_stencil::identify_compiler(&compiler, work.path()).unwrap().identity().to_owned()
    };
    assert_ne!(wrapped("env cc"), wrapped("env true"), "another wrapped compiler");
    assert_ne!(wrapped("cc"), wrapped("cc -m64"), "a flag among the words");
}

#[test]
fn a_compiler_that_hangs_on_its_probes_is_identified_within_the_probe_timeout() {
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("cc");
    std::fs::write(&script, "#!/bin/sh\nsleep 600\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let compiler = gridkey_settings::CompilerSettings::from_command(script.to_str().unwrap(), |_| None).unwrap();
    let started = std::time::Instant::now();
    let identified = gridkey_stencil::identify_compiler(&compiler, work.path()).unwrap();
    let took = started.elapsed();
    assert!(took < gridkey_stencil::PROBE_TIMEOUT * 2 + std::time::Duration::from_secs(5), "{took:?}");
    assert_eq!(identified.identity().len(), 32);
}
