//! The shared tier's deadline rows (ADR 0029, ADR 0056): servers that stall after the handshake,
//! trickle a byte at a time, announce a 1 TiB reply, answer millions of nulls or are not Redis (fake servers on loopback, in
//! this process), objects over the size limit and a real `redis-server` stopped mid-run.
//! Each `gridkey run` must finish with the keys and results of a run without a shared tier and
//! cost at most one reply timeout (plus the connect timeout) more than that run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{lost, names, Client, Node, Shared, TIMEOUT};
use crate::faults::{s, Matrix, Run, Seen};
use crate::redis_server::{RedisServer, ServerCommands as _};

/// Longest a run of these rows may take before it is killed (a client without deadlines hangs
/// on a trickling server for ever).
const HANG: Duration = Duration::from_secs(120);

/// Seconds of noise allowed on a loaded machine over the reference run's time.
const NOISE: f64 = 2.0;

/// What a fake server does after answering the handshake's `PING`.
#[derive(Clone, Copy)]
enum Fake {
    /// Reads and never answers.
    Stall,
    /// Sends an endless reply one byte every 300 ms.
    Trickle,
    /// Announces a 1 TiB bulk reply and sends up to 256 MiB of it.
    Huge,
    /// Answers with an array of 3 million nulls (9 MB, within the lookup's byte bound): tiny
    /// values the client must not build one by one (ADR 0056).
    Flood,
}

/// Starts a fake server for `fake` on a free loopback port; counts the bytes it sent.
fn fake(fake: Fake, sent: Arc<AtomicU64>) -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let sent = sent.clone();
            std::thread::spawn(move || serve(stream, fake, &sent));
        }
    });
    Ok(port)
}

fn serve(stream: TcpStream, fake: Fake, sent: &AtomicU64) {
    let Ok(read_half) = stream.try_clone() else { return };
    let mut r = BufReader::new(read_half);
    let mut w = stream;
    loop {
        let Some(words) = command(&mut r) else { return };
        if words.first().is_some_and(|w| w.eq_ignore_ascii_case(b"PING")) {
            let _ = w.write_all(b"+PONG\r\n");
            continue;
        }
        match fake {
            Fake::Stall => {
                let mut sink = [0u8; 4096];
                while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
            }
            Fake::Trickle => {
                for b in b":1\r\n".repeat(10_000) {
                    if w.write_all(&[b]).is_err() {
                        return;
                    }
                    sent.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
            Fake::Huge => {
                let _ = w.write_all(b"$1099511627776\r\n");
                let chunk = vec![b'x'; 1 << 16];
                for _ in 0..(256 << 20) / chunk.len() {
                    if w.write_all(&chunk).is_err() {
                        return;
                    }
                    sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_secs(60));
            }
            Fake::Flood => {
                const NULLS: usize = 3_000_000;
                let _ = w.write_all(format!("*{NULLS}\r\n").as_bytes());
                let chunk = b"_\r\n".repeat(1 << 14);
                for _ in 0..NULLS / (1 << 14) {
                    if w.write_all(&chunk).is_err() {
                        return;
                    }
                    sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        return;
    }
}

/// `ok` and `text` of a row, with what the fake server of `kind` could send (`sent` bytes) before
/// the client hung up: for a 1 TiB header, the client's reply bound plus the kernel's socket
/// buffers, not 256 MiB; for a flood of nulls, the values bound, far less than its 9 MB.
fn sent_within(kind: Fake, sent: u64, ok: bool, text: String) -> (bool, String) {
    let bound: u64 = match kind {
        Fake::Huge => 48 << 20,
        Fake::Flood => 8 << 20,
        Fake::Stall | Fake::Trickle => return (ok, text),
    };
    (ok && sent < bound, format!("{text}; the server sent {} KiB", sent >> 10))
}

/// One RESP command off the wire: its words.
fn command(r: &mut impl BufRead) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let n: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut words = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut word = vec![0u8; len + 2];
        r.read_exact(&mut word).ok()?;
        word.truncate(len);
        words.push(word);
    }
    Some(words)
}

/// An HTTP server on a free loopback port: `400 Bad Request` to anything.
fn http_server() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    Ok(port)
}

impl Matrix {
    /// [`Matrix::node`], killed after [`HANG`].
    fn node_bounded(&self, cache: &std::path::Path, client: &Client) -> Result<Node> {
        let mut args = vec!["run", "--grid", s(&self.grid), "--cache-dir", s(cache), "--mode", "serial", "--json"];
        args.extend(client.args());
        let t = Instant::now();
        let child = self.cmd(&args, &client.vars()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let pid = child.id();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if finished.recv_timeout(HANG).is_err() {
                // SAFETY: kill(2) on the child this row started, not yet reaped.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        });
        let out = child.wait_with_output().context("waiting for gridkey")?;
        let _ = done.send(());
        let _ = watchdog.join();
        let run = Run::of(out)?;
        let report = serde_json::from_str(&run.stdout).ok();
        Ok(Node { run, report, seconds: t.elapsed().as_secs_f64() })
    }
}

/// Bytes the server has sent to its clients (`INFO stats`, `total_net_output_bytes`).
fn output_bytes(server: &RedisServer) -> Result<u64> {
    let info: String = redis::from_redis_value(server.command(&["INFO", "stats"])?)?;
    let line = info.lines().find_map(|l| l.strip_prefix("total_net_output_bytes:")).context("INFO stats")?;
    Ok(line.trim().parse()?)
}

/// Runs the deadline rows.
pub(super) fn rows(m: &mut Matrix, sh: &mut Shared, baseline: f64) -> Result<()> {
    let timeout: f64 = TIMEOUT.parse()?;
    // One reply timeout with the margin of the tests, plus the connect timeout (the same value).
    let allowed = baseline + 1.5 * timeout + timeout + NOISE;
    let expected = "one timeout, one warning, same results";
    let verdict = |n: &Node, says: &str| {
        let warning = n.run.stderr.lines().find(|l| l.contains("warning: shared cache")).unwrap_or_default();
        let ok = n.run.ok()
            && n.warnings() == 1
            && !n.remote_on()
            && n.remote().errors == 1
            && n.seconds <= allowed
            && warning.contains(says);
        (ok, format!("{}; {:.1} s (allowed {allowed:.1} s); {warning}", n.run.summary(), n.seconds))
    };

    for (what, kind, says) in [
        ("stalled after the handshake", Fake::Stall, "no complete reply within"),
        ("trickling a byte every 300 ms", Fake::Trickle, "no complete reply within"),
        ("announcing a 1 TiB reply", Fake::Huge, "this request allows"),
        ("answering 3 million nulls", Fake::Flood, "values this request can be answered with"),
    ] {
        m.row(&format!("shared tier: deadline, server {what}"), expected, |m| {
            let sent = Arc::new(AtomicU64::new(0));
            let port = fake(kind, sent.clone())?;
            let url = format!("redis://127.0.0.1:{port}/");
            let ns = sh.ns("deadline");
            let cache = m.fresh("remote-deadline");
            let n = m.node_bounded(&cache, &Client::writer(&url, &ns))?;
            let (ok, text) = verdict(&n, says);
            let (ok, text) = sent_within(kind, sent.load(Ordering::SeqCst), ok, text);
            Ok(Seen::new(ok, &lost(&sh.reference, &[(cache, &n)]), text))
        });
    }

    m.row("shared tier: deadline, an HTTP server on the port", "tier off, warning says what answered", |m| {
        let port = http_server()?;
        let url = format!("redis://:s3cret@127.0.0.1:{port}/");
        let cache = m.fresh("remote-http");
        let n = m.node_bounded(&cache, &Client::writer(&url, "x"))?;
        let (mut ok, text) = verdict(&n, "answered `HTTP/1.1 400 Bad Request`, not Redis");
        ok &= !n.run.stderr.contains("password") && !n.run.stderr.contains("s3cret");
        Ok(Seen::new(ok, &lost(&sh.reference, &[(cache, &n)]), text))
    });

    m.row("shared tier: deadline, objects over the size limit", "sized, never sent, built here", |m| {
        let server = RedisServer::start(&sh.binary, None)?;
        let url = server.url();
        let ns = sh.ns("deadline-size");
        m.seed(&Client::writer(&url, &ns))?;
        let cache = m.fresh("remote-deadline-size");
        let before = output_bytes(&server)?;
        let n = m.node_bounded(&cache, &Client::reader(&url, &ns).with("GRIDKEY_REMOTE_MAX_OBJECT", "10000"))?;
        let sent = output_bytes(&server)? - before;
        let st = n.remote();
        // Besides the objects it downloaded, the server sent only small replies: less than one
        // object's worth at the limit, where fetching up to the limit sends 10000 bytes each.
        let overhead = sent.saturating_sub(st.bytes_in);
        let ok = n.run.ok() && st.rejected == sh.reference.len() as u64 && overhead < 10_000 && n.remote_on();
        Ok(Seen::new(
            ok,
            &lost(&sh.reference, &[(cache, &n)]),
            format!(
                "{} rejected; the server sent {sent} bytes, {} of them objects; {}",
                st.rejected,
                st.bytes_in,
                n.run.summary()
            ),
        ))
    });

    m.row("shared tier: deadline, redis-server SIGSTOPped mid-run", expected, |m| {
        let server = RedisServer::start(&sh.binary, None)?;
        let url = server.url();
        let ns = sh.ns("deadline-stopped");
        let cache = m.fresh("remote-deadline-stopped");
        let m = &*m;
        let node = std::thread::scope(|scope| {
            let running = scope.spawn(|| m.node_bounded(&cache, &Client::writer(&url, &ns)));
            // Stopped once the run holds its leases: its heartbeat and its uploads meet the stall.
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(60) && names(&server, &ns, "lease-v1:*").map_or(0, |n| n.len()) == 0
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            server.signal(libc::SIGSTOP);
            running.join().expect("node thread")
        });
        server.signal(libc::SIGCONT);
        let n = node?;
        let (ok, text) = verdict(&n, "no complete reply within");
        let caches: Vec<(PathBuf, &Node)> = vec![(cache.clone(), &n)];
        Ok(Seen::new(ok, &lost(&sh.reference, &caches), text))
    });
    Ok(())
}
