//! The client of the shared tier: one synchronous Redis connection with a deadline per request
//! ([`crate::link`], ADR 0029), a per-run circuit breaker, the lease protocol and the counters.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, Pipeline, RedisError, Value};
use serde::{Deserialize, Serialize};

use crate::link::{self, Address, Failure, Link, Sockets};
use crate::object::{self, hex, Kind, Reject};
use crate::trust::Trust;
use crate::RemoteError;
use gridkey_settings::RemoteSettings;

mod retract;
pub use retract::{ObjectChecksum, Retracted};

/// Takes the lease unless the object is there or the lease is held: 2 present, 1 taken, 0 held.
const CLAIM: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then return 2 end \
    if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0";

/// Renews every lease of KEYS still held by ARGV[1]; returns how many.
const RENEW: &str = "local n = 0 for _, k in ipairs(KEYS) do \
    if redis.call('GET', k) == ARGV[1] then redis.call('PEXPIRE', k, ARGV[2]) n = n + 1 end end return n";

/// Deletes every lease of KEYS still held by ARGV[1]; returns how many.
const RELEASE: &str = "local n = 0 for _, k in ipairs(KEYS) do \
    if redis.call('GET', k) == ARGV[1] then redis.call('DEL', k) n = n + 1 end end return n";

/// What [`Remote::sizes`] learnt of the objects of one lookup, in the order of their names: the
/// size in bytes of each (or why it has none that can be read), and the object itself where the
/// lookup script sent it in the same reply (within the size limit and the reply's budget).
type LookedUp = (Vec<Result<u64, Reject>>, Vec<Option<Value>>);

/// The size of each object of KEYS and, while ARGV[2] bytes suffice, the object itself when it is
/// within the size limit ARGV[1]: one reply per key, the object's bytes or its size (0 for no
/// object), or the error of a name that holds another type. Run with `EVAL_RO` (Redis 7), so it
/// can write nothing. Sizes are known on the server before any byte is sent, so an object over
/// the limit never travels (ADR 0029, ADR 0055).
///
/// It runs the commands a lookup without it runs (`STRLEN`, then `GETRANGE` of the whole
/// object), so that an ACL user allowed those and `EVAL_RO` may run it.
const LOOK_UP: &str = "local max, budget, out = tonumber(ARGV[1]), tonumber(ARGV[2]), {} \
    for i, k in ipairs(KEYS) do local n = redis.pcall('STRLEN', k) \
    if type(n) == 'table' then out[i] = n \
    elseif n > 0 and n <= max and n <= budget then budget = budget - n out[i] = redis.call('GETRANGE', k, 0, n - 1) \
    else out[i] = n end end return out";

/// Whether an error answered to [`LOOK_UP`] says that this client will never run it here: its
/// ACL user may not (`NOPERM`; when the script's own commands or keys are not allowed, Redis
/// 7.0's `ERR The user executing the script can't run this command` or `... can't access at
/// least one of the keys`, Redis 7.2's `ERR ACL failure in script: ...`), the server has no
/// `EVAL_RO` (`ERR unknown command`, Redis before 7), or its keys are not in one slot
/// (`CROSSSLOT`, Redis Cluster). Anything else (a server busy with another script, loading, out
/// of memory) holds for this request only.
fn refuses_scripts(e: &redis::ServerError) -> bool {
    match e.code() {
        "NOPERM" | "CROSSSLOT" => true,
        "ERR" => e.details().is_some_and(|d| {
            let d = d.trim_start().to_ascii_lowercase();
            d.starts_with("unknown command")
                || d.starts_with("acl failure in script")
                || d.contains("can't run this command")
                || d.contains("can't access at least one of the keys")
        }),
        _ => false,
    }
}

/// Whether an error answered for one object of a lookup concerns that object alone: its name
/// holds another type than a string (`WRONGTYPE`), so it is rejected as an object that cannot be
/// read. Every other error (the user may not read the name, the cluster does not serve its slot,
/// the server is busy, loading or has lost its master) says that the server cannot answer
/// lookups now: the tier goes off with it as the warning, instead of counting good objects as
/// rejected.
fn concerns_the_object(e: &redis::ServerError) -> bool {
    e.code() == "WRONGTYPE"
}

/// Longest pause between two looks at a lease that is waited on.
const MAX_POLL: Duration = Duration::from_millis(100);

/// Most object bytes one request of a lookup asks for (more objects are fetched in further
/// requests), unless one object alone is larger (it is within the size limit): what a lookup
/// holds of replies at once (ADR 0029).
const BATCH_BYTES: u64 = 64 << 20;

/// Most object bytes the first request of a lookup brings with the sizes ([`LOOK_UP`]): the
/// translation entries and built artifacts of many programs, while a server that lies about
/// what it holds can make the client read no more than this, and ADR 0029's 1 MiB for the
/// rest of the reply, before it is off (ADR 0055).
const FIRST_BATCH_BYTES: u64 = 8 << 20;

/// A 16-byte key an object answers: a translation key, or a built artifact's remote key.
pub use gridkey_fingerprint::shared::ObjectKey;

/// What a lookup found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// A checked payload.
    Hit(Vec<u8>),
    /// No object under the key.
    Absent,
    /// An object that failed a check: a miss, reported.
    Rejected(Reject),
    /// The tier is off for this run (unreachable, or failed earlier).
    Off,
}

/// What an upload did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Uploaded, this many bytes of object.
    Uploaded(u64),
    /// Not uploaded: this client is read-only.
    ReadOnly,
    /// Not uploaded: the object would be over the size limit.
    TooLarge {
        /// Bytes of the object.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The tier is off for this run.
    Off,
    /// Not uploaded: an object was already under the key, and this writer takes nothing from
    /// the tier (no trusted keys, trust mode `signed`), so it cannot tell a good object from a
    /// bad one and never replaces one (ADR 0031).
    Kept,
}

/// What [`Remote::claim`] decided for one key that missed: the shared-tier protocol's
/// [`gridkey_fingerprint::shared::Claim`] (ADR 0041).
pub use gridkey_fingerprint::shared::Claim;

/// How a [`Remote::wait`] on another writer's lease ended for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waited {
    /// The object arrived and checks: a hit.
    Arrived(Vec<u8>),
    /// An object arrived that failed a check: translate here (a writer uploads over it).
    Rejected(Reject),
    /// The holder's lease expired without an object (the holder died); this writer took the
    /// lease over: translate, then [`Remote::put_many`].
    TakenOver,
    /// Read-only: the lease went away without an object; translate here.
    Gone,
    /// The wait cap passed: translate here (a writer uploads without a lease).
    TimedOut,
    /// The tier went off for this run.
    Off,
}

/// Counters of one client over its run (README "Usage", `gridkey cache stats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TierStats {
    /// Lookups that returned a checked payload.
    pub hits: u64,
    /// Lookups that returned nothing usable (absent or rejected).
    pub misses: u64,
    /// Objects that failed a check (counted in `misses` too).
    pub rejected: u64,
    /// Objects downloaded (hits and rejects).
    pub fetches: u64,
    /// Object bytes downloaded.
    pub bytes_in: u64,
    /// Objects uploaded.
    pub uploads: u64,
    /// Object bytes uploaded.
    pub bytes_out: u64,
    /// Failed requests (each one turns the tier off for the run, so at most one, plus a
    /// heartbeat's).
    pub errors: u64,
    /// Leases taken, including take-overs.
    pub leases: u64,
    /// Leases taken over from a holder that died.
    pub takeovers: u64,
    /// Keys waited on because another writer held the lease.
    pub lease_waits: u64,
    /// Seconds spent waiting on leases.
    pub lease_wait_seconds: f64,
    /// Requests sent to the server (a pipeline is one).
    pub round_trips: u64,
}

impl TierStats {
    /// Adds `other`'s counters to these (totals over runs).
    pub fn add(&mut self, other: &TierStats) {
        for ((_, slot), (_, n)) in stat_fields_mut(self).into_iter().zip(stat_fields(other)) {
            *slot += n;
        }
        self.lease_wait_seconds += other.lease_wait_seconds;
    }
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
    fetches: AtomicU64,
    bytes_in: AtomicU64,
    uploads: AtomicU64,
    bytes_out: AtomicU64,
    errors: AtomicU64,
    leases: AtomicU64,
    takeovers: AtomicU64,
    lease_waits: AtomicU64,
    lease_wait_micros: AtomicU64,
    round_trips: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// What the client and its heartbeat thread share.
struct Shared {
    settings: RemoteSettings,
    shown_url: String,
    /// Where the links connect (for `rediss://`, with the TLS roots).
    address: Address,
    /// The login and database of the URL.
    login: redis::RedisConnectionInfo,
    /// The sockets of the open connections, shut down when the tier goes off.
    sockets: Arc<Sockets>,
    owner: String,
    off: AtomicBool,
    /// What made the tier go off, without what a run does about it ([`Remote::warning`] adds that).
    failure: Mutex<Option<String>>,
    counters: Counters,
    /// Redis names of the leases this client holds.
    leases: Mutex<BTreeSet<String>>,
    /// Whether a lookup asks for sizes and objects in one round trip ([`LOOK_UP`]); off once
    /// the server refused the script ([`refuses_scripts`]), for the rest of this client.
    script_lookup: AtomicBool,
    /// The objects looked up that failed a check here ([`Remote::rejections`]).
    rejections: Mutex<Rejections>,
}

/// The objects of a run's lookups that failed a check here: their names (each counted once,
/// however often it is looked up), the first (`kind object-name: check`), and whether one was
/// signed by a key this client does not trust.
#[derive(Default)]
struct Rejections {
    names: BTreeSet<String>,
    first: Option<String>,
    untrusted: bool,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these values half-updated: every update is one assignment.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// Turns the tier off for the rest of the run, keeping the first warning, and ends the
    /// requests still in flight on the other connections (ADR 0029). A failure seen after the
    /// tier went off (a request that another one's failure ended) is not counted again.
    fn trip(&self, what: &str, failure: &Failure) {
        {
            // The warning is there before anyone can see the tier off.
            let mut failed = lock(&self.failure);
            if self.off.load(Ordering::SeqCst) {
                return;
            }
            add(&self.counters.errors, 1);
            *failed = Some(format!("shared cache {}: {what} failed: {failure}", self.shown_url));
            self.off.store(true, Ordering::SeqCst);
        }
        self.sockets.shut_all();
    }

    /// A new connection, authenticated, within the connect timeout.
    fn connect(&self) -> Result<Link, Failure> {
        Link::open(&self.address, &self.login, self.settings.connect_timeout, &self.sockets)
    }

    /// The deadline of a request that starts now.
    fn deadline(&self) -> Instant {
        Instant::now() + self.settings.timeout
    }

    fn ttl_ms(&self) -> u64 {
        self.settings.lease_ttl.as_millis().max(1) as u64
    }
}

/// Why `url` does not parse, in words (the scheme or the part that is wrong), for
/// [`RemoteError::Url`]: the `redis` crate's own error only names its error kind. Never quotes
/// the URL, which may hold a password.
fn url_problem(url: &str, e: &redis::RedisError) -> String {
    let redis_scheme = |scheme: &str| gridkey_settings::REDIS_SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme));
    match url.split_once("://") {
        None => match url.split_once(':') {
            Some((scheme, _)) if redis_scheme(scheme) => format!("its scheme `{scheme}:` is not followed by `//`"),
            _ => "it has no scheme".to_owned(),
        },
        Some((scheme, _)) if !redis_scheme(scheme) => {
            format!("its scheme is `{scheme}`, not `redis`, `rediss` or `redis+unix`")
        }
        Some(_) => match e.detail() {
            Some(detail) => format!("it does not parse as a Redis URL ({detail})"),
            None => "it does not parse as a Redis URL (a bad host, port or database number, or a password holding \
                     `/`, `?`, `#` or `@` that is not percent-encoded)"
                .to_owned(),
        },
    }
}

/// Checks the URL of `settings` and, for `rediss://`, its CA file, without connecting: what
/// [`Remote::connect`] refuses before it opens a socket, so that a caller can say so before it
/// says anything else about the tier.
///
/// Errors: [`RemoteError::Url`] for a URL that cannot be used; [`RemoteError::CaFile`],
/// [`RemoteError::UnsafeAnchor`] or [`RemoteError::Tls`] for a CA file or system roots that
/// cannot be used.
pub fn check_url(settings: &RemoteSettings) -> Result<(), RemoteError> {
    open_target(settings, &settings.shown_url()).map(|_| ())
}

/// Where the settings' URL connects and how it logs in: over TLS for `rediss://`, trusting only
/// the CA file when one is given, a checked trust anchor (ADR 0031, ADR 0037).
fn open_target(
    settings: &RemoteSettings,
    shown_url: &str,
) -> Result<(Address, redis::RedisConnectionInfo), RemoteError> {
    use redis::IntoConnectionInfo;
    let info = settings
        .url
        .as_str()
        .into_connection_info()
        .map_err(|e| RemoteError::Url { url: shown_url.to_owned(), reason: url_problem(&settings.url, &e) })?;
    let ca = settings.ca_file.as_deref().filter(|_| settings.url.starts_with("rediss://"));
    if let Some(ca) = ca {
        crate::trust::check_anchor(ca, "CA")?;
    }
    let address = Address::new(info.addr(), ca, shown_url)?;
    Ok((address, info.redis_settings().clone()))
}

/// A client of the shared tier for one run (ADR 0019, ADR 0018).
///
/// Every request goes through one connection and has one deadline, the reply timeout of the
/// settings from its start, for all its round trips and replies together; its replies may hold
/// no more bytes than it asked for (ADR 0029). The first request that fails (its deadline
/// passed, a dropped connection, an error reply, a reply larger than asked for, a peer that is
/// not Redis) turns the tier off for the rest of the run, ends the requests in flight on the
/// other connection, and records one warning ([`Remote::warning`]); every later call answers
/// `Off` at once, so a dead, stalled, trickling or lying server costs at most one timeout per
/// run. One error reply does not: the lookup script's, which sends that lookup's sizes first
/// instead (ADR 0055). Leases are renewed by a heartbeat thread on a second connection, within
/// the same rule, and released when the client is dropped.
pub struct Remote {
    shared: Arc<Shared>,
    trust: Trust,
    con: Mutex<Option<Link>>,
    heartbeat: Mutex<Option<(mpsc::Sender<()>, JoinHandle<()>)>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.shared.shown_url).field("on", &self.is_on()).finish()
    }
}

impl Remote {
    /// Checks the settings, reads the key files and connects: `redis://` in plain TCP,
    /// `rediss://` in TLS (ADR 0037) or `redis+unix://`; a user name in the URL logs in as that
    /// Redis 6 ACL user (ADR 0031).
    ///
    /// A server that cannot be reached (refused, timed out, black-holed, stalled) or that is
    /// not Redis (its first line is in the warning) is not an error: the client is returned
    /// off, with its warning, after at most the connect timeout. Errors, all at start:
    /// [`RemoteError::Url`] for a URL the client cannot use, [`RemoteError::Refused`] when the
    /// server rejects the credentials or the database (a wrong password, a password missing),
    /// and the key-file errors of [`Trust::load`]. Over TLS, a certificate that does not verify
    /// (another CA, another host name) or a server that does not speak TLS is
    /// [`RemoteError::Tls`], with its fix; a TLS handshake that does not complete within the
    /// connect timeout leaves the tier off, like a server that does not answer. A CA file that
    /// cannot be used or trusted is [`RemoteError::CaFile`] or [`RemoteError::UnsafeAnchor`]. No
    /// message holds the URL's password.
    pub fn connect(settings: &RemoteSettings) -> Result<Remote, RemoteError> {
        let shown_url = settings.shown_url();

        let trust = Trust::load(settings)?;
        let (address, login) = open_target(settings, &shown_url)?;
        let shared = Arc::new(Shared {
            settings: settings.clone(),
            shown_url,
            address,
            login,
            sockets: Arc::default(),
            owner: owner_token(),
            off: AtomicBool::new(false),
            failure: Mutex::new(None),
            counters: Counters::default(),
            leases: Mutex::new(BTreeSet::new()),
            script_lookup: AtomicBool::new(true),
            rejections: Mutex::default(),
        });
        let remote = Remote { shared, trust, con: Mutex::new(None), heartbeat: Mutex::new(None) };
        let shared = &remote.shared;
        add(&shared.counters.round_trips, 1);
        match shared.connect() {
            Ok(link) => *lock(&remote.con) = Some(link),
            Err(e) if e.unreachable() => shared.trip("connecting", &e),
            Err(Failure::Tls { problem, reason }) => {
                return Err(RemoteError::Tls {
                    url: shared.shown_url.clone(),
                    ca: shared.settings.ca_file.clone(),
                    problem,
                    reason,
                })
            }
            Err(Failure::Reply(e)) if e.kind() == redis::ErrorKind::InvalidClientConfig => {
                return Err(RemoteError::Url { url: shared.shown_url.clone(), reason: e.to_string() })
            }
            Err(e) => {
                // The server's sentence, without its full stop: the error goes on with the fix.
                let reason = e.to_string().trim_end().trim_end_matches('.').to_owned();
                return Err(RemoteError::Refused { url: shared.shown_url.clone(), reason });
            }
        }
        Ok(remote)
    }

    /// The settings this client was made with.
    pub fn settings(&self) -> &RemoteSettings {
        &self.shared.settings
    }

    /// The URL with its password hidden.
    pub fn shown_url(&self) -> &str {
        &self.shared.shown_url
    }

    /// The trust material (signing key, trusted keys).
    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// The line a run prints at start about what this client takes from the shared tier
    /// ([`Trust::statement`]).
    pub fn trust_statement(&self) -> String {
        self.trust.statement(&self.shared.settings)
    }

    /// The sentence of the run's warning about the objects its lookups found under their keys
    /// that failed a check here (damaged, forged, replayed, over the size limit, signed by a key
    /// not trusted here), or `None` when there was none so far. They were misses, made here (a
    /// writer uploads its own over them, ADR 0030); the sentence counts them (each object once,
    /// however often it was looked up) and names the first, and, where one was signed by a key
    /// not trusted here, says what that can be (a revoked key, a writer's key the nodes do not
    /// trust, someone else's) and to trust a key only once its owner is known (ADR 0031). Checks
    /// that fail after an object was taken (a kernel that does not verify) are not counted here:
    /// they are the frontend's reports ([`Remote::retract_many`]).
    pub fn rejections(&self) -> Option<String> {
        let r = lock(&self.shared.rejections);
        let first = r.first.as_deref()?;
        let n = r.names.len();
        let (n, were) = if n == 1 { ("1 object".to_owned(), "was") } else { (format!("{n} objects"), "were") };
        let who = if self.is_writer() {
            "a writer uploads its own over them while the tier is on"
        } else {
            "a reader uploads nothing"
        };
        let mut sentence = format!(
            "shared tier {}: {n} looked up failed a check here and {were} not used, made here instead ({who}); the \
             first: {first}",
            self.shared.shown_url
        );
        if r.untrusted {
            sentence += ". One was signed by a key not trusted here: a revoked writer's key, a writer's key missing \
                         from the shared tier's trusted keys here, or the key of someone who may write to the server \
                         but is not one of your writers; trust a key only once you know whose it is";
        }
        Some(sentence)
    }

    /// Whether the tier is still on for this run.
    pub fn is_on(&self) -> bool {
        !self.shared.off.load(Ordering::SeqCst)
    }

    /// The one warning of the run: why the tier went off, if it did.
    pub fn warning(&self) -> Option<String> {
        self.failure().map(|failed| {
            format!("{failed}; the shared tier is off for the rest of this run, which goes on with the local cache")
        })
    }

    /// What made the tier go off, if it did, without what a run does about it: for a command
    /// that cannot go on without the tier (`cache push`, `cache retract`) to say what to do.
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared.failure).clone()
    }

    /// Whether this client uploads and takes leases.
    pub fn is_writer(&self) -> bool {
        self.shared.settings.is_writer()
    }

    /// The counters so far.
    pub fn stats(&self) -> TierStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TierStats {
            hits: get(&c.hits),
            misses: get(&c.misses),
            rejected: get(&c.rejected),
            fetches: get(&c.fetches),
            bytes_in: get(&c.bytes_in),
            uploads: get(&c.uploads),
            bytes_out: get(&c.bytes_out),
            errors: get(&c.errors),
            leases: get(&c.leases),
            takeovers: get(&c.takeovers),
            lease_waits: get(&c.lease_waits),
            lease_wait_seconds: get(&c.lease_wait_micros) as f64 * 1e-6,
            round_trips: get(&c.round_trips),
        }
    }

    /// The Redis name of the object answering `key` of `kind`: `<namespace>:obj-v1:<te|kl>:<hex>`.
    pub fn object_name(&self, kind: Kind, key: &ObjectKey) -> String {
        format!("{}:obj-v{}:{}:{}", self.shared.settings.namespace, object::OBJECT_FORMAT_VERSION, kind.tag(), hex(key))
    }

    /// The Redis name of the lease on `key` of `kind`: `<namespace>:lease-v1:<te|kl>:<hex>`.
    pub fn lease_name(&self, kind: Kind, key: &ObjectKey) -> String {
        format!("{}:lease-v1:{}:{}", self.shared.settings.namespace, kind.tag(), hex(key))
    }

    /// Sends the commands of `pipe` in one round trip and returns one reply per command (error
    /// replies in their place), all before `deadline`, with at most `asked` bytes of bulk
    /// replies (plus room for small replies); on failure turns the tier off and returns `None`.
    fn request(&self, what: &str, pipe: &Pipeline, asked: u64, deadline: Instant) -> Option<Vec<Value>> {
        if !self.is_on() {
            return None;
        }
        let mut guard = lock(&self.con);
        // Another request may have failed while this one waited for the connection.
        if !self.is_on() {
            return None;
        }
        let link = guard.as_mut()?;
        add(&self.shared.counters.round_trips, 1);
        match link.exchange(pipe, asked, deadline, self.shared.settings.timeout) {
            Ok(v) => Some(v),
            Err(e) => {
                *guard = None;
                drop(guard);
                self.shared.trip(what, &e);
                None
            }
        }
    }

    /// Turns the tier off after a request whose replies are unusable, and drops the connection.
    fn fail(&self, what: &str, failure: &Failure) {
        *lock(&self.con) = None;
        self.shared.trip(what, failure);
    }

    /// [`Remote::request`] of commands with small replies, within one timeout from now: each
    /// reply as a `T`; an error reply or one of another type turns the tier off.
    fn query<T: FromRedisValue>(&self, what: &str, pipe: &Pipeline) -> Option<Vec<T>> {
        let replies = self.request(what, pipe, 0, self.shared.deadline())?;
        match convert(replies) {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(what, &Failure::Reply(e));
                None
            }
        }
    }

    /// [`Remote::get_many`] for one key.
    pub fn get(&self, kind: Kind, key: &ObjectKey) -> Fetched {
        self.get_many(kind, std::slice::from_ref(key)).pop().expect("one result per key")
    }

    /// The size of each object of `names` (or why it has none that can be read) and the objects
    /// within `max` bytes that fit in `budget` bytes together, in one round trip ([`LOOK_UP`],
    /// run read-only with `EVAL_RO`). Where the server answers the script with an error, the
    /// sizes alone (`STRLEN`) in a second round trip, and no object; after a refusal
    /// ([`refuses_scripts`]: this user may not run it, the server has no `EVAL_RO`) this client
    /// asks the sizes alone from then on. `None` when the tier went off: the request failed, the
    /// server answered an error for an object that is not the object's own (anything but
    /// `WRONGTYPE`, ADR 0056), or it answered what it was not asked (another number of replies,
    /// an object over the size limit, more object bytes than `budget`, an object where a size was
    /// asked for, a reply that is neither).
    fn sizes(&self, what: &str, names: &[String], max: u64, budget: u64, deadline: Instant) -> Option<LookedUp> {
        let mut bodies: Vec<Option<Value>> = vec![None; names.len()];
        let lying = |reason: &'static str| {
            self.fail(what, &Failure::Lie(reason));
            None
        };
        let replies = if self.shared.script_lookup.load(Ordering::Relaxed) {
            let mut pipe = redis::pipe();
            pipe.cmd("EVAL_RO").arg(LOOK_UP).arg(names.len()).arg(names).arg(max).arg(budget);
            match self.request(what, &pipe, budget, deadline)?.pop() {
                Some(Value::Array(replies)) if replies.len() == names.len() => Some(replies),
                Some(Value::Array(_)) => return lying("the lookup script with another number of replies than keys"),
                // Not run (refused, or a server busy or loading): sizes first, as below.
                Some(Value::ServerError(e)) => {
                    if refuses_scripts(&e) {
                        self.shared.script_lookup.store(false, Ordering::Relaxed);
                    }
                    None
                }
                _ => return lying("the lookup script with something else than one reply per key"),
            }
        } else {
            None
        };
        let scripted = replies.is_some();
        let replies = match replies {
            Some(replies) => replies,
            None => {
                let mut pipe = redis::pipe();
                for name in names {
                    pipe.cmd("STRLEN").arg(name);
                }
                self.request(what, &pipe, 0, deadline)?
            }
        };
        let mut sized: Vec<Result<u64, Reject>> = Vec::with_capacity(names.len());
        let mut brought = 0u64;
        for (reply, body) in replies.into_iter().zip(&mut bodies) {
            sized.push(match reply {
                Value::Int(n) => match u64::try_from(n) {
                    Ok(n) => Ok(n),
                    Err(_) if scripted => return lying("the lookup script with a negative size"),
                    Err(_) => return lying("STRLEN with a negative size"),
                },
                Value::BulkString(_) if !scripted => return lying("STRLEN with an object, not a size"),
                Value::BulkString(bytes) => {
                    let len = bytes.len() as u64;
                    if len > max {
                        return lying("the lookup script with an object over the size limit");
                    }
                    brought = brought.saturating_add(len);
                    if brought > budget {
                        return lying("the lookup script with more object bytes than it was allowed");
                    }
                    *body = Some(Value::BulkString(bytes));
                    Ok(len)
                }
                Value::ServerError(e) if concerns_the_object(&e) => {
                    Err(Reject::Unreadable { reason: link::escaped(&RedisError::from(e).to_string()) })
                }
                Value::ServerError(e) => {
                    self.fail(what, &Failure::Reply(RedisError::from(e)));
                    return None;
                }
                _ if scripted => return lying("the lookup script with something else than a size or an object"),
                _ => return lying("STRLEN with something else than a size"),
            });
        }
        Some((sized, bodies))
    }

    /// Which objects of a lookup were replaced between the round trip that sized them and the
    /// `GETRANGE` that fetched them (`fetched_later`, indices): a writer uploaded another object
    /// under the name meanwhile, so what was fetched is a part of it, or more than it. Only an
    /// object fetched later that failed its checks is asked about: one whose reply is shorter
    /// than its size was, or whose size is another now (one more round trip, for those alone,
    /// within the lookup's deadline). Such an object is not damaged and not rejected: a miss. A
    /// name that holds another type now (`WRONGTYPE`) was replaced too. `None` when the tier
    /// went off: the request failed, or the server answered a size with an error that is not the
    /// object's or with something else than a size (ADR 0056).
    fn replaced_while_read(
        &self,
        names: &[String],
        fetched_later: &[usize],
        sized: &[Result<u64, Reject>],
        bodies: &[Option<Value>],
        decoded: &[Option<Result<Vec<u8>, Reject>>],
        deadline: Instant,
    ) -> Option<Vec<bool>> {
        let mut replaced = vec![false; names.len()];
        let mut ask = Vec::new();
        for &i in fetched_later {
            let (Ok(len), Some(Value::BulkString(bytes)), Some(Err(_))) = (&sized[i], &bodies[i], &decoded[i]) else {
                continue;
            };
            if (bytes.len() as u64) < *len {
                replaced[i] = true;
            } else {
                ask.push((i, *len));
            }
        }
        if ask.is_empty() {
            return Some(replaced);
        }
        let what = "looking up objects";
        let mut pipe = redis::pipe();
        for (i, _) in &ask {
            pipe.cmd("STRLEN").arg(&names[*i]);
        }
        let now = self.request(what, &pipe, 0, deadline)?;
        for ((i, len), reply) in ask.into_iter().zip(now) {
            replaced[i] = match &reply {
                Value::Int(n) if *n < 0 => {
                    self.fail(what, &Failure::Lie("STRLEN with a negative size"));
                    return None;
                }
                Value::Int(n) => u64::try_from(*n).ok() != Some(len),
                Value::ServerError(e) if concerns_the_object(e) => true,
                Value::ServerError(e) => {
                    self.fail(what, &Failure::Reply(RedisError::from(e.clone())));
                    return None;
                }
                _ => {
                    self.fail(what, &Failure::Lie("STRLEN with something else than a size"));
                    return None;
                }
            };
        }
        Some(replaced)
    }

    /// Looks up the objects of `kind` answering `keys` and checks each ([`object::decode`])
    /// before it is returned: one round trip asks for their sizes and brings the objects within
    /// the size limit, at most 8 MiB of them (a read-only script); further round trips fetch the rest
    /// (`GETRANGE` up to the size each had), at most 64 MiB per round trip; an object over the
    /// limit is never downloaded (ADR 0029, ADR 0055). A server that refuses the script (a
    /// Redis ACL user without `EVAL_RO`, a Redis before 7) is asked for the sizes alone first
    /// (`STRLEN`).
    /// All of it within one timeout. A reply larger than the size asked for turns the tier off.
    /// Counts hits, misses, rejects and bytes.
    pub fn get_many(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Fetched> {
        if keys.is_empty() {
            return Vec::new();
        }
        // A client that accepts nothing downloads nothing: every key is a miss (ADR 0031).
        if !self.trust.accepts_any() {
            add(&self.shared.counters.misses, keys.len() as u64);
            return vec![Fetched::Rejected(Reject::NotTrusted); keys.len()];
        }
        let what = "looking up objects";
        let off = || vec![Fetched::Off; keys.len()];
        let max = self.shared.settings.max_object_bytes;
        let deadline = self.shared.deadline();
        let names: Vec<String> = keys.iter().map(|key| self.object_name(kind, key)).collect();
        let batch_bytes = BATCH_BYTES.max(max);
        let Some((sized, mut bodies)) = self.sizes(what, &names, max, FIRST_BATCH_BYTES, deadline) else {
            return off();
        };
        // The objects within the limit that the first round trip did not bring.
        let wanted: Vec<usize> = (0..keys.len())
            .filter(|&i| bodies[i].is_none() && matches!(sized[i], Ok(n) if n > 0 && n <= max))
            .collect();
        let mut rest = &wanted[..];
        while !rest.is_empty() {
            let (mut n, mut asked) = (0, 0u64);
            for &i in rest {
                let len = *sized[i].as_ref().unwrap_or(&0);
                if n > 0 && asked.saturating_add(len) > batch_bytes {
                    break;
                }
                asked = asked.saturating_add(len);
                n += 1;
            }
            let (batch, later) = rest.split_at(n);
            rest = later;
            let mut pipe = redis::pipe();
            for &i in batch {
                let len = *sized[i].as_ref().unwrap_or(&0);
                pipe.cmd("GETRANGE").arg(&names[i]).arg(0).arg(len - 1);
            }
            let Some(replies) = self.request(what, &pipe, asked, deadline) else { return off() };
            for (&i, reply) in batch.iter().zip(replies) {
                let len = *sized[i].as_ref().unwrap_or(&0);
                match &reply {
                    Value::BulkString(bytes) if bytes.len() as u64 > len => {
                        self.fail(what, &Failure::Oversize { allowed: len });
                        return off();
                    }
                    Value::BulkString(_) => {}
                    Value::ServerError(e) if concerns_the_object(e) => {}
                    Value::ServerError(e) => {
                        self.fail(what, &Failure::Reply(RedisError::from(e.clone())));
                        return off();
                    }
                    _ => {
                        self.fail(what, &Failure::Lie("GETRANGE with something else than an object"));
                        return off();
                    }
                }
                bodies[i] = Some(reply);
            }
        }
        let c = &self.shared.counters;
        // Every check but the signatures, object by object; then the signatures of the round
        // trip as one batch.
        let decoded: Vec<Option<Result<object::Unverified<'_>, Reject>>> = keys
            .iter()
            .zip(&sized)
            .zip(&bodies)
            .map(|((key, size), body)| match (size, body) {
                (Ok(len), Some(Value::BulkString(bytes))) if *len <= max && !bytes.is_empty() => {
                    Some(object::decode_unverified(kind, key, bytes, max, &self.trust))
                }
                _ => None,
            })
            .collect();
        let checks: Vec<&object::SignatureCheck<'_>> =
            decoded.iter().filter_map(|d| d.as_ref()?.as_ref().ok()?.signature()).collect();
        let mut verified = object::verify_signatures(&checks).into_iter();
        let decoded: Vec<Option<Result<Vec<u8>, Reject>>> = decoded
            .into_iter()
            .map(|d| {
                d.map(|r| {
                    r.and_then(|u| {
                        let ok = u.signature().map(|_| verified.next().expect("one answer per signature"));
                        u.checked(ok).map(<[u8]>::to_vec)
                    })
                })
            })
            .collect();
        let Some(replaced) = self.replaced_while_read(&names, &wanted, &sized, &bodies, &decoded, deadline) else {
            return off();
        };
        keys.iter()
            .zip(sized)
            .zip(bodies)
            .zip(decoded)
            .zip(replaced)
            .map(|((((key, size), body), decoded), replaced)| {
                let fetched = match (size, body, decoded) {
                    // Another object than the one sized: a miss, as if looked up a moment later.
                    _ if replaced => Fetched::Absent,
                    (Err(reject), _, _) => Fetched::Rejected(reject),
                    (Ok(0), _, _) => Fetched::Absent,
                    (Ok(len), _, _) if len > max => Fetched::Rejected(Reject::TooLarge { len, max }),
                    // Evicted or replaced by an empty value between the two round trips.
                    (Ok(_), Some(Value::BulkString(bytes)), _) if bytes.is_empty() => Fetched::Absent,
                    (Ok(_), Some(Value::BulkString(bytes)), Some(decoded)) => {
                        add(&c.fetches, 1);
                        add(&c.bytes_in, bytes.len() as u64);
                        match decoded {
                            Ok(payload) => Fetched::Hit(payload),
                            Err(reject) => Fetched::Rejected(reject),
                        }
                    }
                    (Ok(_), Some(Value::ServerError(e)), _) => Fetched::Rejected(Reject::Unreadable {
                        reason: link::escaped(&RedisError::from(e).to_string()),
                    }),
                    (Ok(_), other, _) => {
                        Fetched::Rejected(Reject::Unreadable { reason: format!("unexpected reply {other:?}") })
                    }
                };
                match &fetched {
                    Fetched::Hit(_) => add(&c.hits, 1),
                    Fetched::Rejected(reject) => {
                        add(&c.rejected, 1);
                        add(&c.misses, 1);
                        let mut r = lock(&self.shared.rejections);
                        let name = self.object_name(kind, key);
                        r.untrusted |= matches!(reject, Reject::Untrusted { .. });
                        if r.first.is_none() {
                            r.first = Some(format!("{kind} {name}: {reject}"));
                        }
                        r.names.insert(name);
                    }
                    Fetched::Absent => add(&c.misses, 1),
                    Fetched::Off => {}
                }
                fetched
            })
            .collect()
    }

    /// [`Remote::put_many`] for one object.
    pub fn put(&self, kind: Kind, key: &ObjectKey, payload: &[u8]) -> Stored {
        self.put_many(kind, &[(*key, payload)]).pop().expect("one result per object")
    }

    /// Uploads the objects of `kind` for `items` (key, payload), signed when this client has a
    /// signing key, in one round trip, and releases the leases this client holds on those keys
    /// in the same round trip. A read-only client uploads nothing. An object over the size limit
    /// is not uploaded. A writer that takes nothing from the tier ([`Trust::accepts_any`] false)
    /// only fills keys that hold no object (`SET NX`): one already there is [`Stored::Kept`],
    /// since this writer could not check it and may not replace a good object it cannot see
    /// (ADR 0031).
    pub fn put_many(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Stored> {
        if !self.is_writer() {
            return vec![Stored::ReadOnly; items.len()];
        }
        if !self.is_on() {
            return vec![Stored::Off; items.len()];
        }
        let max = self.shared.settings.max_object_bytes;
        let keep_existing = !self.trust.accepts_any();
        let mut out = Vec::with_capacity(items.len());
        let mut pipe = redis::pipe();
        let mut sent = 0;
        for (key, payload) in items {
            let object = object::encode(kind, key, payload, &self.trust);
            let len = object.len() as u64;
            if len > max {
                out.push(Stored::TooLarge { len, max });
                continue;
            }
            let set = pipe.cmd("SET").arg(self.object_name(kind, key)).arg(object);
            if keep_existing {
                set.arg("NX");
            }
            out.push(Stored::Uploaded(len));
            sent += 1;
        }
        let leases: Vec<String> = {
            let held = lock(&self.shared.leases);
            items.iter().map(|(key, _)| self.lease_name(kind, key)).filter(|l| held.contains(l)).collect()
        };
        if !leases.is_empty() {
            pipe.cmd("EVAL").arg(RELEASE).arg(leases.len()).arg(&leases).arg(&self.shared.owner);
        }
        if sent == 0 && leases.is_empty() {
            return out;
        }
        let Some(replies) = self.query::<Value>("uploading objects", &pipe) else {
            return vec![Stored::Off; items.len()];
        };
        // One reply per `SET`, in order (the lease release's comes last): `SET NX` answers nil
        // where an object was already under the key.
        let mut set_replies = replies.iter();
        for stored in out.iter_mut().filter(|s| matches!(s, Stored::Uploaded(_))) {
            if keep_existing && matches!(set_replies.next(), Some(Value::Nil)) {
                *stored = Stored::Kept;
            }
        }
        let mut held = lock(&self.shared.leases);
        for lease in &leases {
            held.remove(lease);
        }
        let c = &self.shared.counters;
        for stored in &out {
            if let Stored::Uploaded(len) = stored {
                add(&c.uploads, 1);
                add(&c.bytes_out, *len);
            }
        }
        out
    }

    /// Decides, for each key of `kind` that missed, who translates it (ADR 0018). A
    /// writer takes the lease with `SET NX PX` unless the object arrived or
    /// another writer holds it, in one round trip; a read-only client takes no lease and only
    /// looks whether a writer holds one.
    pub fn claim(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Claim> {
        if keys.is_empty() {
            return Vec::new();
        }
        let mut pipe = redis::pipe();
        let ttl = self.shared.ttl_ms();
        for key in keys {
            let (object, lease) = (self.object_name(kind, key), self.lease_name(kind, key));
            if self.is_writer() {
                pipe.cmd("EVAL").arg(CLAIM).arg(2).arg(object).arg(lease).arg(&self.shared.owner).arg(ttl);
            } else {
                pipe.cmd("EXISTS").arg(object).cmd("EXISTS").arg(lease);
            }
        }
        let Some(replies) = self.query::<i64>("taking leases", &pipe) else {
            return vec![Claim::Off; keys.len()];
        };
        if self.is_writer() {
            let claims: Vec<Claim> = replies
                .iter()
                .map(|r| match r {
                    2 => Claim::Present,
                    1 => Claim::Won,
                    _ => Claim::Held,
                })
                .collect();
            let won: Vec<String> = keys
                .iter()
                .zip(&claims)
                .filter(|(_, c)| **c == Claim::Won)
                .map(|(k, _)| self.lease_name(kind, k))
                .collect();
            self.hold(won);
            claims
        } else {
            replies
                .chunks(2)
                .map(|pair| match pair {
                    [1, _] => Claim::Present,
                    [_, 1] => Claim::Held,
                    _ => Claim::Free,
                })
                .collect()
        }
    }

    /// Records leases taken and starts the heartbeat that renews them.
    fn hold(&self, leases: Vec<String>) {
        if leases.is_empty() {
            return;
        }
        add(&self.shared.counters.leases, leases.len() as u64);
        lock(&self.shared.leases).extend(leases);
        let mut heartbeat = lock(&self.heartbeat);
        if heartbeat.is_none() {
            let (stop, stopped) = mpsc::channel();
            let shared = self.shared.clone();
            let thread = std::thread::Builder::new()
                .name("gridkey-lease-heartbeat".to_owned())
                .spawn(move || beat(&shared, &stopped))
                .expect("a thread can be started");
            *heartbeat = Some((stop, thread));
        }
    }

    /// Releases the leases this client holds on `keys` of `kind` without uploading (the
    /// translation failed): another writer may take them at once.
    pub fn release(&self, kind: Kind, keys: &[ObjectKey]) {
        let leases: Vec<String> = {
            let mut held = lock(&self.shared.leases);
            keys.iter().map(|k| self.lease_name(kind, k)).filter(|l| held.remove(l)).collect()
        };
        self.release_names(&leases);
    }

    fn release_names(&self, leases: &[String]) {
        if leases.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL").arg(RELEASE).arg(leases.len()).arg(leases).arg(&self.shared.owner);
        let _ = self.query::<i64>("releasing leases", &pipe);
    }

    /// Waits on other writers' leases on `keys` of `kind` until each object arrives, its lease
    /// goes away, or the wait cap of the settings passes; one round trip per look, the looks
    /// spaced from 5 ms up to 100 ms. A writer takes over the lease of a holder that died (its
    /// lease expired without an object).
    pub fn wait(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Waited> {
        let mut out: Vec<Option<Waited>> = vec![None; keys.len()];
        if keys.is_empty() {
            return Vec::new();
        }
        let c = &self.shared.counters;
        add(&c.lease_waits, keys.len() as u64);
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            let pending: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
            if pending.is_empty() {
                break;
            }
            if !self.is_on() {
                pending.iter().for_each(|&i| out[i] = Some(Waited::Off));
                break;
            }
            if started.elapsed() >= self.shared.settings.lease_wait {
                pending.iter().for_each(|&i| out[i] = Some(Waited::TimedOut));
                break;
            }
            let mut pipe = redis::pipe();
            for &i in &pending {
                pipe.cmd("EXISTS")
                    .arg(self.object_name(kind, &keys[i]))
                    .cmd("EXISTS")
                    .arg(self.lease_name(kind, &keys[i]));
            }
            let Some(replies) = self.query::<i64>("waiting on leases", &pipe) else { continue };
            let mut arrived = Vec::new();
            let mut gone = Vec::new();
            for (&i, pair) in pending.iter().zip(replies.chunks(2)) {
                match pair {
                    [1, _] => arrived.push(i),
                    [_, 0] => gone.push(i),
                    _ => {}
                }
            }
            let fetched = self.get_many(kind, &arrived.iter().map(|&i| keys[i]).collect::<Vec<_>>());
            for (&i, f) in arrived.iter().zip(fetched) {
                out[i] = match f {
                    Fetched::Hit(payload) => Some(Waited::Arrived(payload)),
                    Fetched::Rejected(reject) => Some(Waited::Rejected(reject)),
                    Fetched::Off => Some(Waited::Off),
                    // Evicted between the two requests: look again.
                    Fetched::Absent => None,
                };
            }
            if self.is_writer() {
                let claims = self.claim(kind, &gone.iter().map(|&i| keys[i]).collect::<Vec<_>>());
                for (&i, claim) in gone.iter().zip(claims) {
                    match claim {
                        Claim::Won => {
                            add(&c.takeovers, 1);
                            out[i] = Some(Waited::TakenOver);
                        }
                        Claim::Off => out[i] = Some(Waited::Off),
                        // Present: fetched on the next look; Held: another writer took over first.
                        _ => {}
                    }
                }
            } else {
                gone.iter().for_each(|&i| out[i] = Some(Waited::Gone));
            }
            if out.iter().any(Option::is_none) {
                std::thread::sleep(pause);
                pause = (pause * 2).min(MAX_POLL);
            }
        }
        add(&c.lease_wait_micros, started.elapsed().as_micros() as u64);
        out.into_iter().map(|w| w.expect("every key decided")).collect()
    }

    /// Adds this run's counters to the server-side totals (`<namespace>:stats-v1`, one hash
    /// shared by every client) in one round trip; `gridkey cache stats` reads them back with
    /// [`Remote::server_stats`].
    /// A read-only client publishes nothing: it writes nothing to the server.
    pub fn publish_stats(&self) {
        if !self.is_writer() {
            return;
        }
        let s = self.stats();
        let name = format!("{}:stats-v1", self.shared.settings.namespace);
        let mut pipe = redis::pipe();
        for (field, n) in stat_fields(&s) {
            pipe.cmd("HINCRBY").arg(&name).arg(field).arg(n);
        }
        pipe.cmd("HINCRBY").arg(&name).arg("lease_wait_micros").arg((s.lease_wait_seconds * 1e6) as u64);
        pipe.cmd("HINCRBY").arg(&name).arg("runs").arg(1);
        let _ = self.query::<i64>("publishing counters", &pipe);
    }

    /// What the server holds: objects and bytes of each kind (a `SCAN` of this namespace) and
    /// the totals that every client's [`Remote::publish_stats`] added. `None` when the tier is
    /// off.
    pub fn server_stats(&self) -> Option<ServerStats> {
        let mut out = ServerStats::default();
        for kind in Kind::ALL {
            let pattern =
                format!("{}:obj-v{}:{}:*", self.shared.settings.namespace, object::OBJECT_FORMAT_VERSION, kind.tag());
            let mut cursor = 0u64;
            let (mut objects, mut bytes) = (0u64, 0u64);
            loop {
                let mut scan = redis::pipe();
                scan.cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000);
                let (next, names): (u64, Vec<String>) = self.query("listing objects", &scan)?.pop()?;
                if !names.is_empty() {
                    let mut pipe = redis::pipe();
                    for name in &names {
                        pipe.cmd("STRLEN").arg(name);
                    }
                    let lens: Vec<u64> = self.query("sizing objects", &pipe)?;
                    objects += lens.iter().filter(|&&n| n > 0).count() as u64;
                    bytes += lens.iter().sum::<u64>();
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            out.kinds.push(KindStats { kind: kind.as_str().to_owned(), objects, bytes });
        }
        let name = format!("{}:stats-v1", self.shared.settings.namespace);
        let mut hgetall = redis::pipe();
        hgetall.cmd("HGETALL").arg(&name);
        let totals: Vec<(String, u64)> = self.query("reading counters", &hgetall)?.pop()?;
        let get = |f: &str| totals.iter().find(|(k, _)| k == f).map_or(0, |(_, v)| *v);
        let mut t = TierStats::default();
        for (field, slot) in stat_fields_mut(&mut t) {
            *slot = get(field);
        }
        t.lease_wait_seconds = get("lease_wait_micros") as f64 * 1e-6;
        out.totals = t;
        out.runs = get("runs");
        Some(out)
    }
}

/// Each reply as a `T`: the first error reply, or the first of another type, is the error.
fn convert<T: FromRedisValue>(replies: Vec<Value>) -> Result<Vec<T>, RedisError> {
    replies.into_iter().map(|v| T::from_redis_value(v.extract_error()?).map_err(RedisError::from)).collect()
}

/// The integer counters by name, in the order of [`TierStats`].
fn stat_fields(s: &TierStats) -> [(&'static str, u64); 12] {
    [
        ("hits", s.hits),
        ("misses", s.misses),
        ("rejected", s.rejected),
        ("fetches", s.fetches),
        ("bytes_in", s.bytes_in),
        ("uploads", s.uploads),
        ("bytes_out", s.bytes_out),
        ("errors", s.errors),
        ("leases", s.leases),
        ("takeovers", s.takeovers),
        ("lease_waits", s.lease_waits),
        ("round_trips", s.round_trips),
    ]
}

fn stat_fields_mut(s: &mut TierStats) -> [(&'static str, &mut u64); 12] {
    [
        ("hits", &mut s.hits),
        ("misses", &mut s.misses),
        ("rejected", &mut s.rejected),
        ("fetches", &mut s.fetches),
        ("bytes_in", &mut s.bytes_in),
        ("uploads", &mut s.uploads),
        ("bytes_out", &mut s.bytes_out),
        ("errors", &mut s.errors),
        ("leases", &mut s.leases),
        ("takeovers", &mut s.takeovers),
        ("lease_waits", &mut s.lease_waits),
        ("round_trips", &mut s.round_trips),
    ]
}

/// Objects and bytes of one kind on the server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KindStats {
    /// `translation entry` or `kernel library`.
    pub kind: String,
    /// Objects of this kind.
    pub objects: u64,
    /// Bytes of those objects.
    pub bytes: u64,
}

/// What [`Remote::server_stats`] reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    /// Objects and bytes per kind.
    pub kinds: Vec<KindStats>,
    /// The counters of every run that published them, added up.
    pub totals: TierStats,
    /// Runs that published their counters.
    pub runs: u64,
}

/// The heartbeat: every third of the lease time, renews the leases still held, on a
/// connection of its own, each renewal within one timeout; stops when told or when a request
/// fails (which turns the tier off and ends the client's request in flight, ADR 0029).
fn beat(shared: &Shared, stop: &mpsc::Receiver<()>) {
    let period = shared.settings.lease_ttl / 3;
    let mut con: Option<Link> = None;
    loop {
        match stop.recv_timeout(period) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        if shared.off.load(Ordering::SeqCst) {
            return;
        }
        let leases: Vec<String> = lock(&shared.leases).iter().cloned().collect();
        if leases.is_empty() {
            continue;
        }
        add(&shared.counters.round_trips, 1);
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL").arg(RENEW).arg(leases.len()).arg(&leases).arg(&shared.owner).arg(shared.ttl_ms());
        let renewed = match con.as_mut() {
            Some(c) => Ok(c),
            None => shared.connect().map(|c| con.insert(c)),
        }
        .and_then(|c| c.exchange(&pipe, 0, shared.deadline(), shared.settings.timeout))
        .and_then(|replies| convert::<i64>(replies).map_err(Failure::Reply));
        if let Err(e) = renewed {
            shared.trip("renewing leases", &e);
            return;
        }
    }
}

impl Drop for Remote {
    /// Stops the heartbeat and releases the leases still held.
    fn drop(&mut self) {
        if let Some((stop, thread)) = lock(&self.heartbeat).take() {
            let _ = stop.send(());
            let _ = thread.join();
        }
        let leases: Vec<String> = std::mem::take(&mut *lock(&self.shared.leases)).into_iter().collect();
        self.release_names(&leases);
    }
}

/// A token naming this client as a lease holder: process id and 16 random bytes.
fn owner_token() -> String {
    use std::io::Read;
    let mut random = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut random));
    if read.is_err() {
        // Without a random source the time and the address of a local still tell clients apart.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        random = (now ^ (&random as *const _ as u128)).to_le_bytes();
    }
    format!("{}-{}", std::process::id(), hex(&random))
}
