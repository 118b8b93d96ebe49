//! The mode matrix of README "The proof", computed once for both of its readers: the integration
//! test `tests/tests/mode_equivalence.rs` asserts on it, and `cargo xtask modes` prints it
//! (ADR 0042: one implementation).
//!
//! 1. Every program is run on a fresh cache in each build-jobs mode, and its key is computed on
//!    each runtime layout of the tables (C order, Fortran order, int64, host copy), every stored
//!    table opened with the verifying open (digest recomputed).
//! 2. For each of the six ordered pairs of modes (A, B), a copy of the cache filled in mode A is
//!    run in mode B.
//! 3. The C source translated against the compile-time view is compared with the source
//!    translated directly against each runtime layout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use gridkey::{AppError, RunConfig, RunReport, StencilHandler};
use gridkey_fingerprint::TranslationOptions;
use gridkey_grid::{Grid, GridError};
use gridkey_jobs::{BuildJobs, BuildJobsMode, Runner, WorkerCommand};
use gridkey_offsets::{compile_time_offset_provider, Entry, OffsetsError};
use gridkey_stencil::{Program, StencilError};
use gridkey_store::{StoreError, TableStore};

/// What can stop the matrix before it has a verdict.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    /// The grid could not be read.
    #[error(transparent)]
    Grid(Box<GridError>),
    /// A run failed as a whole (its settings, its cache directory).
    #[error(transparent)]
    Run(#[from] AppError),
    /// A scratch cache's table store could not be opened, or a stored table did not verify.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A runtime layout or its compile-time view could not be made.
    #[error(transparent)]
    Offsets(#[from] OffsetsError),
    /// A program could not be keyed or translated.
    #[error(transparent)]
    Stencil(#[from] StencilError),
    /// A scratch cache could not be made or copied.
    #[error("scratch cache: {0}; check that the temp directory is writable")]
    Io(#[from] std::io::Error),
}

impl From<GridError> for MatrixError {
    fn from(e: GridError) -> Self {
        MatrixError::Grid(Box::new(e))
    }
}

/// One ordered pair of modes: a cache filled in `a`, copied, then run in `b`.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The mode that filled the cache.
    pub a: BuildJobsMode,
    /// The mode that ran on the copy.
    pub b: BuildJobsMode,
    /// Translations of the fill in `a` (every program, on a fresh cache).
    pub fill_translations: usize,
    /// Translations of the run in `b`: 0 when the cache served it.
    pub translations: usize,
    /// Cache hits of the run in `b`.
    pub hits: usize,
}

/// The matrix's findings; [`ModeMatrix::passed`] is the verdict.
#[derive(Debug, Clone, Default)]
pub struct ModeMatrix {
    /// How many programs ran.
    pub programs: usize,
    /// Per program, per source (`mode serial`, `tables fortran`, ...), the key in hex (empty
    /// when the run gave none).
    pub keys: BTreeMap<String, BTreeMap<String, String>>,
    /// The six ordered pairs of modes.
    pub pairs: Vec<Pair>,
    /// Programs times runtime layouts whose C sources were compared.
    pub source_checks: usize,
    /// `program with LAYOUT runtime tables` for each C source that differed.
    pub sources_differ: Vec<String>,
    /// `MODE mode: PROGRAM did not verify: ERROR` for each program of any run that did not verify.
    pub unverified: Vec<String>,
}

impl ModeMatrix {
    /// Programs whose key is the same, and not empty, from every source.
    pub fn identical_programs(&self) -> usize {
        self.keys.values().filter(|by_source| keys_agree(by_source)).count()
    }

    /// Pairs served entirely from the cache: 0 translations and a hit for every program.
    pub fn pairs_hit(&self) -> usize {
        self.pairs.iter().filter(|p| p.translations == 0 && p.hits == self.programs).count()
    }

    /// Translations in all the B runs of the pairs.
    pub fn retranslations(&self) -> usize {
        self.pairs.iter().map(|p| p.translations).sum()
    }

    /// The proof holds: every run verified, 6/6 pairs hit, 0 re-translations, keys identical for
    /// every program and every C source identical.
    pub fn passed(&self) -> bool {
        self.unverified.is_empty()
            && self.pairs.len() == 6
            && self.pairs_hit() == 6
            && self.retranslations() == 0
            && self.identical_programs() == self.programs
            && self.sources_differ.is_empty()
    }
}

/// Whether every source gave one and the same non-empty key.
pub fn keys_agree(by_source: &BTreeMap<String, String>) -> bool {
    let distinct: BTreeSet<&String> = by_source.values().collect();
    distinct.len() == 1 && !by_source.values().any(String::is_empty)
}

/// Runs the matrix on the grid at `grid_path` with the ICON programs, `jobs` build jobs per mode
/// and `gridkey_bin` as the process-mode worker.
///
/// Errors: [`MatrixError`]; a program that fails or does not verify is a finding
/// ([`ModeMatrix::unverified`]), not an error.
pub fn mode_matrix(grid_path: &Path, gridkey_bin: &Path, jobs: i64) -> Result<ModeMatrix, MatrixError> {
    let grid = gridkey_grid::read_grid(grid_path)?;
    let programs = gridkey_stencil::icon_programs();
    let options = TranslationOptions::new();
    let mut matrix = ModeMatrix { programs: programs.len(), ..ModeMatrix::default() };
    let runners: Vec<Runner<StencilHandler>> = BuildJobsMode::ALL
        .iter()
        .map(|&mode| {
            Runner::new(
                BuildJobs::new(mode, jobs),
                Arc::new(StencilHandler),
                WorkerCommand::gridkey(gridkey_bin.to_path_buf()),
            )
        })
        .collect();
    let run = Run { grid: &grid, grid_path, programs: &programs, options: &options, jobs };
    let filled = fill_each_mode(&run, &runners, &mut matrix)?;
    key_each_layout(&run, &mut matrix)?;
    serve_each_pair(&run, &runners, &filled, &mut matrix)?;
    Ok(matrix)
}

/// What every run of the matrix shares.
struct Run<'a> {
    grid: &'a Grid,
    grid_path: &'a Path,
    programs: &'a [Program],
    options: &'a TranslationOptions,
    jobs: i64,
}

impl Run<'_> {
    /// Runs every program with `runner` on `cache`, every table's digest recomputed before
    /// translating (ADR 0012), and notes the programs that did not verify.
    fn run(
        &self,
        runner: &Runner<StencilHandler>,
        cache: &Path,
        matrix: &mut ModeMatrix,
    ) -> Result<RunReport, MatrixError> {
        let settings = gridkey::Settings {
            verify_tables: true,
            build_jobs: BuildJobs::new(runner.mode(), self.jobs),
            ..crate::run_settings(cache)
        };
        let config = RunConfig {
            grid: self.grid_path.to_path_buf(),
            settings,
            worker: WorkerCommand::gridkey(std::path::PathBuf::new()),
            options: self.options.clone(),
        };
        let report =
            gridkey::run(&config, gridkey::RunOptions::new().grid(self.grid).programs(self.programs).runner(runner))?;
        for p in report.programs.iter().filter(|p| !p.verified) {
            matrix.unverified.push(format!(
                "{} mode: {} did not verify: {}",
                report.mode,
                p.program,
                p.error.as_deref().unwrap_or("-")
            ));
        }
        Ok(report)
    }
}

/// Step 1 for the modes: one fresh cache filled per mode; returns each with its fill's report.
fn fill_each_mode(
    run: &Run<'_>,
    runners: &[Runner<StencilHandler>],
    matrix: &mut ModeMatrix,
) -> Result<Vec<(tempfile::TempDir, RunReport)>, MatrixError> {
    let mut filled = Vec::new();
    for runner in runners {
        let cache = tempfile::tempdir()?;
        let report = run.run(runner, cache.path(), matrix)?;
        for p in &report.programs {
            matrix
                .keys
                .entry(p.program.clone())
                .or_default()
                .insert(format!("mode {}", report.mode), p.key.clone().unwrap_or_default());
        }
        filled.push((cache, report));
    }
    Ok(filled)
}

/// Step 1 for the runtime layouts, with step 3: each layout's compile-time view, its stored
/// tables opened with the verifying open, each program's key, and its C source compared with
/// the source translated against the runtime tables directly.
fn key_each_layout(run: &Run<'_>, matrix: &mut ModeMatrix) -> Result<(), MatrixError> {
    for (layout, provider) in gridkey::layouts::runtime_layouts(run.grid.provider())? {
        let cache = tempfile::tempdir()?;
        let store = TableStore::open(cache.path())?.verifying(true);
        let ct = compile_time_offset_provider(&provider, &store)?;
        for (_, entry) in ct.entries() {
            if let Entry::Gather(c) = entry {
                store.open_verified(c.spec())?;
            }
        }
        for program in run.programs {
            let key = gridkey_stencil::key_inputs(program, run.options, &ct)?.key();
            matrix.keys.entry(program.name().to_owned()).or_default().insert(format!("tables {layout}"), key.to_hex());
            let compiled = gridkey_stencil::translate(program, &ct, run.options)?;
            let facts = gridkey_stencil::infer_domains_runtime(program, &provider)?;
            let direct = gridkey_stencil::emit_c(program, &facts, run.options);
            matrix.source_checks += 1;
            if compiled.as_bytes() != direct.as_bytes() {
                matrix.sources_differ.push(format!("{} with {layout} runtime tables", program.name()));
            }
        }
    }
    Ok(())
}

/// Step 2: each filled cache, copied, serves each other mode.
fn serve_each_pair(
    run: &Run<'_>,
    runners: &[Runner<StencilHandler>],
    filled: &[(tempfile::TempDir, RunReport)],
    matrix: &mut ModeMatrix,
) -> Result<(), MatrixError> {
    for (a, (cache, fill)) in runners.iter().zip(filled) {
        for b in runners.iter().filter(|b| b.mode() != a.mode()) {
            let copy = tempfile::tempdir()?;
            copy_tree(cache.path(), copy.path())?;
            let warm = run.run(b, copy.path(), matrix)?;
            matrix.pairs.push(Pair {
                a: a.mode(),
                b: b.mode(),
                fill_translations: fill.translations(),
                translations: warm.translations(),
                hits: warm.hits(),
            });
        }
    }
    Ok(())
}

/// Copies the cache directory `from` into `to` (regular files and directories only).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}
