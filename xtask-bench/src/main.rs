//! `cargo xtask bench [--quick]`: digest, compile-time views, keys, payload and build jobs,
//! each measured against its limit in the same run (README "Performance"; ADR 0008 for the
//! digest, ADR 0011 for the view build).
//!
//! What the integrity checks cost: `convert_stored` converts the R2B9-size provider in a fresh
//! process whose store already holds its tables (ADR 0027, ADR 0028), against one digest of the
//! same tables in a fresh process of the same kind (both are this binary, run as
//! `cargo xtask bench --child KIND CACHE`); `key_lock` times one per-key lock and release
//! (ADR 0025); `warm_run` splits a warm `gridkey run` into the parts its report times (convert,
//! keys, lookup, lock, library check, load); `concurrent_runs_N` starts N = 2, 4, 8 and 16
//! `gridkey run` on one empty cache (in `--quick` too, once each) and counts translations and
//! builds in all, against one run.
//!
//! Every case reports the median of its repetitions in seconds and a `ratio` against the limit
//! named in the case (a plain read, a one-shot xxh3, a plain write, serial mode), because
//! absolute times on a shared 2-core machine are noisy while ratios taken in one run are not.
//! The JSON goes to `target/gridkey-bench.json`; a table goes to stdout. Goals are reported
//! (`meets`), never enforced: this is a benchmark, not a test, and it always exits 0 once the
//! JSON is written.
//!
//! This crate is `cargo xtask bench`'s own (ADR 0042): `cargo xtask bench ARGS` runs
//! `cargo run --release -p xtask-bench -- bench ARGS`.

use std::hint::black_box;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use gridkey::{RunConfig, StencilHandler};
use gridkey_digest::digest_table;
use gridkey_fingerprint::{KeyInputs, TranslationOptions};
use gridkey_grid::{read_grid, Grid};
use gridkey_jobs::protocol::{write_frame, ToWorker, WireTask};
use gridkey_jobs::{BuildJobs, BuildJobsMode, CompilationTask, Runner, WorkerCommand};
use gridkey_offsets::{
    compile_time_connectivity, compile_time_offset_provider, CompileTimeOffsetProvider, Connectivity, Entry,
    IndexTable, OffsetProvider,
};
use gridkey_store::TableStore;
use ndarray::{ArcArray2, Array2, ShapeBuilder};
use serde_json::{json, Value};
use xtask_common::{build_gridkey, root, settings_for, target_dir};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("bench") => bench(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask bench [--quick]");
            return std::process::ExitCode::from(2);
        }
    };
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Rows of the large synthetic table (R2B9 scale: 3e7 rows x 2 int32 = 240 MB).
const LARGE_ROWS: usize = 30_000_000;

/// Row counts of an R2B9 grid (cells, edges, vertices) for the payload case.
const R2B9_ROWS: [(&str, usize); 3] = [("Cell", 20_971_520), ("Edge", 31_457_280), ("Vertex", 10_485_762)];

/// How many times each ICON table is tiled along its rows for the size-independence cases.
const TILES: usize = 100;

struct Reps {
    large: usize,
    small_batches: usize,
    builds: usize,
}

/// Runs the benchmark; returns Ok(true) once the JSON is written.
fn bench(args: &[String]) -> Result<bool> {
    let quick = match args {
        [] => false,
        [flag] if flag == "--quick" => true,
        [flag, kind, cache] if flag == CHILD_FLAG => return child(kind, Path::new(cache)),
        _ => bail!("unexpected arguments {args:?}: expected [--quick]"),
    };
    let reps = if quick {
        Reps { large: 9, small_batches: 21, builds: 3 }
    } else {
        Reps { large: 15, small_batches: 41, builds: 5 }
    };
    let started = Instant::now();
    let target = target_dir();
    let scratch = target.join("bench-scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
    let grid_path = root().join(gridkey::SHIPPED_GRID);
    let grid = read_grid(&grid_path)?;
    let mut cases = Vec::new();

    eprintln!("bench: synthetic table {LARGE_ROWS} x 2 int32");
    let large = synthetic_table(LARGE_ROWS, 2, 0x9e37_79b9);
    cases.push(digest_c(&large, reps.large));
    cases.push(digest_c_small(&grid, reps.small_batches)?);
    cases.push(digest_f(&large, reps.large));
    eprintln!("bench: view_build");
    cases.push(view_build(&large, reps.large.min(5), &scratch)?);
    drop(large);
    eprintln!("bench: view_memo, key");
    let tiled = tiled_provider(grid.provider(), TILES)?;
    let store = TableStore::open(&scratch.join("cache-keys"))?;
    let memo = gridkey_offsets::ConversionMemo::new();
    let icon_ct = memo.provider(grid.provider(), &store)?;
    let tiled_ct = memo.provider(&tiled, &store)?;
    cases.push(view_memo(&memo, grid.provider(), &tiled, &store, reps.small_batches)?);
    cases.push(key_case(&icon_ct, &tiled_ct, reps.small_batches)?);
    drop((tiled, tiled_ct));
    eprintln!("bench: payload (R2B9-size provider)");
    cases.push(payload(grid.provider(), &icon_ct, &scratch)?);
    eprintln!("bench: convert_stored (R2B9-size provider, fresh processes)");
    cases.push(convert_stored(&scratch, reps.builds)?);
    eprintln!("bench: process_speedup, worker_start");
    let gridkey_bin = build_gridkey()?;
    cases.push(process_speedup(&grid, &grid_path, &gridkey_bin, &scratch, reps.builds)?);
    cases.push(worker_start(&gridkey_bin, &scratch, reps.builds.max(3) + 2)?);
    eprintln!("bench: key_lock, warm_run, concurrent_runs");
    cases.push(key_lock(&scratch, reps.small_batches)?);
    cases.push(sync_batch(&scratch, reps.small_batches)?);
    let runs = GridkeyRuns { bin: &gridkey_bin, grid: &grid_path };
    cases.push(warm_run(&runs, &scratch, reps.builds)?);
    // Every N in --quick too: the runs of one N share the work of one, so N = 16 costs seconds.
    cases.extend(concurrent_runs(&runs, &scratch, &CONCURRENT_RUNS, if quick { 1 } else { 3 })?);
    let _ = std::fs::remove_dir_all(&scratch);

    let doc = json!({
        "command": if quick { "cargo xtask bench --quick" } else { "cargo xtask bench" },
        "quick": quick,
        "machine": machine(),
        "total_seconds": started.elapsed().as_secs_f64(),
        "cases": cases,
    });
    let out = target.join("gridkey-bench.json");
    std::fs::write(&out, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("cannot write {}", out.display()))?;
    print_table(&doc);
    println!("\nwrote {} in {:.1} s", out.display(), started.elapsed().as_secs_f64());
    Ok(true)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Median seconds of `reps` calls of `f` and of `g`, interleaved (after one warm-up each) so
/// that both see the same background load.
fn time_pair<R, S>(reps: usize, mut f: impl FnMut() -> R, mut g: impl FnMut() -> S) -> (f64, f64) {
    black_box(f());
    black_box(g());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        black_box(f());
        a.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        black_box(g());
        b.push(t.elapsed().as_secs_f64());
    }
    (median(a), median(b))
}

/// Median seconds of one call of `f`, over `batches` batches of calls lasting about 20 ms each.
fn time_small<R>(batches: usize, mut f: impl FnMut() -> R) -> f64 {
    let t = Instant::now();
    let mut calls = 0u64;
    while t.elapsed().as_secs_f64() < 0.02 || calls < 3 {
        black_box(f());
        calls += 1;
    }
    median(
        (0..batches)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..calls {
                    black_box(f());
                }
                t.elapsed().as_secs_f64() / calls as f64
            })
            .collect(),
    )
}

/// Median seconds of one call of each of `fs`, over `batches` rounds in which every function
/// runs one batch of about 20 ms in turn, so that all see the same background load.
fn time_small_interleaved(batches: usize, fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    let calls: Vec<u64> = fs
        .iter_mut()
        .map(|f| {
            let t = Instant::now();
            let mut calls = 0u64;
            while t.elapsed().as_secs_f64() < 0.02 || calls < 3 {
                f();
                calls += 1;
            }
            calls
        })
        .collect();
    let mut times = vec![Vec::new(); fs.len()];
    for _ in 0..batches {
        for ((f, &n), out) in fs.iter_mut().zip(&calls).zip(&mut times) {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            out.push(t.elapsed().as_secs_f64() / n as f64);
        }
    }
    times.into_iter().map(median).collect()
}

/// A C-order int32 table of `rows x cols` with indices spread over `[0, rows)` (xorshift).
fn synthetic_table(rows: usize, cols: usize, seed: u32) -> ArcArray2<i32> {
    let mut x = seed | 1;
    let v: Vec<i32> = (0..rows * cols)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as usize % rows) as i32
        })
        .collect();
    Array2::from_shape_vec((rows, cols), v).expect("rows * cols elements").into_shared()
}

/// The plain read of a table: the wrapping sum of its elements (vectorised by the compiler).
fn plain_read(slice: &[i32]) -> i32 {
    slice.iter().fold(0i32, |a, &x| a.wrapping_add(x))
}

fn gbps(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

fn digest_c(large: &ArcArray2<i32>, reps: usize) -> Value {
    let bytes = large.len() * 4;
    let slice = large.as_slice().expect("C order");
    let (read, digest) = time_pair(reps, || plain_read(black_box(slice)), || digest_table(black_box(large.view())));
    let ratio = read / digest;
    json!({
        "name": "digest_c",
        "what": "digest_table of a C-order int32 table (hashed in place)",
        "shape": [large.nrows(), large.ncols()],
        "bytes": bytes, "seconds": digest, "gb_per_s": gbps(bytes, digest),
        "limit": "plain read of the same bytes (wrapping sum of the elements)",
        "limit_seconds": read, "limit_gb_per_s": gbps(bytes, read),
        "ratio": ratio, "ratio_means": "throughput of the digest / throughput of the plain read",
        "goal": ">= 0.9", "meets": ratio >= 0.9,
    })
}

fn digest_c_small(grid: &Grid, batches: usize) -> Result<Value> {
    let Some(c) = grid.provider().gather("C2E") else { bail!("the ICON grid has no C2E") };
    let IndexTable::I32(table) = c.host_table("C2E")? else { bail!("C2E is int32") };
    let table = table.as_standard_layout().into_owned();
    let bytes: &[u8] = bytemuck_cast(table.as_slice().expect("C order"));
    let view = table.view();
    let times = time_small_interleaved(
        batches,
        &mut [
            &mut || {
                black_box(digest_table(black_box(view)));
            },
            &mut || {
                black_box(twox_hash::XxHash3_128::oneshot(black_box(bytes)));
            },
            &mut || {
                black_box(xxhash_rust::xxh3::xxh3_128(black_box(bytes)));
            },
            &mut || {
                let mut h = xxhash_rust::xxh3::Xxh3::new();
                h.update(black_box(bytes));
                black_box(h.digest128());
            },
            // The streaming API alone, no prefix: what separates the digest from the one-shot.
            &mut || {
                let mut h = twox_hash::XxHash3_128::new();
                h.write(black_box(bytes));
                black_box(h.finish_128());
            },
        ],
    );
    let [digest, twox, xxhash_rust, xxhash_rust_stream, twox_stream] = times[..] else {
        unreachable!("five functions")
    };
    let same = twox_hash::XxHash3_128::oneshot(bytes) == xxhash_rust::xxh3::xxh3_128(bytes);
    let limit = twox.min(xxhash_rust);
    let ratio = limit / digest;
    Ok(json!({
        "name": "digest_c_small",
        "what": "digest_table of the ICON R02B04 C2E table (in cache): prefix + elements, streaming",
        "shape": table.shape(),
        "bytes": bytes.len(), "seconds": digest, "gb_per_s": gbps(bytes.len(), digest),
        "limit": "xxh3_128 one-shot over the same bytes, fastest of twox-hash 2 (SIMD path chosen at run time) and xxhash-rust (path chosen at compile time)",
        "limit_seconds": limit,
        "twox_hash_oneshot_seconds": twox, "twox_hash_oneshot_gb_per_s": gbps(bytes.len(), twox),
        "xxhash_rust_oneshot_seconds": xxhash_rust, "xxhash_rust_oneshot_gb_per_s": gbps(bytes.len(), xxhash_rust),
        "xxhash_rust_streaming_seconds": xxhash_rust_stream,
        "xxhash_rust_streaming_gb_per_s": gbps(bytes.len(), xxhash_rust_stream),
        "twox_hash_streaming_no_prefix_seconds": twox_stream,
        "twox_hash_streaming_no_prefix_gb_per_s": gbps(bytes.len(), twox_stream),
        "streaming_api_ratio": limit / twox_stream,
        "streaming_api_ratio_means": "throughput of the bare streaming API (no prefix, same bytes) / the one-shot limit: the ceiling of a digest that must stream a prefix",
        "implementations_agree": same,
        "cpu_avx2": std::arch::is_x86_feature_detected!("avx2"),
        "ratio": ratio, "ratio_means": "throughput of the digest / throughput of the one-shot limit",
        "goal": ">= 0.9", "meets": ratio >= 0.9,
    }))
}

fn bytemuck_cast(slice: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding and any byte is a valid u8; the length is scaled by 4.
    unsafe { std::slice::from_raw_parts(slice.as_ptr().cast::<u8>(), std::mem::size_of_val(slice)) }
}

fn digest_f(large: &ArcArray2<i32>, reps: usize) -> Value {
    let mut fortran = Array2::<i32>::zeros(large.raw_dim().f());
    fortran.assign(large);
    let bytes = fortran.len() * 4;
    let agrees = digest_table(fortran.view()) == digest_table(large.view());
    let rss_before = proc_status_kib("VmRSS");
    let reset = reset_peak_rss();
    let hwm_before = proc_status_kib("VmHWM");
    black_box(digest_table(black_box(fortran.view())));
    let hwm_after = proc_status_kib("VmHWM");
    let growth_kib = match (reset, rss_before, hwm_after) {
        (true, Some(before), Some(after)) => Some(after.saturating_sub(before)),
        (false, _, Some(after)) => hwm_before.map(|b| after.saturating_sub(b)),
        _ => None,
    };
    let (digest_c_seconds, seconds) =
        time_pair(reps, || digest_table(black_box(large.view())), || digest_table(black_box(fortran.view())));
    let ratio = digest_c_seconds / seconds;
    json!({
        "name": "digest_f",
        "what": "digest_table of the same table in Fortran order (blocks of rows transposed into a 64 KiB buffer)",
        "shape": [fortran.nrows(), fortran.ncols()],
        "bytes": bytes, "seconds": seconds, "gb_per_s": gbps(bytes, seconds),
        "limit": "digest_c of the same table (C order), interleaved in the same run", "limit_seconds": digest_c_seconds,
        "ratio": ratio, "ratio_means": "throughput of digest_f / throughput of digest_c",
        "same_digest_as_c_order": agrees,
        "peak_rss_growth_bytes": growth_kib.map(|k| k * 1024),
        "peak_rss_method": if reset { "VmHWM after the digest minus VmRSS before, peak reset through /proc/self/clear_refs" } else { "VmHWM after minus VmHWM before (peak could not be reset)" },
        "goal": ">= 0.5, extra memory at most a few MiB",
        "meets": ratio >= 0.5 && growth_kib.is_some_and(|k| k <= 4 * 1024),
    })
}

fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// Resets the peak RSS (VmHWM) to the current RSS (Linux `clear_refs` value 5).
fn reset_peak_rss() -> bool {
    std::fs::OpenOptions::new().write(true).open("/proc/self/clear_refs").and_then(|mut f| f.write_all(b"5")).is_ok()
}

fn host_connectivity_of(table: &ArcArray2<i32>) -> Result<Arc<Connectivity>> {
    let (cell, edge, local) = dims("Cell", "Edge", "E2CDim");
    Ok(Arc::new(Connectivity::from_host(edge, local, cell, None, IndexTable::I32(table.clone()))?))
}

fn dims(
    domain: &str,
    codomain: &str,
    local: &str,
) -> (gridkey_offsets::Dimension, gridkey_offsets::Dimension, gridkey_offsets::Dimension) {
    use gridkey_offsets::{Dimension, DimensionKind};
    (
        Dimension::new(domain, DimensionKind::Horizontal),
        Dimension::new(codomain, DimensionKind::Horizontal),
        Dimension::new(local, DimensionKind::Local),
    )
}

/// Writes back every dirty page (`sync(2)`), untimed, so that each timed write starts from the
/// same clean page cache instead of paying for the previous one's writeback or discards.
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

fn view_build(large: &ArcArray2<i32>, reps: usize, scratch: &Path) -> Result<Value> {
    let bytes = large.len() * 4;
    let data: &[u8] = bytemuck_cast(large.as_slice().expect("C order"));
    let mut build = Vec::new();
    let mut write = Vec::new();
    let mut write_sync = Vec::new();
    let mut parts = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..reps {
        // The same steps one by one, for the profile: digest, store write, checked open.
        let dir = scratch.join(format!("view-parts-{i}"));
        let store = TableStore::open(&dir)?;
        settle();
        let t = Instant::now();
        let digest = digest_table(large.view());
        parts[0].push(t.elapsed().as_secs_f64());
        settle();
        let t = Instant::now();
        store.put_table(digest, large.view())?;
        parts[1].push(t.elapsed().as_secs_f64());
        let spec = gridkey_store::TableSpec {
            digest,
            dtype: gridkey_digest::Dtype::I32,
            shape: [large.nrows(), large.ncols()],
        };
        settle();
        let t = Instant::now();
        black_box(store.open_table(&spec)?);
        parts[2].push(t.elapsed().as_secs_f64());
        std::fs::remove_dir_all(&dir)?;

        // A fresh store and a fresh runtime connectivity: a memo miss and a store miss.
        let dir = scratch.join(format!("view-build-{i}"));
        let store = TableStore::open(&dir)?;
        let connectivity = host_connectivity_of(large)?;
        settle();
        let t = Instant::now();
        let ct = compile_time_connectivity("E2C", &connectivity, &store)?;
        build.push(t.elapsed().as_secs_f64());
        black_box(ct.digest());
        drop((ct, connectivity));
        std::fs::remove_dir_all(&dir)?;

        let plain = scratch.join(format!("plain-{i}.bin"));
        settle();
        let t = Instant::now();
        std::fs::write(&plain, data)?;
        write.push(t.elapsed().as_secs_f64());
        std::fs::remove_file(&plain)?;

        settle();
        let t = Instant::now();
        let mut f = std::fs::File::create(&plain)?;
        f.write_all(data)?;
        f.sync_all()?;
        write_sync.push(t.elapsed().as_secs_f64());
        drop(f);
        std::fs::remove_file(&plain)?;
    }
    let (build, write, write_sync) = (median(build), median(write), median(write_sync));
    let [digest_s, store_s, open_s] = parts.map(median);
    // The store must sync_all before the rename (ADR 0002): a file named by its content must
    // not be empty after a crash. The profile shows the sync dominating the plain write, so the
    // fair limit is the same bytes written and synced; the plain write is reported beside it.
    let ratio = build / write_sync;
    Ok(json!({
        "name": "view_build",
        "what": "compile_time_connectivity of a fresh host int32 table into a fresh store: digest on a second thread while the .npy is written (temp file, sync_all, rename), checked mmap open",
        "shape": [large.nrows(), large.ncols()],
        "bytes": bytes, "seconds": build,
        "limit": "std::fs::File::create + write_all + sync_all of the same bytes on the same file system, same run (the store syncs every table; see profile_seconds)",
        "limit_seconds": write_sync,
        "plain_write_seconds": write,
        "profile_seconds": { "digest": digest_s, "store_write": store_s, "checked_open": open_s },
        "ratio": ratio, "ratio_means": "time of the view build / time of write + sync_all",
        "ratio_against_plain_write": build / write,
        "goal": "<= 1.5", "meets": ratio <= 1.5,
    }))
}

/// `provider` with every gather table tiled `tiles` times along its rows (new runtime tables).
fn tiled_provider(provider: &OffsetProvider, tiles: usize) -> Result<OffsetProvider> {
    let mut out = OffsetProvider::new();
    for (offset, entry) in provider.entries() {
        let entry = match entry {
            Entry::Dimension(d) => Entry::Dimension(d.clone()),
            Entry::Gather(c) => {
                let IndexTable::I32(a) = c.host_table(offset)? else { bail!("grid tables are int32") };
                let views = vec![a.view(); tiles];
                let big = ndarray::concatenate(ndarray::Axis(0), &views)?;
                Entry::Gather(Arc::new(Connectivity::from_host(
                    c.domain().clone(),
                    c.local().clone(),
                    c.codomain().clone(),
                    c.skip_value(),
                    IndexTable::I32(big.into_shared()),
                )?))
            }
        };
        out.push(offset.clone(), entry)?;
    }
    Ok(out)
}

fn table_bytes<G>(provider: &gridkey_offsets::Provider<G>, shape: impl Fn(&G) -> ([usize; 2], usize)) -> usize {
    provider
        .entries()
        .iter()
        .filter_map(|(_, e)| match e {
            Entry::Gather(g) => {
                let (s, item) = shape(g);
                Some(s[0] * s[1] * item)
            }
            Entry::Dimension(_) => None,
        })
        .sum()
}

fn runtime_bytes(p: &OffsetProvider) -> usize {
    table_bytes(p, |c| (c.shape(), c.dtype().itemsize()))
}

fn ct_bytes(p: &CompileTimeOffsetProvider) -> usize {
    table_bytes(p, |c| (c.shape(), c.dtype().itemsize()))
}

fn gathers<G>(p: &gridkey_offsets::Provider<G>) -> usize {
    p.entries().iter().filter(|(_, e)| matches!(e, Entry::Gather(_))).count()
}

fn view_memo(
    memo: &gridkey_offsets::ConversionMemo,
    icon: &OffsetProvider,
    tiled: &OffsetProvider,
    store: &TableStore,
    batches: usize,
) -> Result<Value> {
    let n = gathers(icon);
    let icon_s = time_small(batches, || memo.provider(icon, store).expect("memo hit")) / n as f64;
    let tiled_s = time_small(batches, || memo.provider(tiled, store).expect("memo hit")) / n as f64;
    let worst = icon_s.max(tiled_s);
    Ok(json!({
        "name": "view_memo",
        "what": "ConversionMemo::provider of the same runtime provider again (memo hits), per connectivity",
        "connectivities": n,
        "bytes": runtime_bytes(icon), "seconds": icon_s,
        "tiled_bytes": runtime_bytes(tiled), "tiled_seconds": tiled_s,
        "limit": "none; the ratio compares the provider with tables tiled 100 times to the ICON provider",
        "ratio": tiled_s / icon_s, "ratio_means": "seconds per connectivity, tiled / ICON (1 = independent of table size)",
        "goal": "< 5 microseconds per connectivity, independent of table size", "meets": worst < 5e-6,
    }))
}

fn key_case(icon: &CompileTimeOffsetProvider, tiled: &CompileTimeOffsetProvider, batches: usize) -> Result<Value> {
    let programs = gridkey_stencil::icon_programs();
    let Some(div) = programs.iter().find(|p| p.name() == "div") else { bail!("no program div") };
    let encoding = div.encode();
    let frontend = gridkey_stencil::frontend();
    let options = TranslationOptions::new();
    let key = |p: &CompileTimeOffsetProvider| KeyInputs::new(&frontend, div.name(), &encoding, &options, p).key();
    let icon_s = time_small(batches, || key(icon));
    let tiled_s = time_small(batches, || key(tiled));
    let worst = icon_s.max(tiled_s);
    Ok(json!({
        "name": "key",
        "what": "TranslationKey of div (KeyInputs::new + key) against the compile-time provider",
        "bytes": ct_bytes(icon), "seconds": icon_s,
        "tiled_bytes": ct_bytes(tiled), "tiled_seconds": tiled_s,
        "limit": "none; the ratio compares the provider with tables tiled 100 times to the ICON provider",
        "ratio": tiled_s / icon_s, "ratio_means": "key seconds, tiled / ICON (1 = independent of table size)",
        "reference": "GT4Py 1.2.3 on this machine: 7 ms (ICON) and 131-155 ms (tiled)",
        "goal": "< 10 microseconds for both", "meets": worst < 10e-6,
    }))
}

/// An offset provider with the ICON entries (names, dimensions, widths, skip values) and tables
/// of R2B9 row counts. Tables of the same shape share one synthetic content (the store keeps it
/// once), which does not matter to a frame that carries digests only.
fn r2b9_provider(icon: &OffsetProvider) -> Result<OffsetProvider> {
    let mut out = OffsetProvider::new();
    let mut by_shape: Vec<([usize; 2], ArcArray2<i32>)> = Vec::new();
    for (offset, entry) in icon.entries() {
        let entry = match entry {
            Entry::Dimension(d) => Entry::Dimension(d.clone()),
            Entry::Gather(c) => {
                let Some(&(_, rows)) = R2B9_ROWS.iter().find(|(name, _)| *name == c.domain().name()) else {
                    bail!("no R2B9 row count for domain {}", c.domain().name())
                };
                let shape = [rows, c.shape()[1]];
                let table = match by_shape.iter().find(|(s, _)| *s == shape) {
                    Some((_, t)) => t.clone(),
                    None => {
                        let t = synthetic_table(rows, shape[1], rows as u32);
                        by_shape.push((shape, t.clone()));
                        t
                    }
                };
                Entry::Gather(Arc::new(Connectivity::from_host(
                    c.domain().clone(),
                    c.local().clone(),
                    c.codomain().clone(),
                    c.skip_value(),
                    IndexTable::I32(table),
                )?))
            }
        };
        out.push(offset.clone(), entry)?;
    }
    Ok(out)
}

/// The flag of the child processes of [`convert_stored`]: `cargo xtask bench --child KIND CACHE`.
const CHILD_FLAG: &str = "--child";

/// A child process of [`convert_stored`]: builds the R2B9-size provider (untimed), then times
/// one `KIND` (`convert`: [`compile_time_offset_provider`] into the store of `cache`; `digest`:
/// [`digest_table`] of every gather table once; `read`: a plain read of every gather table and
/// of its stored file) and prints `{"seconds": ..}` and what it did as one JSON line.
fn child(kind: &str, cache: &Path) -> Result<bool> {
    let grid = read_grid(&root().join(gridkey::SHIPPED_GRID))?;
    let r2b9 = r2b9_provider(grid.provider())?;
    let tables: Vec<ArcArray2<i32>> = r2b9
        .entries()
        .iter()
        .filter_map(|(name, e)| match e {
            Entry::Gather(c) => Some((name, c)),
            Entry::Dimension(_) => None,
        })
        .map(|(name, c)| match c.host_table(name)? {
            IndexTable::I32(a) => Ok(a),
            IndexTable::I64(_) => bail!("the R2B9-size tables are int32"),
        })
        .collect::<Result<_>>()?;
    let bytes: usize = tables.iter().map(|t| t.len() * 4).sum();
    let out = match kind {
        "digest" => {
            let t = Instant::now();
            for table in &tables {
                black_box(digest_table(black_box(table.view())));
            }
            json!({ "seconds": t.elapsed().as_secs_f64(), "tables": tables.len(), "bytes": bytes })
        }
        "convert" => {
            // As `gridkey run` opens it: its translations check what they read (ADR 0028).
            let store = TableStore::open(cache)?.checked_by_readers(true);
            let memo = gridkey_offsets::ConversionMemo::new();
            let t = Instant::now();
            let ct = memo.provider(&r2b9, &store)?;
            let seconds = t.elapsed().as_secs_f64();
            black_box(&ct);
            json!({
                "seconds": seconds, "tables": tables.len(), "bytes": bytes,
                "tables_hashed": memo.stats().tables_hashed,
                "bytes_hashed": memo.stats().bytes_hashed,
                "repaired": store.repaired().len(),
            })
        }
        "read" => {
            // The floor of any check that reads every stored byte: the runtime tables and the
            // stored files read once each (names found untimed).
            let store = TableStore::open(cache)?;
            let specs: Vec<gridkey_store::TableSpec> = tables
                .iter()
                .map(|t| gridkey_store::TableSpec {
                    digest: digest_table(t.view()),
                    dtype: gridkey_digest::Dtype::I32,
                    shape: [t.nrows(), t.ncols()],
                })
                .collect();
            let t = Instant::now();
            for (table, spec) in tables.iter().zip(&specs) {
                let stored = store.open_table(spec)?;
                let gridkey_store::TableView::I32(view) = stored.view() else { bail!("stored as int32") };
                black_box(plain_read(view.as_slice().context("C order")?));
                black_box(plain_read(table.as_slice().context("C order")?));
            }
            json!({ "seconds": t.elapsed().as_secs_f64(), "tables": tables.len(), "bytes": bytes })
        }
        other => bail!("unknown child kind {other:?}: expected convert, digest or read"),
    };
    println!("{out}");
    Ok(true)
}

/// Runs `cargo xtask bench --child KIND CACHE` (this very binary) and returns its JSON line.
fn run_child(kind: &str, cache: &Path) -> Result<Value> {
    let exe = std::env::current_exe().context("cannot find the xtask binary")?;
    let out = std::process::Command::new(&exe)
        .args(["bench", CHILD_FLAG, kind])
        .arg(cache)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    if !out.status.success() {
        bail!("the {kind} child process failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).with_context(|| format!("the {kind} child printed {text:?}"))
}

/// Conversion of the R2B9-size provider in a fresh process whose store already holds its
/// tables, against one digest of the same runtime tables in a fresh process of the same kind.
fn convert_stored(scratch: &Path, reps: usize) -> Result<Value> {
    let cache = scratch.join("cache-convert");
    // The first conversion stores the tables; the timed ones find them under their names.
    let fill = run_child("convert", &cache)?;
    let (mut convert, mut digest, mut read, mut runs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let seconds = |v: &Value| v["seconds"].as_f64().context("a child's seconds");
    for _ in 0..reps {
        settle();
        digest.push(seconds(&run_child("digest", &cache)?)?);
        settle();
        let run = run_child("convert", &cache)?;
        convert.push(seconds(&run)?);
        runs.push(run);
        settle();
        read.push(seconds(&run_child("read", &cache)?)?);
    }
    let temps = count_temps(&cache);
    let (convert, digest, read) = (median(convert), median(digest), median(read));
    let ratio = convert / digest;
    let repaired: u64 = runs.iter().filter_map(|r| r["repaired"].as_u64()).sum();
    let all_hashed_once =
        runs.iter().all(|r| r["tables_hashed"] == fill["tables"] && r["bytes_hashed"] == fill["bytes"]);
    std::fs::remove_dir_all(&cache)?;
    Ok(json!({
        "name": "convert_stored",
        "what": "compile_time_offset_provider of the R2B9-size provider in a fresh process whose store already holds every table (each connectivity: its stored file found by size and first 64 KiB, the runtime table hashed, the file under the digest's name kept after its checked mmap open, unread, as `gridkey run` does, whose translations check what they read; ADR 0027, ADR 0028)",
        "tables": fill["tables"], "bytes": fill["bytes"], "seconds": convert,
        "first_conversion_seconds": fill["seconds"],
        "limit": "one digest_table of every runtime table of the same provider, in a fresh process of the same kind, interleaved in the same run",
        "limit_seconds": digest,
        "ratio": ratio, "ratio_means": "conversion seconds / digest seconds",
        "read_floor_seconds": read,
        "read_floor_means": "a plain read (sum of the elements) of every runtime table and of its stored file, in a fresh process of the same kind: the memory traffic of any check that reads every stored byte",
        "ratio_to_read_floor": convert / read,
        "digest_ratio_to_read_floor": digest / read,
        "repaired": repaired, "each_table_hashed_once": all_hashed_once, "temps_left": temps,
        "goal": "<= 1.3", "meets": ratio <= 1.3 && repaired == 0 && all_hashed_once && temps == 0,
    }))
}

/// Files and directories named [`gridkey_fs::TEMP_PREFIX`]`*` under `dir`, recursively.
fn count_temps(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| {
            let temp = e.file_name().to_string_lossy().starts_with(gridkey_fs::TEMP_PREFIX);
            let below = if e.file_type().is_ok_and(|t| t.is_dir()) { count_temps(&e.path()) } else { 0 };
            usize::from(temp) + below
        })
        .sum()
}

fn frame_of(provider: &Arc<CompileTimeOffsetProvider>, cache_dir: &Path) -> Result<(usize, usize)> {
    let programs = gridkey_stencil::icon_programs();
    let div = programs.iter().find(|p| p.name() == "div").context("no program div")?;
    let task = CompilationTask {
        program: div.name().to_owned(),
        encoding: div.encode(),
        options: TranslationOptions::new(),
        provider: provider.clone(),
        settings: gridkey::task_settings(&settings_for(cache_dir, BuildJobs::new(BuildJobsMode::Serial, 1)))?,
    };
    let message = ToWorker::Task { id: 0, task: Box::new(WireTask::from_task(&task).map_err(anyhow::Error::msg)?) };
    let mut frame = Vec::new();
    write_frame(&mut frame, &message)?;
    let postcard = postcard::to_stdvec(&message)?;
    Ok((frame.len(), postcard.len()))
}

fn payload(icon: &OffsetProvider, icon_ct: &CompileTimeOffsetProvider, scratch: &Path) -> Result<Value> {
    let r2b9 = r2b9_provider(icon)?;
    // Both frames name the same cache directory, so that only the providers differ.
    let cache_dir = scratch.join("cache-payload");
    let store = TableStore::open(&cache_dir)?;
    let r2b9_ct = Arc::new(compile_time_offset_provider(&r2b9, &store)?);
    let icon_ct = Arc::new(icon_ct.clone());
    let (icon_frame, icon_postcard) = frame_of(&icon_ct, &cache_dir)?;
    let (r2b9_frame, r2b9_postcard) = frame_of(&r2b9_ct, &cache_dir)?;
    Ok(json!({
        "name": "payload",
        "what": "bytes of one process-mode task frame (write_frame of ToWorker::Task for div)",
        "bytes": icon_frame, "seconds": null,
        "table_bytes": ct_bytes(&icon_ct),
        "r2b9_frame_bytes": r2b9_frame, "r2b9_table_bytes": ct_bytes(&r2b9_ct),
        "postcard_bytes": icon_postcard, "r2b9_postcard_bytes": r2b9_postcard,
        "limit": "none; the ratio compares the R2B9-size frame to the ICON frame",
        "ratio": r2b9_frame as f64 / icon_frame as f64, "ratio_means": "frame bytes, R2B9 / ICON",
        "goal": "identical byte counts (no table bytes travel)",
        "meets": r2b9_frame == icon_frame,
    }))
}

fn process_speedup(grid: &Grid, grid_path: &Path, gridkey_bin: &Path, scratch: &Path, reps: usize) -> Result<Value> {
    let programs = gridkey_stencil::icon_programs();
    let mut times = [Vec::new(), Vec::new()];
    let modes = [(BuildJobsMode::Serial, 1), (BuildJobsMode::Process, 2)];
    for rep in 0..reps {
        for (slot, &(mode, jobs)) in modes.iter().enumerate() {
            // A fresh cache and a fresh runner: every program translated and built, workers started.
            let cache = scratch.join(format!("cache-build-{rep}-{mode}"));
            std::fs::create_dir_all(&cache)?;
            let jobs = BuildJobs::new(mode, jobs);
            let runner = Runner::new(jobs, Arc::new(StencilHandler), WorkerCommand::gridkey(gridkey_bin.to_path_buf()));
            let config = RunConfig {
                grid: grid_path.to_path_buf(),
                settings: settings_for(&cache, jobs),
                worker: WorkerCommand::gridkey(gridkey_bin.to_path_buf()),
                options: TranslationOptions::new(),
            };
            let report =
                gridkey::run(&config, gridkey::RunOptions::new().grid(grid).programs(&programs).runner(&runner))?;
            if !report.all_verified() || report.translations() != programs.len() {
                bail!(
                    "{mode} mode: {} of {} programs verified, {} translated",
                    report.programs.iter().filter(|p| p.verified).count(),
                    programs.len(),
                    report.translations()
                );
            }
            times[slot].push(report.compile_seconds);
            drop(runner);
            std::fs::remove_dir_all(&cache)?;
        }
    }
    let [serial, process] = times.map(median);
    let ratio = serial / process;
    let (cc_serial, cc_parallel) = cc_only(grid, &programs, scratch, reps)?;
    Ok(json!({
        "name": "process_speedup",
        "what": "compiling (translate + cc build) the ICON programs on a fresh cache, process mode with 2 jobs (worker start included)",
        "programs": programs.len(),
        "bytes": null, "seconds": process,
        "limit": "serial mode, fresh cache, same run", "limit_seconds": serial,
        "ratio": ratio, "ratio_means": "serial seconds / process seconds",
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cc_only_serial_seconds": cc_serial,
        "cc_only_two_at_a_time_seconds": cc_parallel,
        "cc_only_speedup": cc_serial / cc_parallel,
        "cc_only_means": "the same 8 translated C sources built by `cc -O2 -shared -fPIC` directly, one at a time vs two at a time: the speedup the machine allows right now",
        "load_average": std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split_whitespace().next().and_then(|x| x.parse::<f64>().ok())),
        "goal": ">= 1.6", "meets": ratio >= 1.6,
    }))
}

/// Seconds to build the translated sources of `programs` with `cc` directly: one at a time, and
/// two at a time (two threads, half the sources each); medians of `reps`.
fn cc_only(grid: &Grid, programs: &[gridkey_stencil::Program], scratch: &Path, reps: usize) -> Result<(f64, f64)> {
    let cache = scratch.join("cache-cc-only");
    let store = TableStore::open(&cache)?;
    let ct = compile_time_offset_provider(grid.provider(), &store)?;
    let options = TranslationOptions::new();
    let dir = scratch.join("cc-only");
    std::fs::create_dir_all(&dir)?;
    let mut sources = Vec::new();
    for (i, program) in programs.iter().enumerate() {
        let path = dir.join(format!("k{i}.c"));
        std::fs::write(&path, gridkey_stencil::translate(program, &ct, &options)?.as_bytes())?;
        sources.push(path);
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let build = |src: &Path| -> Result<()> {
        let status = std::process::Command::new(&cc)
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(src.with_extension("so"))
            .arg(src)
            .status()?;
        if !status.success() {
            bail!("{cc} failed on {} ({status})", src.display());
        }
        Ok(())
    };
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        for src in &sources {
            build(src)?;
        }
        one.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let (a, b) = sources.split_at(sources.len() / 2);
        std::thread::scope(|scope| -> Result<()> {
            let left = scope.spawn(|| a.iter().try_for_each(|s| build(s)));
            b.iter().try_for_each(|s| build(s))?;
            left.join().map_err(|_| anyhow::anyhow!("a cc thread panicked"))?
        })?;
        two.push(t.elapsed().as_secs_f64());
    }
    Ok((median(one), median(two)))
}

fn worker_start(gridkey_bin: &Path, scratch: &Path, reps: usize) -> Result<Value> {
    let cache = scratch.join("cache-worker");
    std::fs::create_dir_all(&cache)?;
    // An empty task: no offsets and a program encoding that does not decode, so the worker
    // answers after the handshake without translating anything.
    let task = CompilationTask {
        program: "empty".to_owned(),
        encoding: Vec::new(),
        options: TranslationOptions::new(),
        provider: Arc::new(CompileTimeOffsetProvider::new()),
        settings: gridkey::task_settings(&settings_for(&cache, BuildJobs::new(BuildJobsMode::Process, 1)))?,
    };
    let mut times = Vec::new();
    let mut answered = true;
    for _ in 0..reps {
        let jobs = BuildJobs::new(BuildJobsMode::Process, 1);
        let t = Instant::now();
        let runner = Runner::new(jobs, Arc::new(StencilHandler), WorkerCommand::gridkey(gridkey_bin.to_path_buf()));
        let result = runner.run_all(std::slice::from_ref(&task));
        times.push(t.elapsed().as_secs_f64());
        // The handler's decode error proves the task made the round trip through a worker.
        answered &= matches!(&result[..], [Err(e)] if matches!(e.cause, gridkey_jobs::TaskFailure::Handler(_)));
        drop(runner);
    }
    let seconds = median(times);
    Ok(json!({
        "name": "worker_start",
        "what": "spawn a gridkey worker, handshake (Hello), first empty task answered (program that does not decode)",
        "bytes": null, "seconds": seconds, "milliseconds": seconds * 1e3,
        "limit": "none; reported", "ratio": null,
        "answered_by_worker": answered,
        "goal": "report it", "meets": answered,
    }))
}

/// One lock and release of a per-key lock (ADR 0025), uncontended, in a cache directory on the
/// file system of the bench caches, against creating and removing a plain file there.
fn key_lock(scratch: &Path, batches: usize) -> Result<Value> {
    let cache = scratch.join("cache-locks");
    std::fs::create_dir_all(&cache)?;
    let locks = gridkey_fs::lock::KeyLocks::new(&cache);
    let plain_dir = cache.join("plain");
    std::fs::create_dir_all(&plain_dir)?;
    let plain = plain_dir.join("translation-0123456789abcdef0123456789abcdef.lock");
    let mut contended = 0u64;
    let times = time_small_interleaved(
        batches,
        &mut [
            &mut || {
                let (held, waited) = locks.lock("translation-0123456789abcdef0123456789abcdef").expect("lock");
                contended += u64::from(!waited.is_zero());
                drop(black_box(held));
            },
            &mut || {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&plain)
                    .expect("create");
                drop(black_box(f));
                std::fs::remove_file(&plain).expect("remove");
            },
        ],
    );
    let [lock, create] = times[..] else { unreachable!("two functions") };
    let left = std::fs::read_dir(locks.dir())?.count();
    std::fs::remove_dir_all(&cache)?;
    let ratio = lock / create;
    Ok(json!({
        "name": "key_lock",
        "what": "KeyLocks::lock + drop of one key, uncontended (open O_CREAT, flock, fstat, stat, unlink, close) in a cache directory",
        "bytes": null, "seconds": lock, "microseconds": lock * 1e6,
        "per_program_miss_seconds": 2.0 * lock,
        "per_program_means": "a program that misses takes two locks (its translation, its build); a hit takes none",
        "filesystem_of": scratch,
        "limit": "open(O_CREAT) + close + unlink of a plain file in the same directory, interleaved in the same run",
        "limit_seconds": create,
        "ratio": ratio, "ratio_means": "lock and release seconds / plain create and remove seconds",
        "contended": contended, "lock_files_left": left,
        "goal": "<= 2 (a flock and two stats more), never contended, no lock file left",
        "meets": ratio <= 2.0 && contended == 0 && left == 0,
    }))
}

/// Files of the `sync_batch` case: what a fresh node writes from the shared tier for the
/// shipped grid (8 translation entries, 8 key-input records, 8 kernel libraries).
const SYNC_BATCH_FILES: usize = 24;

/// `gridkey_fs::write_atomic_all` of [`SYNC_BATCH_FILES`] files of 5 KB into fresh bucket
/// directories (ADR 0049: every file synced before its rename, the syncs pending together),
/// against the same files written by `write_atomic` one after the other, interleaved in the
/// same run; the files are removed after each call.
fn sync_batch(scratch: &Path, batches: usize) -> Result<Value> {
    let dir = scratch.join("sync-batch");
    let payload = vec![7u8; 5000];
    let paths: Vec<PathBuf> =
        (0..SYNC_BATCH_FILES).map(|i| dir.join(format!("{:02x}", i % 8)).join(format!("f{i}.bin"))).collect();
    let clean = || {
        let _ = std::fs::remove_dir_all(&dir);
    };
    let times = time_small_interleaved(
        batches,
        &mut [
            &mut || {
                let files: Vec<(&Path, &[u8])> = paths.iter().map(|p| (p.as_path(), payload.as_slice())).collect();
                let written = gridkey_fs::write_atomic_all(&files, None);
                assert!(written.iter().all(Result::is_ok), "batch written");
                clean();
            },
            &mut || {
                for p in &paths {
                    gridkey_fs::write_atomic(p, None, |out| out.write_all(&payload)).expect("file written");
                }
                clean();
            },
        ],
    );
    let [batch, one_by_one] = times[..] else { unreachable!("two functions") };
    let ratio = batch / one_by_one;
    Ok(json!({
        "name": "sync_batch",
        "what": format!("write_atomic_all of {SYNC_BATCH_FILES} files of 5 KB in 8 new directories (what a fresh node writes from the shared tier), then removed"),
        "bytes": SYNC_BATCH_FILES * payload.len(), "seconds": batch,
        "filesystem_of": scratch,
        "limit": "the same files by write_atomic one after the other (each synced before the next is written), interleaved in the same run",
        "limit_seconds": one_by_one,
        "ratio": ratio, "ratio_means": "batch seconds / one-by-one seconds",
        "goal": "<= 0.6 (the syncs of a batch pending together share the device's cache flushes)",
        "meets": ratio <= 0.6,
    }))
}

/// The gridkey binary and the grid of the `gridkey run` cases.
struct GridkeyRuns<'a> {
    bin: &'a Path,
    grid: &'a Path,
}

/// What the `gridkey run` cases read from one run.
struct RunOutcome {
    report: gridkey::RunReport,
    wall_seconds: f64,
}

impl GridkeyRuns<'_> {
    /// `gridkey run --mode serial --json` on `cache`, with the caller's gridkey variables cleared.
    fn command(&self, cache: &Path) -> std::process::Command {
        let mut cmd = std::process::Command::new(self.bin);
        cmd.arg("run").arg("--grid").arg(self.grid).arg("--cache-dir").arg(cache);
        cmd.args(["--mode", "serial", "--json"]);
        for var in gridkey::environment() {
            cmd.env_remove(var);
        }
        cmd.env("GRIDKEY_NO_PROGRESS", "1");
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        cmd
    }

    /// `n` runs started together on `cache`; their reports and the wall seconds from the first
    /// start to the last exit.
    fn concurrent(&self, cache: &Path, n: usize) -> Result<(Vec<gridkey::RunReport>, f64)> {
        std::fs::create_dir_all(cache)?;
        let t = Instant::now();
        let children = (0..n).map(|_| self.command(cache).spawn()).collect::<std::io::Result<Vec<_>>>()?;
        let outputs = children.into_iter().map(|c| c.wait_with_output()).collect::<std::io::Result<Vec<_>>>()?;
        let wall = t.elapsed().as_secs_f64();
        let reports = outputs
            .into_iter()
            .map(|out| {
                let report: gridkey::RunReport = serde_json::from_slice(&out.stdout).with_context(|| {
                    format!("gridkey run ({}) printed no report: {}", out.status, String::from_utf8_lossy(&out.stderr))
                })?;
                if !report.all_verified() {
                    bail!("gridkey run: not every program verified: {:?}", report.programs);
                }
                Ok(report)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((reports, wall))
    }

    fn one(&self, cache: &Path) -> Result<RunOutcome> {
        let (mut reports, wall_seconds) = self.concurrent(cache, 1)?;
        Ok(RunOutcome { report: reports.remove(0), wall_seconds })
    }
}

/// The numbers of concurrent runs of the `concurrent_runs` cases (ADR 0025).
const CONCURRENT_RUNS: [usize; 4] = [2, 4, 8, 16];

/// A warm `gridkey run` of the ICON programs (a fresh process, every translation and library
/// cached), split into its parts from the run's own report.
fn warm_run(runs: &GridkeyRuns<'_>, scratch: &Path, reps: usize) -> Result<Value> {
    let cache = scratch.join("cache-warm-run");
    let cold = runs.one(&cache)?;
    let part_names = ["convert", "parent_keys", "key", "lookup", "lock", "library_check", "load"];
    let mut parts: Vec<Vec<f64>> = vec![Vec::new(); part_names.len()];
    let (mut walls, mut phases) = (Vec::new(), [Vec::new(), Vec::new(), Vec::new(), Vec::new()]);
    let (mut translations, mut builds) = (0, 0);
    for _ in 0..reps {
        let warm = runs.one(&cache)?;
        let r = &warm.report;
        translations += r.translations();
        builds += r.builds();
        let sum = |f: fn(&gridkey::ProgramReport) -> f64| r.programs.iter().map(f).sum::<f64>();
        let values = [
            r.convert_seconds,
            r.keys_seconds,
            sum(|p| p.key_seconds),
            sum(|p| p.lookup_seconds),
            sum(|p| p.lock_seconds),
            sum(|p| p.library_check_seconds),
            sum(|p| p.load_seconds),
        ];
        for (out, v) in parts.iter_mut().zip(values) {
            out.push(v);
        }
        for (out, v) in phases.iter_mut().zip([r.read_seconds, r.convert_seconds, r.compile_seconds, r.verify_seconds])
        {
            out.push(v);
        }
        walls.push(warm.wall_seconds);
    }
    std::fs::remove_dir_all(&cache)?;
    let parts: Vec<f64> = parts.into_iter().map(median).collect();
    let checks: f64 = parts.iter().sum();
    let wall = median(walls);
    let [read, convert, compile, verify] = phases.map(median);
    let named: serde_json::Map<String, Value> =
        part_names.iter().zip(&parts).map(|(n, &v)| (format!("{n}_seconds"), json!(v))).collect();
    let ratio = checks / wall;
    Ok(json!({
        "name": "warm_run",
        "what": "gridkey run --mode serial of the 8 ICON programs in a fresh process on a cache that holds every table, translation and library: its parts, from the run's report (medians; per-program parts summed over the programs)",
        "programs": cold.report.programs.len(), "bytes": null, "seconds": checks,
        "parts_seconds": named,
        "parts_means": "convert: compile-time view (tables hashed and found under their names, ADR 0028); parent_keys: the parent's keys and lookups before the batch; key: key inputs in the compile step; lookup: key hash and translation-cache lookup; lock: per-key locks (none on a hit); library_check: the compile step's check of the stored library (checksum trailer, load); load: the load that runs and verifies the kernel",
        "phases_seconds": { "read": read, "convert": convert, "compile": compile, "verify": verify },
        "limit": "wall time of the whole warm gridkey run process (start to exit), same runs",
        "limit_seconds": wall,
        "cold_run_wall_seconds": cold.wall_seconds,
        "ratio": ratio, "ratio_means": "sum of the parts / wall seconds of the warm run",
        "translations": translations, "builds": builds,
        "goal": "report the parts; 0 translations and 0 builds", "meets": translations == 0 && builds == 0,
    }))
}

/// `n` concurrent `gridkey run` on one empty cache for each `n` of `ns`, against one run on an
/// empty cache, interleaved, `reps` times: one case per `n`.
fn concurrent_runs(runs: &GridkeyRuns<'_>, scratch: &Path, ns: &[usize], reps: usize) -> Result<Vec<Value>> {
    let mut one = Vec::new();
    let mut walls = vec![Vec::new(); ns.len()];
    let mut counts = vec![(usize::MAX, usize::MAX, usize::MAX); ns.len()];
    let mut waited = vec![0usize; ns.len()];
    let mut programs = 0;
    for rep in 0..reps {
        let cache = scratch.join(format!("cache-concurrent-1-{rep}"));
        let single = runs.one(&cache)?;
        programs = single.report.programs.len();
        one.push(single.wall_seconds);
        std::fs::remove_dir_all(&cache)?;
        for (i, &n) in ns.iter().enumerate() {
            let cache = scratch.join(format!("cache-concurrent-{n}-{rep}"));
            let (reports, wall) = runs.concurrent(&cache, n)?;
            walls[i].push(wall);
            let translations = reports.iter().map(|r| r.translations()).sum::<usize>();
            let builds = reports.iter().map(|r| r.builds()).sum::<usize>();
            let entries = count_files(&cache.join(gridkey_fingerprint::TRANSLATION_DIR), "bin");
            // The worst repetition is the one reported: every one must make one of each.
            let worst = |a: usize, b: usize| if a == usize::MAX { b } else { a.max(b) };
            counts[i] = (worst(counts[i].0, translations), worst(counts[i].1, builds), worst(counts[i].2, entries));
            waited[i] += reports.iter().flat_map(|r| &r.programs).filter(|p| p.lock_seconds > 1e-3).count();
            std::fs::remove_dir_all(&cache)?;
        }
    }
    let one = median(one);
    Ok(ns
        .iter()
        .zip(walls)
        .zip(counts)
        .zip(waited)
        .map(|(((&n, wall), (translations, builds, entries)), waited)| {
            let wall = median(wall);
            let ratio = wall / one;
            json!({
                "name": format!("concurrent_runs_{n}"),
                "what": format!("{n} gridkey run --mode serial started together on one empty cache (ICON, {programs} programs): translations and builds in all, wall time from the first start to the last exit"),
                "runs": n, "repetitions": reps,
                "bytes": null, "seconds": wall,
                "translations": translations, "builds": builds, "translation_entries": entries,
                "programs_that_waited_over_1_ms_for_a_lock": waited,
                "limit": "one gridkey run on an empty cache, interleaved in the same run",
                "limit_seconds": one,
                "ratio": ratio, "ratio_means": "wall seconds of the N runs / wall seconds of one run",
                "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
                "goal": format!("{programs} translations, {programs} builds in all; wall ratio reported"),
                "meets": translations == programs && builds == programs,
            })
        })
        .collect())
}

/// Regular files under `dir` (recursively) whose extension is `ext`, temp files left out.
fn count_files(dir: &Path, ext: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                count_files(&path, ext)
            } else {
                let temp = e.file_name().to_string_lossy().starts_with(gridkey_fs::TEMP_PREFIX);
                usize::from(!temp && path.extension().is_some_and(|x| x == ext))
            }
        })
        .sum()
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(str::trim);
    json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "avx2": std::arch::is_x86_feature_detected!("avx2"),
        "avx512f": std::arch::is_x86_feature_detected!("avx512f"),
    })
}

fn print_table(doc: &Value) {
    println!("{:<18} {:>12} {:>12} {:>10} {:<10} {:<5}", "case", "bytes", "seconds", "ratio", "goal", "meets");
    for case in doc["cases"].as_array().into_iter().flatten() {
        let num = |v: &Value, prec: usize| v.as_f64().map_or("-".to_owned(), |x| format!("{x:.prec$e}"));
        println!(
            "{:<18} {:>12} {:>12} {:>10} {:<10} {:<5}",
            case["name"].as_str().unwrap_or("?"),
            case["bytes"].as_u64().map_or("-".to_owned(), |b| b.to_string()),
            num(&case["seconds"], 3),
            case["ratio"].as_f64().map_or("-".to_owned(), |r| format!("{r:.3}")),
            case["goal"].as_str().unwrap_or("").split(',').next().unwrap_or(""),
            case["meets"].as_bool().map_or("-", |m| if m { "yes" } else { "NO" }),
        );
    }
}
