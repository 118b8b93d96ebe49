//! The headline invariant on the shipped ICON grid: the key of each of the eight programs is the
//! same whether it was compiled serially, in threads or in worker processes, and whether the
//! runtime tables are in C order, Fortran order, int64 or behind a host copy; and a cache filled
//! in any mode serves each other mode with 0 translations.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use gridkey::{RunConfig, RunReport, StencilHandler};
use gridkey_fingerprint::TranslationOptions;
use gridkey_jobs::{BuildJobs, BuildJobsMode, Runner, WorkerCommand};
use gridkey_offsets::compile_time_offset_provider;
use gridkey_store::TableStore;
use gridkey_tests::{data, gridkey_binary, run_settings};

fn run(grid: &gridkey_grid::Grid, runner: &Runner<StencilHandler>, cache: &Path) -> RunReport {
    let config = RunConfig {
        grid: data(gridkey::SHIPPED_GRID.trim_start_matches("data/")),
        settings: run_settings(cache),
        worker: WorkerCommand::gridkey(gridkey_binary()),
        options: TranslationOptions::new(),
    };
    let report = gridkey::run(
        &config,
        gridkey::RunOptions::new().grid(grid).programs(&gridkey_stencil::icon_programs()).runner(runner),
    )
    .unwrap();
    if let Some(p) = report.programs.iter().find(|p| !p.verified) {
        panic!("{} mode: {} did not verify: {:?}", report.mode, p.program, p.error);
    }
    report
}

/// Copies the cache directory `from` into `to` (regular files and directories only).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

#[test]
fn keys_are_identical_across_modes_and_layouts_and_every_mode_serves_every_other() {
    let grid = gridkey_grid::read_grid(&data("grids/icon_grid_0013_R02B04_R.nc")).unwrap();
    let runners: Vec<Runner<StencilHandler>> = BuildJobsMode::ALL
        .iter()
        .map(|&m| Runner::new(BuildJobs::new(m, 2), Arc::new(StencilHandler), WorkerCommand::gridkey(gridkey_binary())))
        .collect();
    let mut keys: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();

    // Fill one fresh cache per mode: every program translated there.
    let filled: Vec<(BuildJobsMode, tempfile::TempDir)> = runners
        .iter()
        .map(|runner| {
            let cache = tempfile::tempdir().unwrap();
            let report = run(&grid, runner, cache.path());
            assert_eq!(report.translations(), 8, "{} mode on a fresh cache", report.mode);
            for p in &report.programs {
                keys.entry(p.program.clone())
                    .or_default()
                    .insert(format!("mode {}", report.mode), p.key.clone().unwrap());
            }
            (runner.mode(), cache)
        })
        .collect();

    // Every runtime layout of the same tables gives the same compile-time view.
    let options = TranslationOptions::new();
    for (layout, provider) in gridkey::layouts::runtime_layouts(grid.provider()).unwrap() {
        let cache = tempfile::tempdir().unwrap();
        let ct = compile_time_offset_provider(&provider, &TableStore::open(cache.path()).unwrap()).unwrap();
        for program in gridkey_stencil::icon_programs() {
            let key = gridkey_stencil::key_inputs(&program, &options, &ct).unwrap().key().to_hex();
            keys.entry(program.name().to_owned()).or_default().insert(format!("tables {layout}"), key);
        }
    }
    assert_eq!(keys.len(), 8);
    for (program, by_source) in &keys {
        assert_eq!(by_source.len(), 3 + 4, "{program}: three modes and four layouts");
        let distinct: BTreeSet<&String> = by_source.values().collect();
        assert_eq!(distinct.len(), 1, "{program}: {by_source:#?}");
    }

    // A cache filled in mode A serves mode B (on a copy) with 0 translations, for all 6 pairs.
    let mut pairs = 0;
    for (a, filled_cache) in &filled {
        for runner in runners.iter().filter(|r| r.mode() != *a) {
            let copy = tempfile::tempdir().unwrap();
            copy_tree(filled_cache.path(), copy.path());
            let report = run(&grid, runner, copy.path());
            assert_eq!((report.translations(), report.hits()), (0, 8), "{a} -> {}", runner.mode());
            pairs += 1;
        }
    }
    assert_eq!(pairs, 6);
}
