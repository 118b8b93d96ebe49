//! The shared tier of the translation and build caches, on Redis.
//!
//! Many nodes that compile the same programs against the same grids share one Redis server:
//! one node translates a key, the others download the result. Each key has one
//! self-contained, checked object ([`object`], ADR 0019); a writer takes a lease before it
//! translates, so that a cold cluster translates each key once ([`Remote::claim`],
//! [`Remote::wait`]); clients are read-only unless designated writers, and readers with trusted
//! keys accept only objects signed by a writer ([`trust`], ADR 0018).
//!
//! # Architecture invariant
//!
//! Nothing downloaded is handed out before [`object::decode`] checked all of it (format,
//! kind, key, length, checksum, size limit, signature policy): a bad object is a reported miss,
//! never a hit. An object is fetched only after its size was asked and found within the limit,
//! and no reply is read past the bytes its request asked for. Correctness never depends on a
//! lease: any object that checks is accepted. A server that is down, slow, stalled, trickling,
//! lying or not Redis, or that dies, costs at most one timeout per [`Remote`]: each request has
//! one deadline, and the first that fails turns the tier off, with one warning, and ends the
//! others in flight (ADR 0029); only a misconfiguration is an error, at [`Remote::connect`]. The
//! crate reads no environment variable: it takes [`RemoteSettings`], parsed at the edge with the
//! other settings (`gridkey_settings`).
//!
//! # Example
//!
//! ```
//! use gridkey_remote::{object, Fetched, Kind, Remote, RemoteSettings, Role, Trust};
//!
//! // An object checks only under its own key and kind.
//! let key = [7u8; 16];
//! let bytes = object::encode(Kind::TranslationEntry, &key, b"int kernel;", &Trust::acl());
//! let payload = object::decode(Kind::TranslationEntry, &key, &bytes, 1 << 20, &Trust::acl()).unwrap();
//! assert_eq!(payload, b"int kernel;");
//! assert!(object::decode(Kind::KernelLibrary, &key, &bytes, 1 << 20, &Trust::acl()).is_err());
//!
//! // A server that cannot be reached is not an error: the tier is off, with one warning.
//! let mut settings = RemoteSettings::new("redis://127.0.0.1:1/");
//! settings.role = Role::Writer;
//! // Trusting the ACL: without it, and with no trusted keys, nothing would be asked for at all.
//! settings.trust = gridkey_remote::RemoteTrust::Acl;
//! let remote = Remote::connect(&settings).unwrap();
//! assert!(!remote.is_on());
//! assert_eq!(remote.get(Kind::TranslationEntry, &key), Fetched::Off);
//! assert!(remote.warning().unwrap().contains("off for the rest of this run"));
//! ```

use std::io;
use std::path::PathBuf;

mod client;
mod link;
pub mod object;
mod tier;
pub mod trust;

pub use client::{
    check_url, Claim, Fetched, KindStats, ObjectChecksum, ObjectKey, Remote, Retracted, ServerStats, Stored, TierStats,
    Waited,
};
/// The Ed25519 implementation of signatures and keys ([`Trust::new`] takes its types).
pub use ed25519_dalek;
pub use gridkey_settings::{RemoteSettings, RemoteTrust, Role};
pub use object::{Kind, Reject};
pub use tier::{library_key, RemoteTier};
pub use trust::Trust;

/// Why the TLS handshake with a `rediss://` server failed ([`RemoteError::Tls`], ADR 0037).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsProblem {
    /// The certificate does not chain to a trusted certificate authority.
    UnknownIssuer,
    /// The certificate does not name the URL's host.
    NameMismatch,
    /// The server does not speak TLS on that port (a plain Redis, say).
    NotTls,
    /// Any other TLS error.
    Other,
}

impl TlsProblem {
    /// What to do about it, given the CA file in use (`None`: the system's roots).
    pub fn fix(self, ca: Option<&std::path::Path>) -> String {
        match (self, ca) {
            (TlsProblem::UnknownIssuer, Some(ca)) => format!(
                "check that the shared tier's CA file {} holds the certificate authority that signed the server's certificate",
                ca.display()
            ),
            (TlsProblem::UnknownIssuer, None) => {
                "give the server's certificate authority as the shared tier's CA file, a PEM file".to_owned()
            }
            (TlsProblem::NameMismatch, _) => {
                "give the host name the server's certificate is for in the shared tier's URL, or have the certificate reissued for that host".to_owned()
            }
            (TlsProblem::NotTls, _) => {
                "check that the server speaks TLS on that port (tls-port in redis.conf); a plain server takes a redis:// URL".to_owned()
            }
            (TlsProblem::Other, _) => "check the server's TLS setup (tls-port, tls-cert-file, tls-key-file)".to_owned(),
        }
    }
}

/// Errors of the shared tier: all of them misconfigurations, found at start.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The URL cannot be used.
    #[error("shared cache URL {url} cannot be used: {reason}; give the shared tier's URL as redis://[USER][:PASSWORD@]HOST:PORT[/DB] or rediss://... for TLS")]
    Url {
        /// The URL, password hidden.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server refused the connection's credentials or setup.
    #[error("shared cache {url} refused the connection: {reason}; fix the password or user in the shared tier's URL")]
    Refused {
        /// The URL, password hidden.
        url: String,
        /// The server's reply.
        reason: String,
    },
    /// A key file is missing or unreadable.
    #[error("cannot read {what} file {path}: {source}; {}", key_file_fix(.what))]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Which file it is (`signing key`, `trusted keys`, `random source`).
        what: &'static str,
        /// The I/O error.
        source: io::Error,
    },
    /// A new signing key cannot be written (`gridkey cache keygen`): the file exists (a key is
    /// never replaced) or its directory cannot be written.
    #[error("cannot write the new signing key file {path}: {source}; {fix}")]
    NewKeyFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
        /// What to do.
        fix: &'static str,
    },
    /// A key file does not hold what its format says.
    #[error("key file {path}, line {line}: {reason}; a key is 64 hex digits (`gridkey cache keygen` writes one)")]
    KeyFormat {
        /// The file.
        path: PathBuf,
        /// The line (1-based; 0 for the file as a whole).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A trust anchor (trusted keys, signing key, CA file) could be changed by someone else
    /// (ADR 0031, [`trust::check_anchor`]).
    #[error("{what} file {path} (resolved to {resolved}) cannot be trusted: {problem}")]
    UnsafeAnchor {
        /// Which file it is (`trusted keys`, `signing key`, `CA`).
        what: &'static str,
        /// The file as given.
        path: PathBuf,
        /// The file with every symlink resolved.
        resolved: PathBuf,
        /// The component at fault, what is wrong with it and the fix.
        problem: String,
    },
    /// The CA file of a `rediss://` URL cannot be read or holds no certificate.
    #[error("CA file {path} cannot be used: {reason}; give the shared tier's CA file as a PEM file of the server's certificate authority")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The TLS handshake with a `rediss://` server failed, at start (ADR 0037): its certificate
    /// does not chain to the CA file (or the system's roots), does not name the URL's host, or the
    /// server does not speak TLS.
    #[error("shared cache {url}: TLS handshake failed: {reason}; {}", problem.fix(ca.as_deref()))]
    Tls {
        /// The URL, password hidden.
        url: String,
        /// The CA file, if one was given.
        ca: Option<PathBuf>,
        /// What is wrong, for the fix.
        problem: TlsProblem,
        /// The TLS error.
        reason: String,
    },
    /// The signing key file may be read by others.
    #[error("signing key file {path} has mode {mode:03o}, readable by others; run chmod 600 on it")]
    KeyPermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// What to do about an unreadable file of [`RemoteError::KeyFile`]: the setting whose path to
/// fix, by its role (the entry point names its variable, `gridkey_settings::name_settings`).
fn key_file_fix(what: &str) -> &'static str {
    match what {
        "signing key" => "fix the path of the shared tier's signing key, or write one with gridkey cache keygen FILE",
        "trusted keys" => "fix the path of the shared tier's trusted keys",
        _ => "check that this system's random source can be read",
    }
}
