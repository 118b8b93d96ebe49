//! The shared tier as a [`Tier`] of the translation cache and as the [`SharedTier`] of the
//! shared-tier protocol (ADR 0041), and the remote key of a kernel library of the build cache.

use std::sync::Arc;

use gridkey_fingerprint::shared::{self as protocol, SharedTier};
use gridkey_fingerprint::{FingerprintError, KeyInputs, Miss, Tier, TranslationKey};
use xxhash_rust::xxh3::Xxh3;

use crate::{Claim, Fetched, Kind, ObjectChecksum, ObjectKey, Reject, Remote, Retracted, Stored, Waited};

/// The shared tier of the translation cache, for [`gridkey_fingerprint::Tiers`] after the local
/// tier: [`Tier::get`] downloads and checks the translation entry, [`Tier::put`] uploads it
/// (designated writers only). Every call goes through the one [`Remote`] of the run, so a dead
/// server costs one timeout, whichever call meets it.
///
/// `gridkey run` does the remote I/O of a run in its parent, in batches and with leases, through
/// [`RemoteTier::remote`]; an embedder that translates in its own process may instead put this
/// tier into the [`gridkey_fingerprint::Tiers`] that `translate_cached` looks up (no leases then:
/// every object that checks is accepted, whoever wrote it first); its [`Tier::put`] then comes
/// from [`gridkey_fingerprint::Tiers::accept`], once the embedder's check of the result passed.
#[derive(Clone, Debug)]
pub struct RemoteTier {
    remote: Arc<Remote>,
}

impl RemoteTier {
    /// The tier over `remote`.
    pub fn new(remote: Arc<Remote>) -> Self {
        Self { remote }
    }

    /// The client.
    pub fn remote(&self) -> &Arc<Remote> {
        &self.remote
    }
}

impl Tier for RemoteTier {
    fn name(&self) -> &str {
        "remote"
    }

    /// The checked payload of the translation entry answering `key`; an absent object, or a tier
    /// that is off, is [`Miss::Absent`]; an object that fails a check is [`Miss::Invalid`] naming
    /// the check.
    fn get(&self, key: &TranslationKey) -> Result<Vec<u8>, Miss> {
        match self.remote.get(Kind::TranslationEntry, key.as_bytes()) {
            Fetched::Hit(payload) => Ok(payload),
            // Nothing is taken from a tier this client does not trust: not a bad object.
            Fetched::Absent | Fetched::Off | Fetched::Rejected(Reject::NotTrusted) => Err(Miss::Absent),
            Fetched::Rejected(reject) => Err(Miss::Invalid(format!(
                "{} object {}: {reject}",
                self.remote.shown_url(),
                self.remote.object_name(Kind::TranslationEntry, key.as_bytes())
            ))),
        }
    }

    /// Uploads the translation entry (the key-input record stays local: a reader computes the
    /// inputs itself). A tier that is off stores nothing and says so once, in its warning.
    ///
    /// Errors: [`FingerprintError::TierWrite`] when the object is over the size limit.
    fn put(&self, inputs: &KeyInputs, payload: &[u8]) -> Result<(), FingerprintError> {
        let key = inputs.key();
        match self.remote.put(Kind::TranslationEntry, key.as_bytes(), payload) {
            Stored::Uploaded(_) | Stored::ReadOnly | Stored::Off | Stored::Kept => Ok(()),
            Stored::TooLarge { len, max } => Err(FingerprintError::TierWrite {
                tier: self.name().to_owned(),
                key,
                reason: format!(
                    "the object is {len} bytes, over the limit of {max}; raise the shared tier's object limit"
                ),
            }),
        }
    }

    /// Only a designated writer's tier is written, and only while it is on.
    fn writable(&self) -> bool {
        self.remote.is_writer() && self.remote.is_on()
    }

    /// Shared: `translate_cached` leaves it to [`gridkey_fingerprint::Tiers::accept`], after
    /// the frontend's check of the result (ADR 0030).
    fn shared(&self) -> bool {
        true
    }
}

/// The Redis tier under the shared-tier protocol ([`gridkey_fingerprint::shared::SharedSession`],
/// ADR 0041): each batch is one request of the one [`Remote`] of the process, so a dead server
/// costs one timeout, whichever batch meets it. A rejected object is named with the check it
/// failed ([`Reject`]).
impl SharedTier for RemoteTier {
    fn is_writer(&self) -> bool {
        self.remote.is_writer()
    }

    fn is_on(&self) -> bool {
        self.remote.is_on()
    }

    fn object_name(&self, kind: Kind, key: &ObjectKey) -> String {
        self.remote.object_name(kind, key)
    }

    fn look_up(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<protocol::Lookup> {
        self.remote
            .get_many(kind, keys)
            .into_iter()
            .map(|f| match f {
                Fetched::Hit(payload) => protocol::Lookup::Hit(payload),
                Fetched::Absent => protocol::Lookup::Absent,
                Fetched::Rejected(reject) => protocol::Lookup::Rejected(reject.to_string()),
                Fetched::Off => protocol::Lookup::Off,
            })
            .collect()
    }

    fn claim(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Claim> {
        self.remote.claim(kind, keys)
    }

    fn wait(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<protocol::WaitEnd> {
        self.remote
            .wait(kind, keys)
            .into_iter()
            .map(|w| match w {
                Waited::Arrived(payload) => protocol::WaitEnd::Arrived(payload),
                Waited::Rejected(reject) => protocol::WaitEnd::Rejected(reject.to_string()),
                Waited::TakenOver => protocol::WaitEnd::TakenOver,
                Waited::Gone => protocol::WaitEnd::Gone,
                Waited::TimedOut => protocol::WaitEnd::TimedOut,
                Waited::Off => protocol::WaitEnd::Off,
            })
            .collect()
    }

    fn upload(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) {
        self.remote.put_many(kind, items);
    }

    fn release(&self, kind: Kind, keys: &[ObjectKey]) {
        self.remote.release(kind, keys);
    }

    fn retract(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Retracted> {
        self.remote.retract_many(kind, items)
    }

    fn checksums(&self, kind: Kind, keys: &[ObjectKey]) -> Option<Vec<Option<ObjectChecksum>>> {
        self.remote.checksums(kind, keys)
    }

    fn checksums_holding(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Option<ObjectChecksum>> {
        self.remote.checksums_holding(kind, items)
    }

    fn count_rejected(&self, n: u64) {
        self.remote.count_rejected(n);
    }
}

/// The remote key of a kernel library: xxh3_128 over `gridkey kernel library v1`, the build key
/// (32 hex digits, `gridkey_stencil::build_key`) and the compiler identity, each
/// length-prefixed (u64 LE). A library is shared only between nodes whose compiler identity
/// matches (ADR 0019).
pub fn library_key(build_key: &str, compiler_identity: &str) -> ObjectKey {
    let mut h = Xxh3::new();
    for part in [b"gridkey kernel library v1".as_slice(), build_key.as_bytes(), compiler_identity.as_bytes()] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.digest128().to_be_bytes()
}
