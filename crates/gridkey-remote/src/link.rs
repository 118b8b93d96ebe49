//! One connection to the server with a deadline per request and a bound on the bytes of its
//! replies (ADR 0029).
//!
//! The `redis` crate's synchronous `Connection` applies its read timeout to each `read()` and
//! buffers a reply as long as its bulk header says, so a server that trickles a byte at a time
//! never trips it and one that announces a terabyte makes it buffer until memory runs out; it
//! keeps its socket private, so nothing else can end a request that is overdue. A [`Link`]
//! therefore owns its socket and uses the crate for everything else: the URL
//! (`redis::ConnectionInfo`), the encoding of commands (`Pipeline::get_packed_pipeline`) and the
//! parsing of replies (`redis::Parser`), which reads through [`Bounded`]: before each read the
//! socket's timeout is set to what is left of the request's deadline, and the bytes of the
//! request's replies are counted against what was asked for.
//!
//! A `rediss://` link is a rustls client stream on that socket (ADR 0037), driven one socket
//! call at a time so that the same rules hold over TLS: the handshake is part of the connect
//! deadline, each record is read with what is left of the request's deadline, and the bound
//! counts the plaintext the parser reads. The server's certificate must chain to the CA file's
//! certificates (or, without one, the system's roots) and name the URL's host; there is no
//! fall-back to plain TCP.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, Pipeline, RedisConnectionInfo, RedisError, Value};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::{RemoteError, TlsProblem};

/// Bytes of reply a request may get beyond the bulk bytes it asked for: room for the replies of
/// pipelined integer, status and short array commands (a `SCAN` page of 1000 names included).
const REPLY_SLACK_BYTES: u64 = 1 << 20;

/// First bytes of a request's replies, kept to name a peer that is not Redis.
const FIRST_BYTES: usize = 64;

/// Values a request's replies may hold beyond four per argument of its commands (a lookup
/// script's reply holds one per key it was given): room for a `SCAN` page of 1000 names and the
/// counters' hash. The `redis` crate's parser makes a [`Value`] of tens of bytes of every value,
/// however few bytes it took on the wire (`_\r\n` is three), so a bound on bytes alone lets a
/// lying server make the client hold twenty times what it sent (ADR 0056).
const REPLY_SLACK_VALUES: u64 = 1 << 16;

/// Why a request got no usable reply.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The request's deadline passed before its last reply was complete.
    Deadline {
        /// The deadline, from the start of the request.
        after: Duration,
    },
    /// The replies were larger than what was asked for (a lying or broken server).
    Oversize {
        /// Bytes the request allowed.
        allowed: u64,
    },
    /// The replies held more values than the request can be answered with (a lying or broken
    /// server, ADR 0056).
    TooManyValues {
        /// Values the request allowed.
        allowed: u64,
    },
    /// What answered does not speak the Redis protocol.
    NotRedis {
        /// The first line it sent, escaped.
        answered: String,
    },
    /// The TLS handshake did not complete within the connect deadline.
    Handshake {
        /// The deadline, from the start of the connection.
        after: Duration,
    },
    /// The TLS handshake failed: the certificate does not verify, or the peer does not speak
    /// TLS. A misconfiguration: [`Remote::connect`](crate::Remote::connect) returns it as
    /// [`RemoteError::Tls`].
    Tls {
        /// What is wrong, for the fix.
        problem: TlsProblem,
        /// The TLS error, with what the peer answered when it was not TLS.
        reason: String,
    },
    /// The connection failed: refused, reset, closed.
    Io(io::Error),
    /// The server answered with an error or with a reply of another type than the command's.
    Reply(RedisError),
    /// The server answered what it was not asked, in words for the warning (ADR 0055).
    Lie(&'static str),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Deadline { after } => {
                write!(f, "no complete reply within {:.1} s", after.as_secs_f64())
            }
            Failure::Oversize { allowed } => {
                write!(
                    f,
                    "the replies were larger than the {allowed} bytes this request allows (a lying or broken server)"
                )
            }
            Failure::TooManyValues { allowed } => write!(
                f,
                "the replies held more than the {allowed} values this request can be answered with (a lying or broken server)"
            ),
            Failure::NotRedis { answered } => write!(f, "the server answered `{answered}`, not Redis"),
            Failure::Handshake { after } => write!(
                f,
                "no complete TLS handshake within {:.1} s (a server that does not speak TLS on that port waits like this: a plain one takes a redis:// URL)",
                after.as_secs_f64()
            ),
            Failure::Tls { reason, .. } => write!(f, "TLS handshake failed: {reason}"),
            Failure::Io(e) => write!(f, "{e}"),
            Failure::Reply(e) => f.write_str(&escaped(&e.to_string())),
            Failure::Lie(what) => write!(f, "the server answered {what} (a lying or broken server)"),
        }
    }
}

impl Failure {
    /// Whether this says that the server cannot be used for now (down, stalled, lying, not
    /// Redis, busy loading) rather than that the settings are wrong.
    pub(crate) fn unreachable(&self) -> bool {
        match self {
            Failure::Reply(e) => matches!(e.code(), Some("LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN")),
            Failure::Tls { .. } => false,
            _ => true,
        }
    }
}

/// Where the links of one client connect, resolved once from its URL (and, for `rediss://`,
/// its trust roots) by [`Address::new`].
pub(crate) enum Address {
    /// `redis://HOST:PORT`.
    Tcp { host: String, port: u16 },
    /// `rediss://HOST:PORT`: TLS with `config`, the certificate verified for `name` (ADR 0037).
    Tls { host: String, port: u16, name: ServerName<'static>, config: Arc<ClientConfig> },
    /// `redis+unix:///PATH`.
    Unix(PathBuf),
}

impl Address {
    /// The address of `addr`; for TLS, trusting only the certificates of `ca_file` when given,
    /// else the system's roots (ADR 0037).
    ///
    /// Errors: [`RemoteError::Url`] for a `rediss://` URL with `#insecure` (certificates are always
    /// checked) or a host that is no server name, [`RemoteError::CaFile`] for a CA file that cannot
    /// be read or holds no certificate, [`RemoteError::Tls`] when the system has no roots.
    pub(crate) fn new(addr: &ConnectionAddr, ca_file: Option<&Path>, shown_url: &str) -> Result<Address, RemoteError> {
        let url_error = |reason: &str| RemoteError::Url { url: shown_url.to_owned(), reason: reason.to_owned() };
        match addr {
            ConnectionAddr::Tcp(host, port) => Ok(Address::Tcp { host: host.clone(), port: *port }),
            ConnectionAddr::Unix(path) => Ok(Address::Unix(path.clone())),
            ConnectionAddr::TcpTls { insecure: true, .. } => Err(url_error(
                "`#insecure` would accept any certificate, which this client never does; remove it and give the server's certificate authority as the shared tier's CA file",
            )),
            ConnectionAddr::TcpTls { host, port, .. } => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|e| url_error(&format!("its host `{host}` is not a DNS name or IP address ({e})")))?;
                let config = client_config(ca_file, shown_url)?;
                Ok(Address::Tls { host: host.clone(), port: *port, name, config })
            }
            other => Err(url_error(&format!("this client does not connect to {other}"))),
        }
    }
}

/// The rustls client configuration of `rediss://` links: ring, TLS 1.2 and 1.3, no client
/// certificate, and as roots the certificates of `ca_file` alone or the system's.
fn client_config(ca_file: Option<&Path>, shown_url: &str) -> Result<Arc<ClientConfig>, RemoteError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(ca) => {
            let ca_error = |reason: String| RemoteError::CaFile { path: ca.to_path_buf(), reason };
            let pem = std::fs::read(ca).map_err(|e| ca_error(e.to_string()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| ca_error(format!("it is not a PEM file ({e})")))?;
                roots.add(cert).map_err(|e| ca_error(format!("a certificate in it cannot be used ({e})")))?;
            }
            if roots.is_empty() {
                return Err(ca_error("it holds no PEM certificate".to_owned()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map_or_else(|| "none found".to_owned(), |e| e.to_string());
                return Err(RemoteError::Tls {
                    url: shown_url.to_owned(),
                    ca: None,
                    problem: TlsProblem::UnknownIssuer,
                    reason: format!(
                        "no certificate could be checked: the system has no trusted certificate authorities ({why})"
                    ),
                });
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| RemoteError::Tls {
            url: shown_url.to_owned(),
            ca: ca_file.map(Path::to_path_buf),
            problem: TlsProblem::Other,
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// What is left of `deadline`, or a timed-out error when nothing is.
fn left(deadline: Instant) -> io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|t| !t.is_zero())
        .ok_or_else(|| io::ErrorKind::TimedOut.into())
}

/// A rustls client connection on its socket, driven one socket call at a time.
struct Tls {
    conn: ClientConnection,
    sock: TcpStream,
}

impl Tls {
    /// Sends the TLS records rustls has queued, before `deadline`.
    fn flush_before(&mut self, deadline: Instant) -> io::Result<()> {
        while self.conn.wants_write() {
            self.sock.set_write_timeout(Some(left(deadline)?))?;
            self.conn.write_tls(&mut self.sock)?;
        }
        Ok(())
    }

    /// Plaintext into `buf`, reading records until one brings some, each socket read within
    /// what is left of `deadline` (rustls's own stream reads until a record is whole, whatever
    /// the time).
    fn read_before(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
            self.flush_before(deadline)?;
            self.sock.set_read_timeout(Some(left(deadline)?))?;
            // At the end of the stream the reader answers end of file (or an unexpected end).
            self.conn.read_tls(&mut self.sock)?;
            self.conn.process_new_packets().map_err(io::Error::other)?;
        }
    }

    /// Queues `buf` (as much as rustls takes) and sends it before `deadline`.
    fn write_before(&mut self, buf: &[u8], deadline: Instant) -> io::Result<usize> {
        let n = self.conn.writer().write(buf)?;
        self.flush_before(deadline)?;
        Ok(n)
    }

    /// Runs the handshake before `deadline` (ADR 0037).
    ///
    /// Errors: [`Failure::Handshake`] when the deadline passes, [`Failure::Tls`] when the
    /// certificate does not verify or the peer is not TLS (its first bytes in the reason),
    /// [`Failure::Io`] for a connection that failed.
    fn handshake(&mut self, deadline: Instant, timeout: Duration) -> Result<(), Failure> {
        let passed = |e: &io::Error| matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut);
        let deadline_failure =
            |e: io::Error| if passed(&e) { Failure::Handshake { after: timeout } } else { Failure::Io(e) };
        let mut first = Vec::new();
        while self.conn.is_handshaking() {
            if self.conn.wants_write() {
                self.flush_before(deadline).map_err(deadline_failure)?;
                continue;
            }
            self.sock.set_read_timeout(Some(left(deadline).map_err(deadline_failure)?)).map_err(io_failure)?;
            let mut recorder = Recorder { inner: &mut self.sock, first: &mut first };
            let n = self.conn.read_tls(&mut recorder).map_err(deadline_failure)?;
            if n == 0 {
                return Err(Failure::Tls {
                    problem: TlsProblem::NotTls,
                    reason: "the server closed the connection during the handshake".to_owned(),
                });
            }
            if let Err(e) = self.conn.process_new_packets() {
                // Tell the server why (the alert rustls queued), as far as the socket takes it.
                let _ = self.flush_before(deadline);
                return Err(tls_failure(&e, &first));
            }
        }
        self.flush_before(deadline).map_err(deadline_failure)
    }
}

/// The handshake error `e` as a failure with its fix; `first`: the peer's first bytes.
fn tls_failure(e: &rustls::Error, first: &[u8]) -> Failure {
    use rustls::CertificateError as C;
    let problem = match e {
        rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            TlsProblem::NameMismatch
        }
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature | C::UnknownRevocationStatus) => {
            TlsProblem::UnknownIssuer
        }
        rustls::Error::InvalidMessage(_) => TlsProblem::NotTls,
        _ => TlsProblem::Other,
    };
    let reason = match problem {
        TlsProblem::NotTls => format!("{e}; the server answered `{}`", first_line(first)),
        _ => e.to_string(),
    };
    Failure::Tls { problem, reason }
}

/// The socket as the handshake reads it: keeps the first bytes, to show what a peer that is
/// not TLS answered.
struct Recorder<'a> {
    inner: &'a mut TcpStream,
    first: &'a mut Vec<u8>,
}

impl Read for Recorder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let take = n.min(FIRST_BYTES.saturating_sub(self.first.len()));
        self.first.extend_from_slice(&buf[..take]);
        Ok(n)
    }
}

/// The socket of a link: TCP, TLS on TCP for `rediss://`, or a Unix socket for `redis+unix://`.
enum Stream {
    Tcp(TcpStream),
    Tls(Box<Tls>),
    Unix(UnixStream),
}

impl Stream {
    /// A handle on the same socket, to shut it down from another thread (for TLS, the TCP socket
    /// under it).
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Tls(t) => Stream::Tcp(t.sock.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        // A socket already closed by the peer answers NotConnected: nothing left to stop.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Tls(t) => t.sock.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// One read (for TLS, the record reads until some plaintext), within what is left of
    /// `deadline`; a timed-out error when it passes.
    fn read_before(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(left(deadline)?))?;
                s.read(buf)
            }
            Stream::Tls(t) => t.read_before(buf, deadline),
            Stream::Unix(s) => {
                s.set_read_timeout(Some(left(deadline)?))?;
                s.read(buf)
            }
        }
    }

    /// One write within what is left of `deadline`; a timed-out error when it passes.
    fn write_before(&mut self, buf: &[u8], deadline: Instant) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => {
                s.set_write_timeout(Some(left(deadline)?))?;
                s.write(buf)
            }
            Stream::Tls(t) => t.write_before(buf, deadline),
            Stream::Unix(s) => {
                s.set_write_timeout(Some(left(deadline)?))?;
                s.write(buf)
            }
        }
    }
}

/// The sockets of every open link of one client, so that the request that trips the tier can
/// end the others at once (the heartbeat's included): a dead server costs one deadline, not one
/// per connection.
#[derive(Default)]
pub(crate) struct Sockets {
    open: Mutex<Vec<(u64, Stream)>>,
    next: std::sync::atomic::AtomicU64,
}

impl Sockets {
    /// Shuts down every open socket; their requests fail at once.
    pub(crate) fn shut_all(&self) {
        for (_, s) in crate::client::lock(&self.open).iter() {
            s.shutdown();
        }
    }

    fn add(&self, s: Stream) -> u64 {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::client::lock(&self.open).push((id, s));
        id
    }

    fn remove(&self, id: u64) {
        crate::client::lock(&self.open).retain(|(i, _)| *i != id);
    }
}

/// What a [`Bounded`] read ran into, kept apart from the parser's own error so that the warning
/// says what happened.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Deadline,
    Oversize,
    TooManyValues,
}

/// Where [`Values`] is in the replies' bytes.
#[derive(Clone, Copy)]
enum Scan {
    /// At the type byte of the next value.
    Type,
    /// In a value's first line; for a blob (`$`, `=`, `!`), its length so far (`None` once it
    /// is no length: `-1`, a null blob, or bytes that are not the protocol, which the parser
    /// rejects).
    Line { blob: bool, len: Option<u64> },
    /// In a blob's payload and its closing `\r\n`: the bytes left.
    Payload { left: u64 },
}

/// Counts the values of RESP replies as their bytes pass, without building them: every type
/// byte starts one (an aggregate and each of its elements alike), a blob's payload is skipped by
/// its length (ADR 0056). Bytes that are not the protocol are the parser's to reject; they can
/// only make the count larger.
struct Values {
    scan: Scan,
    seen: u64,
}

impl Values {
    fn new() -> Values {
        Values { scan: Scan::Type, seen: 0 }
    }

    /// Counts the values that begin in `bytes` (the next bytes of the replies).
    fn feed(&mut self, mut bytes: &[u8]) {
        while let Some((&b, rest)) = bytes.split_first() {
            match self.scan {
                Scan::Type => {
                    self.seen += 1;
                    self.scan = Scan::Line { blob: matches!(b, b'$' | b'=' | b'!'), len: Some(0) };
                    bytes = rest;
                }
                Scan::Line { blob, len } => {
                    self.scan = match (b, len) {
                        (b'\n', Some(n)) if blob => Scan::Payload { left: n.saturating_add(2) },
                        (b'\n', _) => Scan::Type,
                        (b'\r', _) => Scan::Line { blob, len },
                        (b'0'..=b'9', Some(n)) => {
                            Scan::Line { blob, len: n.checked_mul(10).and_then(|n| n.checked_add(u64::from(b - b'0'))) }
                        }
                        _ => Scan::Line { blob, len: None },
                    };
                    bytes = rest;
                }
                Scan::Payload { left } => {
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                    let left = left - take as u64;
                    self.scan = if left == 0 { Scan::Type } else { Scan::Payload { left } };
                    bytes = &bytes[take..];
                }
            }
        }
    }
}

/// The socket as the parser reads it during one request.
struct Bounded<'a> {
    stream: &'a mut Stream,
    deadline: Instant,
    left: u64,
    values: Values,
    values_allowed: u64,
    first: &'a mut Vec<u8>,
    stop: Option<Stop>,
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            self.stop = Some(Stop::Oversize);
            return Err(io::Error::other("reply larger than asked for"));
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.stream.read_before(&mut buf[..want], self.deadline) {
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                self.stop = Some(Stop::Deadline);
                return Err(e);
            }
            other => other?,
        };
        if self.first.len() < FIRST_BYTES {
            let take = n.min(FIRST_BYTES - self.first.len());
            self.first.extend_from_slice(&buf[..take]);
        }
        self.left -= n as u64;
        self.values.feed(&buf[..n]);
        if self.values.seen > self.values_allowed {
            self.stop = Some(Stop::TooManyValues);
            return Err(io::Error::other("replies of more values than asked for"));
        }
        Ok(n)
    }
}

/// One open connection, authenticated and on its database.
pub(crate) struct Link {
    stream: Stream,
    parser: redis::Parser,
    first: Vec<u8>,
    sockets: Arc<Sockets>,
    id: u64,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.sockets.remove(self.id);
        self.stream.shutdown();
    }
}

/// The error of a socket call, as a failure of the request.
fn io_failure(e: io::Error) -> Failure {
    Failure::Io(e)
}

impl Link {
    /// Connects to `address` and runs the handshake (for `rediss://` the TLS handshake first,
    /// then `AUTH` when `login` has a password, `SELECT` when it names a database, then
    /// `PING`), all within `timeout`.
    ///
    /// Errors: [`Failure::Reply`] with the server's error when it refuses the credentials or the
    /// database (a misconfiguration), [`Failure::Tls`] when the server's certificate does not
    /// verify or it does not speak TLS, [`Failure::Handshake`] when the TLS handshake does not
    /// complete in time, [`Failure::NotRedis`] when what answered is not Redis, and the failures
    /// of [`Link::exchange`] otherwise.
    pub(crate) fn open(
        address: &Address,
        login: &RedisConnectionInfo,
        timeout: Duration,
        sockets: &Arc<Sockets>,
    ) -> Result<Link, Failure> {
        let deadline = Instant::now() + timeout;
        let stream = match address {
            Address::Tcp { host, port } => Stream::Tcp(connect_tcp(host, *port, deadline)?),
            Address::Tls { host, port, name, config } => {
                let sock = connect_tcp(host, *port, deadline)?;
                let conn = ClientConnection::new(config.clone(), name.clone())
                    .map_err(|e| Failure::Tls { problem: TlsProblem::Other, reason: e.to_string() })?;
                Stream::Tls(Box::new(Tls { conn, sock }))
            }
            Address::Unix(path) => Stream::Unix(UnixStream::connect(path).map_err(io_failure)?),
        };
        let id = sockets.add(stream.try_clone().map_err(io_failure)?);
        let mut link = Link { stream, parser: redis::Parser::new(), first: Vec::new(), sockets: sockets.clone(), id };
        if let Stream::Tls(tls) = &mut link.stream {
            tls.handshake(deadline, timeout)?;
        }
        let mut pipe = redis::pipe();
        if let Some(password) = login.password() {
            let auth = pipe.cmd("AUTH");
            if let Some(user) = login.username() {
                auth.arg(user);
            }
            auth.arg(password);
        }
        if login.db() != 0 {
            pipe.cmd("SELECT").arg(login.db());
        }
        pipe.cmd("PING");
        let replies = link.exchange(&pipe, 0, deadline, timeout)?;
        for reply in &replies {
            if let Value::ServerError(e) = reply {
                return Err(Failure::Reply(RedisError::from(e.clone())));
            }
        }
        match replies.last() {
            Some(Value::SimpleString(s)) if s == "PONG" => Ok(link),
            Some(Value::BulkString(b)) if b == b"PONG" => Ok(link),
            _ => Err(Failure::NotRedis { answered: first_line(&link.first) }),
        }
    }

    /// Sends the commands of `pipe` and reads one reply per command, all before `deadline`,
    /// with at most `asked` bytes of bulk replies plus [`REPLY_SLACK_BYTES`]. Error replies
    /// are returned as [`Value::ServerError`], in their place. `timeout` is what the deadline
    /// was set from, for the message.
    ///
    /// Errors: [`Failure::Deadline`], [`Failure::Oversize`], [`Failure::NotRedis`] for bytes
    /// that are not the Redis protocol, [`Failure::Io`] for a connection that failed. After an
    /// error the link is of no further use: drop it.
    pub(crate) fn exchange(
        &mut self,
        pipe: &Pipeline,
        asked: u64,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Vec<Value>, Failure> {
        let deadline_passed = || Failure::Deadline { after: timeout };
        self.first.clear();
        let packed = pipe.get_packed_pipeline();
        let mut sent = 0;
        while sent < packed.len() {
            match self.stream.write_before(&packed[sent..], deadline) {
                Ok(0) => return Err(Failure::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(deadline_passed())
                }
                Err(e) => return Err(Failure::Io(e)),
            }
        }
        let allowed = asked.saturating_add(REPLY_SLACK_BYTES);
        let arguments: usize = pipe.cmd_iter().map(|cmd| cmd.args_iter().count()).sum();
        let values_allowed = (arguments as u64).saturating_mul(4).saturating_add(REPLY_SLACK_VALUES);
        let mut reader = Bounded {
            stream: &mut self.stream,
            deadline,
            left: allowed,
            values: Values::new(),
            values_allowed,
            first: &mut self.first,
            stop: None,
        };
        let mut replies = Vec::with_capacity(pipe.len());
        for _ in 0..pipe.len() {
            match self.parser.parse_value(&mut reader) {
                Ok(v) => replies.push(v),
                Err(e) => {
                    return Err(match reader.stop {
                        Some(Stop::Deadline) => deadline_passed(),
                        Some(Stop::Oversize) => Failure::Oversize { allowed },
                        Some(Stop::TooManyValues) => Failure::TooManyValues { allowed: values_allowed },
                        None if e.is_io_error() => Failure::Io(io::Error::other(e.to_string())),
                        None => Failure::NotRedis { answered: first_line(reader.first) },
                    })
                }
            }
        }
        Ok(replies)
    }
}

/// Connects to the first address of `host` that accepts before `deadline`.
fn connect_tcp(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, Failure> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs().map_err(io_failure)? {
        let Some(time) = deadline.checked_duration_since(Instant::now()).filter(|t| !t.is_zero()) else { break };
        match TcpStream::connect_timeout(&addr, time) {
            Ok(s) => {
                // Requests are small and answered at once; Nagle's delay would only add latency.
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(Failure::Io(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "connection timed out"))))
}

/// `text` a server sent (an error's message), with its control characters escaped (`\u{1b}`),
/// so that what a warning or an error quotes of it cannot move the cursor, retitle the terminal
/// or start a line of its own on the user's terminal.
pub(crate) fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The first line of `bytes`, escaped, at most [`FIRST_BYTES`] long: what a peer that is not
/// Redis answered (`HTTP/1.1 400 Bad Request`, an SSH banner).
fn first_line(bytes: &[u8]) -> String {
    let line = bytes.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    if line.is_empty() {
        return "nothing it could read".to_owned();
    }
    line.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::Values;
    use proptest::prelude::*;

    /// A reply as a tree, with what it encodes to and how many values it holds.
    #[derive(Clone, Debug)]
    enum Reply {
        Int(i64),
        Bulk(Vec<u8>),
        Nil,
        Status(String),
        Error(String),
        Array(Vec<Reply>),
    }

    impl Reply {
        fn encode(&self, out: &mut Vec<u8>) {
            match self {
                Reply::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
                Reply::Bulk(b) => {
                    out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                    out.extend_from_slice(b);
                    out.extend_from_slice(b"\r\n");
                }
                Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
                Reply::Status(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
                Reply::Error(s) => out.extend_from_slice(format!("-ERR {s}\r\n").as_bytes()),
                Reply::Array(items) => {
                    out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                    for item in items {
                        item.encode(out);
                    }
                }
            }
        }

        fn values(&self) -> u64 {
            match self {
                Reply::Array(items) => 1 + items.iter().map(Reply::values).sum::<u64>(),
                _ => 1,
            }
        }
    }

    fn reply() -> impl Strategy<Value = Reply> {
        // Payloads that hold the protocol's own bytes, so that a scan that looked into them would
        // count wrong.
        let bytes = proptest::collection::vec(
            prop_oneof![Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), any::<u8>()],
            0..40,
        );
        let leaf = prop_oneof![
            any::<i64>().prop_map(Reply::Int),
            bytes.prop_map(Reply::Bulk),
            Just(Reply::Nil),
            "[a-zA-Z ]{0,12}".prop_map(Reply::Status),
            "[a-z ]{1,12}".prop_map(Reply::Error),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| proptest::collection::vec(inner, 0..8).prop_map(Reply::Array))
    }

    proptest! {
        /// However the bytes of a pipeline's replies arrive, the scan counts the values the
        /// replies were made of, and the `redis` crate's parser (the witness that the bytes are
        /// the protocol) reads back as many replies.
        #[test]
        fn the_scan_counts_every_value_whatever_the_reads(
            replies in proptest::collection::vec(reply(), 1..6),
            cuts in proptest::collection::vec(1usize..50, 1..40),
        ) {
            let mut wire = Vec::new();
            for r in &replies {
                r.encode(&mut wire);
            }
            let mut parser = redis::Parser::new();
            let mut reader = wire.as_slice();
            for _ in &replies {
                let parsed = parser.parse_value(&mut reader);
                prop_assert!(parsed.is_ok(), "{parsed:?}");
            }
            let mut values = Values::new();
            let mut rest = wire.as_slice();
            for cut in cuts.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (now, later) = rest.split_at((*cut).min(rest.len()));
                values.feed(now);
                rest = later;
            }
            prop_assert_eq!(values.seen, replies.iter().map(Reply::values).sum::<u64>());
        }
    }

    #[test]
    fn a_flood_of_nulls_is_counted_value_by_value() {
        let mut values = Values::new();
        values.feed(b"*4\r\n_\r\n_\r\n$-1\r\n*-1\r\n");
        assert_eq!(values.seen, 5);
    }
}
