//! Who may write objects that a reader uses (ADR 0018, amended by ADR 0031).
//!
//! A writer may hold an Ed25519 signing key in a file that only writers can read
//! ([`load_signing_key`]); a reader may name a file of trusted public keys
//! ([`load_trusted_keys`]). A reader with trusted keys accepts only objects whose signature by
//! one of them verifies, so neither a process that can write to Redis nor another reader can
//! make it load a translation or a library that a writer did not produce. A reader without
//! trusted keys takes nothing from the shared tier, unless its settings say that the Redis ACL
//! is the trust boundary ([`RemoteTrust::Acl`]): then it takes every object that checks.
//!
//! File formats (text, UTF-8):
//! - signing key: the 32-byte Ed25519 secret key as 64 hex digits on one line; the file must
//!   not be readable by group or others (like an ssh private key);
//! - trusted keys: one public key per line as 64 hex digits, optionally followed by a space and
//!   a name; blank lines and lines starting with `#` are ignored; at least one key.
//!
//! Every file that decides what is trusted (the trusted keys, the signing key, the CA file of a
//! `rediss://` server) is a trust anchor, checked like an ssh key ([`check_anchor`]): symlinks
//! are resolved, and the file and every directory of the resolved path are owned by this user
//! or root and writable by no one else (an ancestor above the file's own directory may be a
//! sticky directory such as `/tmp`, whose entries only their owners can replace).

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};
use gridkey_settings::{RemoteSettings, RemoteTrust};

use crate::object::hex;
use crate::RemoteError;

/// What a client accepts from the shared tier.
#[derive(Clone, Debug, Default)]
enum Accepts {
    /// Nothing: no trusted keys, and the ACL is not trusted (the default).
    #[default]
    Nothing,
    /// Objects signed by one of these keys.
    SignedBy(BTreeSet<[u8; 32]>),
    /// Every object that checks (a signed one only when its signature verifies).
    Acl,
}

/// The signing and trust material of one client: the writer's key, if any, and what it
/// accepts (objects signed by trusted keys, every object the ACL lets in, or nothing).
#[derive(Clone, Debug, Default)]
pub struct Trust {
    signing: Option<SigningKey>,
    accepts: Accepts,
}

impl Trust {
    /// Trust with no signing key that accepts every object that checks (a signed one only when
    /// its signature verifies): the Redis ACL is the trust boundary ([`RemoteTrust::Acl`]).
    pub fn acl() -> Trust {
        Trust { signing: None, accepts: Accepts::Acl }
    }

    /// Trust with no signing key that accepts nothing: a reader without trusted keys
    /// ([`RemoteTrust::Signed`], the default).
    pub fn nothing() -> Trust {
        Trust::default()
    }

    /// Trust with this signing key that accepts objects signed by `trusted`, or, without
    /// trusted keys, what `policy` says: nothing ([`RemoteTrust::Signed`]) or every object that
    /// checks ([`RemoteTrust::Acl`]). Trusted keys always win over [`RemoteTrust::Acl`].
    pub fn new(signing: Option<SigningKey>, trusted: Option<BTreeSet<[u8; 32]>>, policy: RemoteTrust) -> Trust {
        let accepts = match (trusted, policy) {
            (Some(keys), _) => Accepts::SignedBy(keys),
            (None, RemoteTrust::Acl) => Accepts::Acl,
            (None, RemoteTrust::Signed) => Accepts::Nothing,
        };
        Trust { signing, accepts }
    }

    /// Reads the files named by the settings ([`load_signing_key`], [`load_trusted_keys`]) and
    /// takes the settings' [`RemoteTrust`].
    ///
    /// Errors: as those two functions.
    pub fn load(settings: &RemoteSettings) -> Result<Trust, RemoteError> {
        let signing = settings.signing_key.as_deref().map(load_signing_key).transpose()?;
        let trusted = settings.trusted_keys.as_deref().map(load_trusted_keys).transpose()?;
        Ok(Trust::new(signing, trusted, settings.trust))
    }

    /// The key objects are signed with.
    pub fn signing_key(&self) -> Option<&SigningKey> {
        self.signing.as_ref()
    }

    /// Whether any object can be accepted; `false` for a reader without trusted keys that does
    /// not trust the ACL, which then downloads nothing.
    pub fn accepts_any(&self) -> bool {
        !matches!(self.accepts, Accepts::Nothing)
    }

    /// Whether only objects signed by a trusted key are accepted.
    pub fn requires_signature(&self) -> bool {
        matches!(self.accepts, Accepts::SignedBy(_))
    }

    /// Whether `public` is one of the trusted keys (false when there are none).
    pub fn is_trusted(&self, public: &[u8; 32]) -> bool {
        matches!(&self.accepts, Accepts::SignedBy(keys) if keys.contains(public))
    }

    /// How many public keys are trusted (0 when there are none).
    pub fn trusted_count(&self) -> usize {
        match &self.accepts {
            Accepts::SignedBy(keys) => keys.len(),
            _ => 0,
        }
    }

    /// The public key of the signing key as 64 hex digits, if there is one.
    pub fn signer_hex(&self) -> Option<String> {
        self.signing.as_ref().map(|k| hex(k.verifying_key().as_bytes()))
    }

    /// The line a run prints at start about what it takes from the shared tier `settings`
    /// names (ADR 0031), without a final period, e.g. `shared tier redis://:***@host:6379/:
    /// trusting objects signed by 2 keys from /etc/gridkey/trusted`. The password is hidden.
    pub fn statement(&self, settings: &RemoteSettings) -> String {
        let url = settings.shown_url();
        let what = match &self.accepts {
            Accepts::SignedBy(keys) => format!(
                "trusting objects signed by {} from {}",
                if keys.len() == 1 { "1 key".to_owned() } else { format!("{} keys", keys.len()) },
                settings.trusted_keys.as_deref().map_or_else(String::new, |p| p.display().to_string())
            ),
            Accepts::Acl => {
                "trusting every object the Redis ACL lets in (the shared tier's trust mode is acl)".to_owned()
            }
            Accepts::Nothing => "no trusted keys: nothing is taken from the shared tier (give \
                                 the shared tier's trusted keys, or set the shared tier's trust mode to acl)"
                .to_owned(),
        };
        format!("shared tier {url}: {what}")
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
/// [`RemoteError::UnsafeAnchor`] when others could replace it ([`check_anchor`]),
/// [`RemoteError::KeyPermissions`] when group or others may read it, [`RemoteError::KeyFormat`]
/// when it does not hold 64 hex digits.
pub fn load_signing_key(path: &Path) -> Result<SigningKey, RemoteError> {
    check_anchor(path, "signing key")?;
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
/// [`RemoteError::UnsafeAnchor`] when others could change it ([`check_anchor`]),
/// [`RemoteError::KeyFormat`] naming the first bad line, or line 0 when the file names no key.
pub fn load_trusted_keys(path: &Path) -> Result<BTreeSet<[u8; 32]>, RemoteError> {
    check_anchor(path, "trusted keys")?;
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
/// Errors: [`RemoteError::KeyFile`] when the random source cannot be read;
/// [`RemoteError::NewKeyFile`] when `path` exists or cannot be written.
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
    written.map_err(|source| {
        let fix = if source.kind() == io::ErrorKind::AlreadyExists {
            "a signing key is never replaced: remove the file or give another path"
        } else {
            "give a path in a directory you can write"
        };
        RemoteError::NewKeyFile { path: path.to_path_buf(), source, fix }
    })?;
    Ok(hex(key.verifying_key().as_bytes()))
}

/// The public key of the signing key in `path`, as 64 hex digits.
///
/// Errors: as [`load_signing_key`].
pub fn public_key_of(path: &Path) -> Result<String, RemoteError> {
    Ok(hex(load_signing_key(path)?.verifying_key().as_bytes()))
}

/// Checks that only this user (or root) can change the trust anchor `path` (`what`: `trusted
/// keys`, `signing key`, `CA`): the path is resolved (every symlink followed), then the file
/// must be a regular file owned by this user or root and not writable by group or others, and
/// so must every directory of the resolved path, except that a directory above the file's own
/// may be a sticky one (such as `/tmp`: only an entry's owner can rename or remove it, and the
/// next directory down is checked to be this user's or root's).
///
/// Errors: [`RemoteError::KeyFile`] when the path cannot be resolved or read,
/// [`RemoteError::UnsafeAnchor`] naming the file, the component at fault and the fix.
pub fn check_anchor(path: &Path, what: &'static str) -> Result<PathBuf, RemoteError> {
    let resolved = fs::canonicalize(path).map_err(|e| key_file_error(path, what, e))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let unsafe_anchor = |problem: String| RemoteError::UnsafeAnchor {
        what,
        path: path.to_path_buf(),
        resolved: resolved.clone(),
        problem,
    };
    let meta = fs::metadata(&resolved).map_err(|e| key_file_error(path, what, e))?;
    if !meta.is_file() {
        return Err(unsafe_anchor("it is not a regular file".to_owned()));
    }
    check_owner_and_mode(&resolved, &meta, me, false).map_err(unsafe_anchor)?;
    for (depth, dir) in resolved.ancestors().skip(1).enumerate() {
        let meta = fs::metadata(dir).map_err(|e| key_file_error(dir, what, e))?;
        // The file's own directory may not be sticky-and-shared: whoever can create entries
        // there could have planted the file before it existed.
        check_owner_and_mode(dir, &meta, me, depth > 0).map_err(unsafe_anchor)?;
    }
    Ok(resolved)
}

fn check_owner_and_mode(path: &Path, meta: &fs::Metadata, me: u32, sticky_ok: bool) -> Result<(), String> {
    let kind = if meta.is_dir() { "directory" } else { "file" };
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "{kind} {} is owned by user {}, not by you (user {me}) or root, so that user can change what is trusted; \
             keep the file where only you or root can write",
            path.display(),
            meta.uid()
        ));
    }
    let mode = meta.permissions().mode();
    let shared = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    if shared && !(sticky_ok && sticky) {
        let fix = if meta.is_dir() && sticky {
            "a sticky directory writable by others is no place for it; move it to a directory only you can write \
             (e.g. ~/.config/gridkey)"
                .to_owned()
        } else {
            format!("run chmod go-w {}", path.display())
        };
        return Err(format!(
            "{kind} {} has mode {:03o}, writable by group or others, so they can change what is trusted; {fix}",
            path.display(),
            mode & 0o7777
        ));
    }
    Ok(())
}
