//! The README's shell blocks, as a newcomer pastes them: the synopsis of `gridkey` names only
//! subcommands and flags the binary accepts, the site-cache block runs as written (its placeholders
//! `GRID` and `/srv/gridkey/site` replaced), and the shared tier's TLS quick start runs as written
//! against a real `redis-server` started by the block itself (its home `~` a temp directory, its port
//! a free one), each `gridkey` line verifying 8/8 programs. The `cargo` blocks are the CI script's
//! commands (`.ci/run`).
//!
//! Without `redis-server` or `openssl` on `PATH` the quick start says that it skipped (it fails
//! instead under `GRIDKEY_TEST_REQUIRE=redis`, as `cargo xtask test` sets).

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::gridkey_command;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).expect("README.md reads")
}

/// The README's fenced `sh` blocks, in order.
fn shell_blocks() -> Vec<String> {
    let text = readme();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), l) => {
                block.push_str(l);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "README.md: a ```sh block is never closed");
    blocks
}

/// The one block holding `needle`.
fn block_with(needle: &str) -> String {
    let found: Vec<String> = shell_blocks().into_iter().filter(|b| b.contains(needle)).collect();
    assert_eq!(found.len(), 1, "README.md: expected one ```sh block holding {needle:?}, found {}", found.len());
    found.into_iter().next().unwrap()
}

fn bash(script: &str, cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", script]).current_dir(cwd);
    for var in gridkey::environment() {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("bash runs")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `PATH` with the directory of the `gridkey` binary under test first.
fn path_with_gridkey() -> String {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_gridkey"));
    format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default())
}

#[test]
fn the_synopsis_names_only_subcommands_and_flags_the_binary_accepts() {
    let block = block_with("gridkey cache keygen FILE");
    let mut checked = 0;
    for line in block.lines().filter(|l| l.starts_with("gridkey ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        // The subcommand: `gridkey run`, or `gridkey cache gc` for the cache's subcommands.
        let sub: Vec<&str> = if words[1] == "cache" { words[1..3].to_vec() } else { words[1..2].to_vec() };
        let mut args = sub.clone();
        args.push("--help");
        let out = gridkey_command(&args, &[]).output().unwrap();
        assert!(
            out.status.success(),
            "`gridkey {}` of README.md's synopsis is not a subcommand: {}",
            sub.join(" "),
            text(&out)
        );
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let flags: BTreeSet<&str> = words
            .iter()
            .filter_map(|w| w.trim_start_matches(['[', '(']).split(['=', ']', ' ']).next())
            .filter(|w| w.starts_with("--"))
            .collect();
        for flag in flags {
            assert!(
                help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).any(|w| w == flag),
                "README.md's synopsis gives `gridkey {} {flag}`, which its --help does not list:\n{help}",
                sub.join(" ")
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "the synopsis was not found whole: {checked} flags checked");
}

#[test]
fn the_site_cache_block_runs_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    let grid = common::data("grids/icon_grid_0013_R02B04_R.nc");
    let block = block_with("/srv/gridkey/site")
        .replace("/srv/gridkey/site", site.to_str().unwrap())
        .replace("GRID", grid.to_str().unwrap());
    let out = bash(&block, dir.path(), &[("PATH", &path_with_gridkey())]);
    assert!(out.status.success(), "README.md's site-cache block failed:\n{block}\n{}", text(&out));
    assert!(text(&out).contains("8/8 programs verified"), "{}", text(&out));
    // What the block promises: a site cache another user can read and not write, which serves hits.
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&site).unwrap().permissions());
    assert_eq!(mode & 0o022, 0, "the site cache is still writable by others: {mode:o}");
    let served = gridkey_command(
        &["run", "--grid", grid.to_str().unwrap(), "--site-cache", site.to_str().unwrap(), "--cache-dir"],
        &[],
    )
    .arg(dir.path().join("mine"))
    .output()
    .unwrap();
    assert!(served.status.success(), "{}", text(&served));
    assert!(text(&served).contains("8 cache hits"), "the site cache served no hits: {}", text(&served));
}

/// Whether `program` runs on this machine.
fn found(program: &str, arg: &str) -> bool {
    Command::new(program).arg(arg).output().is_ok_and(|o| o.status.success())
}

#[test]
fn the_tls_quick_start_of_the_shared_tier_runs_as_written() {
    if !found("redis-server", "--version") || !found("openssl", "version") || !found("redis-cli", "--version") {
        let required = std::env::var("GRIDKEY_TEST_REQUIRE").is_ok_and(|r| r.split(',').any(|s| s == "redis"));
        assert!(!required, "the README's TLS quick start needs redis-server, redis-cli and openssl on PATH");
        eprintln!(
            "gridkey: skipped the README's TLS quick start: it needs redis-server, redis-cli and openssl on PATH \
             (install Debian's redis-server and openssl)"
        );
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let block = block_with("--tls-port 6390").replace("6390", &port);
    // The block starts the server in the background and stops it at its end; a block that fails
    // in between leaves it to this guard.
    struct Stop(PathBuf, String);
    impl Drop for Stop {
        fn drop(&mut self) {
            let config = self.0.join(".config/gridkey");
            let _ = Command::new("redis-cli")
                .args(["--tls", "--cacert", "ca.pem", "-p", &self.1, "--user", "writer", "--pass", "W-s3cret"])
                .args(["shutdown", "nosave"])
                .current_dir(config)
                .output();
        }
    }
    let _stop = Stop(home.path().to_path_buf(), port.clone());
    let out = bash(&block, home.path(), &[("HOME", home.path().to_str().unwrap()), ("PATH", &path_with_gridkey())]);
    let said = text(&out);
    assert!(out.status.success(), "README.md's TLS quick start failed:\n{block}\n{said}");
    assert_eq!(said.matches("8/8 programs verified").count(), 2, "the writer and the reader each verify 8/8:\n{said}");
    // No line shows a password (ADR 0037).
    assert!(!said.contains("W-s3cret") && !said.contains("R-s3cret"), "a password was printed:\n{said}");
    // The server is stopped by the block's last line: nothing answers on its port any more.
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_err(),
        "the block left its server running"
    );
}
