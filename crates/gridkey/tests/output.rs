//! Closed output through the real binary: a reader that goes away (`| head -1`) ends every
//! command quietly, as it ends command-line tools; a full standard output (`> /dev/full`) is
//! one clear error; never a panic.

use crate::common;

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Output, Stdio};

use common::{data, gridkey_command};

/// The write end of a pipe whose read end is already closed: every write to it is EPIPE.
fn closed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

fn with_stdout(args: &[&str], stdout: Stdio) -> Output {
    gridkey_command(args, &[]).stdout(stdout).stderr(Stdio::piped()).output().unwrap()
}

/// The single place that checks a command whose reader went away: it ends as SIGPIPE ends a
/// tool (killed by the signal, which the shell shows as status 141), silent on stderr.
fn check_quiet_on_closed_pipe(args: &[&str]) {
    let out = with_stdout(args, Stdio::from(closed_pipe()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{args:?}: {:?}\n{stderr}", out.status);
    assert!(stderr.is_empty(), "{args:?}: nothing on stderr, got\n{stderr}");
}

/// The single place that checks a command whose standard output is full: exit status 2 and one
/// line saying so, no panic.
fn check_one_error_on_full_stdout(args: &[&str]) -> Output {
    let out = with_stdout(args, Stdio::from(File::options().write(true).open("/dev/full").unwrap()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {:?}\n{stderr}", out.status);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(
        errors,
        ["gridkey: error: cannot write to standard output: No space left on device (os error 28); \
          free space or redirect it elsewhere"],
        "{args:?}:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    out
}

#[test]
fn every_command_ends_quietly_when_its_reader_is_gone() {
    let grid = data("grids/oQU480.231010.nc");
    let grid = grid.to_str().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    check_quiet_on_closed_pipe(&["tables", "--grid", grid, "--json"]);
    check_quiet_on_closed_pipe(&["tables", "--grid", grid]);
    check_quiet_on_closed_pipe(&["cache", "stats", "--cache-dir", c]);
    check_quiet_on_closed_pipe(&["cache", "stats", "--cache-dir", c, "--json"]);
    check_quiet_on_closed_pipe(&["cache", "gc", "--cache-dir", c]);
}

#[test]
fn head_one_through_a_shell_is_quiet() {
    // As a user types it; whether the writer meets EPIPE or finishes first, the pipeline is
    // quiet and gridkey's status is 0 or the SIGPIPE status 141.
    let grid = data("grids/icon_grid_0013_R02B04_R.nc");
    let script = r#"set -o pipefail; "$0" tables --grid "$1" --json | head -1; echo "status ${PIPESTATUS[0]}" >&2"#;
    let out = std::process::Command::new("bash")
        .args(["-c", script, env!("CARGO_BIN_EXE_gridkey"), grid.to_str().unwrap()])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout, "[\n");
    assert!(stderr == "status 0\n" || stderr == "status 141\n", "{stderr}");
}

#[test]
fn a_full_standard_output_is_one_error() {
    let grid = data("grids/oQU480.231010.nc");
    let grid = grid.to_str().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    check_one_error_on_full_stdout(&["tables", "--grid", grid, "--json"]);
    check_one_error_on_full_stdout(&["cache", "stats", "--cache-dir", c]);
    let run =
        check_one_error_on_full_stdout(&["run", "--grid", grid, "--cache-dir", c, "--mode", "thread", "--jobs", "2"]);
    // The run itself completed: its translations are in the cache for the next one.
    let stats = gridkey_command(&["cache", "stats", "--cache-dir", c, "--json"], &[]).output().unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["stores"][1]["entries"], 8, "{stats}\n{}", String::from_utf8_lossy(&run.stderr));
}
