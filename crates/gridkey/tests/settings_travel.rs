//! Every switch of the typed settings behaves the same in serial, thread and process mode, also
//! in a process pool reused after the setting changed (ADR 0013): workers read nothing from
//! their own environment, the settings travel with every task.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey::{tasks_for, Settings, StencilHandler, TaskSettings};
use gridkey_fingerprint::{decode_entry, encode_entry, TranslationCache, TranslationOptions};
use gridkey_jobs::{BuildJobs, BuildJobsMode, Runner, TaskError, WorkerCommand};
use gridkey_offsets::{compile_time_offset_provider, CompileTimeOffsetProvider};
use gridkey_stencil::{icon_programs, CompileOutcome, Program};
use gridkey_store::TableStore;

/// One runner per mode; the process runner's pool lives for the whole test, so later batches
/// run on workers started before the settings changed.
struct Modes {
    runners: Vec<Runner<StencilHandler>>,
}

impl Modes {
    fn new() -> Self {
        let worker = WorkerCommand::gridkey(PathBuf::from(env!("CARGO_BIN_EXE_gridkey")));
        let runners = BuildJobsMode::ALL
            .iter()
            .map(|&mode| Runner::new(BuildJobs::new(mode, 2), Arc::new(StencilHandler), worker.clone()))
            .collect();
        Self { runners }
    }

    /// Compiles `program` against `ct` with `settings` in each mode (serial, thread, process).
    fn run(
        &self,
        program: &Program,
        ct: &Arc<CompileTimeOffsetProvider>,
        settings: &Arc<TaskSettings>,
    ) -> Vec<(BuildJobsMode, Result<CompileOutcome, TaskError>)> {
        let tasks = tasks_for(std::slice::from_ref(program), ct, &TranslationOptions::new(), settings);
        self.runners.iter().map(|r| (r.mode(), r.run_all(&tasks).pop().expect("one result"))).collect()
    }

    fn workers_started(&self) -> u64 {
        self.runners
            .iter()
            .map(|r| match r {
                Runner::Process(pool) => pool.workers_started(),
                _ => 0,
            })
            .sum()
    }
}

fn div() -> Program {
    icon_programs().into_iter().find(|p| p.name() == "div").expect("div")
}

/// The MPAS grid converted into `cache`.
fn converted(cache: &Path) -> Arc<CompileTimeOffsetProvider> {
    let grid = gridkey_grid::read_grid(&common::data("grids/oQU480.231010.nc")).unwrap();
    Arc::new(compile_time_offset_provider(grid.provider(), &TableStore::open(cache).unwrap()).unwrap())
}

/// The task settings of the caller's compiler and `cache`, with `change` made to the settings
/// they are built from.
fn with(cache: &Path, change: impl FnOnce(&mut Settings)) -> Arc<TaskSettings> {
    let compiler_vars = |name: &str| {
        (name == gridkey_settings::ENV_CC || gridkey_settings::COMPILER_ENV.contains(&name))
            .then(|| std::env::var(name).ok())
            .flatten()
    };
    let mut s = Settings { cache_dir: cache.to_path_buf(), ..Settings::from_vars(compiler_vars).unwrap() };
    change(&mut s);
    gridkey::task_settings(&s).unwrap()
}

#[test]
fn verify_tables_is_honoured_in_every_mode_also_by_a_reused_pool() {
    let cache = tempfile::tempdir().unwrap();
    let ct = converted(cache.path());
    let modes = Modes::new();
    for (mode, r) in modes.run(&div(), &ct, &with(cache.path(), |s| s.verify_tables = true)) {
        r.unwrap_or_else(|e| panic!("{mode}: intact tables verify: {e}"));
    }
    let started = modes.workers_started();

    // A table modified in place after conversion, at the same size.
    let c2e = ct.gather("C2E").unwrap();
    let path = c2e.table_path().to_path_buf();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes.swap(last, last - 4);
    bytes[last - 8] ^= 1;
    std::fs::write(&path, &bytes).unwrap();

    for (mode, r) in modes.run(&div(), &ct, &with(cache.path(), |s| s.verify_tables = true)) {
        let e = r.expect_err(&format!("{mode}: a changed table must fail with verify_tables"));
        let text = e.to_string();
        assert!(text.contains("offset C2E") && text.contains("modified after it was stored"), "{mode}: {text}");
    }
    assert_eq!(modes.workers_started(), started, "the same workers ran with the new setting");
    for (mode, r) in modes.run(&div(), &ct, &with(cache.path(), |s| s.verify_tables = false)) {
        r.unwrap_or_else(|e| panic!("{mode}: off, the table is not read again: {e}"));
    }
}

#[test]
fn verify_cache_hits_is_honoured_in_every_mode_also_by_a_reused_pool() {
    let cache = tempfile::tempdir().unwrap();
    let ct = converted(cache.path());
    let modes = Modes::new();
    let results = modes.run(&div(), &ct, &with(cache.path(), |s| s.verify_cache_hits = true));
    let key = results[0].1.as_ref().unwrap().key;
    for (mode, r) in &results {
        r.as_ref().unwrap_or_else(|e| panic!("{mode}: {e}"));
    }
    let started = modes.workers_started();

    // An entry with a valid checksum whose C source is not what translation gives.
    let entries = TranslationCache::open(cache.path()).unwrap();
    let entry = entries.entry_path(&key);
    let payload = decode_entry(&key, &std::fs::read(&entry).unwrap()).unwrap().to_vec();
    let mut tampered = payload.clone();
    tampered.extend_from_slice(b"\n/* not from this translator */\n");
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&entry, encode_entry(&key, &tampered)).unwrap();

    for (mode, r) in modes.run(&div(), &ct, &with(cache.path(), |s| s.verify_cache_hits = false)) {
        let outcome = r.unwrap_or_else(|e| panic!("{mode}: off, a checked entry is a hit: {e}"));
        assert!(!outcome.translated, "{mode}");
    }
    for (mode, r) in modes.run(&div(), &ct, &with(cache.path(), |s| s.verify_cache_hits = true)) {
        let text = r.expect_err(&format!("{mode}: on, the tampered hit must be caught")).to_string();
        assert!(text.contains("differs from a fresh translation"), "{mode}: {text}");
    }
    assert_eq!(modes.workers_started(), started, "the same workers ran with the new setting");
}

/// A compiler wrapper `dir/mycc` that appends one line to `log` and runs the real compiler.
fn wrapper(dir: &Path, log: &Path) {
    let real = which::which("cc").expect("a C compiler on PATH");
    // Logs builds only, not the identity probes (`--version`, `-dumpmachine`) of the parent.
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in *\" -shared \"*) echo built >> '{}';; esac\nexec '{}' \"$@\"\n",
        log.display(),
        real.display()
    );
    let path = dir.join("mycc");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn the_compiler_resolved_in_the_parent_runs_in_every_mode_whatever_the_workers_path() {
    let bins = tempfile::tempdir().unwrap();
    let (one, two) = (bins.path().join("one"), bins.path().join("two"));
    let (log_one, log_two) = (bins.path().join("one.log"), bins.path().join("two.log"));
    for (dir, log) in [(&one, &log_one), (&two, &log_two)] {
        std::fs::create_dir(dir).unwrap();
        wrapper(dir, log);
    }
    let modes = Modes::new();
    let path = std::env::var("PATH").unwrap_or_default();
    let mut started = None;
    // The same words, `mycc`, behind another PATH: the workers started before the change, with
    // a PATH that holds neither wrapper, still run the compiler the parent resolved.
    for (dir, log) in [(&one, &log_one), (&two, &log_two)] {
        for mode in BuildJobsMode::ALL {
            let cache = tempfile::tempdir().unwrap();
            let ct = converted(cache.path());
            let settings = Settings {
                cache_dir: cache.path().to_path_buf(),
                ..Settings::from_vars(|name| match name {
                    "CC" => Some("mycc".to_owned()),
                    "PATH" => Some(format!("{}:{path}", dir.display())),
                    _ => None,
                })
                .unwrap()
            };
            let settings = gridkey::task_settings(&settings).unwrap();
            assert_eq!(settings.compiler().program(), dir.join("mycc"));
            let runner = modes.runners.iter().find(|r| r.mode() == mode).unwrap();
            let tasks = tasks_for(&[div()], &ct, &TranslationOptions::new(), &settings);
            let outcome = runner.run_all(&tasks).pop().unwrap().unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert!(outcome.built, "{mode}: a fresh cache builds");
        }
        assert_eq!(lines(log), 3, "{}: one build in each mode", log.display());
        started.get_or_insert(modes.workers_started());
    }
    assert_eq!(Some(modes.workers_started()), started, "the same workers ran after the change");
}

#[test]
fn the_cache_directory_travels_to_every_mode() {
    let modes = Modes::new();
    for round in 0..2 {
        for mode in BuildJobsMode::ALL {
            let cache = tempfile::tempdir().unwrap();
            let ct = converted(cache.path());
            let settings = common::settings(cache.path());
            let runner = modes.runners.iter().find(|r| r.mode() == mode).unwrap();
            let tasks = tasks_for(&[div()], &ct, &TranslationOptions::new(), &settings);
            let outcome = runner.run_all(&tasks).pop().unwrap().unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert!(outcome.translated, "round {round}, {mode}: a fresh cache misses");
            assert!(outcome.artifact.starts_with(settings.cache_dir()), "{mode}: {}", outcome.artifact.display());
            assert!(TranslationCache::open(cache.path()).unwrap().entry_path(&outcome.key).is_file(), "{mode}");
        }
    }
}
