//! The real Redis servers of the tests.
//!
//! `GRIDKEY_TEST_REDIS_URL` names a server that the test command started on loopback
//! (`cargo xtask test` does, and so does `cargo xtask with-redis -- cargo test ...`); with
//! `GRIDKEY_TEST_REQUIRE` naming `redis`, a missing server fails the test instead. Tests that
//! need to stop, pause, kill or password-protect a server start a private `redis-server` of their
//! own (the binary named by `GRIDKEY_TEST_REDIS_SERVER`, else `redis-server` on the `PATH`),
//! but only when the test command set up Redis, so that a plain `cargo test --workspace`
//! without a server says that it skipped them and how to run them.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gridkey_remote::{Remote, RemoteSettings, RemoteTrust, Role};

pub const URL_VAR: &str = "GRIDKEY_TEST_REDIS_URL";
pub const SERVER_VAR: &str = "GRIDKEY_TEST_REDIS_SERVER";

/// Says, past the test harness's output capture (so that a plain `cargo test` shows it), that
/// `test` skipped, and once per test binary how to run it.
fn skip(test: &str) {
    let required = std::env::var("GRIDKEY_TEST_REQUIRE").is_ok_and(|r| r.split(',').any(|s| s == "redis"));
    assert!(!required, "a Redis server is required (GRIDKEY_TEST_REQUIRE) but {URL_VAR} is unset");
    static HOW: std::sync::Once = std::sync::Once::new();
    let mut err = std::io::stderr().lock();
    HOW.call_once(|| {
        let _ = writeln!(
            err,
            "gridkey-remote: no test Redis server ({URL_VAR} unset), so the real-server tests skip; run them with \
             `cargo xtask test` or `cargo xtask with-redis -- cargo test -p gridkey-remote` (each installs redis-server \
             if missing and starts one on loopback), or set {URL_VAR}=redis://127.0.0.1:PORT/"
        );
    });
    let _ = writeln!(err, "gridkey-remote: skipped {test}");
}

/// The URL of the shared test server, or `None` after saying that `test` skipped.
pub fn shared_url(test: &str) -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            skip(test);
            None
        }
    }
}

/// A namespace of key names that no other test uses.
pub fn namespace(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("gktest-{test}-{}-{nanos}", std::process::id())
}

/// Settings for `url` in a namespace of its own, with short timeouts and leases, trusting the
/// ACL (the tests of lookups, leases and timeouts are not about trust; those of trust set it).
pub fn settings(url: &str, test: &str, role: Role) -> RemoteSettings {
    let mut s = RemoteSettings::new(url);
    s.trust = RemoteTrust::Acl;
    s.namespace = namespace(test);
    s.role = role;
    s.timeout = Duration::from_millis(500);
    s.connect_timeout = Duration::from_millis(500);
    s.lease_ttl = Duration::from_millis(600);
    s.lease_wait = Duration::from_secs(5);
    s
}

/// A connected client; panics when the server is not reachable (the test command started it).
pub fn connect(settings: &RemoteSettings) -> Remote {
    let remote = Remote::connect(settings).expect("settings are valid");
    assert!(remote.is_on(), "test server unreachable: {:?}", remote.warning());
    remote
}

/// One raw command to a server at `port`, without the client under test: the RESP reply.
pub fn raw(port: u16, password: Option<&str>, words: &[&[u8]]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to test server");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut send = |words: &[&[u8]]| {
        let mut out = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
            out.extend_from_slice(w);
            out.extend_from_slice(b"\r\n");
        }
        s.write_all(&out).unwrap();
    };
    if let Some(p) = password {
        send(&[b"AUTH", p.as_bytes()]);
    }
    send(words);
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = vec![0u8; 1 << 20];
    let n = s.read(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// The port of a `redis://host:port/...` URL.
pub fn port_of(url: &str) -> u16 {
    let rest = url.split("://").nth(1).unwrap();
    let authority = rest.split('/').next().unwrap();
    let hostport = authority.rsplit('@').next().unwrap();
    hostport.rsplit(':').next().unwrap().parse().unwrap()
}

/// A `redis-server` of one test's own on a free loopback port; killed when dropped.
pub struct PrivateRedis {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl PrivateRedis {
    /// Starts one (with `requirepass` when `password` is given), or says that `test` skipped.
    pub fn start(test: &str, password: Option<&str>) -> Option<PrivateRedis> {
        let args: Vec<String> = password.map(|p| vec!["--requirepass".to_owned(), p.to_owned()]).unwrap_or_default();
        PrivateRedis::start_with(test, |port| {
            let mut all = vec!["--port".to_owned(), port.to_string()];
            all.extend(args.iter().cloned());
            all
        })
    }

    /// Starts one with the arguments `args` gives for its free port (which must make it listen
    /// there: `--port P`, or `--port 0 --tls-port P`), or says that `test` skipped.
    pub fn start_with(test: &str, args: impl Fn(u16) -> Vec<String>) -> Option<PrivateRedis> {
        shared_url(test)?;
        let server = std::env::var_os(SERVER_VAR).map_or_else(|| PathBuf::from("redis-server"), PathBuf::from);
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(&server);
        cmd.args(args(port))
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", server.display()));
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "redis-server did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(PrivateRedis { child, port, dir })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Sends `signal` (`libc::SIGSTOP`, `SIGCONT`, `SIGKILL`) to the server.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert!(rc == 0 || signal == libc::SIGCONT);
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
