//! The remote object format, version 1 (ADR 0019).
//!
//! One object per key, self-contained: nothing in it refers to another key, so evicting any
//! other key never makes it unusable. All integers are little-endian.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"GKRO"` ([`OBJECT_MAGIC`]) |
//! | 4 | 2 | format version, u16 ([`OBJECT_FORMAT_VERSION`]) |
//! | 6 | 1 | kind ([`Kind`]: 1 translation entry, 2 kernel library, 3 GT4Py translation entry, 4 GT4Py extension) |
//! | 7 | 1 | flags: bit 0 set when signed; every other bit 0 |
//! | 8 | 16 | the key the object answers |
//! | 24 | 8 | payload length `n`, u64 |
//! | 32 | `n` | payload |
//! | 32 + n | 96 | only when signed: the writer's Ed25519 public key (32), then the signature (64) over bytes `0 .. 64 + n` (header, payload and public key) |
//! | end - 16 | 16 | xxh3_128 of every byte before it, u128 |
//!
//! [`decode`] checks every field before it hands out the payload: a short, foreign, future,
//! mislabelled, misplaced (another key), resized, corrupted, oversize, unsigned-where-required
//! or wrongly signed object is a [`Reject`], never a payload.

use ed25519_dalek::{Signature, Signer, VerifyingKey};
use xxhash_rust::xxh3::xxh3_128;

use crate::trust::Trust;

/// Magic bytes that start every remote object.
pub const OBJECT_MAGIC: &[u8; 4] = b"GKRO";

/// Version of the remote object format; part of every Redis key name (`obj-v1`), so that a
/// new format never meets old objects.
pub const OBJECT_FORMAT_VERSION: u16 = 1;

/// Bytes before the payload.
pub const HEADER_BYTES: usize = 32;

/// Bytes of the signature block (public key and signature) of a signed object.
pub const SIGNATURE_BYTES: usize = 32 + 64;

/// Bytes of the trailing checksum.
pub const CHECKSUM_BYTES: usize = 16;

const FLAG_SIGNED: u8 = 1;

/// What an object holds: [`gridkey_fingerprint::shared::Kind`], the kinds of the shared-tier
/// protocol (ADR 0041); its kind byte is the format's byte 6.
pub use gridkey_fingerprint::shared::Kind;

/// Why a downloaded object was not used. Each is reported and counted, and is a miss.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// Fewer bytes than a header and checksum.
    #[error("object is {len} bytes, shorter than the {min} bytes of its header and checksum (truncated)")]
    Truncated {
        /// Bytes found.
        len: usize,
        /// Bytes at least.
        min: usize,
    },
    /// Not a gridkey remote object.
    #[error("not a gridkey remote object (bad magic)")]
    Magic,
    /// Written by another format version.
    #[error("object format version {found}, this gridkey reads {OBJECT_FORMAT_VERSION}")]
    Version {
        /// The version found.
        found: u16,
    },
    /// The announced payload length does not match the bytes there.
    #[error("object announces {announced} payload bytes, holds {held} (truncated or extended)")]
    Length {
        /// Bytes announced in the header.
        announced: u64,
        /// Bytes actually there.
        held: u64,
    },
    /// The checksum over the object does not match.
    #[error("object checksum mismatch (corrupted)")]
    Checksum,
    /// Flags this format does not define.
    #[error("object has unknown flags {flags:#04x}")]
    Flags {
        /// The flag byte.
        flags: u8,
    },
    /// Another kind than the one asked for.
    #[error("object holds a {found}, not a {expected}")]
    Kind {
        /// The kind asked for.
        expected: Kind,
        /// The kind found (`unknown kind N` when not a kind).
        found: String,
    },
    /// Stored under another key than the one it answers (a swapped object).
    #[error("object answers key {found}, not the key {expected} it is stored under (swapped)")]
    Key {
        /// The key asked for, hex.
        expected: String,
        /// The key in the object, hex.
        found: String,
    },
    /// Larger than the size limit.
    #[error("object is {len} bytes, over the limit of {max} bytes")]
    TooLarge {
        /// Bytes of the object.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Unsigned, but this reader accepts only signed objects.
    #[error("object is not signed, and this reader accepts only objects signed by a trusted key")]
    Unsigned,
    /// Signed by a key that is not in the trusted keys.
    #[error("object is signed by {signer}, which is not a trusted key")]
    Untrusted {
        /// The signer's public key, hex.
        signer: String,
    },
    /// The server could not hand out the object as bytes (another Redis type under its name).
    #[error("object cannot be read: {reason}")]
    Unreadable {
        /// The server's reply.
        reason: String,
    },
    /// Not looked at: this client trusts no key and not the Redis ACL (ADR 0031), so nothing
    /// is taken from the shared tier.
    #[error("not taken: this client trusts no key (give the shared tier's trusted keys, or set the shared tier's trust mode to acl)")]
    NotTrusted,
    /// The signature does not verify.
    #[error("object signature by {signer} does not verify (forged or corrupted)")]
    Signature {
        /// The signer's public key, hex.
        signer: String,
    },
}

/// The bytes of the object answering `key` of `kind` with `payload`, signed when `trust` holds
/// a signing key.
pub fn encode(kind: Kind, key: &[u8; 16], payload: &[u8], trust: &Trust) -> Vec<u8> {
    let signer = trust.signing_key();
    let extra = if signer.is_some() { SIGNATURE_BYTES } else { 0 };
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len() + extra + CHECKSUM_BYTES);
    out.extend_from_slice(OBJECT_MAGIC);
    out.extend_from_slice(&OBJECT_FORMAT_VERSION.to_le_bytes());
    out.push(kind.code());
    out.push(if signer.is_some() { FLAG_SIGNED } else { 0 });
    out.extend_from_slice(key);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    if let Some(signer) = signer {
        out.extend_from_slice(signer.verifying_key().as_bytes());
        let signature = signer.sign(&out);
        out.extend_from_slice(&signature.to_bytes());
    }
    let check = xxh3_128(&out);
    out.extend_from_slice(&check.to_le_bytes());
    out
}

/// The payload of `bytes`, an object that must answer `key` of `kind`, be at most `max_bytes`
/// long and satisfy `trust`: signed by a trusted key when `trust` has trusted keys; never
/// accepted when `trust` accepts nothing ([`Trust::nothing`], ADR 0031). The signature covers
/// the header (format version, kind, key, length), the payload and the signer's key, so a
/// signed object replayed under another key or kind, or relabelled, does not check.
///
/// Errors: a [`Reject`] naming the first check that failed; the checks run in this order:
/// size limit, length, magic, version, announced length, checksum, flags, kind, key,
/// signature, trust ([`Reject::NotTrusted`]).
pub fn decode<'a>(
    kind: Kind,
    key: &[u8; 16],
    bytes: &'a [u8],
    max_bytes: u64,
    trust: &Trust,
) -> Result<&'a [u8], Reject> {
    let parts = decode_unverified(kind, key, bytes, max_bytes, trust)?;
    let verified = parts.signature().map(|s| verify_signatures(&[s])[0]);
    parts.checked(verified)
}

/// An object that passed every check of [`decode`] but its signature's: the payload, the
/// signature to verify (if signed), and whether `trust` takes anything.
#[derive(Debug)]
pub struct Unverified<'a> {
    payload: &'a [u8],
    signature: Option<SignatureCheck<'a>>,
    accepted: bool,
}

/// A signature of an object and what it signs, to verify with [`verify_signatures`].
#[derive(Debug)]
pub struct SignatureCheck<'a> {
    signer: [u8; 32],
    signature: [u8; 64],
    message: &'a [u8],
}

impl<'a> Unverified<'a> {
    /// The object's signature, not verified yet (`None`: unsigned).
    pub fn signature(&self) -> Option<&SignatureCheck<'a>> {
        self.signature.as_ref()
    }

    /// The payload, given `verified`: whether the signature verified ([`verify_signatures`]).
    /// The rest of [`decode`]. A signed object is taken only with `Some(true)`.
    ///
    /// Errors: [`Reject::Signature`] for a signed object unless `verified` is `Some(true)`;
    /// [`Reject::NotTrusted`] when `trust` takes nothing.
    pub fn checked(self, verified: Option<bool>) -> Result<&'a [u8], Reject> {
        if let (Some(check), false) = (&self.signature, verified == Some(true)) {
            return Err(Reject::Signature { signer: hex(&check.signer) });
        }
        if !self.accepted {
            return Err(Reject::NotTrusted);
        }
        Ok(self.payload)
    }
}

/// Whether each signature verifies (Ed25519, ADR 0018). A signer whose key does not decode or
/// is weak (of small order, for which signatures can be forged) fails. The others are checked
/// as one batch (`ed25519_dalek::verify_batch`, about 0.6 times the cost of checking each on
/// its own: one multiscalar multiplication for the batch); when the batch fails, each is
/// checked on its own (`verify_strict`) to find which. A batch (cofactorless, with coefficients
/// derived from the batch) accepts what `verify_strict` accepts, and may also accept a
/// signature whose R is encoded non-canonically or has a small-order component: only the holder
/// of the signing key can make one (a malleated copy of a signature it made, never a forgery).
pub fn verify_signatures(checks: &[&SignatureCheck<'_>]) -> Vec<bool> {
    let keys: Vec<Option<VerifyingKey>> =
        checks.iter().map(|c| VerifyingKey::from_bytes(&c.signer).ok().filter(|k| !k.is_weak())).collect();
    let batch: Vec<usize> = (0..checks.len()).filter(|&i| keys[i].is_some()).collect();
    let mut out: Vec<bool> = keys.iter().map(Option::is_some).collect();
    let one = |i: usize| {
        let key = keys[i].expect("in the batch");
        key.verify_strict(checks[i].message, &Signature::from_bytes(&checks[i].signature)).is_ok()
    };
    if batch.len() > 1 {
        let messages: Vec<&[u8]> = batch.iter().map(|&i| checks[i].message).collect();
        let signatures: Vec<Signature> = batch.iter().map(|&i| Signature::from_bytes(&checks[i].signature)).collect();
        let verifying: Vec<VerifyingKey> = batch.iter().map(|&i| keys[i].expect("in the batch")).collect();
        if ed25519_dalek::verify_batch(&messages, &signatures, &verifying).is_ok() {
            return out;
        }
    }
    for i in batch {
        out[i] = one(i);
    }
    out
}

/// [`decode`] without verifying the signature: every other check, in the same order, and
/// the signature to verify ([`verify_signatures`], many objects at once), then
/// [`Unverified::checked`].
///
/// Errors: as [`decode`], but for [`Reject::Signature`] and [`Reject::NotTrusted`].
pub fn decode_unverified<'a>(
    kind: Kind,
    key: &[u8; 16],
    bytes: &'a [u8],
    max_bytes: u64,
    trust: &Trust,
) -> Result<Unverified<'a>, Reject> {
    if bytes.len() as u64 > max_bytes {
        return Err(Reject::TooLarge { len: bytes.len() as u64, max: max_bytes });
    }
    let min = HEADER_BYTES + CHECKSUM_BYTES;
    if bytes.len() < min {
        return Err(Reject::Truncated { len: bytes.len(), min });
    }
    if &bytes[..4] != OBJECT_MAGIC {
        return Err(Reject::Magic);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != OBJECT_FORMAT_VERSION {
        return Err(Reject::Version { found: version });
    }
    let flags = bytes[7];
    let signed = flags & FLAG_SIGNED != 0;
    let announced = u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes"));
    let trailer = CHECKSUM_BYTES + if signed { SIGNATURE_BYTES } else { 0 };
    let held = bytes.len().saturating_sub(HEADER_BYTES + trailer) as u64;
    if bytes.len() < HEADER_BYTES + trailer || announced != held {
        return Err(Reject::Length { announced, held });
    }
    let (body, check) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
    if xxh3_128(body).to_le_bytes() != check {
        return Err(Reject::Checksum);
    }
    if flags & !FLAG_SIGNED != 0 {
        return Err(Reject::Flags { flags });
    }
    match Kind::from_code(bytes[6]) {
        Some(found) if found == kind => {}
        Some(found) => return Err(Reject::Kind { expected: kind, found: found.as_str().to_owned() }),
        None => return Err(Reject::Kind { expected: kind, found: format!("unknown kind {}", bytes[6]) }),
    }
    if bytes[8..24] != key[..] {
        return Err(Reject::Key { expected: hex(key), found: hex(&bytes[8..24]) });
    }
    let payload_end = HEADER_BYTES + held as usize;
    let signature = if signed {
        let signer: [u8; 32] = body[payload_end..payload_end + 32].try_into().expect("32 bytes");
        let signature: [u8; 64] = body[payload_end + 32..].try_into().expect("64 bytes");
        if trust.requires_signature() && !trust.is_trusted(&signer) {
            return Err(Reject::Untrusted { signer: hex(&signer) });
        }
        // A signature is checked even by a reader that trusts no key in particular: what is
        // signed must verify.
        Some(SignatureCheck { signer, signature, message: &body[..payload_end + 32] })
    } else if trust.requires_signature() {
        return Err(Reject::Unsigned);
    } else {
        None
    };
    Ok(Unverified { payload: &bytes[HEADER_BYTES..payload_end], signature, accepted: trust.accepts_any() })
}

pub(crate) use gridkey_digest::hex;
