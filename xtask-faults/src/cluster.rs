//! `cargo xtask cluster --nodes N [--grid FILE] [--mode M] [--jobs J] [--rounds R] [--loopback] [--tls | --compare-tls] [--caches-in-memory]`:
//! N simulated nodes on one Redis server (README "The shared tier"). Each node is a
//! `gridkey run` process with a local cache of its own, in a network namespace of its own
//! (a veth pair on a bridge) when this process may create them, else on loopback; every node is
//! a designated writer.
//!
//! 1. Cold start: all N nodes at once on an empty server and empty caches. Every key must be
//!    translated exactly once cluster-wide.
//! 2. Warm starts, interleaved over R rounds: N fresh nodes (empty local caches) from the shared
//!    tier, against the N nodes of the cold start, each warm from its own full local cache (no
//!    shared tier: the best case). Translations must be 0 and fetches at most one per key and
//!    kind per node; the ratio of the median wave times is what the tier costs (on a machine of
//!    few cores N nodes share them, so only this ratio, not N against one node, says it).
//! 3. The server killed mid-run: N fresh nodes on an empty server, the server SIGKILLed once the
//!    first object is uploaded; every node must complete with the same keys and results.
//!
//! Prints translations per key cluster-wide, remote round trips and bytes per node, both wave
//! times and their ratio, and ends with `cluster: ... ok` or what failed.
//!
//! The server has a TLS port too, with a certificate of a CA made for the run (`openssl`).
//! `--tls`: every node reaches it over `rediss://` with `GRIDKEY_REMOTE_CA_FILE` (ADR 0037).
//! `--compare-tls`: the nodes use plain `redis://`, and each warm round also runs N fresh nodes
//! from the shared tier over TLS; the ratio TLS / plain of the median warm-start times of the
//! same run is printed (goal <= 1.2).
//!
//! `--caches-in-memory`: every node's cache directory on one `tmpfs` mounted for the run (root
//! only). A fresh node writes its whole cache (for the shipped ICON grid 32 files in 21
//! directories, 2.2 MB, most of it the stored tables, each synced), N of them at once on one
//! file system and one disk, which N real nodes do not share, while the warm nodes write nothing.
//! In memory, the ratio is what the tier costs beyond writing a cache to a disk; the goal is
//! checked on the disk, without this flag.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gridkey::RunReport;

use crate::redis_server::{certificates, ensure_installed, RedisServer, ServerCommands as _};

/// The password of the cluster's server (so that protected mode lets the namespaces in).
const PASSWORD: &str = "gridkey-cluster";

/// Subnet of the bridge; the server is `.0.1`, node i is `10.213.(i / 250 + 1).(i % 250 + 2)`.
const SERVER_IP: &str = "10.213.0.1";

struct Options {
    nodes: usize,
    grid: PathBuf,
    mode: String,
    jobs: usize,
    rounds: usize,
    loopback: bool,
    /// Every node over TLS.
    tls: bool,
    /// Warm starts over TLS beside the plain ones, and their ratio.
    compare_tls: bool,
    /// The node caches on a tmpfs of the run.
    caches_in_memory: bool,
}

/// How a node reaches the shared tier.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    /// No shared tier.
    Off,
    /// `redis://`.
    Plain,
    /// `rediss://` with the run's CA file.
    Tls,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        nodes: 16,
        grid: crate::root().join(gridkey::SHIPPED_GRID),
        mode: "serial".to_owned(),
        jobs: 1,
        rounds: 3,
        loopback: false,
        tls: false,
        compare_tls: false,
        caches_in_memory: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => o.nodes = value()?.parse().context("--nodes takes a positive number")?,
            "--grid" => o.grid = PathBuf::from(value()?),
            "--mode" => o.mode = value()?.clone(),
            "--jobs" => o.jobs = value()?.parse().context("--jobs takes a number")?,
            "--rounds" => o.rounds = value()?.parse().context("--rounds takes a number")?,
            "--loopback" => o.loopback = true,
            "--tls" => o.tls = true,
            "--compare-tls" => o.compare_tls = true,
            "--caches-in-memory" => o.caches_in_memory = true,
            other => bail!("unexpected argument {other:?}: expected --nodes N [--grid FILE] [--mode M] [--jobs J] [--rounds R] [--loopback] [--tls | --compare-tls] [--caches-in-memory]"),
        }
    }
    if o.nodes == 0 || o.rounds == 0 {
        bail!("--nodes and --rounds must be at least 1");
    }
    if o.tls && o.compare_tls {
        bail!("--tls and --compare-tls exclude each other: --compare-tls runs both");
    }
    Ok(o)
}

/// Network namespaces on a bridge, one per node; removed when dropped.
struct Namespaces {
    tag: String,
    names: Vec<String>,
    bridge: String,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("cannot run ip")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Namespaces {
    fn create(nodes: usize) -> Result<Namespaces> {
        let tag = format!("{:x}", std::process::id() % 0xfffff);
        let bridge = format!("gkbr{tag}");
        let mut ns = Namespaces { tag: tag.clone(), names: Vec::new(), bridge: bridge.clone() };
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{SERVER_IP}/16"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..nodes {
            let name = format!("gk{tag}n{i}");
            let veth = format!("gk{tag}v{i}");
            ip(&["netns", "add", &name])?;
            ns.names.push(name.clone());
            ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name])?;
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            let addr = format!("10.213.{}.{}/16", i / 250 + 1, i % 250 + 2);
            ip(&["-n", &name, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &name, "link", "set", "eth0", "up"])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = ip(&["netns", "del", name]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
        let _ = &self.tag;
    }
}

/// A tmpfs mounted for the node caches; unmounted when dropped.
struct MemoryCaches {
    dir: PathBuf,
}

impl MemoryCaches {
    fn mount(dir: PathBuf) -> Result<MemoryCaches> {
        std::fs::create_dir_all(&dir)?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8g,mode=0700", "gridkey-cluster-caches"])
            .arg(&dir)
            .output()
            .context("cannot run mount")?;
        if !out.status.success() {
            bail!(
                "cannot mount a tmpfs on {} ({}); --caches-in-memory needs root",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(MemoryCaches { dir })
    }
}

impl Drop for MemoryCaches {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// What one wave of nodes did.
struct Wave {
    reports: Vec<RunReport>,
    failures: Vec<String>,
    seconds: f64,
}

struct Cluster<'a> {
    bin: &'a Path,
    o: &'a Options,
    ns: Option<Namespaces>,
    url: String,
    /// The `rediss://` URL of the same server and the CA file of its certificate.
    tls_url: String,
    ca: PathBuf,
    /// The cluster's signing key, and the trusted-keys file that lists it (ADR 0031).
    signing_key: PathBuf,
    trusted_keys: PathBuf,
    /// The tmpfs of `--caches-in-memory`, unmounted before `work` is removed (fields drop in
    /// order).
    memory: Option<MemoryCaches>,
    /// The run's directory, removed when the cluster is dropped; held, never read.
    _work: tempfile::TempDir,
    /// Where the node caches live: the work directory, or the tmpfs of `--caches-in-memory`.
    caches: PathBuf,
    waves: usize,
}

impl Cluster<'_> {
    /// A node's `gridkey run` into `cache`, with the shared tier as `link` says.
    fn node(&self, i: usize, cache: &Path, link: Link) -> Command {
        let mut cmd = match &self.ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.names[i]]).arg(self.bin);
                c
            }
            None => Command::new(self.bin),
        };
        cmd.args(["run", "--json", "--mode", &self.o.mode, "--jobs", &self.o.jobs.to_string(), "--grid"])
            .arg(&self.o.grid)
            .arg("--cache-dir")
            .arg(cache);
        for var in gridkey::environment() {
            cmd.env_remove(var);
        }
        if link == Link::Tls {
            cmd.args(["--remote", &self.tls_url]).env("GRIDKEY_REMOTE_CA_FILE", &self.ca);
        }
        if link == Link::Plain {
            cmd.args(["--remote", &self.url]);
        }
        if link != Link::Off {
            // Every node signs what it uploads and takes what the cluster's key signed: without
            // trusted keys a node would take nothing (ADR 0031).
            cmd.env("GRIDKEY_REMOTE_SIGNING_KEY", &self.signing_key)
                .env("GRIDKEY_REMOTE_TRUSTED_KEYS", &self.trusted_keys);
            cmd.arg("--remote-writer");
            // N nodes on few cores: a holder's batch can take long; the heartbeat keeps its lease.
            cmd.env("GRIDKEY_REMOTE_LEASE_WAIT", "300").env("GRIDKEY_REMOTE_TIMEOUT", "5");
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
        cmd
    }

    /// N fresh cache directories.
    fn fresh(&mut self) -> Vec<PathBuf> {
        self.waves += 1;
        (0..self.o.nodes).map(|i| self.caches.join(format!("wave{}-node{i}", self.waves))).collect()
    }

    /// All nodes at once; `during` runs while they do (with the time the wave started).
    fn wave(&self, caches: &[PathBuf], link: Link, during: impl FnOnce(Instant)) -> Result<Wave> {
        let started = Instant::now();
        let children: Vec<Child> = caches
            .iter()
            .enumerate()
            .map(|(i, c)| self.node(i, c, link).spawn().context("cannot start a node"))
            .collect::<Result<_>>()?;
        during(started);
        let mut reports = Vec::new();
        let mut failures = Vec::new();
        for (i, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output()?;
            match serde_json::from_slice::<RunReport>(&out.stdout) {
                Ok(r) if out.status.success() => reports.push(r),
                Ok(r) => {
                    failures.push(format!(
                        "node {i}: exit {:?}, {}/{} verified",
                        out.status.code(),
                        verified(&r),
                        r.programs.len()
                    ));
                    reports.push(r);
                }
                Err(_) => failures.push(format!(
                    "node {i}: exit {:?}, no report: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
                )),
            }
        }
        Ok(Wave { reports, failures, seconds: started.elapsed().as_secs_f64() })
    }
}

fn verified(r: &RunReport) -> usize {
    r.programs.iter().filter(|p| p.verified).count()
}

fn remote_tier(r: &RunReport) -> Option<&gridkey::cache::TierReport> {
    r.tiers.iter().find(|t| t.tier == "remote")
}

/// min / median / max of `values`.
fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    (values[0], values[values.len() / 2], values[values.len() - 1])
}

fn median(values: &[f64]) -> f64 {
    spread(values.to_vec()).1
}

/// Keys of every program, in program order, when every report has the same; else `None`.
fn common_keys(reports: &[RunReport]) -> Option<Vec<String>> {
    let keys = |r: &RunReport| r.programs.iter().map(|p| p.key.clone().unwrap_or_default()).collect::<Vec<_>>();
    let first = keys(reports.first()?);
    reports.iter().all(|r| keys(r) == first).then_some(first)
}

fn per_node(label: &str, reports: &[RunReport]) {
    let f = |get: fn(&gridkey_remote::TierStats) -> u64| {
        spread(reports.iter().filter_map(remote_tier).map(|t| get(&t.stats) as f64).collect())
    };
    let (rt, bin, bout, fetch) = (f(|s| s.round_trips), f(|s| s.bytes_in), f(|s| s.bytes_out), f(|s| s.fetches));
    println!(
        "{label}: per node (min / median / max): {:.0} / {:.0} / {:.0} round trips, {:.0} / {:.0} / {:.0} bytes in, \
         {:.0} / {:.0} / {:.0} bytes out, {:.0} / {:.0} / {:.0} fetches",
        rt.0, rt.1, rt.2, bin.0, bin.1, bin.2, bout.0, bout.1, bout.2, fetch.0, fetch.1, fetch.2
    );
}

pub fn cluster(args: &[String], bin: &Path) -> Result<bool> {
    let o = parse(args)?;
    let binary = ensure_installed()?;
    let ns = if o.loopback {
        None
    } else {
        match Namespaces::create(o.nodes) {
            Ok(ns) => Some(ns),
            Err(e) => {
                println!("cluster: no network namespaces ({e:#}); the nodes share loopback");
                None
            }
        }
    };
    let bind: Vec<&str> = if ns.is_some() { vec!["127.0.0.1", SERVER_IP] } else { vec!["127.0.0.1"] };
    let work = tempfile::Builder::new().prefix("gridkey-cluster-").tempdir_in(crate::root().join("target"))?;
    // The CA file is a trust anchor (ADR 0031): in a directory of this user alone.
    let certs = work.path().join("tls");
    std::fs::create_dir_all(&certs)?;
    std::fs::set_permissions(&certs, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let ca = certificates(&certs, "cluster", Some(&format!("IP:127.0.0.1,IP:{SERVER_IP}")))?;
    let mut server = RedisServer::start_tls(&binary, Some(PASSWORD), &bind, &certs, "cluster")?;
    let host = if ns.is_some() { SERVER_IP } else { "127.0.0.1" };
    let url = format!("redis://:{PASSWORD}@{host}:{}/", server.port());
    let tls_url = server.tls_url(host).context("the server has no TLS port")?;
    let main = if o.tls { Link::Tls } else { Link::Plain };
    let signing_key = certs.join("cluster.signing-key");
    let public = gridkey_remote::trust::generate_signing_key(&signing_key)?;
    let trusted_keys = certs.join("trusted");
    std::fs::write(&trusted_keys, format!("{public} cluster\n"))?;
    let memory = if o.caches_in_memory { Some(MemoryCaches::mount(work.path().join("caches"))?) } else { None };
    let caches = memory.as_ref().map_or_else(|| work.path().to_path_buf(), |m| m.dir.clone());
    let mut c =
        Cluster { bin, o: &o, ns, url, tls_url, ca, signing_key, trusted_keys, memory, _work: work, caches, waves: 0 };
    println!(
        "cluster: {} nodes ({}), each `gridkey run --mode {} --jobs {}` with a cache of its own{} and --remote-writer, \
         on {} ({} cores here), {}",
        o.nodes,
        if c.ns.is_some() { "each in a network namespace on a bridge" } else { "on loopback" },
        o.mode,
        o.jobs,
        if c.memory.is_some() { " on a tmpfs (--caches-in-memory: not the goal's disk)" } else { " on the disk" },
        redis_version(&binary),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        match (o.tls, o.compare_tls) {
            (true, _) => "every node over TLS (rediss:// with the run's CA file)",
            (_, true) => "plain redis://, and warm starts over TLS beside them",
            _ => "plain redis://",
        }
    );
    let mut ok = true;
    let mut fail = |why: String| {
        println!("FAILED: {why}");
        ok = false;
    };

    let (cold_caches, reference) = cold_start(&mut c, main, &mut fail)?;
    warm_starts(&mut c, main, &cold_caches, &reference, &mut fail)?;
    server_killed(&mut c, &mut server, main, &reference, &mut fail)?;
    println!("cluster: {} nodes, {}", o.nodes, if ok { "ok" } else { "FAILED" });
    drop(c);
    Ok(ok)
}

/// Step 1: the cold start, every node on an empty cache; one translation per key cluster-wide.
/// Returns the nodes' caches and the keys they agree on.
fn cold_start(
    c: &mut Cluster<'_>,
    main: Link,
    fail: &mut impl FnMut(String),
) -> Result<(Vec<PathBuf>, Option<Vec<String>>)> {
    let o = c.o;
    // 1. Cold start.
    let cold_caches = c.fresh();
    let cold = c.wave(&cold_caches, main, |_| {})?;
    cold.failures.iter().for_each(|f| fail(format!("cold start {f}")));
    let reference = common_keys(&cold.reports);
    if reference.is_none() {
        fail("cold start: the nodes computed different keys".to_owned());
    }
    let mut per_key: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for r in &cold.reports {
        for p in &r.programs {
            let entry = per_key.entry(p.key.clone().unwrap_or_default()).or_insert((p.program.clone(), 0));
            entry.1 += usize::from(p.translated);
        }
    }
    let translations: usize = per_key.values().map(|(_, n)| n).sum();
    let builds: usize = cold.reports.iter().map(RunReport::builds).sum();
    println!(
        "cold start: {} nodes in {:.2} s: {translations} translations cluster-wide for {} keys ({}), {builds} builds",
        o.nodes,
        cold.seconds,
        per_key.len(),
        per_key.values().map(|(p, n)| format!("{p} {n}")).collect::<Vec<_>>().join(", ")
    );
    per_node("cold start", &cold.reports);
    if per_key.values().any(|(_, n)| *n != 1) {
        fail(format!(
            "cold start: {translations} translations for {} keys, expected exactly one per key",
            per_key.len()
        ));
    }
    let waits: u64 = cold.reports.iter().filter_map(remote_tier).map(|t| t.stats.lease_waits).sum();
    let takeovers: u64 = cold.reports.iter().filter_map(remote_tier).map(|t| t.stats.takeovers).sum();
    println!("cold start: {waits} lease waits, {takeovers} take-overs cluster-wide");
    Ok((cold_caches, reference))
}

/// Step 2: warm starts, interleaved: fresh nodes from the shared tier (and over TLS with
/// `--compare-tls`) against the cold nodes from their own caches, with the ratio of medians.
fn warm_starts(
    c: &mut Cluster<'_>,
    main: Link,
    cold_caches: &[PathBuf],
    reference: &Option<Vec<String>>,
    fail: &mut impl FnMut(String),
) -> Result<()> {
    let o = c.o;
    let (mut shared_s, mut local_s, mut tls_s) = (Vec::new(), Vec::new(), Vec::new());
    let mut last_shared = None;
    for round in 0..o.rounds {
        let local = c.wave(cold_caches, Link::Off, |_| {})?;
        local.failures.iter().for_each(|f| fail(format!("warm start from local caches, round {round}: {f}")));
        if local.reports.iter().any(|r| r.translations() > 0 || r.builds() > 0) {
            fail(format!("warm start from local caches, round {round}: a node translated or built"));
        }
        local_s.push(local.seconds);
        let links: &[Link] = if o.compare_tls { &[Link::Plain, Link::Tls] } else { &[main] };
        let mut waves = Vec::new();
        for &link in links {
            let fresh = c.fresh();
            let wave = c.wave(&fresh, link, |_| {})?;
            let what = if link == Link::Tls { "over TLS" } else { "in plain TCP" };
            check_warm(&wave, reference, &format!("warm start from the shared tier {what}, round {round}"), fail);
            waves.push(wave);
        }
        let shared = waves.remove(0);
        let (t, b): (usize, usize) = (
            shared.reports.iter().map(RunReport::translations).sum(),
            shared.reports.iter().map(RunReport::builds).sum(),
        );
        if let Some(tls) = waves.pop() {
            tls_s.push(tls.seconds);
            println!("warm round {round}: {} fresh nodes from the shared tier over TLS {:.2} s", o.nodes, tls.seconds);
        }
        shared_s.push(shared.seconds);
        println!(
            "warm round {round}: {} fresh nodes from the shared tier {:.2} s ({t} translations, {b} builds), the same \
             nodes warm from full local caches {:.2} s",
            o.nodes, shared.seconds, local.seconds
        );
        last_shared = Some(shared);
    }
    if let Some(shared) = &last_shared {
        per_node("warm start from the shared tier", &shared.reports);
    }
    let ratio = median(&shared_s) / median(&local_s);
    println!(
        "warm start: shared tier {:.2} s vs full local caches {:.2} s (medians of {} interleaved rounds): ratio {ratio:.2} \
         (goal <= 1.2)",
        median(&shared_s),
        median(&local_s),
        o.rounds
    );
    if ratio > 1.2 {
        fail(format!("warm start from the shared tier is {ratio:.2} times the local best case, over 1.2"));
    }
    if !tls_s.is_empty() {
        let tls_ratio = median(&tls_s) / median(&shared_s);
        println!(
            "warm start over TLS: {:.2} s vs plain {:.2} s (medians of {} interleaved rounds, same run): ratio TLS / plain \
             {tls_ratio:.2} (goal <= 1.2)",
            median(&tls_s),
            median(&shared_s),
            o.rounds
        );
        if tls_ratio > 1.2 {
            fail(format!("warm start over TLS is {tls_ratio:.2} times the plain one, over 1.2"));
        }
    }
    Ok(())
}

/// Step 3: the server killed as soon as the first object is uploaded; every node completes with
/// the cold start's keys.
fn server_killed(
    c: &mut Cluster<'_>,
    server: &mut RedisServer,
    main: Link,
    reference: &Option<Vec<String>>,
    fail: &mut impl FnMut(String),
) -> Result<()> {
    let o = c.o;
    server.command(&["FLUSHALL"])?;
    let fresh = c.fresh();
    let mut killed_at = None;
    let probe = RedisProbe { server };
    let killed = c.wave(&fresh, main, |started| {
        // Kill the server as soon as the first object is uploaded (or after 60 s).
        while started.elapsed() < Duration::from_secs(60) && probe.objects() == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        killed_at = Some(started.elapsed().as_secs_f64());
        probe.kill();
    })?;
    server.kill();
    killed.failures.iter().for_each(|f| fail(format!("server killed mid-run: {f}")));
    let complete = killed.reports.iter().filter(|r| r.all_verified()).count();
    let t: usize = killed.reports.iter().map(RunReport::translations).sum();
    let errors: Vec<f64> = killed.reports.iter().filter_map(remote_tier).map(|t| t.stats.errors as f64).collect();
    let off = killed.reports.iter().filter_map(remote_tier).filter(|t| !t.on).count();
    println!(
        "server killed mid-run (at {:.2} s): {complete}/{} nodes completed and verified in {:.2} s, {t} translations, {off} \
         nodes saw the tier go off, remote errors per node max {:.0}",
        killed_at.unwrap_or(0.0),
        o.nodes,
        killed.seconds,
        spread(errors.clone()).2
    );
    if complete != o.nodes {
        fail(format!("server killed mid-run: only {complete}/{} nodes completed", o.nodes));
    }
    if common_keys(&killed.reports) != *reference {
        fail("server killed mid-run: keys differ from the cold start".to_owned());
    }
    if errors.iter().any(|&e| e > 2.0) {
        fail("server killed mid-run: a node met more than one failed request (and one heartbeat)".to_owned());
    }
    Ok(())
}

/// Checks a warm wave from the shared tier: no translation or build, every program a remote hit
/// with at most one fetch per key and kind, the keys of the cold start; `fail` is told what is not.
fn check_warm(shared: &Wave, reference: &Option<Vec<String>>, what: &str, fail: &mut impl FnMut(String)) {
    shared.failures.iter().for_each(|f| fail(format!("{what}: {f}")));
    let t: usize = shared.reports.iter().map(RunReport::translations).sum();
    let b: usize = shared.reports.iter().map(RunReport::builds).sum();
    if t > 0 || b > 0 {
        fail(format!("{what}: {t} translations, {b} builds"));
    }
    for (i, r) in shared.reports.iter().enumerate() {
        let programs = r.programs.len() as u64;
        let fetches = remote_tier(r).map_or(0, |t| t.stats.fetches);
        if fetches > 2 * programs {
            fail(format!("{what}: node {i}: {fetches} fetches for {programs} keys, more than one per key and kind"));
        }
        if r.remote_hits() != r.programs.len() {
            fail(format!("{what}: node {i}: {} of {programs} hits from the shared tier", r.remote_hits()));
        }
    }
    if common_keys(&shared.reports) != *reference {
        fail(format!("{what}: keys differ from the cold start"));
    }
}

/// Looks at and kills the server from the driver thread while the nodes run.
struct RedisProbe<'a> {
    server: &'a RedisServer,
}

impl RedisProbe<'_> {
    /// Objects on the server (leases and counters are not objects).
    fn objects(&self) -> usize {
        self.server
            .connection()
            .and_then(|mut c| Ok(redis::cmd("KEYS").arg("gridkey:obj-v1:*").query::<Vec<String>>(&mut c)?))
            .map_or(0, |names| names.len())
    }

    fn kill(&self) {
        self.server.signal(libc::SIGKILL);
    }
}

fn redis_version(binary: &Path) -> String {
    Command::new(binary)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.split_whitespace().find(|w| w.starts_with("v=")).map(|v| format!("Redis {}", &v[2..])))
        .unwrap_or_else(|| "Redis".to_owned())
}
