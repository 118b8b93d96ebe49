//! No poisoned entry (ADR 0024): a stored table changed in place while a run holds it fails the
//! tasks that translated from it, nothing is cached from it, and the run rewrites the table from
//! the runtime table and compiles those programs again, in every mode.

use crate::common;

use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey::{RunConfig, StencilHandler};
use gridkey_fingerprint::{TranslationCache, TranslationOptions};
use gridkey_jobs::{BuildJobs, BuildJobsMode, Runner, WorkerCommand};
use gridkey_offsets::{compile_time_offset_provider, ConversionMemo};
use gridkey_store::{TableStore, TableView};

/// Writes `value` over the first element of the stored int32 table at `path` holding `elements`
/// elements, in place: the same inode, so every mapping of it sees the change.
fn overwrite_first_element(path: &Path, elements: usize, value: i32) {
    let start = std::fs::metadata(path).unwrap().len() - (elements * 4) as u64;
    write_in_place(path, start, &value.to_le_bytes());
}

/// Writes `bytes` at byte `at` of the file at `path`, in place, and syncs; the file is made
/// writable for the write and given its mode back afterwards (a stored table is read-only).
fn write_in_place(path: &Path, at: u64, bytes: &[u8]) {
    let mode = std::fs::metadata(path).unwrap().permissions();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
    std::fs::set_permissions(path, mode).unwrap();
}

/// What every test here starts from: an empty cache, the MPAS grid (its path and one read of
/// it), the eight programs and the default options.
struct Setup {
    cache: tempfile::TempDir,
    grid_path: PathBuf,
    grid: gridkey_grid::Grid,
    programs: Vec<gridkey_stencil::Program>,
    options: TranslationOptions,
}

fn setup() -> Setup {
    let grid_path = common::data("grids/oQU480.231010.nc");
    Setup {
        cache: tempfile::tempdir().unwrap(),
        grid: gridkey_grid::read_grid(&grid_path).unwrap(),
        grid_path,
        programs: gridkey_stencil::icon_programs(),
        options: TranslationOptions::new(),
    }
}

fn check_mode(mode: BuildJobsMode) {
    check(mode, false, false);
}

/// A table changed in place while a run holds it, with `verify` (`--verify`: every table
/// re-hashed on open, every hit translated again) and with the cache `filled` by an earlier run
/// (every program a hit).
fn check(mode: BuildJobsMode, verify: bool, filled: bool) {
    let Setup { cache, grid_path, grid, programs, options } = setup();
    let settings =
        gridkey::Settings { verify_tables: verify, verify_cache_hits: verify, ..common::run_settings(cache.path()) };
    if filled {
        let runner = Runner::new(
            BuildJobs::new(BuildJobsMode::Serial, 1),
            Arc::new(StencilHandler),
            WorkerCommand::gridkey(PathBuf::new()),
        );
        let config = RunConfig {
            grid: grid_path.clone(),
            settings: settings.clone(),
            worker: WorkerCommand::gridkey(PathBuf::new()),
            options: options.clone(),
        };
        // Another grid value of the same file, through a memo of the run's own: the run below converts afresh.
        let other = gridkey_grid::read_grid(&grid_path).unwrap();
        assert!(gridkey::run(&config, gridkey::RunOptions::new().grid(&other).programs(&programs).runner(&runner))
            .unwrap()
            .all_verified());
    }
    // The run's conversion finds this view in the memo it is lent: the run holds the mapping changed below.
    let memo = ConversionMemo::new();
    let ct = memo.provider(grid.provider(), &TableStore::open(cache.path()).unwrap()).unwrap();
    let c2e = ct.gather("C2E").unwrap();
    let TableView::I32(table) = c2e.table() else { panic!("C2E is int32") };
    let max = table.iter().copied().max().unwrap();
    let path: PathBuf = c2e.table_path().to_path_buf();
    // A larger index than any real one: domain inference would read another codomain extent.
    overwrite_first_element(&path, table.len(), max + 5);

    let worker = WorkerCommand::gridkey(PathBuf::from(env!("CARGO_BIN_EXE_gridkey")));
    let runner = Runner::new(BuildJobs::new(mode, 2), Arc::new(StencilHandler), worker.clone());
    let config = RunConfig { grid: grid_path, settings, worker, options: options.clone() };
    let lent = gridkey::RunOptions::new().grid(&grid).programs(&programs).runner(&runner).memo(&memo);
    let report = gridkey::run(&config, lent).unwrap();
    for p in &report.programs {
        assert!(p.verified, "{mode}, verify {verify}, filled {filled}: {}: {:?}", p.program, p.error);
    }
    assert!(
        report.warnings.iter().any(|w| w.path == path && w.message.contains("changed after it was stored")),
        "{mode}: the repair is said: {:?}",
        report.warnings
    );
    // Every entry is what a translation from the intact tables gives (an independent conversion
    // into another store).
    let other = tempfile::tempdir().unwrap();
    let good = compile_time_offset_provider(grid.provider(), &TableStore::open(other.path()).unwrap()).unwrap();
    let entries = TranslationCache::open(cache.path()).unwrap();
    for program in &programs {
        let key = gridkey_stencil::key_inputs(program, &options, &good).unwrap().key();
        let fresh = gridkey_stencil::translate(program, &good, &options).unwrap();
        assert_eq!(entries.get(&key).as_deref(), Ok(fresh.as_bytes()), "{mode}: {}", program.name());
    }
    assert!(TableStore::open(cache.path()).unwrap().open_verified(c2e.spec()).is_ok(), "{mode}: the file is repaired");
}

#[test]
fn a_table_changed_while_a_serial_run_holds_it_is_repaired_and_nothing_poisoned_is_cached() {
    check_mode(BuildJobsMode::Serial);
}

#[test]
fn a_table_changed_while_a_process_run_holds_it_is_repaired_and_nothing_poisoned_is_cached() {
    check_mode(BuildJobsMode::Process);
}

#[test]
fn a_table_changed_while_a_verifying_run_holds_it_is_repaired_in_every_mode() {
    for mode in BuildJobsMode::ALL {
        for filled in [false, true] {
            check(mode, true, filled);
        }
    }
}

/// The file under a table's name replaced by another inode with changed content while a run
/// holds an intact mapping of the table it replaced (a concurrent writer renamed identical
/// content over the name, then that file was changed in place): process-mode workers open the
/// table by name, so their tasks fail although the run's own mapping is intact; the run must
/// repair the file under the name and compile those programs again.
#[test]
fn a_changed_file_under_the_name_beside_an_intact_mapping_is_repaired_for_the_workers() {
    let Setup { cache, grid_path, grid, programs, options } = setup();
    // The run is lent this memo, so it holds this intact mapping.
    let memo = ConversionMemo::new();
    let ct = memo.provider(grid.provider(), &TableStore::open(cache.path()).unwrap()).unwrap();
    let c2e = ct.gather("C2E").unwrap();
    let TableView::I32(table) = c2e.table() else { panic!("C2E is int32") };
    let max = table.iter().copied().max().unwrap();
    let path: PathBuf = c2e.table_path().to_path_buf();
    // Another inode under the name, then changed in place: the run's mapping stays intact.
    let copy = path.with_extension("copy");
    std::fs::copy(&path, &copy).unwrap();
    overwrite_first_element(&copy, table.len(), max + 5);
    std::fs::rename(&copy, &path).unwrap();
    assert!(c2e.verify().is_ok(), "the run's own mapping is intact");

    let worker = WorkerCommand::gridkey(PathBuf::from(env!("CARGO_BIN_EXE_gridkey")));
    let runner = Runner::new(BuildJobs::new(BuildJobsMode::Process, 2), Arc::new(StencilHandler), worker.clone());
    let config =
        RunConfig { grid: grid_path, settings: common::run_settings(cache.path()), worker, options: options.clone() };
    let lent = gridkey::RunOptions::new().grid(&grid).programs(&programs).runner(&runner).memo(&memo);
    let report = gridkey::run(&config, lent).unwrap();
    for p in &report.programs {
        assert!(p.verified, "{}: {:?}", p.program, p.error);
    }
    assert!(TableStore::open(cache.path()).unwrap().open_verified(c2e.spec()).is_ok(), "the file is repaired");
}

/// An entry translated while a table held another value, written under the key of the intact
/// table (a table changed and changed back while a translation read it passes the check of ADR
/// 0024, which reads it after the change back; or an entry planted by hand): its kernel refuses
/// the grid's own inputs. The run fails that program once, naming the removal, and removes the
/// entry and its library, so the next run translates it again and verifies every program.
#[test]
fn an_entry_from_a_table_changed_and_changed_back_is_removed_when_its_kernel_refuses_the_grid() {
    let Setup { cache, grid_path, grid, programs, options } = setup();
    let runner = Runner::new(
        BuildJobs::new(BuildJobsMode::Serial, 1),
        Arc::new(StencilHandler),
        WorkerCommand::gridkey(PathBuf::new()),
    );
    let config = RunConfig {
        grid: grid_path.clone(),
        settings: common::run_settings(cache.path()),
        worker: WorkerCommand::gridkey(PathBuf::new()),
        options: options.clone(),
    };
    assert!(gridkey::run(&config, gridkey::RunOptions::new().grid(&grid).programs(&programs).runner(&runner))
        .unwrap()
        .all_verified());

    // The translation of `div` made while C2E's first element was out of range, then the table
    // restored: the entry goes under the intact table's key.
    let ct = compile_time_offset_provider(grid.provider(), &TableStore::open(cache.path()).unwrap()).unwrap();
    let div = programs.iter().find(|p| p.name() == "div").unwrap();
    let inputs = gridkey_stencil::key_inputs(div, &options, &ct).unwrap();
    let c2e = ct.gather("C2E").unwrap();
    let TableView::I32(table) = c2e.table() else { panic!("C2E is int32") };
    let (first, max, len) = (table[[0, 0]], table.iter().copied().max().unwrap(), table.len());
    let path: PathBuf = c2e.table_path().to_path_buf();
    overwrite_first_element(&path, len, max + 10_000);
    let wrong = gridkey_stencil::translate(div, &ct, &options).unwrap();
    overwrite_first_element(&path, len, first);
    assert!(c2e.verify().is_ok(), "the table is intact again");
    let entries = TranslationCache::open(cache.path()).unwrap();
    assert_ne!(entries.get(&inputs.key()).as_deref(), Ok(wrong.as_bytes()), "the translation differs");
    entries.put(&inputs, wrong.as_bytes()).unwrap();

    // Another grid value of the same file, so that the run converts afresh.
    let again = gridkey_grid::read_grid(&grid_path).unwrap();
    let first_run =
        gridkey::run(&config, gridkey::RunOptions::new().grid(&again).programs(&programs).runner(&runner)).unwrap();
    let failed: Vec<_> = first_run.programs.iter().filter(|p| !p.verified).collect();
    assert_eq!(failed.len(), 1, "{:?}", first_run.programs);
    let error = failed[0].error.as_deref().unwrap_or_default();
    assert_eq!(failed[0].program, "div");
    assert!(error.contains("does not fit this grid's tables") && error.contains("removed from the cache"), "{error}");
    assert!(entries.get(&inputs.key()).is_err(), "the entry is gone");
    let second =
        gridkey::run(&config, gridkey::RunOptions::new().grid(&again).programs(&programs).runner(&runner)).unwrap();
    assert!(second.all_verified(), "{:?}", second.programs);
    let fresh = gridkey_stencil::translate(div, &ct, &options).unwrap();
    assert_eq!(entries.get(&inputs.key()).as_deref(), Ok(fresh.as_bytes()), "translated again from the intact table");
}

/// Where [`DamagedDuringTask`] changes the table file.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// The first byte of the `.npy` header's dictionary: the file no longer opens as a table.
    Header,
    /// The first element, set beyond every index: the file opens, its digest differs.
    Element,
}

/// A progress reporter that plays another run on the same cache: when task `program` starts it
/// damages the stored table at `path` in place, and when that task has ended it writes the
/// original bytes back, as another run's repair leaves the file. When the run checks its tables
/// after the batch, every table is whole again.
struct DamagedDuringTask {
    program: usize,
    path: PathBuf,
    damage: Damage,
    /// The original bytes and where they were, while the damage is in place.
    original: std::sync::Mutex<Option<(u64, Vec<u8>)>>,
    /// How the task ended the time it met the damage.
    ended: std::sync::Mutex<Option<gridkey_jobs::Ended>>,
}

impl gridkey_jobs::Progress for DamagedDuringTask {
    fn started(&self, index: usize, _: &str) {
        let mut original = self.original.lock().unwrap();
        if index != self.program || original.is_some() || self.ended.lock().unwrap().is_some() {
            return;
        }
        let bytes = std::fs::read(&self.path).unwrap();
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00", "a stored table is an .npy file of format 1.0");
        let (at, bad) = match self.damage {
            // The dictionary starts after the magic, the version and the header's length.
            Damage::Header => (10, vec![b'#']),
            // The elements start after the header (its length is a little-endian u16 at 8).
            Damage::Element => {
                (10 + u64::from(u16::from_le_bytes([bytes[8], bytes[9]])), i32::MAX.to_le_bytes().to_vec())
            }
        };
        *original = Some((at, bytes[at as usize..at as usize + bad.len()].to_vec()));
        write_in_place(&self.path, at, &bad);
    }

    fn finished(&self, index: usize, _: &str, ended: gridkey_jobs::Ended) {
        if index != self.program {
            return;
        }
        if let Some((at, bytes)) = self.original.lock().unwrap().take() {
            write_in_place(&self.path, at, &bytes);
            *self.ended.lock().unwrap() = Some(ended);
        }
    }
}

/// A table damaged in place while a task reads it, and whole again before the run checks its
/// tables (another run on the cache rewrote it): the run finds nothing to repair, yet the task
/// failed for its input, not its program. It compiles that program once more, warns, and
/// every program verifies; every entry is a fresh translation's (ADR 0054). Before, the run
/// reported the program failed ("cannot rehydrate the task in the worker: ... error parsing
/// header" in process mode), which `cargo xtask chaos` counted as a lost run.
fn check_damaged_during_task(mode: BuildJobsMode, damage: Damage) {
    let Setup { cache, grid_path, grid, programs, options } = setup();
    // The table's file, named by a conversion into another store.
    let other = tempfile::tempdir().unwrap();
    let good = compile_time_offset_provider(grid.provider(), &TableStore::open(other.path()).unwrap()).unwrap();
    let c2e = good.gather("C2E").unwrap();
    let path = TableStore::open(cache.path()).unwrap().path_of(&c2e.spec().digest);
    // A program after the first (a process-mode worker is already running) that reads C2E.
    let program = (1..programs.len()).find(|&i| programs[i].offsets().iter().any(|o| o == "C2E")).unwrap();
    let progress = DamagedDuringTask {
        program,
        path: path.clone(),
        damage,
        original: Default::default(),
        ended: Default::default(),
    };
    let worker = WorkerCommand::gridkey(PathBuf::from(env!("CARGO_BIN_EXE_gridkey")));
    // One task at a time, so that the damage meets that task alone.
    let runner = Runner::new(BuildJobs::new(mode, 1), Arc::new(StencilHandler), worker.clone());
    let config =
        RunConfig { grid: grid_path, settings: common::run_settings(cache.path()), worker, options: options.clone() };
    let lent = gridkey::RunOptions::new().grid(&grid).programs(&programs).runner(&runner).progress(&progress);
    let report = gridkey::run(&config, lent).unwrap();
    let name = programs[program].name();
    assert_eq!(
        *progress.ended.lock().unwrap(),
        Some(gridkey_jobs::Ended::Failed),
        "{mode}, {damage:?}: {name} met the damage"
    );
    for p in &report.programs {
        assert!(p.verified, "{mode}, {damage:?}: {}: {:?}", p.program, p.error);
    }
    assert!(
        report.warnings.iter().any(|w| w.message.starts_with(&format!("({name}) a table was found damaged"))
            && w.message.contains("whole again")),
        "{mode}, {damage:?}: the second compile is said: {:?}",
        report.warnings
    );
    let entries = TranslationCache::open(cache.path()).unwrap();
    for program in &programs {
        let key = gridkey_stencil::key_inputs(program, &options, &good).unwrap().key();
        let fresh = gridkey_stencil::translate(program, &good, &options).unwrap();
        assert_eq!(entries.get(&key).as_deref(), Ok(fresh.as_bytes()), "{mode}, {damage:?}: {}", program.name());
    }
}

#[test]
fn a_table_damaged_during_a_task_and_whole_again_before_the_check_compiles_that_program_again() {
    for mode in BuildJobsMode::ALL {
        for damage in [Damage::Header, Damage::Element] {
            check_damaged_during_task(mode, damage);
        }
    }
}
