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

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, Pipeline, RedisError, Value};

/// Bytes of reply a request may get beyond the bulk bytes it asked for: room for the replies of
/// pipelined integer, status and short array commands (a `SCAN` page of 1000 names included).
const REPLY_SLACK_BYTES: u64 = 1 << 20;

/// First bytes of a request's replies, kept to name a peer that is not Redis.
const FIRST_BYTES: usize = 64;

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
    /// What answered does not speak the Redis protocol.
    NotRedis {
        /// The first line it sent, escaped.
        answered: String,
    },
    /// The connection failed: refused, reset, closed.
    Io(io::Error),
    /// The server answered with an error or with a reply of another type than the command's.
    Reply(RedisError),
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
            Failure::NotRedis { answered } => write!(f, "the server answered `{answered}`, not Redis"),
            Failure::Io(e) => write!(f, "{e}"),
            Failure::Reply(e) => write!(f, "{e}"),
        }
    }
}

impl Failure {
    /// Whether this says that the server cannot be used for now (down, stalled, lying, not
    /// Redis, busy loading) rather than that the settings are wrong.
    pub(crate) fn unreachable(&self) -> bool {
        match self {
            Failure::Reply(e) => matches!(e.code(), Some("LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN")),
            _ => true,
        }
    }
}

/// The socket of a link: TCP, or a Unix socket for `redis+unix://` URLs.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        // A socket already closed by the peer answers NotConnected: nothing left to stop.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    fn set_timeouts(&self, left: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(left))?;
                s.set_write_timeout(Some(left))
            }
            Stream::Unix(s) => {
                s.set_read_timeout(Some(left))?;
                s.set_write_timeout(Some(left))
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
}

/// The socket as the parser reads it during one request.
struct Bounded<'a> {
    stream: &'a mut Stream,
    deadline: Instant,
    left: u64,
    first: &'a mut Vec<u8>,
    stop: Option<Stop>,
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(time) = self.deadline.checked_duration_since(Instant::now()).filter(|t| !t.is_zero()) else {
            self.stop = Some(Stop::Deadline);
            return Err(io::ErrorKind::TimedOut.into());
        };
        if self.left == 0 {
            self.stop = Some(Stop::Oversize);
            return Err(io::Error::other("reply larger than asked for"));
        }
        self.stream.set_timeouts(time)?;
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.stream.read(&mut buf[..want]) {
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
    /// Connects to the server of `info` and runs the handshake (`AUTH` when the URL has a
    /// password, `SELECT` when it names a database, then `PING`), all within `timeout`.
    ///
    /// Errors: [`Failure::Reply`] with the server's error when it refuses the credentials or the
    /// database (a misconfiguration), [`Failure::NotRedis`] when what answered is not Redis, and
    /// the failures of [`Link::exchange`] otherwise.
    pub(crate) fn open(info: &ConnectionInfo, timeout: Duration, sockets: &Arc<Sockets>) -> Result<Link, Failure> {
        let deadline = Instant::now() + timeout;
        let stream = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Stream::Tcp(connect_tcp(host, *port, deadline)?),
            ConnectionAddr::Unix(path) => Stream::Unix(UnixStream::connect(path).map_err(io_failure)?),
            other => {
                return Err(Failure::Reply(RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "this build connects over plain TCP or a Unix socket only, not TLS (rediss://): reach the server through a TLS tunnel you trust and give its redis:// URL",
                    format!("{other}"),
                ))))
            }
        };
        let id = sockets.add(stream.try_clone().map_err(io_failure)?);
        let mut link = Link { stream, parser: redis::Parser::new(), first: Vec::new(), sockets: sockets.clone(), id };
        let redis = info.redis_settings();
        let mut pipe = redis::pipe();
        if let Some(password) = redis.password() {
            let auth = pipe.cmd("AUTH");
            if let Some(user) = redis.username() {
                auth.arg(user);
            }
            auth.arg(password);
        }
        if redis.db() != 0 {
            pipe.cmd("SELECT").arg(redis.db());
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
            let time = deadline.checked_duration_since(Instant::now()).filter(|t| !t.is_zero());
            let time = time.ok_or_else(deadline_passed)?;
            self.stream.set_timeouts(time).map_err(io_failure)?;
            match self.stream.write(&packed[sent..]) {
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
        let mut reader =
            Bounded { stream: &mut self.stream, deadline, left: allowed, first: &mut self.first, stop: None };
        let mut replies = Vec::with_capacity(pipe.len());
        for _ in 0..pipe.len() {
            match self.parser.parse_value(&mut reader) {
                Ok(v) => replies.push(v),
                Err(e) => {
                    return Err(match reader.stop {
                        Some(Stop::Deadline) => deadline_passed(),
                        Some(Stop::Oversize) => Failure::Oversize { allowed },
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

/// The first line of `bytes`, escaped, at most [`FIRST_BYTES`] long: what a peer that is not
/// Redis answered (`HTTP/1.1 400 Bad Request`, an SSH banner).
fn first_line(bytes: &[u8]) -> String {
    let line = bytes.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    if line.is_empty() {
        return "nothing it could read".to_owned();
    }
    line.escape_ascii().to_string()
}
