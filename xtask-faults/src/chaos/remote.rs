//! The shared tier under chaos: one real `redis-server` that two simulated nodes (two local
//! cache directories) use at once, as writers and as readers, while the driver
//!
//! * stops the server (`SIGSTOP`) for a while and lets it go on (`SIGCONT`), at any time;
//! * tampers with objects on the server: a byte flipped, an object copied under another key or
//!   another kind (a replay), a translation entry or a library altered and signed again with a
//!   key nobody trusts (a forgery);
//! * kills and restarts the server (empty again) and wipes a node's local translations and
//!   libraries, only in quiet phases, so that the next runs fetch from the shared tier again.
//!
//! Every client signs with the site's writer key or trusts it (`GRIDKEY_REMOTE_TRUSTED_KEYS`):
//! no tampered object may be used, and no fault of the server may cost a program. The runs'
//! writers compile with every compiler of the chaos, the wrong-kernel one included: what fails
//! its check must never reach another node (ADR 0030).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use gridkey_fingerprint::TranslationKey;
use gridkey_remote::object::{self, Kind};
use gridkey_remote::trust::{generate_signing_key, load_signing_key, Trust};

use super::Rng;
use crate::redis_server::{ensure_installed, RedisServer, ServerCommands as _};

/// Reply timeout of the runs' clients, seconds.
const TIMEOUT: &str = "0.5";
/// Lease time to live of the runs' clients, seconds.
const LEASE_TTL: &str = "2";
/// Longest wait on another writer's lease, seconds.
const LEASE_WAIT: &str = "10";
/// Namespace of the chaos objects.
const NAMESPACE: &str = "gridkey";

/// The server, the key files and the driver's own connection.
pub(super) struct SharedTier {
    server: RedisServer,
    signing_key: PathBuf,
    trusted_keys: PathBuf,
    /// A key nobody trusts, to forge objects with.
    forger: Trust,
    /// Set while the server is stopped: when to let it go on.
    stopped_until: Option<Instant>,
}

impl SharedTier {
    /// Starts a server (installing `redis-server` when missing) and writes the writer's signing
    /// key and the readers' trusted-keys file into `dir` (a directory only this user can write).
    ///
    /// Errors: Redis cannot be installed or started, a key file cannot be written.
    pub(super) fn start(dir: &Path) -> Result<SharedTier> {
        let binary = ensure_installed()?;
        let server = RedisServer::start(&binary, None)?;
        std::fs::create_dir_all(dir)?;
        let signing_key = dir.join("writer.key");
        let public = generate_signing_key(&signing_key)?;
        let trusted_keys = dir.join("trusted-keys");
        std::fs::write(&trusted_keys, format!("# the site's writer\n{public} chaos\n"))?;
        let forger_key = dir.join("forger.key");
        generate_signing_key(&forger_key)?;
        let forger = Trust::new(Some(load_signing_key(&forger_key)?), None, gridkey_settings::RemoteTrust::Acl);
        Ok(SharedTier { server, signing_key, trusted_keys, forger, stopped_until: None })
    }

    /// The server's URL.
    pub(super) fn url(&self) -> String {
        self.server.url()
    }

    /// The variables of a run that uses the shared tier as a writer or as a reader.
    pub(super) fn env(&self, writer: bool) -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("GRIDKEY_REMOTE_URL", self.server.url()),
            ("GRIDKEY_REMOTE_TIMEOUT", TIMEOUT.to_owned()),
            ("GRIDKEY_REMOTE_CONNECT_TIMEOUT", TIMEOUT.to_owned()),
            ("GRIDKEY_REMOTE_LEASE_TTL", LEASE_TTL.to_owned()),
            ("GRIDKEY_REMOTE_LEASE_WAIT", LEASE_WAIT.to_owned()),
            ("GRIDKEY_REMOTE_NAMESPACE", NAMESPACE.to_owned()),
            ("GRIDKEY_REMOTE_TRUSTED_KEYS", self.trusted_keys.display().to_string()),
        ];
        if writer {
            v.push(("GRIDKEY_REMOTE_WRITER", "1".to_owned()));
            v.push(("GRIDKEY_REMOTE_SIGNING_KEY", self.signing_key.display().to_string()));
        }
        v
    }

    /// Lets a stopped server go on once its time is up; called often by the driver.
    pub(super) fn tick(&mut self) {
        if self.stopped_until.is_some_and(|t| Instant::now() >= t) {
            self.server.signal(libc::SIGCONT);
            self.stopped_until = None;
        }
    }

    /// Lets a stopped server go on now.
    pub(super) fn resume(&mut self) {
        if self.stopped_until.take().is_some() {
            self.server.signal(libc::SIGCONT);
        }
    }

    /// Whether the server is stopped now.
    pub(super) fn is_stopped(&self) -> bool {
        self.stopped_until.is_some()
    }

    /// Stops the server for `pause` (it answers nothing meanwhile; connections stay open).
    pub(super) fn stop_for(&mut self, pause: Duration) {
        if self.stopped_until.is_none() {
            self.server.signal(libc::SIGSTOP);
            self.stopped_until = Some(Instant::now() + pause);
        }
    }

    /// Kills the server and starts it again on the same port, empty.
    ///
    /// Errors: it does not start again.
    pub(super) fn restart(&mut self) -> Result<()> {
        self.stopped_until = None;
        self.server.restart().context("restarting the chaos redis-server")
    }

    /// One tampering with an object on the server, chosen by `rng`: the name of what was done,
    /// or `None` when there was nothing to tamper with (or the server is stopped).
    pub(super) fn tamper(&mut self, rng: &mut Rng) -> Option<&'static str> {
        if self.is_stopped() {
            return None;
        }
        let names = self.object_names().ok()?;
        let name = rng.pick(&names)?.clone();
        let bytes = self.server.get_raw(&name).ok()??;
        let (kind, key) = parse_name(&name)?;
        match rng.below(4) {
            0 => {
                // A byte flipped anywhere: the checksum (or the header checks) must catch it.
                let mut bytes = bytes;
                let at = rng.below(bytes.len().max(1));
                if let Some(b) = bytes.get_mut(at) {
                    *b ^= 1 + rng.below(255) as u8;
                }
                self.server.set_raw(&name, &bytes).ok()?;
                Some("remote object byte flipped")
            }
            1 => {
                // The object copied under another key of the same kind: a replay.
                let other = rng.pick(&names)?.clone();
                if other == name || parse_name(&other)?.0 != kind {
                    return None;
                }
                self.server.set_raw(&other, &bytes).ok()?;
                Some("remote object replayed under another key")
            }
            2 => {
                // The object copied under the same key of the other kind.
                let other_kind =
                    if kind == Kind::TranslationEntry { Kind::KernelLibrary } else { Kind::TranslationEntry };
                self.server.set_raw(&object_name(other_kind, &key), &bytes).ok()?;
                Some("remote object replayed as the other kind")
            }
            _ => {
                // The payload altered (a translation whose first accumulation subtracts, or a
                // library byte flipped) and signed again by a key nobody trusts: a forgery that
                // passes every check but the signer's.
                let payload = object::decode(kind, &key, &bytes, u64::MAX, &Trust::acl()).ok()?.to_vec();
                let forged = match kind {
                    Kind::TranslationEntry => {
                        String::from_utf8(payload).ok()?.replacen("acc += ", "acc -= ", 1).into_bytes()
                    }
                    Kind::KernelLibrary | Kind::Gt4pyTranslation | Kind::Gt4pyExtension => {
                        let mut p = payload;
                        let at = p.len() / 2;
                        *p.get_mut(at)? ^= 0x5a;
                        p
                    }
                };
                let forged = object::encode(kind, &key, &forged, &self.forger);
                self.server.set_raw(&name, &forged).ok()?;
                Some("remote object forged and signed by an untrusted key")
            }
        }
    }

    /// Every object name of the chaos namespace now (a `SCAN`).
    fn object_names(&self) -> Result<Vec<String>> {
        let mut con = self.server.connection()?;
        con.set_read_timeout(Some(Duration::from_secs(1)))?;
        let pattern = format!("{NAMESPACE}:obj-v{}:*", object::OBJECT_FORMAT_VERSION);
        let mut cursor = 0u64;
        let mut out = Vec::new();
        loop {
            let (next, names): (u64, Vec<String>) =
                redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000).query(&mut con)?;
            out.extend(names);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        out.sort();
        Ok(out)
    }
}

/// `<namespace>:obj-v1:<te|kl>:<hex>` of `key` of `kind`.
fn object_name(kind: Kind, key: &[u8; 16]) -> String {
    let hex = TranslationKey::from_bytes(*key).to_hex();
    format!("{NAMESPACE}:obj-v{}:{}:{hex}", object::OBJECT_FORMAT_VERSION, kind.tag())
}

/// The kind and key of an object name, if it is one.
fn parse_name(name: &str) -> Option<(Kind, [u8; 16])> {
    let mut parts = name.rsplitn(3, ':');
    let hex = parts.next()?;
    let tag = parts.next()?;
    let kind = Kind::ALL.into_iter().find(|k| k.tag() == tag)?;
    // Both kinds answer 16-byte keys written as 32 hex digits, as translation keys are.
    Some((kind, *hex.parse::<TranslationKey>().ok()?.as_bytes()))
}
