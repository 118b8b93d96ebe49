//! What the binary says, as a user reads it: each cause once.

mod common;

use std::process::Output;

use common::gridkey_command;

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
