//! A run whose every program is served without a translation writes no table; a translation or
//! a build worker gets its tables stored first (ADR 0053). Through the real `gridkey` binary on
//! the shipped ICON grid: the witness of the stored bytes is the table store of an earlier cold
//! run, which stored every table at conversion.

use crate::common::{self, gridkey_command};

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// `gridkey run --json` of the shipped grid in `mode` into `cache`: its report.
fn run(cache: &Path, mode: &str) -> serde_json::Value {
    let grid = common::data("grids/icon_grid_0013_R02B04_R.nc");
    let out = gridkey_command(&["run", "--json", "--mode", mode, "--jobs", "2", "--grid", grid.to_str().unwrap()], &[])
        .arg("--cache-dir")
        .arg(cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The table files under `cache`'s store, by file name, with their bytes.
fn stored_tables(cache: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(shards) = fs::read_dir(cache.join("tables-v1")) else { return out };
    for shard in shards.flatten() {
        for file in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if name.ends_with(".npy") {
                out.insert(name, fs::read(file.path()).unwrap());
            }
        }
    }
    out
}

/// Copies the directory tree `from` into `to`.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap().flatten() {
        let target: PathBuf = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn count(report: &serde_json::Value, field: &str) -> usize {
    report["programs"].as_array().unwrap().iter().filter(|p| p[field].as_bool() == Some(true)).count()
}

#[test]
fn a_run_of_hits_writes_no_table_and_a_worker_or_a_translation_gets_its_tables_stored() {
    // A cold run translates, so it stores every table of the grid: the witness.
    let filled = tempfile::tempdir().unwrap();
    let cold = run(filled.path(), "serial");
    let programs = cold["programs"].as_array().unwrap().len();
    assert_eq!(count(&cold, "translated"), programs);
    let witness = stored_tables(filled.path());
    assert!(!witness.is_empty());

    // A cache holding the translations and libraries, not the tables.
    let hits = tempfile::tempdir().unwrap();
    for store in ["translation-v2", "build-v2"] {
        copy_tree(&filled.path().join(store), &hits.path().join(store));
    }
    for mode in ["serial", "thread"] {
        let report = run(hits.path(), mode);
        assert_eq!((count(&report, "verified"), count(&report, "cache_hit")), (programs, programs), "{mode}");
        assert_eq!((count(&report, "translated"), count(&report, "built")), (0, 0), "{mode}");
        assert_eq!(stored_tables(hits.path()), BTreeMap::new(), "{mode}: a run of hits writes no table");
    }
    // Process-mode workers map the tables of their tasks: stored first, the same bytes.
    let report = run(hits.path(), "process");
    assert_eq!((count(&report, "verified"), count(&report, "translated")), (programs, 0));
    assert_eq!(stored_tables(hits.path()), witness);

    // A translation in serial mode reads the stored tables too.
    let one_miss = tempfile::tempdir().unwrap();
    copy_tree(&filled.path().join("build-v2"), &one_miss.path().join("build-v2"));
    let report = run(one_miss.path(), "serial");
    assert_eq!((count(&report, "verified"), count(&report, "translated")), (programs, programs));
    assert_eq!(stored_tables(one_miss.path()), witness);
}
