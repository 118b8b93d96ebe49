//! Real Redis servers for the test command, `cargo xtask with-redis`, `cargo xtask gt4py`, the
//! fault matrix, chaos and the cluster driver: the server process only, with no Redis client
//! library (ADR 0042).
//!
//! [`ensure_installed`] installs Debian's `redis-server` when it is missing (`apt-get`, as root
//! or through `sudo -n`); [`RedisServer::start`] starts one on loopback on a free port of its own,
//! with no persistence, in a temp directory, waits until it answers a RESP `PING` over std TCP,
//! and stops it when dropped. The drivers that send it other commands do so with the `redis`
//! crate, in `xtask-faults`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The variable that names the test server's URL.
pub const TEST_URL_VAR: &str = "GRIDKEY_TEST_REDIS_URL";
/// The variable that names the `redis-server` binary, for tests that start private servers.
pub const TEST_SERVER_VAR: &str = "GRIDKEY_TEST_REDIS_SERVER";

/// The `redis-server` binary on the `PATH`, installed with `apt-get` first when missing.
///
/// Errors: not installed and `apt-get` is not available or fails.
pub fn ensure_installed() -> Result<PathBuf> {
    if let Some(found) = which("redis-server") {
        return Ok(found);
    }
    eprintln!("redis: redis-server is missing; installing Debian's redis-server with apt-get");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut apt = if root { Command::new("apt-get") } else { sudo_apt() };
    let status = apt
        .args(["install", "-y", "--no-install-recommends", "redis-server"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("cannot run apt-get to install redis-server")?;
    if !status.success() {
        // A fresh image has no package lists yet.
        let mut update = if root { Command::new("apt-get") } else { sudo_apt() };
        update.arg("update").status().context("cannot run apt-get update")?;
        let mut again = if root { Command::new("apt-get") } else { sudo_apt() };
        let status = again
            .args(["install", "-y", "--no-install-recommends", "redis-server"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?;
        if !status.success() {
            bail!(
                "apt-get install redis-server failed ({status}); install Redis 6 or later and put redis-server on PATH"
            );
        }
    }
    which("redis-server").context("redis-server is still not on PATH after apt-get install")
}

fn sudo_apt() -> Command {
    let mut c = Command::new("sudo");
    c.args(["-n", "apt-get"]);
    c
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// A free TCP port on loopback (bound and released; the server binds it right after).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Makes, with Debian's `openssl`, a certificate authority `<name>-ca.pem` in `dir` and, when
/// `names` is given, a server certificate for those subject alternative names
/// (`IP:127.0.0.1,DNS:localhost`) signed by it (`<name>.crt`, `<name>.key`); returns the CA file.
///
/// Errors: `openssl` cannot be run or fails (its output in the error).
pub fn certificates(dir: &Path, name: &str, names: Option<&str>) -> Result<PathBuf> {
    let openssl = |args: &[&str]| -> Result<()> {
        let out = Command::new("openssl").args(args).current_dir(dir).output().context("cannot run openssl")?;
        if !out.status.success() {
            bail!("openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    let (ca, ca_key, subject) =
        (format!("{name}-ca.pem"), format!("{name}-ca.key"), format!("/CN=gridkey xtask {name}"));
    openssl(&[
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &ca_key, "-out", &ca, "-days", "2", "-subj",
        &subject,
    ])?;
    if let Some(names) = names {
        let (crt, key, csr, ext) =
            (format!("{name}.crt"), format!("{name}.key"), format!("{name}.csr"), format!("{name}.ext"));
        openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", "/CN=redis"])?;
        std::fs::write(dir.join(&ext), format!("subjectAltName={names}\n"))?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ])?;
    }
    Ok(dir.join(ca))
}

/// A `redis-server` of this process on loopback; stopped (SIGKILL) when dropped.
pub struct RedisServer {
    child: Option<Child>,
    binary: PathBuf,
    port: u16,
    password: Option<String>,
    bind: Vec<String>,
    dir: tempfile::TempDir,
    /// The TLS port and the server's certificate and key, for [`RedisServer::start_tls`].
    tls: Option<(u16, PathBuf, PathBuf)>,
}

impl RedisServer {
    /// Starts `binary` on a free loopback port, without persistence, and waits until it answers
    /// `PING`.
    ///
    /// Errors: it cannot be started or does not answer within 10 s.
    pub fn start(binary: &Path, password: Option<&str>) -> Result<RedisServer> {
        Self::start_on(binary, password, &["127.0.0.1"])
    }

    /// [`RedisServer::start`] listening on the addresses `bind` (loopback first: the driver
    /// talks to it there).
    ///
    /// Errors: as [`RedisServer::start`].
    pub fn start_on(binary: &Path, password: Option<&str>, bind: &[&str]) -> Result<RedisServer> {
        let mut server = RedisServer {
            child: None,
            binary: binary.to_path_buf(),
            port: free_port()?,
            password: password.map(str::to_owned),
            bind: bind.iter().map(|b| (*b).to_owned()).collect(),
            dir: tempfile::tempdir()?,
            tls: None,
        };
        server.restart()?;
        Ok(server)
    }

    /// [`RedisServer::start_on`] with a TLS port too ([`RedisServer::tls_url`]), serving the
    /// certificate `<name>.crt` and key `<name>.key` of `certs` ([`certificates`] makes them).
    /// The plain port stays, on `bind`, for the driver's own commands (`FLUSHALL`, `KEYS`).
    ///
    /// Errors: as [`RedisServer::start`].
    pub fn start_tls(
        binary: &Path,
        password: Option<&str>,
        bind: &[&str],
        certs: &Path,
        name: &str,
    ) -> Result<RedisServer> {
        let mut server = RedisServer {
            child: None,
            binary: binary.to_path_buf(),
            port: free_port()?,
            password: password.map(str::to_owned),
            bind: bind.iter().map(|b| (*b).to_owned()).collect(),
            dir: tempfile::tempdir()?,
            tls: Some((free_port()?, certs.join(format!("{name}.crt")), certs.join(format!("{name}.key")))),
        };
        server.restart()?;
        Ok(server)
    }

    /// The TLS port, when the server has one.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|(port, _, _)| *port)
    }

    /// `rediss://[:PASSWORD@]HOST:TLSPORT/`, when the server has a TLS port.
    pub fn tls_url(&self, host: &str) -> Option<String> {
        let port = self.tls_port()?;
        Some(match &self.password {
            Some(p) => format!("rediss://:{p}@{host}:{port}/"),
            None => format!("rediss://{host}:{port}/"),
        })
    }

    /// Starts the server again on the same port (after [`RedisServer::kill`]); empty.
    ///
    /// Errors: as [`RedisServer::start`].
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--port", &self.port.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--bind")
            .args(&self.bind)
            .args(["--maxclients", "10000", "--loglevel", "warning"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(p) = &self.password {
            cmd.args(["--requirepass", p]);
        }
        if let Some((port, crt, key)) = &self.tls {
            cmd.args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
                .arg("--tls-cert-file")
                .arg(crt)
                .arg("--tls-key-file")
                .arg(key);
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {}", self.binary.display()))?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if self.ping().is_ok() {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(10) {
                bail!("redis-server on port {} did not answer PING within 10 s", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://[:PASSWORD@]127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// Sends a signal (`libc::SIGSTOP`, `SIGCONT`) to the server.
    pub fn signal(&self, signal: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
    }

    /// Kills the server (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the server answers `PING` with `PONG` (after `AUTH` when it has a password), over
    /// a plain TCP connection with 1 s timeouts: the RESP of two commands, no client library.
    ///
    /// Errors: the server cannot be reached, refuses the password or answers something else.
    pub fn ping(&self) -> Result<()> {
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.set_write_timeout(Some(Duration::from_secs(1)))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        if let Some(password) = &self.password {
            stream.write_all(&resp_command(&["AUTH", password]))?;
            expect_line(&mut reader, "+OK", self.port)?;
        }
        stream.write_all(&resp_command(&["PING"]))?;
        expect_line(&mut reader, "+PONG", self.port)
    }
}

/// `words` as a RESP array of bulk strings, the form a Redis server reads commands in.
fn resp_command(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for word in words {
        out.extend_from_slice(format!("${}\r\n{word}\r\n", word.len()).as_bytes());
    }
    out
}

/// Reads one reply line and fails unless it is `expected`.
fn expect_line(reader: &mut impl BufRead, expected: &str, port: u16) -> Result<()> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if line.trim_end() != expected {
        bail!("redis-server on port {port} answered {:?} where {expected:?} was expected", line.trim_end());
    }
    Ok(())
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `cargo xtask with-redis [--] CMD ARGS...`: installs `redis-server` when missing, starts one
/// on a free loopback port, runs CMD with `GRIDKEY_TEST_REDIS_URL` and
/// `GRIDKEY_TEST_REDIS_SERVER` set, stops the server, and exits with CMD's status.
///
/// Errors: no command given, Redis cannot be installed or started, CMD cannot be run.
pub fn with_redis(args: &[String]) -> Result<ExitCode> {
    let args = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => args,
    };
    let Some((program, rest)) = args.split_first() else {
        bail!("usage: cargo xtask with-redis -- CMD ARGS...");
    };
    let binary = ensure_installed()?;
    let server = RedisServer::start(&binary, None)?;
    eprintln!("redis: {} started on {} for `{}`", binary.display(), server.url(), args.join(" "));
    let status = Command::new(program)
        .args(rest)
        .env(TEST_URL_VAR, server.url())
        .env(TEST_SERVER_VAR, &binary)
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    drop(server);
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(code.clamp(1, 255) as u8),
        None => ExitCode::FAILURE,
    })
}
