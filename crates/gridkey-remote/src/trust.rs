//! Who may write objects that a reader uses (ADR 0018).
//!
//! A writer may hold an Ed25519 signing key in a file that only writers can read
//! ([`load_signing_key`]); a reader may name a file of trusted public keys
//! ([`load_trusted_keys`]). A reader with trusted keys accepts only objects whose signature by
//! one of them verifies, so neither a process that can write to Redis nor another reader can
//! make it load a translation or a library that a writer did not produce.
//!
//! File formats (text, UTF-8):
//! - signing key: the 32-byte Ed25519 secret key as 64 hex digits on one line; the file must
//!   not be readable by group or others (like an ssh private key);
//! - trusted keys: one public key per line as 64 hex digits, optionally followed by a space and
//!   a name; blank lines and lines starting with `#` are ignored; at least one key.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use ed25519_dalek::{SigningKey, VerifyingKey};

use crate::object::hex;
use crate::RemoteError;

/// The signing and trust material of one client: the writer's key, if any, and the trusted
/// public keys, if any.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    signing: Option<SigningKey>,
    trusted: Option<BTreeSet<[u8; 32]>>,
}

impl Trust {
    /// Trust with no signing key and no trusted keys: objects are not signed, and every
    /// object that checks is accepted (a signed one only when its signature verifies).
    pub fn none() -> Trust {
        Trust::default()
    }

    /// Trust with this signing key and these trusted public keys.
    pub fn new(signing: Option<SigningKey>, trusted: Option<BTreeSet<[u8; 32]>>) -> Trust {
        Trust { signing, trusted }
    }

    /// Reads the files named by the settings: [`load_signing_key`] and [`load_trusted_keys`].
    ///
    /// Errors: as those two functions.
    pub fn load(signing_key: Option<&Path>, trusted_keys: Option<&Path>) -> Result<Trust, RemoteError> {
        let signing = signing_key.map(load_signing_key).transpose()?;
        let trusted = trusted_keys.map(load_trusted_keys).transpose()?;
        Ok(Trust { signing, trusted })
    }

    /// The key objects are signed with.
    pub fn signing_key(&self) -> Option<&SigningKey> {
        self.signing.as_ref()
    }

    /// Whether only objects signed by a trusted key are accepted.
    pub fn requires_signature(&self) -> bool {
        self.trusted.is_some()
    }

    /// Whether `public` is one of the trusted keys (false when there are none).
    pub fn is_trusted(&self, public: &[u8; 32]) -> bool {
        self.trusted.as_ref().is_some_and(|t| t.contains(public))
    }

    /// The public key of the signing key as 64 hex digits, if there is one.
    pub fn signer_hex(&self) -> Option<String> {
        self.signing.as_ref().map(|k| hex(k.verifying_key().as_bytes()))
    }
}

fn key_file_error(path: &Path, what: &'static str, source: io::Error) -> RemoteError {
    RemoteError::KeyFile { path: path.to_path_buf(), what, source }
}

fn format_error(path: &Path, line: usize, reason: String) -> RemoteError {
    RemoteError::KeyFormat { path: path.to_path_buf(), line, reason }
}

/// 32 bytes from 64 hex digits.
fn parse_hex32(text: &str) -> Result<[u8; 32], String> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{text:?} is not 64 hex digits"));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digits");
    }
    Ok(out)
}

/// The Ed25519 signing key in `path` (64 hex digits).
///
/// Errors: [`RemoteError::KeyFile`] when the file is missing or unreadable,
/// [`RemoteError::KeyPermissions`] when group or others may read it, [`RemoteError::KeyFormat`]
/// when it does not hold 64 hex digits.
pub fn load_signing_key(path: &Path) -> Result<SigningKey, RemoteError> {
    let mut file = fs::File::open(path).map_err(|e| key_file_error(path, "signing key", e))?;
    let meta = file.metadata().map_err(|e| key_file_error(path, "signing key", e))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(RemoteError::KeyPermissions { path: path.to_path_buf(), mode });
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| key_file_error(path, "signing key", e))?;
    let seed = parse_hex32(text.trim()).map_err(|reason| format_error(path, 1, reason))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// The trusted public keys in `path` (one per line, 64 hex digits and an optional name).
///
/// Errors: [`RemoteError::KeyFile`] when the file is missing or unreadable,
/// [`RemoteError::KeyFormat`] naming the first bad line, or line 0 when the file names no key.
pub fn load_trusted_keys(path: &Path) -> Result<BTreeSet<[u8; 32]>, RemoteError> {
    let text = fs::read_to_string(path).map_err(|e| key_file_error(path, "trusted keys", e))?;
    let mut keys = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let word = line.split_whitespace().next().expect("a non-empty line has a word");
        let key = parse_hex32(word).map_err(|reason| format_error(path, i + 1, reason))?;
        if VerifyingKey::from_bytes(&key).is_err() {
            return Err(format_error(path, i + 1, format!("{word} is not an Ed25519 public key")));
        }
        keys.insert(key);
    }
    if keys.is_empty() {
        return Err(format_error(path, 0, "the file names no public key".to_owned()));
    }
    Ok(keys)
}

/// Writes a new signing key to `path` (created, never replaced; mode 0600) and returns its
/// public key as 64 hex digits, the line to add to the readers' trusted keys file. The secret
/// comes from the operating system's random source (`/dev/urandom`).
///
/// Errors: [`RemoteError::KeyFile`] when `path` exists or cannot be written.
pub fn generate_signing_key(path: &Path) -> Result<String, RemoteError> {
    let mut seed = [0u8; 32];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed))
        .map_err(|e| key_file_error(Path::new("/dev/urandom"), "random source", e))?;
    let key = SigningKey::from_bytes(&seed);
    let written = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).and_then(|mut f| {
        writeln!(f, "{}", hex(&seed))?;
        f.sync_all()
    });
    written.map_err(|e| key_file_error(path, "new signing key", e))?;
    Ok(hex(key.verifying_key().as_bytes()))
}

/// The public key of the signing key in `path`, as 64 hex digits.
///
/// Errors: as [`load_signing_key`].
pub fn public_key_of(path: &Path) -> Result<String, RemoteError> {
    Ok(hex(load_signing_key(path)?.verifying_key().as_bytes()))
}
