//! `cargo xtask memory [--scale N] [--workers W] [--starts S]` (ADR 0010): what a process-mode
//! worker costs.
//!
//! 1. Worker start time: `S` times, the wall time from spawning `gridkey worker` to its
//!    protocol handshake (exec, runtime start, stdout moved, watchdog started).
//! 2. Worker memory: an R2B9-size compile-time provider (the eight ICON connectivities at the
//!    R02B09 sizes: 20 971 520 cells, 31 457 280 edges, 10 485 762 vertices; int32; 2.26 GB of
//!    tables) is stored in a temp cache directory and mapped and read by this process, as the
//!    parent of `gridkey run` holds it. Then `W` workers (`gridkey worker --handler
//!    test-faults`) each run a `memory` task that reads every element of every table and
//!    reports its own `/proc/self/smaps_rollup` while the maps are held; the same with no
//!    tables, and with the sizes divided by `N` (default 64). The private part (`Private_Clean +
//!    Private_Dirty`) must not grow with table size; the command fails if it grows by more than
//!    16 MiB.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use gridkey::faults::FaultReport;
use gridkey_fingerprint::TranslationOptions;
use gridkey_jobs::protocol::{read_frame, FromWorker};
use gridkey_jobs::{CompilationTask, ProcessPool, WorkerCommand};
use gridkey_offsets::{CompileTimeConnectivity, CompileTimeOffsetProvider, Dimension, DimensionKind, Entry};
use gridkey_store::{TableSpec, TableStore, TableView};

const CELLS: usize = 20_971_520;
const EDGES: usize = 31_457_280;
const VERTICES: usize = 10_485_762;

/// One ICON connectivity: offset, domain (name, size), codomain (name, size), neighbours.
type TableShape = (&'static str, (&'static str, usize), (&'static str, usize), usize);

/// The ICON connectivities at R02B09 sizes.
const TABLES: [TableShape; 8] = [
    ("C2E", ("Cell", CELLS), ("Edge", EDGES), 3),
    ("C2V", ("Cell", CELLS), ("Vertex", VERTICES), 3),
    ("C2E2C", ("Cell", CELLS), ("Cell", CELLS), 3),
    ("E2C", ("Edge", EDGES), ("Cell", CELLS), 2),
    ("E2V", ("Edge", EDGES), ("Vertex", VERTICES), 2),
    ("E2C2V", ("Edge", EDGES), ("Vertex", VERTICES), 4),
    ("V2E", ("Vertex", VERTICES), ("Edge", EDGES), 6),
    ("V2C", ("Vertex", VERTICES), ("Cell", CELLS), 6),
];

/// Fields of smaps_rollup shown, in this order.
const FIELDS: [&str; 6] = ["Rss", "Pss", "Shared_Clean", "Private_Clean", "Private_Dirty", "Anonymous"];

pub fn memory(args: &[String], gridkey_bin: &Path) -> Result<bool> {
    let (mut scale, mut workers, mut starts) = (64usize, 2usize, 20usize);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let n: usize = value.parse().with_context(|| format!("{flag} {value}: expected a positive integer"))?;
        match flag.as_str() {
            "--scale" => scale = n.max(1),
            "--workers" => workers = n.max(1),
            "--starts" => starts = n.max(1),
            _ => bail!("unexpected argument {flag}: expected --scale N, --workers W, --starts S"),
        }
    }

    let times = start_times(gridkey_bin, starts)?;
    println!(
        "worker start (spawn to handshake), {starts} starts: min {:.1} ms, median {:.1} ms, max {:.1} ms",
        times[0] * 1e3,
        times[times.len() / 2] * 1e3,
        times[times.len() - 1] * 1e3
    );

    let cache = tempfile::Builder::new().prefix("gridkey-memory-").tempdir_in(crate::root().join("target"))?;
    let store = TableStore::open(cache.path())?;
    let worker = WorkerCommand {
        program: gridkey_bin.to_path_buf(),
        args: vec!["worker".into(), "--handler".into(), gridkey::faults::FAULT_HANDLER_NAME.into()],
    };
    let pool: ProcessPool<FaultReport> = ProcessPool::new(worker, workers);

    println!(
        "\nper-worker memory from /proc/<pid>/smaps_rollup while a task holds the mapped tables (MiB); \
         the parent holds and has read the same tables"
    );
    println!("  {:<22} {:>9} {:>6} {}", "provider", "tables MiB", "pid", FIELDS.map(|f| format!("{f:>14}")).join(""));
    let mut private_by_size = Vec::new();
    for (label, divide) in [("no tables", 0), ("R2B9 / scale", scale), ("R2B9", 1)] {
        let t = Instant::now();
        let provider = if divide == 0 { Arc::new(CompileTimeOffsetProvider::new()) } else { provider(&store, divide)? };
        let bytes: u64 = table_bytes(&provider);
        let parent_sum = touch(&provider);
        let made = t.elapsed().as_secs_f64();
        let tasks: Vec<CompilationTask> =
            (0..workers).map(|i| task(&format!("memory-{i}"), &provider, cache.path())).collect();
        let mut worst_private = 0u64;
        for r in pool.run_all(&tasks) {
            let r = r.map_err(|e| anyhow::anyhow!("{e}"))?;
            if r.element_sum != parent_sum {
                bail!("worker {} read a sum of {} where this process read {parent_sum}", r.pid, r.element_sum);
            }
            let label = if divide > 1 { format!("R2B9 / {divide}") } else { label.to_owned() };
            let cols = FIELDS.map(|f| format!("{:>13.1}", r.memory.get(f).copied().unwrap_or(0) as f64 / MIB)).join("");
            println!("  {label:<22} {:>9.1} {:>6} {cols}", bytes as f64 / MIB, r.pid);
            worst_private = worst_private.max(private(&r.memory));
        }
        let label = if divide > 1 { format!("R2B9 / {divide}") } else { label.to_owned() };
        println!("  ({label}: tables made, stored, mapped and read by the parent in {made:.1} s)");
        private_by_size.push((bytes, worst_private));
        drop(provider);
    }
    let (_, base) = private_by_size[0];
    let (full_bytes, full) = private_by_size[2];
    let growth = full.saturating_sub(base);
    println!(
        "\nprivate (Private_Clean + Private_Dirty) per worker: {:.1} MiB without tables, {:.1} MiB with {:.0} MiB of mapped tables: grew by {:.1} MiB",
        base as f64 / MIB,
        full as f64 / MIB,
        full_bytes as f64 / MIB,
        growth as f64 / MIB
    );
    Ok(growth < 16 << 20)
}

const MIB: f64 = 1024.0 * 1024.0;

fn private(m: &BTreeMap<String, u64>) -> u64 {
    m.get("Private_Clean").copied().unwrap_or(0) + m.get("Private_Dirty").copied().unwrap_or(0)
}

/// Seconds from spawning `gridkey worker` to its handshake, sorted.
fn start_times(gridkey_bin: &Path, n: usize) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut child = Command::new(gridkey_bin)
            .arg("worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", gridkey_bin.display()))?;
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        match read_frame::<FromWorker, _>(&mut out)? {
            Some(FromWorker::Hello { .. }) => times.push(t.elapsed().as_secs_f64()),
            other => bail!("the worker's first frame is not a handshake: {other:?}"),
        }
        drop(child.stdin.take());
        child.wait()?;
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

fn task(program: &str, provider: &Arc<CompileTimeOffsetProvider>, cache: &Path) -> CompilationTask {
    CompilationTask {
        program: program.to_owned(),
        encoding: Vec::new(),
        options: TranslationOptions::new(),
        provider: provider.clone(),
        settings: gridkey::task_settings(&crate::settings_for(cache, gridkey_jobs::BuildJobs::default()))
            .expect("the memory cache and the caller's compiler are usable"),
    }
}

/// The eight ICON connectivities at R02B09 sizes divided by `divide`, with indices spread over
/// the codomain, stored and mapped (one table in memory at a time).
fn provider(store: &TableStore, divide: usize) -> Result<Arc<CompileTimeOffsetProvider>> {
    let mut provider = CompileTimeOffsetProvider::new();
    for (offset, (domain, n), (codomain, m), k) in TABLES {
        let (n, m) = (n / divide, m / divide);
        let table = ndarray::Array2::from_shape_fn((n, k), |(i, j)| ((i * 7 + j * 13) % m) as i32);
        let digest = gridkey_digest::digest_table(table.view());
        store.put_table(digest, table.view())?;
        drop(table);
        let spec = TableSpec { digest, dtype: gridkey_digest::Dtype::I32, shape: [n, k] };
        let c = CompileTimeConnectivity::rehydrate(
            offset,
            store,
            &spec,
            Dimension::new(domain, DimensionKind::Horizontal),
            Dimension::new(format!("{offset}Dim"), DimensionKind::Local),
            Dimension::new(codomain, DimensionKind::Horizontal),
            None,
        )?;
        provider.push(offset, Entry::Gather(Arc::new(c)))?;
    }
    Ok(Arc::new(provider))
}

fn table_bytes(provider: &CompileTimeOffsetProvider) -> u64 {
    provider
        .entries()
        .iter()
        .map(|(_, e)| match e {
            Entry::Gather(c) => (c.shape()[0] * c.shape()[1] * 4) as u64,
            Entry::Dimension(_) => 0,
        })
        .sum()
}

/// Reads every element in this process (the sum the workers must also find).
fn touch(provider: &CompileTimeOffsetProvider) -> i64 {
    let mut sum = 0i64;
    for (_, e) in provider.entries() {
        if let Entry::Gather(c) = e {
            sum = match c.table() {
                TableView::I32(t) => t.iter().fold(sum, |a, &x| a.wrapping_add(x as i64)),
                TableView::I64(t) => t.iter().fold(sum, |a, &x| a.wrapping_add(x)),
            };
        }
    }
    sum
}
