//! The settings of the shared tier on Redis (crate `gridkey-remote`), parsed with the rest.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{parse_switch, SettingsError, Variable};

/// The Redis URL of the shared tier; unset or blank: no shared tier.
pub const ENV_REMOTE_URL: &str = "GRIDKEY_REMOTE_URL";
/// Switch: this client uploads objects and takes leases (a designated writer).
pub const ENV_REMOTE_WRITER: &str = "GRIDKEY_REMOTE_WRITER";
/// File of the writer's Ed25519 signing key.
pub const ENV_REMOTE_SIGNING_KEY: &str = "GRIDKEY_REMOTE_SIGNING_KEY";
/// File of the public keys whose signatures a reader accepts.
pub const ENV_REMOTE_TRUSTED_KEYS: &str = "GRIDKEY_REMOTE_TRUSTED_KEYS";
/// Seconds to wait for a connection.
pub const ENV_REMOTE_CONNECT_TIMEOUT: &str = "GRIDKEY_REMOTE_CONNECT_TIMEOUT";
/// Seconds to wait for a reply (and for a write to be taken).
pub const ENV_REMOTE_TIMEOUT: &str = "GRIDKEY_REMOTE_TIMEOUT";
/// Seconds a lease lives without a heartbeat.
pub const ENV_REMOTE_LEASE_TTL: &str = "GRIDKEY_REMOTE_LEASE_TTL";
/// Seconds at most to wait for another writer's lease before translating here.
pub const ENV_REMOTE_LEASE_WAIT: &str = "GRIDKEY_REMOTE_LEASE_WAIT";
/// Largest object, in bytes, that is uploaded or downloaded.
pub const ENV_REMOTE_MAX_OBJECT: &str = "GRIDKEY_REMOTE_MAX_OBJECT";
/// Prefix of every Redis key name.
pub const ENV_REMOTE_NAMESPACE: &str = "GRIDKEY_REMOTE_NAMESPACE";
/// What a reader takes from the shared tier: `signed` (objects signed by a trusted key) or `acl`
/// (every object the Redis ACL lets in).
pub const ENV_REMOTE_TRUST: &str = "GRIDKEY_REMOTE_TRUST";
/// PEM file of the certificate authorities a `rediss://` server's certificate must chain to.
pub const ENV_REMOTE_CA_FILE: &str = "GRIDKEY_REMOTE_CA_FILE";

/// The variables of the shared tier, in the order of [`crate::VARIABLES`].
pub(crate) const REMOTE_VARIABLES: [Variable; 12] = [
    Variable {
        name: ENV_REMOTE_URL,
        meaning: "Redis URL of the shared tier, `redis://[USER][:PASSWORD@]HOST:PORT[/DB]`, `rediss://...` for TLS (the server's certificate checked against `GRIDKEY_REMOTE_CA_FILE` or the system's roots) or `redis+unix:///PATH` (what `--remote` sets)",
        default: "unset: no shared tier",
    },
    Variable {
        name: ENV_REMOTE_WRITER,
        meaning: "switch: this client uploads objects and takes leases, a designated writer (what `--remote-writer` sets)",
        default: "off: read-only",
    },
    Variable {
        name: ENV_REMOTE_SIGNING_KEY,
        meaning: "file of the writer's Ed25519 signing key (`gridkey cache keygen` writes one); uploads are signed",
        default: "unset: unsigned",
    },
    Variable {
        name: ENV_REMOTE_TRUSTED_KEYS,
        meaning: "file of trusted public keys, one per line, owned by you or root and writable by no one else; only objects signed by one of them are used",
        default: "unset: nothing is taken from the shared tier (unless `GRIDKEY_REMOTE_TRUST=acl`)",
    },
    Variable { name: ENV_REMOTE_CONNECT_TIMEOUT, meaning: "seconds to wait for a connection to the shared tier", default: "1" },
    Variable { name: ENV_REMOTE_TIMEOUT, meaning: "seconds a request of the shared tier may take, all its replies together (the heartbeat's too); the first request past it turns the tier off for the run", default: "2" },
    Variable { name: ENV_REMOTE_LEASE_TTL, meaning: "seconds a lease lives without its holder's heartbeat", default: "10" },
    Variable { name: ENV_REMOTE_LEASE_WAIT, meaning: "seconds at most to wait on another writer's lease", default: "60" },
    Variable {
        name: ENV_REMOTE_MAX_OBJECT,
        meaning: "largest object uploaded to or downloaded from the shared tier, in bytes",
        default: "67108864 (64 MiB)",
    },
    Variable { name: ENV_REMOTE_NAMESPACE, meaning: "prefix of every Redis key name of the shared tier", default: "`gridkey`" },
    Variable {
        name: ENV_REMOTE_TRUST,
        meaning: "`signed`: take only objects signed by a key of `GRIDKEY_REMOTE_TRUSTED_KEYS`; `acl`: take every object the Redis ACL lets in (whoever can write to Redis can run code here)",
        default: "`signed`",
    },
    Variable {
        name: ENV_REMOTE_CA_FILE,
        meaning: "PEM file of the certificate authorities for a TLS server, checked as a trust anchor (owned by you or root, writable by no one else); a `rediss://` server's certificate must chain to one of them (ADR 0037)",
        default: "unset: the system's roots",
    },
];

/// What a reader takes from the shared tier (ADR 0031).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteTrust {
    /// Only objects signed by a trusted key; without trusted keys, nothing (the default).
    #[default]
    Signed,
    /// Every object that checks, whoever wrote it: the Redis ACL is the trust boundary.
    Acl,
}

impl RemoteTrust {
    /// The value of [`ENV_REMOTE_TRUST`]: `signed` or `acl`.
    pub fn as_str(self) -> &'static str {
        match self {
            RemoteTrust::Signed => "signed",
            RemoteTrust::Acl => "acl",
        }
    }
}

/// Whether this client writes to the shared tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Reads only: takes no lease and uploads nothing (the default).
    ReadOnly,
    /// A designated writer: takes leases and uploads what it translates and builds.
    Writer,
}

/// The settings of the shared tier (README "The shared tier", ADR 0018).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSettings {
    /// The Redis URL, as given (it may carry a password; [`RemoteSettings::shown_url`] hides it).
    pub url: String,
    /// Reader or designated writer.
    pub role: Role,
    /// File of the writer's signing key.
    pub signing_key: Option<PathBuf>,
    /// File of the trusted public keys.
    pub trusted_keys: Option<PathBuf>,
    /// What a reader takes: with [`RemoteTrust::Signed`] and no trusted keys, nothing.
    pub trust: RemoteTrust,
    /// PEM file of the certificate authorities of a `rediss://` server; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Time to wait for a connection.
    pub connect_timeout: Duration,
    /// Deadline of one request of the shared tier, from its start, for all its round trips and
    /// replies together (ADR 0029).
    pub timeout: Duration,
    /// Time a lease lives without a heartbeat; the heartbeat renews it every third of it.
    pub lease_ttl: Duration,
    /// Time at most to wait on another writer's lease.
    pub lease_wait: Duration,
    /// Largest object, in bytes (header, payload, signature and checksum).
    pub max_object_bytes: u64,
    /// Prefix of every Redis key name.
    pub namespace: String,
}

impl RemoteSettings {
    /// Settings for `url` with every default: read-only, unsigned, no trusted keys, so that
    /// nothing is taken from the shared tier ([`RemoteTrust::Signed`]).
    pub fn new(url: impl Into<String>) -> RemoteSettings {
        RemoteSettings {
            url: url.into(),
            role: Role::ReadOnly,
            signing_key: None,
            trusted_keys: None,
            trust: RemoteTrust::Signed,
            ca_file: None,
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            lease_ttl: Duration::from_secs(10),
            lease_wait: Duration::from_secs(60),
            max_object_bytes: 64 << 20,
            namespace: "gridkey".to_owned(),
        }
    }

    /// The settings given by the variables that `lookup` returns, or `None` when
    /// [`ENV_REMOTE_URL`] is unset or blank. Pure: `lookup` is the only source.
    ///
    /// Errors: [`SettingsError::BadSetting`] naming the variable and what it accepts (for
    /// [`ENV_REMOTE_WRITER`] with or without a URL); also for
    /// `GRIDKEY_REMOTE_TRUST=acl` together with trusted keys (which of the two is meant cannot be
    /// told) and for a CA file with a URL that is not `rediss://` (the connection would not use it).
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<RemoteSettings>, SettingsError> {
        // A bad switch is an error with or without a URL: a value the README calls an error is one.
        let writer = parse_switch(ENV_REMOTE_WRITER, lookup(ENV_REMOTE_WRITER).as_deref())?;
        let Some(url) = lookup(ENV_REMOTE_URL).map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let mut s = RemoteSettings::new(url);
        if writer {
            s.role = Role::Writer;
        }
        let path = |var| lookup(var).filter(|p| !p.trim().is_empty()).map(PathBuf::from);
        s.signing_key = path(ENV_REMOTE_SIGNING_KEY);
        s.trusted_keys = path(ENV_REMOTE_TRUSTED_KEYS);
        s.ca_file = path(ENV_REMOTE_CA_FILE);
        if let Some(value) = lookup(ENV_REMOTE_TRUST) {
            s.trust = match value.trim().to_ascii_lowercase().as_str() {
                "" | "signed" => RemoteTrust::Signed,
                "acl" => RemoteTrust::Acl,
                _ => return Err(bad(ENV_REMOTE_TRUST, &value, "signed or acl")),
            };
            if s.trust == RemoteTrust::Acl && s.trusted_keys.is_some() {
                return Err(bad(
                    ENV_REMOTE_TRUST,
                    &value,
                    "signed while GRIDKEY_REMOTE_TRUSTED_KEYS is set (acl takes every object, trusted keys only signed ones: unset one of them)",
                ));
            }
        }
        if let Some(ca) = &s.ca_file {
            if !s.url.starts_with("rediss://") {
                return Err(bad(
                    ENV_REMOTE_CA_FILE,
                    &ca.display().to_string(),
                    "a CA file for a rediss:// URL only (GRIDKEY_REMOTE_URL is not rediss://, so the file would not be used)",
                ));
            }
        }
        for (var, field) in [
            (ENV_REMOTE_CONNECT_TIMEOUT, &mut s.connect_timeout),
            (ENV_REMOTE_TIMEOUT, &mut s.timeout),
            (ENV_REMOTE_LEASE_TTL, &mut s.lease_ttl),
            (ENV_REMOTE_LEASE_WAIT, &mut s.lease_wait),
        ] {
            if let Some(value) = lookup(var) {
                *field = seconds(var, &value)?;
            }
        }
        if let Some(value) = lookup(ENV_REMOTE_MAX_OBJECT) {
            s.max_object_bytes = value
                .trim()
                .parse()
                .ok()
                .filter(|&n: &u64| n > 0)
                .ok_or_else(|| bad(ENV_REMOTE_MAX_OBJECT, &value, "a positive number of bytes"))?;
        }
        if let Some(value) = lookup(ENV_REMOTE_NAMESPACE) {
            let ok = !value.is_empty() && value.bytes().all(|b| b.is_ascii_graphic());
            if !ok {
                return Err(bad(
                    ENV_REMOTE_NAMESPACE,
                    &value,
                    "a non-empty name of printable characters without spaces",
                ));
            }
            s.namespace = value;
        }
        Ok(Some(s))
    }

    /// The URL with any password replaced by `***`, for messages.
    pub fn shown_url(&self) -> String {
        redact(&self.url)
    }

    /// Whether this client is a designated writer.
    pub fn is_writer(&self) -> bool {
        self.role == Role::Writer
    }
}

fn bad(var: &'static str, value: &str, accepted: &'static str) -> SettingsError {
    SettingsError::BadSetting { var, value: value.to_owned(), accepted }
}

fn seconds(var: &'static str, value: &str) -> Result<Duration, SettingsError> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| bad(var, value, "a positive number of seconds, e.g. 0.5"))
}

/// The URL schemes of Redis that the `redis` crate opens (`redis://`, TLS `rediss://`, and the
/// socket forms `redis+unix://` and `unix://`), compared without case: what [`redact`] and the
/// shared tier's URL errors take for a Redis scheme.
pub const REDIS_SCHEMES: [&str; 4] = ["redis", "rediss", "redis+unix", "unix"];

/// `url` with the password of its user-info part replaced by `***`, and the value of the first
/// query parameter whose name holds `pass` (`redis+unix:///run/redis.sock?pass=...`) with
/// everything after it, for messages.
///
/// Made for any string, a malformed URL included, since that is when a message quotes it. The
/// user-info part is everything before the *last* `@`, since a password written unencoded may
/// hold `/`, `?`, `#`, `:` or `@`, and a host never holds `@`. After one of the schemes a Redis URL
/// has (`redis://`, `rediss://`, `redis+unix://`, `unix://`) the user name is kept where it is plain
/// (no `/`, `?` or `#` in it) and the rest becomes `***`; in anything else, where no one can tell a
/// scheme or a user from a password (`redis:/reader:...`, `reader:/pw:...`), all of it becomes
/// `***`. A query password may hold `@` and `&` unencoded, so nothing after its `=` is shown; the
/// user-info is then looked for before the parameter, except that a socket URL
/// (`redis+unix:///path`) has none past its path, and in any other URL an `@` after the
/// parameter leaves no telling where a password starts: all before the parameter becomes `***`.
pub fn redact(url: &str) -> String {
    let scheme = REDIS_SCHEMES.into_iter().find(|scheme| {
        let n = scheme.len();
        url.get(..n).is_some_and(|s| s.eq_ignore_ascii_case(scheme)) && url.get(n..n + 3) == Some("://")
    });
    let (head, rest) = url.split_at(scheme.map_or(0, |s| s.len() + 3));
    // The first parameter named *pass*: where its name starts (after `?` or `&`) and its value.
    let param = rest.char_indices().filter(|&(_, c)| c == '?' || c == '&').find_map(|(at, _)| {
        let name = rest[at + 1..].split(['&', '?']).next()?.split_once('=')?.0;
        name.to_ascii_lowercase().contains("pass").then_some((at, at + 1 + name.len() + 1))
    });
    let (before, hidden) = match param {
        Some((_, value)) => (&rest[..value], "***"),
        None => (rest, ""),
    };
    let socket = scheme.is_some_and(|s| s.contains("unix")) && rest.starts_with('/');
    // Where the user-info is looked for: a socket URL's path, else all before the password
    // parameter; an `@` past that, outside a socket URL, hides all before the parameter.
    let searched = if socket { before.split('?').next().unwrap_or_default() } else { before };
    if let Some((at, value)) = param.filter(|&(_, value)| !socket && rest[value..].contains('@')) {
        return format!("{head}***{}***", &rest[at..value]);
    }
    let (userinfo, after) = match searched.rfind('@') {
        Some(at) => {
            let user = before[..at]
                .split_once(':')
                .map(|(user, _)| user)
                .filter(|user| !head.is_empty() && !user.contains(['/', '?', '#']));
            (user.map_or_else(|| "***".to_owned(), |user| format!("{user}:***")) + "@", &before[at + 1..])
        }
        None => (String::new(), before),
    };
    format!("{head}{userinfo}{after}{hidden}")
}
