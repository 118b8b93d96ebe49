//! The shared tier's rows of the fault matrix (ADR 0018, ADR 0019): a real `redis-server`
//! (installed when missing) that is down, black-holed, paused, killed, flushed, tampered with,
//! raced on, password-protected or lied to; `gridkey run` must finish with the keys and results
//! of a run without a shared tier, or stop at start with a typed error for a misconfiguration.
//!
//! A row is **lost** when a node reports other keys than the reference run, exits 0 with a
//! result that did not verify, or leaves a file in its local cache that is not what its name
//! says, or when a read-only client wrote to the server.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gridkey::RunReport;
use gridkey_remote::trust::generate_signing_key;

use super::{check_final_files, s, Matrix, Run, Seen};

#[path = "remote_deadline.rs"]
mod remote_deadline;
#[path = "remote_tls.rs"]
mod remote_tls;
#[path = "remote_trust.rs"]
mod remote_trust;
use crate::redis_server::{ensure_installed, RedisServer, ServerCommands as _};

/// Reply timeout of the rows' clients, seconds.
const TIMEOUT: &str = "0.5";
/// Lease time to live of the rows' clients, seconds.
const LEASE_TTL: &str = "2";

/// One client of the shared tier: where, in which namespace, with which role and extra variables.
struct Client<'a> {
    url: &'a str,
    ns: &'a str,
    writer: bool,
    env: Vec<(&'a str, String)>,
}

impl<'a> Client<'a> {
    fn writer(url: &'a str, ns: &'a str) -> Self {
        Client { url, ns, writer: true, env: Vec::new() }
    }

    fn reader(url: &'a str, ns: &'a str) -> Self {
        Client { url, ns, writer: false, env: Vec::new() }
    }

    fn with(mut self, var: &'a str, value: impl Into<String>) -> Self {
        self.env.push((var, value.into()));
        self
    }

    fn args(&self) -> Vec<&str> {
        let mut a = vec!["--remote", self.url];
        if self.writer {
            a.push("--remote-writer");
        }
        a
    }

    fn vars(&self) -> Vec<(&str, &str)> {
        let mut v = vec![
            ("GRIDKEY_REMOTE_NAMESPACE", self.ns),
            ("GRIDKEY_REMOTE_TIMEOUT", TIMEOUT),
            ("GRIDKEY_REMOTE_CONNECT_TIMEOUT", TIMEOUT),
            ("GRIDKEY_REMOTE_LEASE_TTL", LEASE_TTL),
        ];
        // The rows about the server, leases and bad objects trust the ACL (ADR 0031); those
        // about trust say what they trust.
        if !self.env.iter().any(|(k, _)| k.starts_with("GRIDKEY_REMOTE_TRUST")) {
            v.push(("GRIDKEY_REMOTE_TRUST", "acl"));
        }
        v.extend(self.env.iter().map(|(k, val)| (*k, val.as_str())));
        v
    }
}

/// A run's report and its outcome.
struct Node {
    run: Run,
    report: Option<RunReport>,
    seconds: f64,
}

impl Node {
    fn remote(&self) -> gridkey_remote::TierStats {
        self.report
            .as_ref()
            .and_then(|r| r.tiers.iter().find(|t| t.tier == "remote"))
            .map(|t| t.stats.clone())
            .unwrap_or_default()
    }

    fn remote_on(&self) -> bool {
        self.report.as_ref().and_then(|r| r.tiers.iter().find(|t| t.tier == "remote")).is_some_and(|t| t.on)
    }

    fn warnings(&self) -> usize {
        self.run.stderr.matches("warning: shared cache").count()
    }

    fn builds(&self) -> usize {
        self.report.as_ref().map_or(0, RunReport::builds)
    }

    fn remote_hits(&self) -> usize {
        self.report.as_ref().map_or(0, RunReport::remote_hits)
    }
}

struct Shared {
    binary: PathBuf,
    server: RedisServer,
    reference: Vec<String>,
    rows: usize,
}

impl Shared {
    fn ns(&mut self, what: &str) -> String {
        self.rows += 1;
        format!("faults-{what}-{}", self.rows)
    }
}

impl Matrix {
    fn node(&self, cache: &Path, client: &Client) -> Result<Node> {
        let t = Instant::now();
        let run = self.run(cache, &client.args(), &client.vars())?;
        let report = serde_json::from_str(&run.stdout).ok();
        Ok(Node { run, report, seconds: t.elapsed().as_secs_f64() })
    }

    /// `n` nodes at once, each with a fresh cache; `during` runs while they do.
    fn nodes(&self, name: &str, n: usize, client: &Client, during: impl FnOnce()) -> Result<Vec<(PathBuf, Node)>> {
        let caches: Vec<PathBuf> = (0..n).map(|i| self.fresh(&format!("{name}-{i}"))).collect();
        let nodes = std::thread::scope(|scope| {
            let handles: Vec<_> = caches.iter().map(|c| scope.spawn(move || self.node(c, client))).collect();
            during();
            handles.into_iter().map(|h| h.join().expect("node thread")).collect::<Result<Vec<_>>>()
        })?;
        Ok(caches.into_iter().zip(nodes).collect())
    }

    /// Fills the namespace of `writer` with one run of it; returns its cache.
    fn seed(&self, writer: &Client) -> Result<PathBuf> {
        let cache = self.fresh("seed");
        let node = self.node(&cache, writer)?;
        if !node.run.ok() || node.remote().uploads == 0 {
            bail!("seeding the shared tier failed: {}", node.run.why());
        }
        Ok(cache)
    }
}

/// What is lost in `nodes`: other keys than the reference, a result that exits 0 without
/// verifying, a local file that is not what its name says.
fn lost(reference: &[String], nodes: &[(PathBuf, &Node)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (cache, node) in nodes {
        if node.run.programs > 0 && node.run.keys != reference {
            problems.push(format!("{}: keys differ from a run without a shared tier", cache.display()));
        }
        if node.run.code == Some(0) && node.run.verified != node.run.programs {
            problems.push(format!(
                "{}: exit 0 with {}/{} verified",
                cache.display(),
                node.run.verified,
                node.run.programs
            ));
        }
        problems.extend(check_final_files(cache));
    }
    problems
}

/// The Redis key names of namespace `ns` matching `pattern` (`obj-v1:te:*`), sorted.
fn names(server: &RedisServer, ns: &str, pattern: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> =
        redis::cmd("KEYS").arg(format!("{ns}:{pattern}")).query(&mut server.connection()?).context("KEYS")?;
    out.sort();
    Ok(out)
}

/// Runs the rows of the shared tier.
pub(super) fn rows(m: &mut Matrix) -> Result<()> {
    if m.only.as_ref().is_some_and(|only| !only.starts_with("shared tier")) {
        return Ok(());
    }
    let binary = ensure_installed()?;
    let server = RedisServer::start(&binary, None)?;
    let t = Instant::now();
    let reference = {
        let cache = m.fresh("remote-reference");
        let r = m.run(&cache, &[], &[])?;
        if !r.ok() {
            bail!("the reference run failed: {}", r.why());
        }
        r.keys
    };
    let baseline = t.elapsed().as_secs_f64();
    let mut sh = Shared { binary, server, reference, rows: 0 };
    start_rows(m, &mut sh, baseline)?;
    object_rows(m, &mut sh)?;
    load_rows(m, &mut sh)?;
    client_rows(m, &mut sh)?;
    signing_rows(m, &mut sh)?;
    super::verified_travel::rows(m, &sh.server.url(), &sh.ns("miscompile"), &sh.reference);
    remote_trust::rows(m, &mut sh)?;
    remote_tls::rows(m, &mut sh)?;
    remote_deadline::rows(m, &mut sh, baseline)
}

/// The shared tier down, black-holed or slow at start: one warning, the run as without it.
fn start_rows(m: &mut Matrix, sh: &mut Shared, baseline: f64) -> Result<()> {
    let expected_local = "one warning, same keys and results";

    m.row("shared tier: server down at start", expected_local, |m| {
        let port = crate::redis_server::free_port()?;
        let url = format!("redis://127.0.0.1:{port}/");
        let cache = m.fresh("remote-down");
        let n = m.node(&cache, &Client::writer(&url, "x"))?;
        let ok = n.run.ok() && n.warnings() == 1 && !n.remote_on();
        Ok(Seen::new(
            ok,
            &lost(&sh.reference, &[(cache, &n)]),
            format!("{}; {} warning", n.run.summary(), n.warnings()),
        ))
    });

    for (what, stall) in [("black-holed (SIGSTOP)", "stop"), ("slow (CLIENT PAUSE 5 s)", "pause")] {
        m.row(&format!("shared tier: server {what} at start"), "one timeout, one warning, same results", |m| {
            let server = RedisServer::start(&sh.binary, None)?;
            let url = server.url();
            let ns = sh.ns("stall");
            m.seed(&Client::writer(&url, &ns))?;
            match stall {
                "stop" => server.signal(libc::SIGSTOP),
                _ => {
                    server.command(&["CLIENT", "PAUSE", "5000", "ALL"])?;
                }
            }
            let cache = m.fresh("remote-stall");
            let n = m.node(&cache, &Client::writer(&url, &ns))?;
            server.signal(libc::SIGCONT);
            let st = n.remote();
            let ok = n.run.ok() && n.warnings() == 1 && st.errors == 1 && n.seconds < 10.0;
            Ok(Seen::new(
                ok,
                &lost(&sh.reference, &[(cache, &n)]),
                format!(
                    "{}; {} remote error, {:.1} s (without a shared tier {baseline:.1} s, timeout {TIMEOUT} s)",
                    n.run.summary(),
                    st.errors,
                    n.seconds
                ),
            ))
        });
    }
    Ok(())
}

/// The server killed mid-run, and objects tampered with in the server: rejected, built here.
fn object_rows(m: &mut Matrix, sh: &mut Shared) -> Result<()> {
    m.row("shared tier: server killed mid-run (4 writers)", "all complete, same keys and results", |m| {
        let mut server = RedisServer::start(&sh.binary, None)?;
        let url = server.url();
        let ns = sh.ns("killed");
        let pid = server.pid();
        let killed_after = std::cell::Cell::new(0.0);
        let nodes = m.nodes("remote-killed", 4, &Client::writer(&url, &ns), || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(30) && names(&server, &ns, "obj-v1:*").map_or(0, |n| n.len()) == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            killed_after.set(t.elapsed().as_secs_f64());
            if let Some(pid) = pid {
                // SAFETY: kill(2) on the server this row started.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        })?;
        server.kill();
        let all = nodes.iter().all(|(_, n)| n.run.ok());
        let off = nodes.iter().filter(|(_, n)| !n.remote_on()).count();
        let refs: Vec<(PathBuf, &Node)> = nodes.iter().map(|(c, n)| (c.clone(), n)).collect();
        Ok(Seen::new(
            all,
            &lost(&sh.reference, &refs),
            format!(
                "killed after {:.2} s; {}/4 verified all, {off} saw the tier go off",
                killed_after.get(),
                nodes.iter().filter(|(_, n)| n.run.ok()).count()
            ),
        ))
    });

    for tamper in ["truncated", "corrupted", "swapped"] {
        let expected = "rejected, translated here, same results";
        m.row(&format!("shared tier: {tamper} translation entry object"), expected, |m| {
            let url = sh.server.url();
            let ns = sh.ns(tamper);
            m.seed(&Client::writer(&url, &ns))?;
            let objects = names(&sh.server, &ns, "obj-v1:te:*")?;
            let value = |name: &str| sh.server.get_raw(name).ok().flatten().context("object missing");
            let bad = match tamper {
                "truncated" => {
                    let v = value(&objects[0])?;
                    sh.server.set_raw(&objects[0], &v[..v.len() / 2])?;
                    1
                }
                "corrupted" => {
                    let mut v = value(&objects[0])?;
                    let i = v.len() / 2;
                    v[i] ^= 0x40;
                    sh.server.set_raw(&objects[0], &v)?;
                    1
                }
                _ => {
                    let (a, b) = (value(&objects[0])?, value(&objects[1])?);
                    sh.server.set_raw(&objects[0], &b)?;
                    sh.server.set_raw(&objects[1], &a)?;
                    2
                }
            };
            let cache = m.fresh("remote-tampered");
            let n = m.node(&cache, &Client::reader(&url, &ns))?;
            let st = n.remote();
            let ok = n.run.ok() && st.rejected == bad && n.run.translations() == bad as usize;
            Ok(Seen::new(
                ok,
                &lost(&sh.reference, &[(cache, &n)]),
                format!("{} rejected, {}", st.rejected, n.run.summary()),
            ))
        });
    }

    m.row("shared tier: corrupted kernel library object", "rejected, built here, same results", |m| {
        let url = sh.server.url();
        let ns = sh.ns("library");
        m.seed(&Client::writer(&url, &ns))?;
        let objects = names(&sh.server, &ns, "obj-v1:kl:*")?;
        let mut v = sh.server.get_raw(&objects[0])?.context("library object missing")?;
        let i = v.len() - 20;
        v[i] ^= 1;
        sh.server.set_raw(&objects[0], &v)?;
        let cache = m.fresh("remote-library");
        let n = m.node(&cache, &Client::reader(&url, &ns))?;
        let ok = n.run.ok() && n.remote().rejected == 1 && n.builds() == 1 && n.run.translations() == 0;
        Ok(Seen::new(
            ok,
            &lost(&sh.reference, &[(cache, &n)]),
            format!("{} rejected, {} built, {}", n.remote().rejected, n.builds(), n.run.summary()),
        ))
    });
    Ok(())
}

/// FLUSHALL during runs, many writers of one key, a lease holder killed mid-translation.
fn load_rows(m: &mut Matrix, sh: &mut Shared) -> Result<()> {
    m.row("shared tier: FLUSHALL again and again during 4 runs", "misses, same keys and results", |m| {
        let server = RedisServer::start(&sh.binary, None)?;
        let url = server.url();
        let ns = sh.ns("flush");
        m.seed(&Client::writer(&url, &ns))?;
        let stop = AtomicBool::new(false);
        let flushes = std::sync::atomic::AtomicUsize::new(0);
        let nodes = std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    if server.command(&["FLUSHALL"]).is_ok() {
                        flushes.fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(15));
                }
            });
            let nodes = m.nodes("remote-flush", 4, &Client::writer(&url, &ns), || {});
            stop.store(true, Ordering::SeqCst);
            nodes
        })?;
        let all = nodes.iter().all(|(_, n)| n.run.ok());
        let t: usize = nodes.iter().map(|(_, n)| n.run.translations()).sum();
        let refs: Vec<(PathBuf, &Node)> = nodes.iter().map(|(c, n)| (c.clone(), n)).collect();
        Ok(Seen::new(
            all,
            &lost(&sh.reference, &refs),
            format!("{} flushes; 4/4 ok: {all}; {t} translations", flushes.load(Ordering::SeqCst)),
        ))
    });

    for (writers, what) in [(8, "8 writers of one key at once"), (32, "32 cold starters on one key")] {
        m.row(&format!("shared tier: {what}"), "each key translated once cluster-wide", |m| {
            let url = sh.server.url();
            let ns = sh.ns("race");
            let nodes = m.nodes("remote-race", writers, &Client::writer(&url, &ns), || {})?;
            let all = nodes.iter().all(|(_, n)| n.run.ok());
            let mut per_key = std::collections::BTreeMap::<String, usize>::new();
            for (_, n) in &nodes {
                for p in n.report.iter().flat_map(|r| &r.programs) {
                    *per_key.entry(p.key.clone().unwrap_or_default()).or_default() += usize::from(p.translated);
                }
            }
            let once = per_key.values().all(|&t| t == 1) && per_key.len() == sh.reference.len();
            let total: usize = per_key.values().sum();
            let refs: Vec<(PathBuf, &Node)> = nodes.iter().map(|(c, n)| (c.clone(), n)).collect();
            Ok(Seen::new(
                all && once,
                &lost(&sh.reference, &refs),
                format!("{total} translations for {} keys by {writers} nodes", per_key.len()),
            ))
        });
    }

    m.row("shared tier: lease holder SIGKILLed mid-translation", "lease taken over, same results", |m| {
        let url = sh.server.url();
        let ns = sh.ns("holder");
        let holder = Client::writer(&url, &ns).with("GRIDKEY_FAULT", "pause:written:translation-v2");
        let holder_cache = m.fresh("remote-holder");
        let (mut child, _) = m.paused_with(&holder_cache, &holder)?;
        // The holder holds every lease now, its heartbeat renewing them; a second writer waits on
        // them, and the holder dies without releasing them.
        let waiter_cache = m.fresh("remote-waiter");
        let waited = std::thread::scope(|scope| {
            let node = scope.spawn(|| m.node(&waiter_cache, &Client::writer(&url, &ns)));
            std::thread::sleep(Duration::from_millis(500));
            let _ = child.kill(); // SIGKILL
            node.join().expect("waiter thread")
        })?;
        let _ = child.wait();
        let st = waited.remote();
        let ok = waited.run.ok() && st.takeovers >= 1 && st.lease_waits >= 1;
        let mut problems = lost(&sh.reference, &[(waiter_cache, &waited)]);
        problems.extend(check_final_files(&holder_cache));
        Ok(Seen::new(
            ok,
            &problems,
            format!("waited {:.1} s, {} take-overs, {}", st.lease_wait_seconds, st.takeovers, waited.run.summary()),
        ))
    });
    Ok(())
}

/// A read-only client, a wrong password, objects over the size limit.
fn client_rows(m: &mut Matrix, sh: &mut Shared) -> Result<()> {
    m.row("shared tier: read-only client", "translates here, writes nothing", |m| {
        let url = sh.server.url();
        let ns = sh.ns("reader");
        let cache = m.fresh("remote-reader");
        let n = m.node(&cache, &Client::reader(&url, &ns))?;
        let written = names(&sh.server, &ns, "*")?;
        let ok = n.run.ok() && n.run.translations() == sh.reference.len();
        let mut problems = lost(&sh.reference, &[(cache, &n)]);
        if !written.is_empty() {
            problems.push(format!("a read-only client wrote {written:?}"));
        }
        Ok(Seen::new(ok, &problems, format!("{} keys written, {}", written.len(), n.run.summary())))
    });

    m.row("shared tier: wrong password", "error at start naming GRIDKEY_REMOTE_URL", |m| {
        let server = RedisServer::start(&sh.binary, Some("s3cret"))?;
        let url = format!("redis://:wrong@127.0.0.1:{}/", server.port());
        let cache = m.fresh("remote-password");
        let n = m.node(&cache, &Client::writer(&url, "x"))?;
        let ok = n.run.code == Some(2)
            && n.run.stderr.contains("GRIDKEY_REMOTE_URL")
            && !n.run.stderr.contains("wrong@")
            && !cache.join(gridkey_fingerprint::TRANSLATION_DIR).exists();
        let first = n.run.stderr.lines().next().unwrap_or("").chars().take(90).collect::<String>();
        Ok(Seen::new(ok, &lost(&sh.reference, &[(cache, &n)]), format!("exit {:?}: {first}", n.run.code)))
    });

    m.row("shared tier: objects over the size limit", "not downloaded, built here, same results", |m| {
        let url = sh.server.url();
        let ns = sh.ns("size");
        m.seed(&Client::writer(&url, &ns))?;
        let cache = m.fresh("remote-size");
        let n = m.node(&cache, &Client::reader(&url, &ns).with("GRIDKEY_REMOTE_MAX_OBJECT", "10000"))?;
        let st = n.remote();
        // Translation entries fit, kernel libraries do not: rejected before download.
        let ok = n.run.ok() && st.rejected == sh.reference.len() as u64 && n.builds() == sh.reference.len();
        Ok(Seen::new(
            ok,
            &lost(&sh.reference, &[(cache, &n)]),
            format!("{} rejected, {} bytes in, {} built, {}", st.rejected, st.bytes_in, n.builds(), n.run.summary()),
        ))
    });
    Ok(())
}

/// Who signed an object and what the reader trusts: unsigned, foreign and missing keys.
fn signing_rows(m: &mut Matrix, sh: &mut Shared) -> Result<()> {
    let keys = m.fresh("remote-keys");
    std::fs::create_dir_all(&keys)?;
    let (writer_key, other_key) = (keys.join("writer.key"), keys.join("other.key"));
    let writer_public = generate_signing_key(&writer_key)?;
    let other_public = generate_signing_key(&other_key)?;
    let trusted = keys.join("trusted");
    std::fs::write(&trusted, format!("# the site's writer\n{writer_public} ci\n"))?;
    let _ = other_public;
    for (what, signer, expected_hits) in [
        ("unsigned objects, reader with trusted keys", None, false),
        ("objects signed by an untrusted key", Some(&other_key), false),
        ("objects signed by the trusted key", Some(&writer_key), true),
    ] {
        let expected = if expected_hits { "hits" } else { "rejected, translated here, same results" };
        m.row(&format!("shared tier: {what}"), expected, |m| {
            let url = sh.server.url();
            let ns = sh.ns("trust");
            let mut seeder = Client::writer(&url, &ns);
            if let Some(key) = signer {
                seeder = seeder.with("GRIDKEY_REMOTE_SIGNING_KEY", s(key).to_owned());
            }
            m.seed(&seeder)?;
            let cache = m.fresh("remote-trust");
            let n =
                m.node(&cache, &Client::reader(&url, &ns).with("GRIDKEY_REMOTE_TRUSTED_KEYS", s(&trusted).to_owned()))?;
            let st = n.remote();
            let all = sh.reference.len();
            let ok = n.run.ok()
                && if expected_hits {
                    n.remote_hits() == all && st.rejected == 0
                } else {
                    n.run.translations() == all && n.remote_hits() == 0 && st.rejected > 0
                };
            Ok(Seen::new(
                ok,
                &lost(&sh.reference, &[(cache, &n)]),
                format!("{} remote hits, {} rejected, {}", n.remote_hits(), st.rejected, n.run.summary()),
            ))
        });
    }

    m.row("shared tier: missing trusted keys file", "error at start naming the file", |m| {
        let url = sh.server.url();
        let cache = m.fresh("remote-nokeys");
        let n =
            m.node(&cache, &Client::reader(&url, "x").with("GRIDKEY_REMOTE_TRUSTED_KEYS", "/nonexistent/trusted"))?;
        let ok = n.run.code == Some(2) && n.run.stderr.contains("/nonexistent/trusted");
        Ok(Seen::new(ok, &[], format!("exit {:?}", n.run.code)))
    });
    Ok(())
}

impl Matrix {
    /// [`Matrix::paused`] for a run with the shared tier of `client` (whose `GRIDKEY_FAULT` says
    /// where to stop).
    fn paused_with(&self, cache: &Path, client: &Client) -> Result<(Child, PathBuf)> {
        let mut args = vec!["run", "--grid", s(&self.grid), "--cache-dir", s(cache), "--mode", "serial"];
        args.extend(client.args());
        let mut child = self.cmd(&args, &client.vars()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
        let stderr = child.stderr.take().context("stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("gridkey-fault: paused at ") {
                    let _ = tx.send(rest.split_once(" writing ").map(|(_, t)| PathBuf::from(t)));
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(temp)) => Ok((child, temp)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("gridkey did not reach the fault point")
            }
        }
    }
}
