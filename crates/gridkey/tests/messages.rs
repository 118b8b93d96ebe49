//! What the binary says, as a user reads it: each cause once, counts in good English, a
//! missing or misplaced cache directory named for what it is.

use crate::common;

use std::process::Output;

use common::{data, gridkey_command};

fn gridkey(args: &[&str]) -> Output {
    gridkey_command(args, &[]).output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The single place that runs a failing command: exit status 2, no panic, every needle in
/// stderr, and the stderr for further checks.
fn check_error(args: &[&str], needles: &[&str]) -> String {
    let out = gridkey(args);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}\n{stdout}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: {n:?} not in\n{stderr}");
    }
    stderr
}

#[test]
fn an_error_cause_is_said_once() {
    let stderr = check_error(&["tables", "--grid", "/nonexistent/grid.nc"], &["/nonexistent/grid.nc", "--grid"]);
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn cache_stats_and_gc_on_a_missing_directory_are_errors_naming_it() {
    let base = tempfile::tempdir().unwrap();
    let missing = base.path().join("no-such-cache");
    let m = missing.to_str().unwrap();
    for args in [["cache", "stats", "--cache-dir", m], ["cache", "gc", "--cache-dir", m]] {
        check_error(&args, &[&format!("cache directory {m} does not exist"), "--cache-dir"]);
    }
    assert!(!missing.exists(), "nothing is created by looking");
    let file = base.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    check_error(&["cache", "stats", "--cache-dir", file.to_str().unwrap()], &["is a file, not a directory"]);
}

#[test]
fn a_store_path_that_is_a_file_is_called_a_file() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    let store = cache.path().join(gridkey_store::TABLES_DIR);
    std::fs::write(&store, b"not a directory").unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let needle = format!("cache path {} is a file where a store directory belongs; remove it", store.display());
    for args in [
        vec!["cache", "stats", "--cache-dir", c],
        vec!["cache", "gc", "--cache-dir", c],
        vec!["run", "--grid", grid.to_str().unwrap(), "--cache-dir", c, "--mode", "serial"],
    ] {
        let stderr = check_error(&args, &[&needle]);
        assert!(!stderr.contains("permissions"), "{args:?}: the problem is not permissions\n{stderr}");
    }
}
