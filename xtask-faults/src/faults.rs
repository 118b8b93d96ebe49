//! `cargo xtask faults`: the fault matrix of ADR 0012. Drives the real `gridkey` binary (and the
//! crates, for the faults that need a handle on a live mapping) through crashes, hostile files,
//! full disks, bad cache directories and races, checks each outcome, prints one row per fault
//! (fault, expected, seen) and ends with `faults: N tried, N survived, 0 lost`.
//!
//! A fault is **survived** when the outcome is the expected one (a rebuild, a miss, or a typed
//! error naming the path, never a panic). It is **lost** when afterwards a file under a final
//! name in the cache is not what its name says (a partial table, a corrupted entry) or a run
//! served a wrong result: the one outcome a cache must never have.
//!
//! Real full disks and read-only file systems come from small tmpfs mounts when this process
//! may mount (root); otherwise the same faults are injected through the writer's I/O layer
//! (`GRIDKEY_FAULT=enospc:...`, parsed by the binary into a `gridkey_fs::Fault`) and the row says
//! so. Every persistent file (table, translation entry, kernel library) is written through
//! `gridkey_fs::write_atomic`, so each is killed and starved the same way.
//!
//! The shared tier's rows (`faults/remote.rs`) run against a real `redis-server`, installed
//! when missing.

mod bounded_waits;
mod remote;
mod site_cache;
mod task_settings;
mod truncated_map;
mod verified_travel;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use gridkey_digest::{digest_table, Dtype, TableDigest};
use gridkey_fingerprint::{decode_entry, encode_entry, KeyInputs, TranslationKey, ENTRY_FORMAT_VERSION};
use gridkey_fs::{PausePoint, TEMP_PREFIX};
use gridkey_offsets::{compile_time_offset_provider, Entry};
use gridkey_store::{StoreError, TableStore};
use ndarray::ArrayView2;
use ndarray_npy::ViewNpyExt;

/// What one fault came to.
struct Seen {
    survived: bool,
    lost: bool,
    text: String,
}

impl Seen {
    fn new(survived: bool, problems: &[String], text: String) -> Self {
        let lost = !problems.is_empty();
        let text = if lost { format!("{text}; BAD FILES: {}", problems.join("; ")) } else { text };
        Seen { survived: survived && !lost, lost, text }
    }
}

struct Matrix {
    bin: PathBuf,
    grid: PathBuf,
    icon: PathBuf,
    work: tempfile::TempDir,
    tried: usize,
    survived: usize,
    lost: usize,
    can_mount: bool,
    /// Only the rows whose name contains this (`--only TEXT`).
    only: Option<String>,
}

/// Runs the matrix; `Ok(true)` when every fault was survived.
pub fn faults(root: &Path, bin: PathBuf, only: Option<String>) -> Result<bool> {
    let work = tempfile::tempdir()?;
    let can_mount = try_mount(&work.path().join("probe"), "size=64k").is_ok_and(|m| {
        let _ = unmount(&m);
        true
    });
    let mut m = Matrix {
        bin,
        grid: root.join("data/grids/oQU480.231010.nc"),
        icon: root.join(gridkey::SHIPPED_GRID),
        work,
        tried: 0,
        survived: 0,
        lost: 0,
        can_mount,
        only,
    };
    let started = Instant::now();
    println!("{:<58} {:<44} seen", "fault", "expected");

    crash_rows(&mut m);

    bad_file_rows(&mut m);

    disk_full_rows(&mut m);

    cache_dir_rows(&mut m);

    race_and_live_table_rows(&mut m);

    // Stopped lock holders and stray lock and run files (ADR 0033).
    bounded_waits::rows(&mut m);
    truncated_map::rows(&mut m);

    task_settings::rows(&mut m)?;
    // 8. The shared tier (ADR 0018, ADR 0019).
    remote::rows(&mut m)?;

    println!(
        "\n{} s; tmpfs mounts {}",
        started.elapsed().as_secs(),
        if m.can_mount {
            "used for disk-full and read-only"
        } else {
            "not permitted: faults injected through the writer"
        }
    );
    println!("faults: {} tried, {} survived, {} lost", m.tried, m.survived, m.lost);
    Ok(m.survived == m.tried && m.lost == 0)
}

/// Row group 1: SIGKILL in the middle of each kind of write, at every pause point.
fn crash_rows(m: &mut Matrix) {
    // 1. SIGKILL in the middle of writing a table and a translation entry, at every point.
    for (what, filter) in [("table", "tables-v1"), ("translation entry", ".bin"), ("kernel library", ".so")] {
        for point in PausePoint::ALL {
            let expected = "no partial final file; temp removed by gc; rerun ok";
            m.row(&format!("SIGKILL writing a {what}, point {}", point.as_str()), expected, |m| {
                m.kill_at(point, filter)
            });
        }
    }
    m.row(
        "SIGKILL writing a table, temp from an old crash",
        "next run removes the temp and verifies",
        Matrix::kill_then_run,
    );
}

/// Row groups 2 and 3: bad table files and bad translation entries under a final name.
fn bad_file_rows(m: &mut Matrix) {
    // 2. Bad table files under a final name.
    for bad in BadTable::ALL {
        m.row(&format!("table file: {}", bad.name()), "rebuild, or typed error naming the file", |m| m.bad_table(bad));
    }

    // 3. Bad translation entries.
    for bad in ["truncated", "corrupted byte", "future format version"] {
        m.row(&format!("translation entry: {bad}"), "a miss, retranslated, entry rewritten", |m| m.bad_entry(bad));
    }
}

/// Row group 4: the disk filling up during a write, on a tmpfs where permitted and injected.
fn disk_full_rows(m: &mut Matrix) {
    // 4. The disk filling up during a write.
    if m.can_mount {
        m.row("disk full (64 KiB tmpfs) while storing tables", "clear error, nothing left behind", |m| {
            m.disk_full_tmpfs(64)
        });
        m.row("disk full (512 KiB tmpfs) during translation/build", "clear error, nothing left behind", |m| {
            m.disk_full_tmpfs(512)
        });
    }
    m.row("ENOSPC injected in the writer: table", "clear error, nothing left behind", |m| {
        m.disk_full_injected("tables-v1")
    });
    m.row("ENOSPC injected in the writer: translation entry", "clear error, nothing left behind", |m| {
        m.disk_full_injected("translation-v2")
    });
    m.row("ENOSPC injected in the writer: kernel library", "clear error, nothing left behind", |m| {
        m.disk_full_injected(".so")
    });
}

/// Row group 5: unusable, shared and read-only cache directories, and the site cache.
fn cache_dir_rows(m: &mut Matrix) {
    // 5. Cache directories.
    m.row("read-only cache directory", "run ok, nothing cached, one warning naming it", Matrix::read_only_dir);
    site_cache::rows(m);
    // Giving a directory to another user needs root; without it the row is skipped, not tried.
    if is_root() {
        m.row("cache directory owned by another user", "warning naming the owner, run ok", |m| m.shared_dir(true));
    } else {
        println!(
            "{:<58} {:<44} skipped: chown to another user needs root",
            "cache directory owned by another user", ""
        );
    }
    m.row("cache directory writable by everyone", "warning, run ok", |m| m.shared_dir(false));
    m.row("cache path that is a file", "typed error naming it", Matrix::dir_is_file);
}

/// Row groups 6 and 7: races between processes, tables changed in place, gc beside live runs.
fn race_and_live_table_rows(m: &mut Matrix) {
    // 6. Races.
    m.row(
        "8 processes convert+key ICON into one empty cache",
        "all ok, keys identical, tables intact once",
        Matrix::race_keys,
    );
    m.row(
        "8 processes run (translate+build) into one empty cache",
        "all ok, keys identical, entries intact once",
        Matrix::race_runs,
    );

    // 7. Tables modified in place after compilation.
    m.row(
        "table modified in place after compilation (host copy)",
        "verifying open: digest error; verify rebuilds",
        Matrix::modified_in_place,
    );

    // A table changed in place between conversion and translation, in a live run.
    for mode in [gridkey_jobs::BuildJobsMode::Serial, gridkey_jobs::BuildJobsMode::Process] {
        m.row(
            &format!("table changed in place before translation ({mode} run)"),
            "task fails, table repaired, entries all fresh",
            |m| m.changed_in_window(mode),
        );
    }

    // gc against a live process.
    m.row(
        "cache gc --max-size 0 while a run maps the tables",
        "mapped tables and live temp kept",
        Matrix::gc_while_mapped,
    );

    m.row(
        "cache gc --max-size 0 in a loop beside a run (process mode)",
        "every program verified; gc removes all after",
        Matrix::gc_loop_beside_run,
    );
}

impl Matrix {
    fn row(&mut self, fault: &str, expected: &str, check: impl FnOnce(&mut Matrix) -> Result<Seen>) {
        if self.only.as_ref().is_some_and(|only| !fault.contains(only.as_str())) {
            return;
        }
        let seen =
            check(self).unwrap_or_else(|e| Seen { survived: false, lost: false, text: format!("driver error: {e:#}") });
        self.tried += 1;
        self.survived += usize::from(seen.survived);
        self.lost += usize::from(seen.lost);
        let mark = if seen.survived { "" } else { "NOT SURVIVED: " };
        println!("{fault:<58} {expected:<44} {mark}{}", seen.text);
    }

    fn fresh(&self, name: &str) -> PathBuf {
        let dir = self.work.path().join(format!("{name}-{}", self.tried));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn cmd(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        for var in gridkey::environment() {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    fn gridkey(&self, args: &[&str], env: &[(&str, &str)]) -> Result<Output> {
        self.cmd(args, env).output().context("cannot run gridkey")
    }

    /// `gridkey run` in serial mode on the small MPAS grid, with extra flags.
    fn run(&self, cache: &Path, extra: &[&str], env: &[(&str, &str)]) -> Result<Run> {
        let mut args = vec!["run", "--grid", s(&self.grid), "--cache-dir", s(cache), "--mode", "serial", "--json"];
        args.extend_from_slice(extra);
        Run::of(self.gridkey(&args, env)?)
    }

    /// A cache filled by one run.
    fn filled(&self, name: &str) -> Result<PathBuf> {
        let cache = self.fresh(name);
        let r = self.run(&cache, &[], &[])?;
        if !r.ok() {
            bail!("filling the cache failed: {}", r.why());
        }
        Ok(cache)
    }

    /// Starts `gridkey run` with a pause fault and waits until it has paused; returns the
    /// process and the temp file it is writing.
    fn paused(&self, cache: &Path, spec: &str) -> Result<(Child, PathBuf)> {
        let args = ["run", "--grid", s(&self.grid), "--cache-dir", s(cache), "--mode", "serial"];
        let mut child =
            self.cmd(&args, &[("GRIDKEY_FAULT", spec)]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
        let stderr = child.stderr.take().context("stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("gridkey-fault: paused at ") {
                    let temp = rest.split_once(" writing ").map(|(_, t)| PathBuf::from(t));
                    let _ = tx.send(temp);
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(temp)) => Ok((child, temp)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("gridkey did not reach the fault point {spec}")
            }
        }
    }

    fn kill_at(&mut self, point: PausePoint, filter: &str) -> Result<Seen> {
        let cache = self.fresh("kill");
        let (mut child, temp) = self.paused(&cache, &format!("pause:{}:{filter}", point.as_str()))?;
        child.kill()?; // SIGKILL
        child.wait()?;
        let mut problems = check_final_files(&cache);
        let killed_temps = temps(&cache);
        if !killed_temps.contains(&temp) {
            problems.push(format!("the killed write's temp file {} is not there", temp.display()));
        }
        let gc = self.gridkey(&["cache", "gc", "--cache-dir", s(&cache), "--temp-age", "0"], &[])?;
        let left = temps(&cache).len();
        let rerun = self.run(&cache, &["--verify"], &[])?;
        problems.extend(check_final_files(&cache));
        let ok = gc.status.success() && left == 0 && rerun.ok();
        Ok(Seen::new(
            ok,
            &problems,
            format!("{} temp left by kill, {left} after gc; rerun {}", killed_temps.len(), rerun.summary()),
        ))
    }

    fn kill_then_run(&mut self) -> Result<Seen> {
        let cache = self.fresh("kill-old");
        let (mut child, temp) = self.paused(&cache, "pause:partial:tables-v1")?;
        child.kill()?;
        child.wait()?;
        // An abandoned temp file from a crash two minutes ago.
        fs::File::open(&temp)?.set_modified(SystemTime::now() - Duration::from_secs(120))?;
        let rerun = self.run(&cache, &[], &[])?;
        let problems = check_final_files(&cache);
        let left = temps(&cache).len();
        Ok(Seen::new(
            rerun.ok() && left == 0 && rerun.temps_removed >= 1,
            &problems,
            format!("run removed {} temp, {left} left; {}", rerun.temps_removed, rerun.summary()),
        ))
    }

    fn bad_table(&mut self, bad: BadTable) -> Result<Seen> {
        let cache = self.filled("badtable")?;
        let store = TableStore::open(&cache)?;
        let (spec, path) = c2e(&store)?;
        let good = fs::read(&path)?;
        let _ = fs::remove_file(&path);
        match bad {
            BadTable::Truncated => fs::write(&path, &good[..good.len() - 7])?,
            BadTable::Mismatch => {
                let mut b = good.clone();
                let last = b.len() - 2;
                b[last] ^= 0x01;
                fs::write(&path, b)?;
            }
            BadTable::OtherDtype => {
                let other = TableStore::open(&self.fresh("other"))?;
                let wide = c2e_table()?.mapv(i64::from);
                let d = digest_table(wide.view());
                other.put_table(d, wide.view())?;
                fs::write(&path, fs::read(other.path_of(&d))?)?;
            }
            BadTable::OtherShape => {
                let mut b = good.clone();
                let header = String::from_utf8_lossy(&b[..128]).into_owned();
                let shape = format!("({}, {})", spec.shape[0], spec.shape[1]);
                let fake = format!("({}, {})", spec.shape[0] - 1, spec.shape[1]);
                let at = header.find(&shape).context("shape in header")?;
                let fake = format!("{fake:<width$}", width = shape.len());
                b[at..at + shape.len()].copy_from_slice(fake.as_bytes());
                fs::write(&path, b)?;
            }
            BadTable::Empty => fs::write(&path, b"")?,
            BadTable::Directory => fs::create_dir(&path)?,
            BadTable::Symlink => {
                let elsewhere = cache.join("planted.npy");
                fs::write(&elsewhere, &good)?;
                std::os::unix::fs::symlink(&elsewhere, &path)?;
            }
        }
        let hex = spec.digest.to_hex();
        let checked = store.open_table(&spec).map(|_| ());
        let verified = store.open_verified(&spec).map(|_| ());
        let r = self.run(&cache, &["--verify"], &[])?;
        let problems = check_final_files(&cache);
        let typed = |res: &std::result::Result<(), StoreError>| match res {
            Ok(()) => "ok",
            Err(e) => kind(e),
        };
        let open_text = format!("open: {}, verified open: {}", typed(&checked), typed(&verified));
        let rebuilt = r.ok() && store.open_verified(&spec).is_ok();
        let typed_error = r.code == Some(2) && r.stderr.contains(&hex) && !r.stderr.contains("panicked");
        let verified_refused = verified.is_err();
        let text = if rebuilt {
            format!("{open_text}; run --verify rebuilt it, {}", r.summary())
        } else {
            format!("{open_text}; run --verify exit {:?}: {}", r.code, r.stderr.trim().lines().last().unwrap_or(""))
        };
        Ok(Seen::new((rebuilt || typed_error) && verified_refused && !r.stderr.contains("panicked"), &problems, text))
    }

    fn bad_entry(&mut self, bad: &str) -> Result<Seen> {
        let cache = self.filled("badentry")?;
        let dir = cache.join(gridkey_fingerprint::TRANSLATION_DIR);
        let entry = files_with_ext(&dir, "bin").into_iter().next().context("an entry")?;
        let key: TranslationKey = stem(&entry).parse()?;
        let good = fs::read(&entry)?;
        let planted = match bad {
            "truncated" => good[..good.len() / 2].to_vec(),
            "corrupted byte" => {
                let mut b = good.clone();
                b[40] ^= 0x10;
                b
            }
            _ => {
                let payload = decode_entry(&key, &good).map_err(anyhow::Error::msg)?;
                let mut future = encode_entry(&key, payload);
                future[4..8].copy_from_slice(&(ENTRY_FORMAT_VERSION + 1).to_le_bytes());
                let body = future.len() - 8;
                let check = xxhash_rust::xxh3::xxh3_64(&future[..body]).to_le_bytes();
                future[body..].copy_from_slice(&check);
                future
            }
        };
        fs::remove_file(&entry)?;
        fs::write(&entry, planted)?;
        let r = self.run(&cache, &[], &[])?;
        let problems = check_final_files(&cache);
        let misses = r.translations();
        let healed = decode_entry(&key, &fs::read(&entry)?).is_ok();
        Ok(Seen::new(
            r.ok() && misses == 1 && healed,
            &problems,
            format!("{misses} miss, entry rewritten: {healed}; {}", r.summary()),
        ))
    }

    fn disk_full_tmpfs(&mut self, kib: u64) -> Result<Seen> {
        let mnt = self.fresh("full");
        let mounted = try_mount(&mnt, &format!("size={}k", kib))?;
        let cache = mnt.join("cache");
        let r = self.run(&cache, &[], &[]);
        let problems = check_final_files(&cache);
        let temps = temps(&cache).len();
        let orphans = orphan_records(&cache);
        unmount(&mounted)?;
        let r = r?;
        let clear = r.text().contains("No space left on device") && !r.text().contains("panicked");
        Ok(Seen::new(
            !r.ok() && clear && temps == 0 && orphans == 0,
            &problems,
            format!("exit {:?}, ENOSPC named: {clear}, {temps} temp files, {orphans} records without entry", r.code),
        ))
    }

    fn disk_full_injected(&mut self, part: &str) -> Result<Seen> {
        let cache = self.fresh("enospc");
        let spec = format!("enospc:100:{part}");
        let r = self.run(&cache, &[], &[("GRIDKEY_FAULT", &spec)])?;
        let problems = check_final_files(&cache);
        let temps = temps(&cache).len();
        let orphans = orphan_records(&cache);
        let clear = r.text().contains("No space left on device") && !r.text().contains("panicked");
        Ok(Seen::new(
            !r.ok() && clear && temps == 0 && orphans == 0,
            &problems,
            format!("exit {:?}, ENOSPC named: {clear}, {temps} temp files, {orphans} records without entry", r.code),
        ))
    }

    fn read_only_dir(&mut self) -> Result<Seen> {
        let mnt = self.fresh("ro");
        let (cache, how, cleanup): (PathBuf, &str, Option<PathBuf>) = if self.can_mount {
            let m = try_mount(&mnt, "size=64k")?;
            let ok = Command::new("mount").args(["-o", "remount,ro"]).arg(&m).status()?.success();
            if !ok {
                unmount(&m)?;
                bail!("cannot remount the tmpfs read-only");
            }
            (m.clone(), "read-only tmpfs", Some(m))
        } else {
            fs::create_dir_all(&mnt)?;
            fs::set_permissions(&mnt, fs::Permissions::from_mode(0o555))?;
            (mnt.clone(), "mode 0555", None)
        };
        let r = self.run(&cache, &[], &[]);
        if let Some(m) = cleanup {
            unmount(&m)?;
        }
        let r = r?;
        // A cache that cannot be written serves what it has (here nothing) and caches nothing new,
        // with one warning naming it (ADR 0036).
        // (A tmpfs root is also writable by everyone, which has its own warning.)
        let warnings: Vec<&str> =
            r.stderr.lines().filter(|l| l.contains(": cache directory is read-only here")).collect();
        let named = warnings.len() == 1 && warnings[0].contains(s(&cache));
        Ok(Seen::new(
            r.ok() && named,
            &[],
            format!("{how}: exit {:?}, {}", r.code, r.stderr.trim().lines().last().unwrap_or("")),
        ))
    }

    fn shared_dir(&mut self, other_owner: bool) -> Result<Seen> {
        let cache = self.fresh("shared");
        fs::create_dir_all(&cache)?;
        let want = if other_owner {
            if std::os::unix::fs::chown(&cache, Some(4242), None).is_err() {
                bail!("cannot chown a directory to another user here (not root)");
            }
            "owned by user 4242"
        } else {
            fs::set_permissions(&cache, fs::Permissions::from_mode(0o777))?;
            "writable by everyone"
        };
        let r = self.run(&cache, &[], &[])?;
        let warned = r.stderr.contains("warning") && r.stderr.contains(want);
        Ok(Seen::new(
            r.ok() && warned,
            &check_final_files(&cache),
            format!("warned ({want}): {warned}; {}", r.summary()),
        ))
    }

    fn dir_is_file(&mut self) -> Result<Seen> {
        let file = self.fresh("file");
        fs::write(&file, b"not a directory")?;
        let r = self.run(&file, &[], &[])?;
        let named = r.stderr.contains(s(&file)) && r.stderr.contains("is a file");
        Ok(Seen::new(r.code == Some(2) && named, &[], format!("exit {:?}: {}", r.code, r.stderr.trim())))
    }

    fn race_keys(&mut self) -> Result<Seen> {
        let cache = self.fresh("race-keys");
        let args = ["keys", "--grid", s(&self.icon), "--cache-dir", s(&cache)];
        let children = (0..8)
            .map(|_| self.cmd(&args, &[]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn())
            .collect::<std::io::Result<Vec<_>>>()?;
        let outs = children.into_iter().map(Child::wait_with_output).collect::<std::io::Result<Vec<_>>>()?;
        let ok = outs.iter().filter(|o| o.status.success()).count();
        let distinct: std::collections::BTreeSet<&[u8]> = outs.iter().map(|o| o.stdout.as_slice()).collect();
        let report: gridkey::keys::KeysReport = serde_json::from_slice(&outs[0].stdout).context("keys JSON")?;
        let tables = files_with_ext(&cache.join(gridkey_store::TABLES_DIR), "npy").len();
        let unique: std::collections::BTreeSet<&String> = report.tables.values().collect();
        let problems = check_final_files(&cache);
        let temps = temps(&cache).len();
        Ok(Seen::new(
            ok == 8 && distinct.len() == 1 && tables == unique.len() && temps == 0,
            &problems,
            format!(
                "{ok}/8 ok, {} distinct outputs, {tables} table files for {} digests, {temps} temps",
                distinct.len(),
                unique.len()
            ),
        ))
    }

    fn race_runs(&mut self) -> Result<Seen> {
        let cache = self.fresh("race-runs");
        let args = ["run", "--grid", s(&self.grid), "--cache-dir", s(&cache), "--mode", "serial", "--json"];
        let children = (0..8)
            .map(|_| self.cmd(&args, &[]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn())
            .collect::<std::io::Result<Vec<_>>>()?;
        let runs = children.into_iter().map(|c| Run::of(c.wait_with_output()?)).collect::<Result<Vec<_>>>()?;
        let ok = runs.iter().filter(|r| r.ok()).count();
        let keys: std::collections::BTreeSet<Vec<String>> = runs.iter().map(|r| r.keys.clone()).collect();
        let entries = files_with_ext(&cache.join(gridkey_fingerprint::TRANSLATION_DIR), "bin").len();
        let libs = files_with_ext(&cache.join(gridkey_stencil::BUILD_DIR), "so").len();
        let problems = check_final_files(&cache);
        let temps = temps(&cache).len();
        let programs = runs[0].keys.len();
        Ok(Seen::new(
            ok == 8 && keys.len() == 1 && entries == programs && libs == programs && temps == 0,
            &problems,
            format!("{ok}/8 ok, {} distinct key sets, {entries} entries and {libs} libraries for {programs} programs, {temps} temps", keys.len()),
        ))
    }

    fn modified_in_place(&mut self) -> Result<Seen> {
        let cache = self.fresh("modified");
        let grid = gridkey_grid::read_grid(&self.grid)?;
        let provider = gridkey::layouts::runtime_layouts(grid.provider())?
            .into_iter()
            .find(|(name, _)| *name == "host copy")
            .context("host-copy variant")?
            .1;
        let store = TableStore::open(&cache)?;
        let ct = compile_time_offset_provider(&provider, &store)?;
        let Some((_, Entry::Gather(c))) = ct.entries().iter().find(|(n, _)| n == "C2E") else { bail!("C2E") };
        let spec = *c.spec();
        let path = store.path_of(&spec.digest);
        let before = KeyInputs::new(&gridkey_stencil::frontend(), "p", b"p", &Default::default(), &ct).key();
        // Modify the stored file in place, as a writer sharing the table would: same inode.
        let mut perms = fs::metadata(&path)?.permissions();
        perms.set_mode(0o644);
        fs::set_permissions(&path, perms)?;
        let mut f = fs::OpenOptions::new().write(true).open(&path)?;
        let len = f.metadata()?.len();
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(len - 4))?;
        f.write_all(&0i32.to_le_bytes())?;
        f.sync_all()?;
        drop(f);
        let still = KeyInputs::new(&gridkey_stencil::frontend(), "p", b"p", &Default::default(), &ct).key();
        let verified = store.open_verified(&spec);
        let detected = matches!(&verified, Err(StoreError::Digest { path: p, .. }) if p == &path);
        drop(verified);
        drop(ct);
        let Some(runtime) = provider.gather("C2E") else { bail!("C2E") };
        let gridkey_offsets::IndexTable::I32(a) = runtime.host_table("C2E")? else { bail!("grid tables are int32") };
        let put = TableStore::open(&cache)?.verifying(true).put_table(spec.digest, a.view());
        let rebuilt = put.is_ok() && store.open_verified(&spec).is_ok();
        Ok(Seen::new(
            detected && rebuilt && before == still,
            &check_final_files(&cache),
            format!("key unchanged (contract): {}; verifying open: digest error naming the file: {detected}; verifying put rebuilt: {rebuilt}", before == still),
        ))
    }

    /// A table of the run's compile-time view changed in place (same inode) after conversion and
    /// before translation: the tasks that translate from it fail, nothing is cached from it, the
    /// run rewrites it and compiles them again; afterwards every translation entry equals a fresh
    /// translation from an independent conversion, and a run that verifies every hit agrees.
    fn changed_in_window(&mut self, mode: gridkey_jobs::BuildJobsMode) -> Result<Seen> {
        use std::sync::Arc;
        let cache = self.fresh("window");
        fs::create_dir_all(&cache)?;
        let grid = gridkey_grid::read_grid(&self.grid)?;
        let programs = gridkey_stencil::icon_programs();
        let options = gridkey_fingerprint::TranslationOptions::new();
        let cache = fs::canonicalize(&cache)?;
        // The run is lent this memo, so it holds this view's mapping.
        let memo = gridkey_offsets::ConversionMemo::new();
        let ct = memo.provider(grid.provider(), &TableStore::open(&cache)?)?;
        let Some((_, Entry::Gather(c2e))) = ct.entries().iter().find(|(n, _)| n == "C2E") else { bail!("C2E") };
        let path = c2e.table_path().to_path_buf();
        let gridkey_store::TableView::I32(table) = c2e.table() else { bail!("grid tables are int32") };
        let max = table.iter().copied().max().context("an element")?;
        let elements = table.len();
        // Same inode, so the run's mapping (the lent memo keeps this view) sees it: a larger index
        // than any real one, which domain inference would read as another codomain extent.
        let mut perms = fs::metadata(&path)?.permissions();
        perms.set_mode(0o644);
        fs::set_permissions(&path, perms)?;
        let mut f = fs::OpenOptions::new().write(true).open(&path)?;
        let data_start = f.metadata()?.len() - (elements * 4) as u64;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(data_start))?;
        f.write_all(&(max + 5).to_le_bytes())?;
        f.sync_all()?;
        drop(f);
        let worker = gridkey_jobs::WorkerCommand::gridkey(self.bin.clone());
        let runner = gridkey_jobs::Runner::new(
            gridkey_jobs::BuildJobs::new(mode, 2),
            Arc::new(gridkey::StencilHandler),
            worker.clone(),
        );
        let config = gridkey::RunConfig {
            grid: self.grid.clone(),
            settings: crate::settings_for(&cache, gridkey_jobs::BuildJobs::new(mode, 2)),
            worker,
            options: options.clone(),
        };
        let lent = gridkey::RunOptions::new().grid(&grid).programs(&programs).runner(&runner).memo(&memo);
        let report = gridkey::run(&config, lent)?;
        drop(ct);
        let verified = report.programs.iter().filter(|p| p.verified).count();
        let warned = report.warnings.iter().any(|w| w.path == path);
        // The entries, checked against an independent conversion of the intact runtime tables.
        let other = tempfile::tempdir()?;
        let good = compile_time_offset_provider(grid.provider(), &TableStore::open(other.path())?)?;
        let entries = gridkey_fingerprint::TranslationCache::open(&cache)?;
        let mut fresh_entries = 0;
        for program in &programs {
            let key = gridkey_stencil::key_inputs(program, &options, &good)?.key();
            let fresh = gridkey_stencil::translate(program, &good, &options)?;
            fresh_entries += usize::from(entries.get(&key).as_deref() == Ok(fresh.as_bytes()));
        }
        let stale = files_with_ext(&cache.join(gridkey_fingerprint::TRANSLATION_DIR), "bin").len() - fresh_entries;
        let rerun = self.run(&cache, &[], &[("GRIDKEY_VERIFY_CACHE_HITS", "1")])?;
        let poisoned = stale > 0 || rerun.translations() > 0 || !rerun.ok();
        let mut problems = check_final_files(&cache);
        if poisoned {
            problems.push(format!("{stale} translation entries that a fresh translation does not give"));
        }
        Ok(Seen::new(
            verified == programs.len() && warned && rerun.ok(),
            &problems,
            format!(
                "{verified}/{} verified, repair warned: {warned}; {fresh_entries} entries fresh, {stale} stale; verifying rerun {}",
                programs.len(),
                rerun.summary()
            ),
        ))
    }

    /// `cache gc --max-size 0` run again and again while a process-mode run translates, builds
    /// and loads into an empty cache (ADR 0026): the run must verify every program, and once it
    /// is over the same collection removes everything.
    fn gc_loop_beside_run(&mut self) -> Result<Seen> {
        let cache = self.fresh("gc-loop");
        let args = ["run", "--grid", s(&self.grid), "--cache-dir", s(&cache), "--mode", "process", "--jobs", "2"];
        let run = self.cmd(&args, &[]).arg("--json").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let gc_args = ["cache", "gc", "--cache-dir", s(&cache), "--max-size", "0", "--json"];
        let (mut loops, mut removed) = (0u64, 0u64);
        let mut run = Some(run);
        let mut out = None;
        while let Some(mut child) = run.take() {
            if child.try_wait()?.is_some() {
                out = Some(child.wait_with_output()?);
                break;
            }
            run = Some(child);
            let gc = self.gridkey(&gc_args, &[])?;
            let report: serde_json::Value = serde_json::from_slice(&gc.stdout).unwrap_or_default();
            removed += report["entries_removed"].as_u64().unwrap_or(0);
            loops += 1;
        }
        let r = Run::of(out.context("the run's output")?)?;
        let after = self.gridkey(&gc_args, &[])?;
        let after: serde_json::Value = serde_json::from_slice(&after.stdout).context("gc JSON")?;
        let emptied = after["bytes_left"] == 0;
        Ok(Seen::new(
            r.ok() && loops > 0 && emptied,
            &check_final_files(&cache),
            format!(
                "{loops} collections beside the run removed {removed} entries; run {}; after: emptied {emptied}",
                r.summary()
            ),
        ))
    }

    fn gc_while_mapped(&mut self) -> Result<Seen> {
        let cache = self.fresh("gc-live");
        let (mut child, temp) = self.paused(&cache, "pause:created:translation-v2")?;
        let during = self
            .gridkey(&["cache", "gc", "--cache-dir", s(&cache), "--max-size", "0", "--temp-age", "0", "--json"], &[])?;
        let tables_during = files_with_ext(&cache.join(gridkey_store::TABLES_DIR), "npy").len();
        let temp_kept = temp.exists();
        child.kill()?;
        child.wait()?;
        let after = self
            .gridkey(&["cache", "gc", "--cache-dir", s(&cache), "--max-size", "0", "--temp-age", "0", "--json"], &[])?;
        let tables_after = files_with_ext(&cache.join(gridkey_store::TABLES_DIR), "npy").len();
        let kept: serde_json::Value = serde_json::from_slice(&during.stdout).context("gc JSON")?;
        let ok =
            during.status.success() && after.status.success() && tables_during == 7 && temp_kept && tables_after == 0;
        Ok(Seen::new(
            ok,
            &check_final_files(&cache),
            format!(
                "during run: {tables_during} tables kept ({} in use), live temp kept: {temp_kept}; after kill: {tables_after} tables",
                kept["kept_in_use"]
            ),
        ))
    }
}

#[derive(Clone, Copy)]
enum BadTable {
    Truncated,
    Mismatch,
    OtherDtype,
    OtherShape,
    Empty,
    Directory,
    Symlink,
}

impl BadTable {
    const ALL: [BadTable; 7] = [
        Self::Truncated,
        Self::Mismatch,
        Self::OtherDtype,
        Self::OtherShape,
        Self::Empty,
        Self::Directory,
        Self::Symlink,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::Mismatch => "content does not match its name",
            Self::OtherDtype => "header with another dtype",
            Self::OtherShape => "header with another shape",
            Self::Empty => "zero-length",
            Self::Directory => "a directory in its place",
            Self::Symlink => "a symlink in its place",
        }
    }
}

fn kind(e: &StoreError) -> &'static str {
    match e {
        StoreError::Missing { .. } => "Missing",
        StoreError::NotAFile { .. } => "NotAFile",
        StoreError::Read { .. } => "Read",
        StoreError::Format { .. } => "Format",
        StoreError::Shape { .. } => "Shape",
        StoreError::Digest { .. } => "Digest",
        StoreError::Write { .. } => "Write",
        StoreError::WriteTemp { .. } => "WriteTemp",
        StoreError::Truncated { .. } => "Truncated",
        StoreError::Directory { .. } => "Directory",
    }
}

/// The outcome of one `gridkey run --json`.
struct Run {
    code: Option<i32>,
    stderr: String,
    stdout: String,
    verified: usize,
    programs: usize,
    translations: usize,
    temps_removed: u64,
    keys: Vec<String>,
}

impl Run {
    fn of(out: Output) -> Result<Run> {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let report: Option<gridkey::RunReport> = serde_json::from_str(&stdout).ok();
        let (verified, programs, translations, temps_removed, keys) = report.map_or((0, 0, 0, 0, Vec::new()), |r| {
            (
                r.programs.iter().filter(|p| p.verified).count(),
                r.programs.len(),
                r.translations(),
                r.temps_removed,
                r.programs.iter().map(|p| p.key.clone().unwrap_or_default()).collect(),
            )
        });
        Ok(Run { code: out.status.code(), stderr, stdout, verified, programs, translations, temps_removed, keys })
    }

    fn ok(&self) -> bool {
        self.code == Some(0) && self.programs > 0 && self.verified == self.programs
    }

    fn translations(&self) -> usize {
        self.translations
    }

    fn text(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    fn summary(&self) -> String {
        format!("{}/{} verified, {} translated", self.verified, self.programs, self.translations)
    }

    fn why(&self) -> String {
        format!("exit {:?}: {}", self.code, self.stderr.trim())
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

fn stem(p: &Path) -> String {
    p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => walk(&p, out),
            Ok(_) => out.push(p),
            Err(_) => {}
        }
    }
}

fn all_files(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(cache, &mut out);
    out
}

fn temps(cache: &Path) -> Vec<PathBuf> {
    all_files(cache)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(TEMP_PREFIX)))
        .collect()
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.retain(|p| {
        p.extension().is_some_and(|e| e == ext)
            && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(TEMP_PREFIX))
    });
    out
}

/// Translation records (`.json`) without their entry (`.bin`).
fn orphan_records(cache: &Path) -> usize {
    files_with_ext(&cache.join(gridkey_fingerprint::TRANSLATION_DIR), "json")
        .iter()
        .filter(|p| !p.with_extension("bin").exists())
        .count()
}

/// The C2E table of a cache filled by the main job on the MPAS grid: its spec and path.
fn c2e(store: &TableStore) -> Result<(gridkey_store::TableSpec, PathBuf)> {
    let a = c2e_table()?;
    let digest = digest_table(a.view());
    let spec = gridkey_store::TableSpec { digest, dtype: Dtype::I32, shape: [a.nrows(), a.ncols()] };
    Ok((spec, store.path_of(&digest)))
}

/// The runtime C2E table of the MPAS grid.
fn c2e_table() -> Result<ndarray::ArcArray2<i32>> {
    let grid = gridkey_grid::read_grid(&PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/grids/oQU480.231010.nc"
    )))?;
    let c = grid.provider().gather("C2E").context("C2E")?;
    let gridkey_offsets::IndexTable::I32(a) = c.host_table("C2E")? else { bail!("grid tables are int32") };
    Ok(a)
}

/// Every file under a final name in the cache that is not what its name says: the independent
/// check of "no partial file under a final name" (tables re-hashed, entries decoded, records
/// re-keyed, libraries checked for their ELF magic).
fn check_final_files(cache: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for path in all_files(cache) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // A temp file, or a file inside a temp directory (a build's private directory, with
        // what the C compiler wrote), is not under a final name.
        let in_temp = path
            .strip_prefix(cache)
            .is_ok_and(|rel| rel.components().any(|c| c.as_os_str().to_string_lossy().starts_with(TEMP_PREFIX)));
        if in_temp || name == "planted.npy" {
            continue;
        }
        let in_store = |store: &str| {
            path.parent().and_then(Path::parent).is_some_and(|p| p.ends_with(store))
                || path.parent().is_some_and(|p| p.ends_with(store))
        };
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let ok = match path.extension().and_then(|e| e.to_str()) {
            Some("npy") if in_store(gridkey_store::TABLES_DIR) => {
                npy_digest(&bytes).is_some_and(|d| d.to_hex() == stem(&path))
            }
            Some("bin") if in_store(gridkey_fingerprint::TRANSLATION_DIR) => {
                stem(&path).parse::<TranslationKey>().is_ok_and(|k| decode_entry(&k, &bytes).is_ok())
            }
            Some("json") if in_store(gridkey_fingerprint::TRANSLATION_DIR) => {
                serde_json::from_slice::<KeyInputs>(&bytes).is_ok_and(|k| k.key().to_hex() == stem(&path))
            }
            // Written by gridkey_fs like every entry: whole and read-only.
            Some("so") if in_store(gridkey_stencil::BUILD_DIR) => {
                bytes.starts_with(b"\x7fELF") && fs::metadata(&path).is_ok_and(|m| m.permissions().readonly())
            }
            _ => true,
        };
        if !ok {
            problems.push(format!("{} is not what its name says ({} bytes)", path.display(), bytes.len()));
        }
    }
    problems
}

fn npy_digest(bytes: &[u8]) -> Option<TableDigest> {
    if let Ok(v) = ArrayView2::<i32>::view_npy(bytes) {
        return Some(digest_table(v));
    }
    ArrayView2::<i64>::view_npy(bytes).ok().map(digest_table)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// Mounts a tmpfs with `options` at `dir` (created); the mount point.
fn try_mount(dir: &Path, options: &str) -> Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let out = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(dir).output()?;
    if !out.status.success() {
        bail!("mount failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(dir.to_path_buf())
}

fn unmount(dir: &Path) -> Result<()> {
    let ok = Command::new("umount").arg(dir).status()?.success();
    if !ok {
        bail!("cannot unmount {}", dir.display());
    }
    Ok(())
}
