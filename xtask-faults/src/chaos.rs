//! `cargo xtask chaos --seconds N [--seed S] [--runs K]`: the fault matrix's chaos row. For `N`
//! seconds of wall time, `gridkey run` runs again and again in all three build-jobs modes
//! (serial, thread, process; `--mode`), on two grids (ICON R02B04 and MPAS oQU480), at most `K`
//! at a time (3 by default), all on **one** cache directory, while this driver
//!
//! * sends `SIGKILL` to parents of runs and to process-mode workers, at random;
//! * runs `gridkey cache gc` in a loop beside them, with `--max-size 0`, a random budget or none;
//! * tampers with tables (`tables-v1/*.npy`), translation entries (`translation-v2/*.bin`) and
//!   kernel libraries (`build-v2/*.so`) in place at the same size, at any time: a byte flipped
//!   (XOR with a non-zero mask, never undone: a byte position of one inode is flipped at most
//!   once) or two different bytes swapped;
//! * truncates or deletes such files, only in a quiet phase, when none of its runs is live and
//!   `/proc/*/maps` shows that no process maps the file (truncating a mapped file raises `SIGBUS`
//!   in its reader, which no error path can catch);
//! * swaps the compiler behind `CC`: each run picks its `CC` words among `gcc`, a script
//!   wrapping `gcc ... -O0`, a script that emits a **wrong kernel** (it turns the first
//!   accumulation of the C source, `acc += `, into `acc -= ` before calling `gcc`), and
//!   `cc-switch`, a name resolved on a `PATH` directory of the driver whose script is switched, in quiet phases, among `gcc`,
//!   `gcc -O1`, `gcc -O0` and the wrong kernel. Every compiler has its own identity, so every swap
//!   must give new build keys (ADR 0022); a compiler is swapped only while no run is live
//!   because ADR 0022 keys a whole run by the identity computed at its start. And `cc-flaky`,
//!   whose bytes never change (one identity) but which emits the wrong kernel in the phases
//!   where the driver's flag file exists: a compiler that miscompiles now and then.
//!
//! Unless `--no-remote` is given, the runs also share a **shared tier** (a real `redis-server`,
//! see `chaos/remote.rs`): a second node's cache beside the first, each run a writer or a reader
//! of one node, while the driver stops and restarts the server, flips bytes of its objects,
//! replays them under other keys and kinds, forges them with a key nobody trusts and wipes a
//! node's local translations and libraries so that the next runs fetch them again.
//!
//! Most runs use `--verify` and `GRIDKEY_VERIFY_CACHE_HITS=1` (every hit is compared with a fresh
//! translation, every table re-hashed on open); `gridkey run` checks every kernel against the
//! Rust reference. After the chaos, the driver checks independently: every translation entry
//! left in the cache that decodes is compared with a fresh translation from an independent
//! conversion in a new cache, and each grid is run once per mode with every check on.
//!
//! # How a run is classified
//!
//! * **killed**: the driver sent `SIGKILL` to its parent (whatever it printed), or to one of its
//!   workers and every program that did not verify names the signal or the killed pid. Not lost.
//! * **ok**: exit status 0, a report, every program verified.
//! * **detected**: every program that did not verify failed for a correctly reported detection
//!   of a fault in **that run's own inputs**: (a) its own `CC` is the wrong-kernel compiler and
//!   the error is the kernel check against the Rust reference, or its wrong library was removed
//!   as wrong by another run of that compiler before it loaded it; or (a') its `CC` is
//!   `cc-flaky` and the kernel check caught a library that compiler miscompiled in an earlier
//!   phase (left by a run killed before its check); or (b) the error names a file
//!   the driver tampered with **at least twice** while the run was live: a run repairs a changed
//!   table once (ADR 0024) and rebuilds an unloadable library once (ADR 0026), so a file changed
//!   again after that repair is reported, not recoverable. A program that fails naming a file
//!   tampered with only once in the run is lost: the run should have repaired it. Not lost.
//! * **false hit** (per program): a hit that differs from a fresh translation
//!   (`VerifyMismatch`), or a kernel outside the tolerance of the Rust reference built by a
//!   correct compiler and served from a cache (a translation hit or a build-cache hit). Every
//!   false hit also makes its run lost. After the chaos, each entry that decodes and differs
//!   from a fresh translation, or whose key no program of either grid has, is a false hit too.
//! * **lost** (to a neighbour): everything else: no report, a crash, a panic, a run hung for
//!   more than [`HANG`], exit status non-zero with every program verified, or a program failed
//!   for any other reason: a fault injected elsewhere (a kill of another run, a collection, a
//!   tamper outside its window) or a cache left inconsistent. A final run that does not verify
//!   every program is lost. A `cache gc` that fails is counted as a gc failure and fails the
//!   command too. A fault of the shared tier (the server stopped or restarted, an object
//!   tampered with, replayed or forged) is no fault of any run's own inputs: a program it costs
//!   is lost. With the shared tier, the final runs also run each grid on the second node, its
//!   local translations and libraries deleted, as a reader with `gcc` and with `cc-flaky` (not
//!   miscompiling): every object they fetch must verify, so a wrong kernel that travelled is
//!   found there.
//!
//! The command prints the seed, the runs per mode and outcome, the faults injected per kind,
//! the false hits and the runs lost, and exits non-zero when either is not 0 (or a gc failed);
//! it then keeps the cache and the output of every run that failed a program (`--keep` keeps
//! them always). The seed fixes
//! every choice of the driver (which fault, which file, which byte, which run, which mode); when
//! the choices land depends on timing, so a seed reproduces a schedule's kinds and targets, not
//! its instants.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gridkey::RunReport;
use gridkey_fingerprint::{TranslationCache, TranslationKey, TranslationOptions};
use gridkey_offsets::compile_time_offset_provider;
use gridkey_store::TableStore;

mod remote;

/// A run still live after this long is hung: killed and lost.
pub const HANG: Duration = Duration::from_secs(240);

/// How long a quiet phase waits for live runs to end before it kills them.
const QUIET_WAIT: Duration = Duration::from_secs(20);

/// The grids, relative to the repository root.
const GRIDS: [&str; 2] = [gridkey::SHIPPED_GRID, "data/grids/oQU480.231010.nc"];

const MODES: [&str; 3] = ["serial", "thread", "process"];

/// xorshift64*: the driver's choices, from the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // splitmix64 of the seed, never 0.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }
}

/// The compilers a run can name in `CC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cc {
    Gcc,
    O0,
    Wrong,
    /// `cc-switch` on the driver's `PATH` directory, whose script is switched in quiet phases.
    Switch,
    /// `cc-flaky`: one script whose bytes (and so whose identity, ADR 0022) never change, and
    /// that emits the wrong kernel while the driver's flag file exists (set and cleared in quiet
    /// phases): a compiler that miscompiles now and then, as a writer's may.
    Flaky,
}

/// What `cc-switch` runs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SwitchTarget {
    Gcc,
    O1,
    O0,
    Wrong,
}

const SWITCH_TARGETS: [SwitchTarget; 4] = [SwitchTarget::Gcc, SwitchTarget::O1, SwitchTarget::O0, SwitchTarget::Wrong];

/// The wrong-kernel script body: the first accumulation of the C source (`acc += `) turned into a
/// subtraction, then `gcc`: a kernel that runs safely and computes wrong numbers.
const WRONG_BODY: &str = "if [ -f kernel.c ]; then sed -i '0,/acc += /s//acc -= /' kernel.c; fi\nexec gcc \"$@\"\n";

fn script(body: &str) -> String {
    format!("#!/bin/sh\n# gridkey chaos compiler\n{body}")
}

/// The body of `cc-flaky`: the wrong kernel while `flag` exists, else `gcc`.
fn flaky_body(flag: &Path) -> String {
    format!(
        "if [ -f '{}' ] && [ -f kernel.c ]; then sed -i '0,/acc += /s//acc -= /' kernel.c; fi\nexec gcc \"$@\"\n",
        flag.display()
    )
}

fn switch_body(target: SwitchTarget) -> &'static str {
    match target {
        SwitchTarget::Gcc => "exec gcc \"$@\"\n",
        SwitchTarget::O1 => "exec gcc \"$@\" -O1\n",
        SwitchTarget::O0 => "exec gcc \"$@\" -O0\n",
        SwitchTarget::Wrong => WRONG_BODY,
    }
}

/// One file tampered with: when, which, and how.
struct Tamper {
    at: Instant,
    path: PathBuf,
}

/// Counts shared with the collector thread.
#[derive(Default)]
struct GcCounts {
    runs: u64,
    max_size_zero: u64,
    failures: Vec<String>,
}

/// A run the driver started and has not yet collected.
struct Live {
    id: usize,
    pid: u32,
    mode: &'static str,
    grid: usize,
    /// Which node's cache (index into `Driver::caches`).
    node: usize,
    /// `Some(writer)` when the run uses the shared tier.
    remote: Option<bool>,
    cc: Cc,
    /// For `Cc::Switch`, what the script ran when the run started (switched only when no run is live).
    wrong: bool,
    verify: bool,
    started: Instant,
    parent_killed: bool,
    /// Killed by the driver after [`HANG`]: counted lost when it was found hung.
    hung: bool,
    workers_killed: Vec<u32>,
    done: Arc<AtomicBool>,
}

/// What the driver counts.
#[derive(Default)]
struct Tally {
    started: BTreeMap<&'static str, u64>,
    ok: u64,
    killed: u64,
    detected: u64,
    lost: u64,
    false_hits: u64,
    hits: u64,
    verified_hits: u64,
    faults: BTreeMap<&'static str, u64>,
    problems: Vec<String>,
    /// The program failures accepted as detections of a tampered file of the run's own.
    detections: Vec<String>,
    /// Kernels of `cc-flaky` built in a miscompiling phase and caught by a later run's check.
    flaky_caught: u64,
}

impl Tally {
    fn fault(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_default() += 1;
    }
}

struct Driver {
    bin: PathBuf,
    root: PathBuf,
    /// The first node's cache; the gc loop and the quiet phases work on every node's.
    cache: PathBuf,
    /// Every node's cache, `cache` first (a second one only with the shared tier).
    caches: Vec<PathBuf>,
    shared: Option<remote::SharedTier>,
    bin_dir: PathBuf,
    rng: Rng,
    tally: Tally,
    tampers: Vec<Tamper>,
    /// (device, inode, offset) of every byte flipped, so that no flip undoes another.
    flipped: HashSet<(u64, u64, u64)>,
    live: Vec<Live>,
    next_id: usize,
    results: mpsc::Receiver<(usize, std::io::Result<Output>)>,
    results_tx: mpsc::Sender<(usize, std::io::Result<Output>)>,
    switch_target: SwitchTarget,
    /// The flag file whose presence makes `cc-flaky` miscompile.
    flaky_flag: PathBuf,
}

/// The command line of `cargo xtask chaos`.
struct ChaosArgs {
    seconds: u64,
    seed: u64,
    max_live: usize,
    keep: bool,
    with_remote: bool,
}

impl ChaosArgs {
    /// `[--seconds N] [--seed S] [--runs K] [--keep] [--no-remote]`; without `--seed`, one from
    /// the clock and the process id.
    fn parse(args: &[String]) -> Result<ChaosArgs> {
        let (mut seconds, mut seed, mut max_live, mut keep, mut with_remote) = (60u64, None, 3usize, false, true);
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            if flag == "--keep" {
                keep = true;
                continue;
            }
            if flag == "--no-remote" {
                with_remote = false;
                continue;
            }
            let value = it.next().with_context(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--seconds" => seconds = value.parse().with_context(|| format!("--seconds {value:?}"))?,
                "--seed" => seed = Some(value.parse::<u64>().with_context(|| format!("--seed {value:?}"))?),
                "--runs" => max_live = value.parse().with_context(|| format!("--runs {value:?}"))?,
                other => {
                    bail!(
                        "unexpected argument {other:?}: expected --seconds N [--seed S] [--runs K] [--keep] [--no-remote]"
                    )
                }
            }
        }
        let seed = seed.unwrap_or_else(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            t.as_nanos() as u64 ^ u64::from(std::process::id())
        });
        if max_live == 0 {
            bail!("--runs must be at least 1");
        }
        Ok(ChaosArgs { seconds, seed, max_live, keep, with_remote })
    }
}

/// What the independent check and the final runs found.
struct FinalCheck {
    compared: usize,
    differ: usize,
    unknown: usize,
    tampered_left: usize,
    final_ok: usize,
    final_runs: usize,
    compared_after: usize,
    differ_after: usize,
    unknown_after: usize,
    seconds: f64,
}

/// Parses the arguments, runs the chaos and prints its figures; `Ok(true)` when there were no
/// false hits and no runs lost.
pub fn chaos(args: &[String], bin: &Path) -> Result<bool> {
    let args = ChaosArgs::parse(args)?;
    let seed = args.seed;
    let work = tempfile::Builder::new().prefix("gridkey-chaos-").tempdir_in(crate::target_dir())?;
    // The binary under test is a copy made now: a build of the tree during the run (another
    // `cargo build` replacing `target/release/gridkey`) would run other code, whose keys differ
    // from those the independent check computes with this driver's code.
    let frozen = work.path().join("gridkey");
    fs::copy(bin, &frozen).with_context(|| format!("cannot copy {} to {}", bin.display(), frozen.display()))?;
    let mut d = start_driver(&frozen, work.path(), &args)?;
    println!(
        "chaos: seed {seed}, {} s, at most {} runs at a time, cache {}",
        args.seconds,
        args.max_live,
        d.cache.display()
    );
    if let Some(shared) = &d.shared {
        println!("chaos: shared tier {} for {} nodes", shared.url(), d.caches.len());
    }

    // The collector, in a loop beside the runs until the chaos ends.
    let stop = Arc::new(AtomicBool::new(false));
    let gc_counts = Arc::new(Mutex::new(GcCounts::default()));
    let collector = {
        let (stop, counts, bin, caches) = (stop.clone(), gc_counts.clone(), d.bin.clone(), d.caches.clone());
        let mut rng = Rng::new(seed ^ 0x6763);
        std::thread::spawn(move || collect_loop(&bin, &caches, &stop, &counts, &mut rng))
    };
    let chaos_seconds = d.run_phases(args.seconds, args.max_live)?;
    d.drain(QUIET_WAIT)?;
    stop.store(true, Ordering::SeqCst);
    let _ = collector.join();

    let check = d.check_after_chaos()?;
    let gc = gc_counts.lock().expect("collector counts");
    d.tally.faults.insert("gc", gc.runs);
    d.tally.faults.insert("gc --max-size 0", gc.max_size_zero);
    for f in &gc.failures {
        d.tally.problems.push(format!("cache gc failed: {f}"));
    }
    println!("\nchaos: seed {seed}; chaos phase {chaos_seconds:.1} s, final check {:.1} s", check.seconds);
    print_tally(&d.tally, &check, &gc);
    let ok = d.tally.false_hits == 0 && d.tally.lost == 0 && gc.failures.is_empty();
    if !ok {
        println!("chaos FAILED: rerun with --seed {seed}");
    }
    if !ok || args.keep {
        println!("the cache and the output of every run that failed a program are kept in {}", work.keep().display());
    }
    Ok(ok)
}

/// The driver of a chaos run in `work`: its caches (a second node's when the shared tier runs),
/// the compiler scripts it swaps in, the shared tier.
fn start_driver(bin: &Path, work: &Path, args: &ChaosArgs) -> Result<Driver> {
    let cache = work.join("cache");
    let bin_dir = work.join("bin");
    fs::create_dir_all(&cache)?;
    fs::create_dir_all(&bin_dir)?;
    write_script(&bin_dir.join("cc-o0"), "exec gcc \"$@\" -O0\n")?;
    write_script(&bin_dir.join("cc-wrong"), WRONG_BODY)?;
    write_script(&bin_dir.join("cc-switch"), switch_body(SwitchTarget::Gcc))?;
    let flaky_flag = work.join("cc-flaky-miscompiles");
    write_script(&bin_dir.join("cc-flaky"), &flaky_body(&flaky_flag))?;
    let shared = if args.with_remote { Some(remote::SharedTier::start(&work.join("keys"))?) } else { None };
    let mut caches = vec![cache.clone()];
    if shared.is_some() {
        let second = work.join("cache-node-b");
        fs::create_dir_all(&second)?;
        caches.push(second);
    }
    let (results_tx, results) = mpsc::channel();
    Ok(Driver {
        bin: bin.to_path_buf(),
        root: crate::root(),
        cache,
        caches,
        shared,
        bin_dir,
        rng: Rng::new(args.seed),
        tally: Tally::default(),
        tampers: Vec::new(),
        flipped: HashSet::new(),
        live: Vec::new(),
        next_id: 0,
        results,
        results_tx,
        switch_target: SwitchTarget::Gcc,
        flaky_flag,
    })
}

/// Prints the figures of a chaos run: runs, hits, faults, the independent check, the final runs
/// and the problems found.
fn print_tally(t: &Tally, check: &FinalCheck, gc: &GcCounts) {
    let total: u64 = t.started.values().sum();
    println!(
        "runs: {total} ({}); ok {}, killed by the driver {}, detected own-input faults {}, lost {}",
        t.started.iter().map(|(m, n)| format!("{m} {n}")).collect::<Vec<_>>().join(", "),
        t.ok,
        t.killed,
        t.detected,
        t.lost - (check.final_runs - check.final_ok) as u64,
    );
    println!(
        "cache hits: {} in runs that reported, {} of them compared with a fresh translation",
        t.hits, t.verified_hits
    );
    println!("faults injected: {}", t.faults.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "));
    let FinalCheck { compared, differ, unknown, tampered_left, compared_after, differ_after, unknown_after, .. } =
        check;
    println!(
        "independent check: {compared} entries compared with a fresh translation from an independent cache, {differ} differ, {unknown} with an unknown key, {tampered_left} tampered (a miss); after the final runs {compared_after} compared, {differ_after} differ, {unknown_after} unknown"
    );
    println!(
        "final runs (every check on, each grid in each mode): {}/{} verified every program",
        check.final_ok, check.final_runs
    );
    println!("gc failures: {}", gc.failures.len());
    println!("flaky compiler's wrong kernels caught by a later run's check: {}", t.flaky_caught);
    for p in t.problems.iter().take(40) {
        println!("  {p}");
    }
    if t.problems.len() > 40 {
        println!("  ... {} more", t.problems.len() - 40);
    }
    for p in t.detections.iter().take(20) {
        println!("  detected: {p}");
    }
    println!("false hits: {}", t.false_hits);
    println!("runs lost to a neighbour: {}", t.lost);
}

/// How a run is named in the problems: its id, mode, grid, node, compiler and role.
fn run_label(run: &Live) -> String {
    format!(
        "run {} ({} mode, {}, node {}, CC {:?}{}{}{})",
        run.id,
        run.mode,
        GRIDS[run.grid].rsplit('/').next().unwrap_or(""),
        run.node,
        run.cc,
        if run.wrong { " = wrong kernel" } else { "" },
        if run.verify { ", verifying" } else { "" },
        match run.remote {
            Some(true) => ", shared-tier writer",
            Some(false) => ", shared-tier reader",
            None => "",
        }
    )
}

fn write_script(path: &Path, body: &str) -> Result<()> {
    // Temp file and rename: a compiler swapped at once, never half written.
    let temp = path.with_extension("new");
    fs::write(&temp, script(body))?;
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o755))?;
    fs::rename(&temp, path)?;
    Ok(())
}

fn collect_loop(bin: &Path, caches: &[PathBuf], stop: &AtomicBool, counts: &Mutex<GcCounts>, rng: &mut Rng) {
    while !stop.load(Ordering::SeqCst) {
        let cache = &caches[rng.below(caches.len())];
        let mut cmd = Command::new(bin);
        cmd.args(["cache", "gc", "--cache-dir"]).arg(cache).arg("--json");
        let zero = rng.chance(0.5);
        if zero {
            cmd.args(["--max-size", "0"]);
        } else if rng.chance(0.5) {
            cmd.args(["--max-size", &(rng.below(4 << 20)).to_string()]);
        }
        for var in gridkey::environment() {
            cmd.env_remove(var);
        }
        let out = cmd.stdin(Stdio::null()).output();
        let mut c = counts.lock().expect("collector counts");
        c.runs += 1;
        c.max_size_zero += u64::from(zero);
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                c.failures.push(format!("exit {:?}: {}", o.status.code(), String::from_utf8_lossy(&o.stderr).trim()))
            }
            Err(e) => c.failures.push(format!("cannot run: {e}")),
        }
        drop(c);
        std::thread::sleep(Duration::from_millis(50 + rng.below(300) as u64));
    }
}

impl Driver {
    /// Active and quiet phases in turn for `seconds`; returns how long they took in seconds.
    fn run_phases(&mut self, seconds: u64, max_live: usize) -> Result<f64> {
        let started = Instant::now();
        let end = started + Duration::from_secs(seconds);
        while Instant::now() < end {
            let phase_end = (Instant::now() + Duration::from_millis(4000 + self.rng.below(8000) as u64)).min(end);
            self.active_phase(phase_end, max_live)?;
            if Instant::now() < end {
                self.quiet_phase()?;
            }
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// The independent check of every entry, a final run per grid and mode with every check on,
    /// and the check again; counts false hits and lost runs into the tally.
    fn check_after_chaos(&mut self) -> Result<FinalCheck> {
        let started = Instant::now();
        let (compared, differ, unknown, tampered_left) = self.check_entries()?;
        self.tally.false_hits += (differ + unknown) as u64;
        let (final_ok, final_runs) = self.final_runs()?;
        let (compared_after, differ_after, unknown_after, _) = self.check_entries()?;
        self.tally.false_hits += (differ_after + unknown_after) as u64;
        self.tally.lost += (final_runs - final_ok) as u64;
        Ok(FinalCheck {
            compared,
            differ,
            unknown,
            tampered_left,
            final_ok,
            final_runs,
            compared_after,
            differ_after,
            unknown_after,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn grid(&self, i: usize) -> PathBuf {
        self.root.join(GRIDS[i])
    }

    fn command(&self, grid: usize, node: usize, mode: &str, jobs: usize, cc: Cc, verify: bool) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(["run", "--json", "--mode", mode, "--jobs", &jobs.to_string(), "--grid"])
            .arg(self.grid(grid))
            .arg("--cache-dir")
            .arg(&self.caches[node]);
        for var in gridkey::environment() {
            cmd.env_remove(var);
        }
        if verify {
            cmd.arg("--verify").env("GRIDKEY_VERIFY_CACHE_HITS", "1");
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![self.bin_dir.clone()];
        dirs.extend(std::env::split_paths(&path));
        cmd.env("PATH", std::env::join_paths(dirs).expect("PATH directories"));
        let cc: PathBuf = match cc {
            Cc::Gcc => "gcc".into(),
            Cc::O0 => self.bin_dir.join("cc-o0"),
            Cc::Wrong => self.bin_dir.join("cc-wrong"),
            Cc::Switch => "cc-switch".into(),
            Cc::Flaky => self.bin_dir.join("cc-flaky"),
        };
        cmd.env("CC", cc).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    }

    fn launch(&mut self) -> Result<()> {
        let mode = MODES[self.rng.below(3)];
        let grid = self.rng.below(GRIDS.len());
        let cc = *self
            .rng
            .pick(&[Cc::Gcc, Cc::Gcc, Cc::Gcc, Cc::O0, Cc::Switch, Cc::Switch, Cc::Wrong, Cc::Flaky])
            .expect("compilers");
        let verify = self.rng.chance(0.8);
        let jobs = 1 + self.rng.below(2);
        let node = self.rng.below(self.caches.len());
        let remote = (self.shared.is_some() && self.rng.chance(0.8)).then(|| self.rng.chance(0.5));
        let mut cmd = self.command(grid, node, mode, jobs, cc, verify);
        if let (Some(shared), Some(writer)) = (&self.shared, remote) {
            cmd.envs(shared.env(writer));
        }
        let child = cmd.spawn().context("cannot start gridkey run")?;
        let id = self.next_id;
        self.next_id += 1;
        let done = Arc::new(AtomicBool::new(false));
        let (tx, flag) = (self.results_tx.clone(), done.clone());
        let pid = child.id();
        std::thread::spawn(move || {
            let out = child.wait_with_output();
            flag.store(true, Ordering::SeqCst);
            let _ = tx.send((id, out));
        });
        *self.tally.started.entry(mode).or_default() += 1;
        let wrong = cc == Cc::Wrong
            || (cc == Cc::Switch && self.switch_target == SwitchTarget::Wrong)
            || (cc == Cc::Flaky && self.flaky_flag.exists());
        self.live.push(Live {
            id,
            pid,
            mode,
            grid,
            node,
            remote,
            cc,
            wrong,
            verify,
            started: Instant::now(),
            parent_killed: false,
            hung: false,
            workers_killed: Vec::new(),
            done,
        });
        Ok(())
    }

    /// Runs are started, killed and tampered with until `until`.
    fn active_phase(&mut self, until: Instant, max_live: usize) -> Result<()> {
        while Instant::now() < until {
            self.collect()?;
            while self.live.len() < max_live {
                self.launch()?;
            }
            // About one fault every 0.2 s; a parent killed about every 4 s; with the shared tier,
            // the server stopped about every 4 s and an object tampered with about every 2 s.
            match self.rng.below(100) {
                0 => self.kill_parent(),
                1 | 2 => self.kill_worker(),
                3 | 4 => self.tamper_in_place("tables-v1", "npy", "table"),
                5 | 6 => self.tamper_in_place("translation-v2", "bin", "entry"),
                7 | 8 => self.tamper_in_place("build-v2", "so", "library"),
                9 => self.stop_server(),
                10 | 11 => self.tamper_remote(),
                _ => {}
            }
            if let Some(shared) = &mut self.shared {
                shared.tick();
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        Ok(())
    }

    /// No new run; the live ones end (or are killed); then files are truncated or deleted and
    /// the compiler behind `cc-switch` is swapped.
    fn quiet_phase(&mut self) -> Result<()> {
        let wait = Duration::from_secs(2 + self.rng.below(6) as u64);
        self.drain(wait)?;
        self.quiet_remote()?;
        let mapped = mapped_files();
        for _ in 0..1 + self.rng.below(3) {
            let (dir, ext, what) = *self
                .rng
                .pick(&[
                    ("tables-v1", "npy", "table"),
                    ("translation-v2", "bin", "entry"),
                    ("build-v2", "so", "library"),
                ])
                .expect("stores");
            let node = self.rng.below(self.caches.len());
            let files = final_files(&self.caches[node].join(dir), ext);
            let Some(path) = self.rng.pick(&files).cloned() else { continue };
            if mapped.contains(&path) {
                self.tally.fault("truncate/delete skipped: mapped");
                continue;
            }
            let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let done = if self.rng.chance(0.5) && len > 0 {
                let keep = self.rng.below(len as usize) as u64;
                make_writable(&path)
                    .and_then(|()| fs::OpenOptions::new().write(true).open(&path)?.set_len(keep))
                    .is_ok()
                    && {
                        self.tally.fault(match what {
                            "table" => "table truncated",
                            "entry" => "entry truncated",
                            _ => "library truncated",
                        });
                        true
                    }
            } else {
                fs::remove_file(&path).is_ok() && {
                    self.tally.fault(match what {
                        "table" => "table deleted",
                        "entry" => "entry deleted",
                        _ => "library deleted",
                    });
                    true
                }
            };
            if done {
                self.tampers.push(Tamper { at: Instant::now(), path });
            }
        }
        let target = *self.rng.pick(&SWITCH_TARGETS).expect("targets");
        if target != self.switch_target {
            write_script(&self.bin_dir.join("cc-switch"), switch_body(target))?;
            self.switch_target = target;
            self.tally.fault("compiler swapped");
        }
        // The flaky compiler miscompiles in about a quarter of the active phases.
        if self.rng.chance(0.25) {
            fs::write(&self.flaky_flag, b"")?;
            self.tally.fault("flaky compiler miscompiles for a phase");
        } else {
            let _ = fs::remove_file(&self.flaky_flag);
        }
        Ok(())
    }

    /// Waits up to `limit` for the live runs to end, then kills the others.
    fn drain(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        while !self.live.is_empty() && Instant::now() < deadline {
            self.collect()?;
            if let Some(shared) = &mut self.shared {
                shared.tick();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for i in 0..self.live.len() {
            if self.kill_parent_of(i) {
                self.tally.fault("SIGKILL parent, quiet phase");
            }
        }
        while !self.live.is_empty() {
            self.collect()?;
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops the shared tier's server for 0.2 to 2.5 s.
    fn stop_server(&mut self) {
        let pause = Duration::from_millis(200 + self.rng.below(2300) as u64);
        if let Some(shared) = &mut self.shared {
            if !shared.is_stopped() {
                shared.stop_for(pause);
                self.tally.fault("remote server stopped");
            }
        }
    }

    /// One object of the shared tier tampered with.
    fn tamper_remote(&mut self) {
        let Some(shared) = &mut self.shared else { return };
        if let Some(what) = shared.tamper(&mut self.rng) {
            self.tally.fault(what);
        }
    }

    /// In a quiet phase: the server goes on, sometimes is restarted empty, and sometimes a node's
    /// local translations and libraries are deleted, so that its next runs fetch them again.
    fn quiet_remote(&mut self) -> Result<()> {
        let Some(shared) = &mut self.shared else { return Ok(()) };
        shared.resume();
        if self.rng.chance(0.1) {
            shared.restart()?;
            self.tally.fault("remote server restarted empty");
        }
        if self.rng.chance(0.3) {
            let node = self.rng.below(self.caches.len());
            let mut wiped = 0;
            for (dir, ext) in [(gridkey_fingerprint::TRANSLATION_DIR, "bin"), (gridkey_stencil::BUILD_DIR, "so")] {
                for path in final_files(&self.caches[node].join(dir), ext) {
                    wiped += usize::from(fs::remove_file(&path).is_ok());
                }
            }
            if wiped > 0 {
                self.tally.fault("node's local translations and libraries deleted");
            }
        }
        Ok(())
    }

    fn kill_parent(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let i = self.rng.below(self.live.len());
        if self.kill_parent_of(i) {
            self.tally.fault("SIGKILL parent");
        }
    }

    fn kill_parent_of(&mut self, i: usize) -> bool {
        let run = &mut self.live[i];
        if run.done.load(Ordering::SeqCst) || run.parent_killed {
            return false;
        }
        // SAFETY: kill(2) on the parent of a run this driver started and has not yet reaped.
        run.parent_killed = unsafe { libc::kill(run.pid as i32, libc::SIGKILL) } == 0;
        run.parent_killed
    }

    fn kill_worker(&mut self) {
        let process: Vec<usize> = (0..self.live.len()).filter(|&i| self.live[i].mode == "process").collect();
        let Some(&i) = self.rng.pick(&process) else { return };
        let run = &self.live[i];
        if run.done.load(Ordering::SeqCst) {
            return;
        }
        // Workers only: the parent's own children also include the C compiler of its rebuild
        // of a library that does not load. Between its fork and its exec that child still runs
        // the gridkey executable, so the executable alone does not tell it from a worker: a
        // worker is the gridkey executable started as `gridkey worker`.
        let bin = fs::canonicalize(&self.bin).unwrap_or_else(|_| self.bin.clone());
        let workers: Vec<u32> = children(run.pid).into_iter().filter(|&w| is_worker(w, &bin)).collect();
        let Some(&w) = self.rng.pick(&workers) else { return };
        // SAFETY: kill(2) on a child of a live run this driver started.
        if unsafe { libc::kill(w as i32, libc::SIGKILL) } == 0 {
            self.live[i].workers_killed.push(w);
            self.tally.fault("SIGKILL worker");
        }
    }

    /// A byte flipped, or two different bytes swapped, in one file of a store.
    fn tamper_in_place(&mut self, dir: &str, ext: &str, what: &'static str) {
        let node = self.rng.below(self.caches.len());
        let files = final_files(&self.caches[node].join(dir), ext);
        let Some(path) = self.rng.pick(&files).cloned() else { return };
        let swap = self.rng.chance(0.3);
        let mask = 1 + self.rng.below(255) as u8;
        let (mut a, b) = (self.rng.next(), self.rng.next());
        // A quarter of the changes to tables land in the `.npy` header (128 bytes).
        if what == "table" && self.rng.chance(0.25) {
            a %= 128;
        }
        let done = self.alter(&path, swap, mask, a, b);
        // Gone or replaced meanwhile (gc, a rewrite), or nothing to swap: no fault.
        if let Ok(true) = done {
            self.tally.fault(match (what, swap) {
                ("table", false) => "table byte flipped",
                ("table", true) => "table bytes swapped",
                ("entry", false) => "entry byte flipped",
                ("entry", true) => "entry bytes swapped",
                (_, false) => "library byte flipped",
                (_, true) => "library bytes swapped",
            });
            self.tampers.push(Tamper { at: Instant::now(), path });
        }
    }

    fn alter(&mut self, path: &Path, swap: bool, mask: u8, a: u64, b: u64) -> Result<bool> {
        let meta = fs::symlink_metadata(path)?;
        if !meta.is_file() || meta.len() < 2 {
            return Ok(false);
        }
        let mode = meta.permissions().mode();
        make_writable(path)?;
        let result = (|| -> Result<bool> {
            let mut f = fs::OpenOptions::new().read(true).write(true).open(path)?;
            let m = f.metadata()?;
            let len = m.len();
            if swap {
                let (i, j) = (a % len, b % len);
                let (x, y) = (read_at(&mut f, i)?, read_at(&mut f, j)?);
                if x == y {
                    return Ok(false);
                }
                write_at(&mut f, i, y)?;
                write_at(&mut f, j, x)?;
                // A swap may restore a byte flipped before: that position now holds another change.
                self.flipped.insert((m.dev(), m.ino(), i));
                self.flipped.insert((m.dev(), m.ino(), j));
            } else {
                let i = a % len;
                if !self.flipped.insert((m.dev(), m.ino(), i)) {
                    return Ok(false);
                }
                let x = read_at(&mut f, i)?;
                write_at(&mut f, i, x ^ mask)?;
            }
            Ok(true)
        })();
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode));
        result
    }

    /// Collects the runs that ended (and kills those hung).
    fn collect(&mut self) -> Result<()> {
        while let Ok((id, out)) = self.results.try_recv() {
            let Some(i) = self.live.iter().position(|r| r.id == id) else { continue };
            let run = self.live.swap_remove(i);
            let out = out.context("waiting for gridkey run")?;
            self.classify(&run, &out);
        }
        for i in 0..self.live.len() {
            if self.live[i].started.elapsed() > HANG && !self.live[i].parent_killed && !self.live[i].hung {
                let run = &self.live[i];
                self.tally.lost += 1;
                self.tally.problems.push(format!(
                    "run {} ({} mode, {}) hung for more than {} s; killed",
                    run.id,
                    run.mode,
                    GRIDS[run.grid],
                    HANG.as_secs()
                ));
                self.kill_parent_of(i);
                self.live[i].hung = true;
            }
        }
        Ok(())
    }

    fn classify(&mut self, run: &Live, out: &Output) {
        if run.hung {
            return; // counted lost when it was found hung
        }
        if run.parent_killed {
            self.tally.killed += 1;
            return;
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let label = run_label(run);
        let report: Option<RunReport> = serde_json::from_str(&stdout).ok();
        if report.as_ref().is_none_or(|r| !r.all_verified()) {
            // Kept for a look when the chaos fails (or with --keep).
            let dir = self.cache.with_file_name("failed-runs");
            let _ = fs::create_dir_all(&dir);
            let _ = fs::write(dir.join(format!("{}.json", run.id)), &out.stdout);
            let _ = fs::write(dir.join(format!("{}.stderr", run.id)), &out.stderr);
        }
        let Some(report) = report else {
            self.tally.lost += 1;
            self.tally.problems.push(format!(
                "{label}: no report, exit {:?} (signal {:?}): {}",
                out.status.code(),
                std::os::unix::process::ExitStatusExt::signal(&out.status),
                tail(&stderr)
            ));
            return;
        };
        if stderr.contains("panicked") {
            self.tally.lost += 1;
            self.tally.problems.push(format!("{label}: panicked: {}", tail(&stderr)));
            return;
        }
        let (mut lost, detected, killed) = self.judge_programs(run, &report, &label);
        if lost.is_none() && report.all_verified() && !out.status.success() {
            lost = Some(format!("every program verified but exit {:?}", out.status.code()));
        }
        match lost {
            Some(why) => {
                self.tally.lost += 1;
                self.tally.problems.push(format!("{label}: {why}"));
            }
            None if killed => self.tally.killed += 1,
            None if detected => self.tally.detected += 1,
            None => self.tally.ok += 1,
        }
    }

    /// Judges each program of a run's report that did not verify: a false hit, a fault the run
    /// detected (its own wrong compiler, a file tampered twice), a worker the driver killed, or
    /// lost. Returns (why the run is lost, detected, killed) and counts hits into the tally.
    fn judge_programs(&mut self, run: &Live, report: &RunReport, label: &str) -> (Option<String>, bool, bool) {
        let window: Vec<&Path> =
            self.tampers.iter().filter(|t| t.at >= run.started).map(|t| t.path.as_path()).collect();
        let mut lost = None;
        let mut detected = false;
        let mut killed = false;
        for p in &report.programs {
            self.tally.hits += u64::from(p.cache_hit);
            self.tally.verified_hits += u64::from(p.cache_hit && run.verify);
            if p.verified {
                continue;
            }
            let error = p.error.as_deref().unwrap_or("");
            let kernel_check = error.contains("max relative error");
            if run.cc == Cc::Flaky && !run.wrong && kernel_check {
                // A library its compiler miscompiled in an earlier phase, left by a run killed
                // before its check, caught by this run's check and removed (ADR 0023). One from
                // the shared tier would be caught as well; the final runs, which fetch everything
                // from the shared tier on a wiped node, fail if one is still there.
                detected = true;
                self.tally.flaky_caught += 1;
            } else if error.contains("differs from a fresh translation")
                || (kernel_check && !run.wrong && (p.cache_hit || !p.built))
            {
                self.tally.false_hits += 1;
                lost = Some(format!("FALSE HIT {}: {error}", p.program));
            } else if run.wrong && (kernel_check || error.contains("cannot load the kernel")) {
                // Its own compiler emits wrong kernels: failed by its check, or its wrong library
                // removed as wrong by another run of that compiler before it loaded it.
                detected = true;
            } else if !run.workers_killed.is_empty()
                && (error.contains("signal 9")
                    || run.workers_killed.iter().any(|w| error.contains(&format!("pid {w}"))))
            {
                killed = true;
            } else if let Some(t) = window
                .iter()
                .find(|t| error.contains(&*t.to_string_lossy()) && window.iter().filter(|u| u == t).count() >= 2)
            {
                // Changed again after the one repair a run makes: reported, not recoverable.
                detected = true;
                let repaired = report.warnings.iter().filter(|w| w.path == *t).count();
                self.tally.detections.push(format!(
                    "{label}: {}: file tampered twice or more in the run, {repaired} repair warnings: {error}",
                    p.program
                ));
            } else {
                lost.get_or_insert_with(|| format!("{}: {error}", p.program));
            }
        }
        (lost, detected, killed)
    }

    /// Every translation entry in the cache that decodes, compared with a fresh translation
    /// from an independent conversion of each grid into a new cache: (compared, differing,
    /// unknown keys, entries that do not decode).
    fn check_entries(&self) -> Result<(usize, usize, usize, usize)> {
        let mut fresh: HashMap<TranslationKey, (String, Vec<u8>)> = HashMap::new();
        let options = TranslationOptions::new();
        for (i, name) in GRIDS.iter().enumerate() {
            let grid = gridkey_grid::read_grid(&self.grid(i))?;
            let other = tempfile::tempdir()?;
            let ct = compile_time_offset_provider(grid.provider(), &TableStore::open(other.path())?)?;
            let (programs, _) = gridkey::supported::split(&gridkey_stencil::icon_programs(), &grid);
            for program in &programs {
                let key = gridkey_stencil::key_inputs(program, &options, &ct)?.key();
                let source = gridkey_stencil::translate(program, &ct, &options)?;
                fresh.insert(key, (format!("{} on {name}", program.name()), source.into_bytes()));
            }
        }
        let (mut compared, mut differ, mut unknown, mut tampered) = (0, 0, 0, 0);
        for cache in &self.caches {
            let entries = TranslationCache::open(cache)?;
            for path in final_files(&cache.join(gridkey_fingerprint::TRANSLATION_DIR), "bin") {
                let Some(key) =
                    path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<TranslationKey>().ok())
                else {
                    continue;
                };
                let Ok(payload) = entries.get(&key) else {
                    tampered += 1;
                    continue;
                };
                match fresh.get(&key) {
                    Some((_, want)) => {
                        compared += 1;
                        if payload.as_slice() != want.as_slice() {
                            differ += 1;
                            eprintln!("chaos: entry {} differs from a fresh translation", path.display());
                        }
                    }
                    None => {
                        unknown += 1;
                        eprintln!("chaos: entry {} has a key no program of the grids has", path.display());
                    }
                }
            }
        }
        Ok((compared, differ, unknown, tampered))
    }

    /// Each grid in each mode, `--verify`, every hit compared, `CC=gcc`: (verified, runs).
    fn final_runs(&mut self) -> Result<(usize, usize)> {
        let (mut ok, mut n) = (0, 0);
        for (grid, name) in GRIDS.iter().enumerate() {
            for mode in MODES {
                n += 1;
                let out = self.command(grid, 0, mode, 2, Cc::Gcc, true).output()?;
                self.final_check(&out, &mut ok, &format!("{mode} mode, {name}"));
            }
        }
        // With the shared tier: each grid on the second node, its local translations and
        // libraries deleted first, as a reader that fetches what the writers left.
        let env = self.shared.as_mut().map(|shared| {
            shared.resume();
            shared.env(false)
        });
        if let Some(env) = env {
            for dir in [gridkey_fingerprint::TRANSLATION_DIR, gridkey_stencil::BUILD_DIR] {
                let _ = fs::remove_dir_all(self.caches[1].join(dir));
            }
            let _ = fs::remove_file(&self.flaky_flag);
            for (grid, name) in GRIDS.iter().enumerate() {
                for cc in [Cc::Gcc, Cc::Flaky] {
                    n += 1;
                    let out = self.command(grid, 1, "process", 2, cc, true).envs(env.clone()).output()?;
                    let what = format!("process mode, {name}, CC {cc:?}, shared-tier reader on a wiped node");
                    self.final_check(&out, &mut ok, &what);
                }
            }
        }
        Ok((ok, n))
    }

    /// Counts a final run `out` as verified in `ok`, or records why not.
    fn final_check(&mut self, out: &Output, ok: &mut usize, what: &str) {
        let report: Option<RunReport> = serde_json::from_slice(&out.stdout).ok();
        match report {
            Some(r) if out.status.success() && r.all_verified() => *ok += 1,
            _ => self.tally.problems.push(format!(
                "final run ({what}): exit {:?}: {} {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).chars().take(2000).collect::<String>(),
                tail(&String::from_utf8_lossy(&out.stderr))
            )),
        }
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

fn read_at(f: &mut fs::File, at: u64) -> Result<u8> {
    let mut b = [0u8];
    f.seek(SeekFrom::Start(at))?;
    f.read_exact(&mut b)?;
    Ok(b[0])
}

fn write_at(f: &mut fs::File, at: u64, byte: u8) -> Result<()> {
    f.seek(SeekFrom::Start(at))?;
    f.write_all(&[byte])?;
    Ok(())
}

fn make_writable(path: &Path) -> std::io::Result<()> {
    let mode = fs::symlink_metadata(path)?.permissions().mode();
    fs::set_permissions(path, fs::Permissions::from_mode(mode | 0o200))
}

/// The files under a final name with extension `ext` below `dir` (no temp files).
fn final_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = fs::symlink_metadata(&p) else { continue };
            let temp = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(gridkey_fs::TEMP_PREFIX));
            if m.is_dir() && !temp {
                stack.push(p);
            } else if m.is_file() && !temp && p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every file some process maps now (`/proc/*/maps`).
fn mapped_files() -> HashSet<PathBuf> {
    let mut out = HashSet::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        if !e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(maps) = fs::read_to_string(e.path().join("maps")) else { continue };
        for line in maps.lines() {
            if let Some(at) = line.find('/') {
                out.insert(PathBuf::from(&line[at..]));
            }
        }
    }
    out
}

/// Whether process `pid` is a process-mode worker: the executable `bin`, started with the first
/// argument `worker` (a child forked by the parent to run a compiler has not exec'd yet, and so
/// still shows `bin`, but with the parent's arguments).
fn is_worker(pid: u32, bin: &Path) -> bool {
    let exe = fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == bin);
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    exe && cmdline.split(|&b| b == 0).nth(1) == Some(b"worker".as_slice())
}

/// The child processes of `pid` (process-mode workers of a run's parent).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out
}
