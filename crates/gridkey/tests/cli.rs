//! The `gridkey` binary as a user runs it: the main job, `tables`, and bad input.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::{data, gridkey_command};

fn gridkey(args: &[&str], env: &[(&str, &str)]) -> Output {
    gridkey_command(args, env).output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn tables_json_gives_the_golden_digests() {
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("golden/table-digests-v1.json")).unwrap()).unwrap();
    for grid in ["oQU480.231010.nc", "icon_grid_0013_R02B04_R.nc"] {
        let out = gridkey(&["tables", "--grid", data(&format!("grids/{grid}")).to_str().unwrap(), "--json"], &[]);
        assert!(out.status.success(), "{:?}", text(&out));
        let rows: Vec<serde_json::Map<String, serde_json::Value>> = serde_json::from_slice(&out.stdout).unwrap();
        let expect = golden["grids"][grid]["tables"].as_object().unwrap();
        assert_eq!(rows.len(), expect.len());
        for row in rows {
            let keys: Vec<&str> = row.keys().map(String::as_str).collect();
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, ["codomain", "digest", "domain", "dtype", "offset", "shape", "skip_count"]);
            let g = &expect[row["offset"].as_str().unwrap()];
            for field in ["domain", "codomain", "shape", "dtype", "skip_count", "digest"] {
                assert_eq!(row[field], g[field], "{grid} {} {field}", row["offset"]);
            }
        }
    }
}

#[test]
fn the_main_job_verifies_every_program_and_hits_the_cache_the_second_time() {
    let cache = tempfile::tempdir().unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let args = ["run", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.path().to_str().unwrap()];
    let first = gridkey(&args, &[("GRIDKEY_BUILD_JOBS_MODE", "thread"), ("GRIDKEY_BUILD_JOBS", "2")]);
    let (stdout, stderr) = text(&first);
    assert!(first.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.ends_with("  verified")).count(), 8, "{stdout}");
    assert!(
        stdout.contains("8/8 programs verified")
            && stdout.contains("(thread mode, 2 jobs): 0 cache hits, 8 misses, 8 translations"),
        "{stdout}"
    );
    let second = gridkey(&args, &[("GRIDKEY_BUILD_JOBS_MODE", "process")]);
    let (stdout, stderr) = text(&second);
    assert!(second.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("8 cache hits, 0 misses, 0 translations, 0 builds"), "{stdout}");
}

/// The single place that runs a failing command and checks its exit code and message.
fn check_fails(args: &[&str], env: &[(&str, &str)], code: i32, needles: &[&str]) {
    let out = gridkey(args, env);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}\n{stdout}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n) || stdout.contains(n), "{args:?}: {n:?} not in\n{stdout}\n{stderr}");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    check_fails(
        &["run", "--grid", "/nonexistent/grid.nc", "--cache-dir", c],
        &[],
        2,
        &["/nonexistent/grid.nc", "--grid"],
    );
    let readme = data("grids/README.md");
    check_fails(&["tables", "--grid", readme.to_str().unwrap()], &[], 2, &["README.md", "is not a netCDF file"]);
    check_fails(
        &["run", "--cache-dir", c],
        &[("GRIDKEY_BUILD_JOBS_MODE", "fast")],
        2,
        &["GRIDKEY_BUILD_JOBS_MODE", "serial, thread or process"],
    );
    check_fails(
        &["run", "--cache-dir", c],
        &[("GRIDKEY_BUILD_TIMEOUT", "soon")],
        2,
        &["GRIDKEY_BUILD_TIMEOUT", "a number of seconds"],
    );
    let file = cache.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    check_fails(&["run", "--cache-dir", file.to_str().unwrap()], &[], 2, &["a-file", "writable"]);
    for size in ["1G", "abc", "-1"] {
        check_fails(
            &["cache", "gc", "--cache-dir", c, "--max-size", size],
            &[],
            2,
            &["not a number of bytes", "without a unit"],
        );
    }
    check_fails(&["cache", "gc", "--cache-dir", c, "--temp-age", "1h"], &[], 2, &["not a number of seconds"]);
    for prefix in ["", "zz", &"0".repeat(33)] {
        check_fails(
            &["explain", prefix, "7b48", "--cache-dir", c],
            &[],
            2,
            &["is not the start of a key", "hex digits"],
        );
    }
}

#[test]
fn a_failing_c_compiler_fails_each_program_and_leaves_no_artifact() {
    let cache = tempfile::tempdir().unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let args = [
        "run",
        "--grid",
        grid.to_str().unwrap(),
        "--cache-dir",
        cache.path().to_str().unwrap(),
        "--mode",
        "process",
        "--jobs",
        "2",
    ];
    check_fails(&args, &[("CC", "false")], 1, &["0/8 programs verified", "CC"]);
    let build = cache.path().join("build-v2");
    let left: Vec<_> =
        std::fs::read_dir(&build).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "nothing left in build-v2: {left:?}");
}

#[test]
fn a_table_planted_under_another_tables_name_never_reaches_a_translation() {
    // C2V's bytes under C2E's name (same shape on this grid), translations and libraries gone:
    // the next run must translate from the real C2E, not from what the file holds.
    let cache = tempfile::tempdir().unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let args =
        ["run", "--mode", "serial", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.path().to_str().unwrap()];
    assert!(gridkey(&args, &[]).status.success());
    let tables = cache.path().join("tables-v1");
    let path_of = |hex: &str| tables.join(&hex[..2]).join(format!("{hex}.npy"));
    let (c2e, c2v) = (path_of("eca80d29e9c8c9e85522c42c2dcf1a50"), path_of("7987c4b53072cc2b75ca3ddc37329b22"));
    std::fs::remove_file(&c2e).unwrap();
    std::fs::copy(&c2v, &c2e).unwrap();
    std::fs::remove_dir_all(cache.path().join("translation-v2")).unwrap();
    std::fs::remove_dir_all(cache.path().join("build-v2")).unwrap();
    let out = gridkey(&args, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("8/8 programs verified"), "{stdout}");
    let rerun = gridkey(&args, &[("GRIDKEY_VERIFY_CACHE_HITS", "1")]);
    assert!(rerun.status.success(), "every cached translation equals a fresh one: {:?}", text(&rerun));
    assert_ne!(std::fs::read(&c2e).unwrap(), std::fs::read(&c2v).unwrap(), "the planted file was replaced");
}

#[test]
fn flags_replace_their_variables_and_a_bad_option_is_a_usage_error() {
    let cache = tempfile::tempdir().unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let base = ["run", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.path().to_str().unwrap()];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        base.iter().chain(extra).copied().collect()
    }
    let bad_env = [("GRIDKEY_BUILD_JOBS_MODE", "foo"), ("GRIDKEY_BUILD_JOBS", "abc")];
    let out = gridkey(&with(&base, &["--mode", "thread", "--jobs", "2"]), &bad_env);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stdout.contains("(thread mode, 2 jobs)"), "{stdout}\n{stderr}");
    let out = gridkey(&with(&base, &["--mode", "process", "--jobs", "-1"]), &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stdout.contains("(serial mode, 1 job)"), "--jobs -1 is serial: {stdout}\n{stderr}");
    check_fails(&with(&base, &["--option", "fast=1"]), &[], 2, &["unknown translation option \"fast\"", "opt_level"]);
}

#[test]
fn a_program_that_fails_to_build_is_still_counted_as_its_hit_or_miss() {
    let cache = tempfile::tempdir().unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let args = [
        "run",
        "--mode",
        "serial",
        "--json",
        "--grid",
        grid.to_str().unwrap(),
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ];
    for (round, hit) in [(1, false), (2, true)] {
        let out = gridkey(&args, &[("CC", "false")]);
        assert_eq!(out.status.code(), Some(1), "round {round}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for p in report["programs"].as_array().unwrap() {
            assert_eq!(p["verified"], false);
            assert_eq!(p["key"].as_str().map(str::len), Some(32), "round {round}: {p}");
            assert_eq!(
                (p["cache_hit"].as_bool(), p["translated"].as_bool()),
                (Some(hit), Some(!hit)),
                "round {round}: {p}"
            );
            assert!(p["error"].as_str().unwrap().contains("it printed nothing"), "{p}");
        }
    }
}

#[test]
fn the_readme_documents_every_variable_that_changes_a_run() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    for var in gridkey::environment() {
        assert!(readme.lines().any(|l| l.starts_with(&format!("| `{var}`"))), "README has no row for {var}");
    }
}

/// The single place that runs the main job on the MPAS grid with `args` and `env` in a fresh cache.
fn run_mpas(args: &[&str], env: &[(&str, &str)]) -> Output {
    let cache = tempfile::tempdir().unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let mut all = vec!["run", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.path().to_str().unwrap()];
    all.extend_from_slice(args);
    gridkey(&all, env)
}

#[test]
fn a_blank_or_missing_compiler_is_one_usage_error_naming_cc() {
    for (cc, says) in [
        ("", "CC=\"\" is not valid"),
        ("  ", "CC=\"  \" is not valid"),
        ("no-such-cc-xyz", "C compiler \"no-such-cc-xyz\" (CC) is not found"),
    ] {
        let out = run_mpas(&["--mode", "serial"], &[("CC", cc)]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "CC={cc:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(says), "CC={cc:?}: {stderr}");
        assert_eq!(stderr.matches("gridkey: error").count(), 1, "said once: {stderr}");
        assert!(!stdout.contains("FAILED"), "not a failure of every program: {stdout}");
    }
}

#[test]
fn flags_replace_bad_variables_and_both_count_variables_ignore_spaces() {
    // --verify switches table verification on whatever the variable says.
    let out = run_mpas(&["--mode", "serial", "--verify"], &[("GRIDKEY_VERIFY_TABLES", "sometimes")]);
    assert!(out.status.success(), "{:?}", text(&out));
    let out = run_mpas(&["--mode", "serial"], &[("GRIDKEY_VERIFY_TABLES", "sometimes")]);
    assert_eq!(out.status.code(), Some(2), "without the flag the bad value is an error: {:?}", text(&out));
    // The mode variable, like the count, ignores surrounding spaces.
    let out = run_mpas(&["--json"], &[("GRIDKEY_BUILD_JOBS_MODE", " thread "), ("GRIDKEY_BUILD_JOBS", " 2 ")]);
    assert!(out.status.success(), "{:?}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((report["mode"].as_str(), report["jobs"].as_u64()), (Some("thread"), Some(2)));
}

#[test]
fn a_remote_url_it_cannot_use_is_the_one_thing_said() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    for (url, says) in [
        ("http://localhost:6379", "its scheme is `http`, not `redis`, `rediss` or `redis+unix`"),
        // A socket URL that does not parse is not told that its scheme is wrong, nor one in capitals.
        ("redis+unix:///run/redis.sock?db=one&pass=s3cret", "it does not parse as a Redis URL"),
        ("REDIS://:s3cret@localhost:notaport/", "it does not parse as a Redis URL"),
        ("localhost:6379", "it has no scheme"),
        ("redis://:s3cret@localhost:notaport/", "it does not parse as a Redis URL"),
        // Unencoded passwords and a scheme without its slashes: the message quotes the URL with
        // the password hidden, whatever the password holds.
        (
            "redis://reader:Zq8/s3cret==@localhost:6379/",
            "a password holding `/`, `?`, `#` or `@` that is not percent-encoded",
        ),
        ("redis:/reader:s3cret@localhost:6379/", "its scheme `redis:` is not followed by `//`"),
        ("redis//writer:s3cret@localhost:6379/", "it has no scheme"),
    ] {
        let out = gridkey(&["run", "--cache-dir", c, "--remote", url], &[]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{url}: {stderr}");
        assert!(stderr.contains(says), "{url}: {stderr}");
        assert!(!stderr.contains("gridkey: shared tier"), "no trust line before the error: {stderr}");
        assert!(!stderr.contains("InvalidClientConfig") && !stderr.contains("s3cret"), "{stderr}");
    }
}

#[test]
fn every_directory_of_a_cache_is_the_owners_alone_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("new").join("cache");
    let grid = data("grids/oQU480.231010.nc");
    let mut command = gridkey_command(
        &["run", "--mode", "serial", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.to_str().unwrap()],
        &[],
    );
    // SAFETY: umask is async-signal-safe and the closure touches nothing else.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(!text(&out).1.contains("writable by everyone"), "{}", text(&out).1);
    let mut dirs = vec![root.path().join("new")];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} has mode {mode:o}", dir.display());
        seen += 1;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                dirs.push(entry.path());
            } else {
                let mode = meta.permissions().mode() & 0o777;
                assert_eq!(mode & 0o022, 0, "{} is writable by others: {mode:o}", entry.path().display());
            }
        }
    }
    assert!(seen >= 5, "the cache, its buckets and their fan-out directories: {seen}");
}

#[test]
fn the_summary_counts_the_hits_of_each_tier_it_has() {
    let site = tempfile::tempdir().unwrap();
    let mine = tempfile::tempdir().unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let g = grid.to_str().unwrap();
    let fill = gridkey(&["run", "--mode", "serial", "--grid", g, "--cache-dir", site.path().to_str().unwrap()], &[]);
    assert!(fill.status.success(), "{:?}", text(&fill));
    let args = ["run", "--mode", "serial", "--grid", g, "--cache-dir", mine.path().to_str().unwrap()];
    let out = gridkey(&[&args[..], &["--site-cache", site.path().to_str().unwrap()]].concat(), &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("0 hits from the local tier, 8 from the site tier"), "{stdout}");
    assert!(!stdout.contains("remote tier"), "no shared tier, no word of one: {stdout}");
}
