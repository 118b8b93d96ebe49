//! Translation key format v2 (ADR 0003, ADR 0020), the persistent translation cache (ADR 0012)
//! and the cache protocol every frontend calls ([`translate_cached`]).
//!
//! # What goes into a key
//!
//! [`KeyInputs`] is the one place that lists the inputs; [`TranslationKey::of`] hashes exactly
//! these, in this order, with xxh3_128 over an explicit little-endian encoding ([`KeyEncoder`]:
//! lengths as u64, no `usize`, no `HashMap` iteration, no `std::hash::Hash`):
//!
//! | input | why |
//! |---|---|
//! | [`KEY_FORMAT_VERSION`] and the table digest format version | a format change must change every key |
//! | frontend name, version and fingerprint (a digest of its translation code, ADR 0020) | another compiler, or the same version rebuilt with other translation code, another translation |
//! | program name and the program's stable encoding | the program itself |
//! | translation options (sorted by name) | they shape the emitted code |
//! | every offset-provider entry, in order: its name, then `Dimension{name, kind}` or `Gather{domain, local, codomain, skip_value, dtype, shape, table digest}` | translation reads the tables (domain inference) |
//!
//! Left out on purpose, because they vary by how compilation ran and not by what it computes:
//!
//! | excluded | why |
//! |---|---|
//! | file paths (cache directory, table files, grid file) | the same tables at another path are the same input |
//! | runner mode and worker count | the point of gridkey: serial, thread and process compile alike |
//! | memory order, strides, byte order and integer width of the runtime tables | compile-time tables are canonical (ADR 0006) |
//! | array library, device, host/device residence | only the digest of the content is seen |
//! | time, host name, process id | never an input |
//!
//! The encoder destructures [`KeyInputs`] field by field, so a field added to it that is not
//! encoded does not compile; what is excluded is never a field of it (the settings that travel
//! with a task live in `gridkey_settings::Settings`, which no key sees).
//!
//! # The cache protocol
//!
//! [`translate_cached`] is the one lookup / translate / verify / put sequence a frontend needs:
//! it looks the key up in each [`Tier`] of a [`Tiers`] list in order (the local
//! [`TranslationCache`] first), on a hit in a later tier writes the entry back to the earlier
//! writable ones, on a miss calls the frontend's translate function and puts the result with
//! its key-input record into every writable tier, and with `verify_hits` translates again on a
//! hit and compares byte for byte.
//!
//! # Example
//!
//! What a frontend does with a compile-time view: key a program and let the cache protocol
//! decide whether to translate. A second request with the same inputs is a hit, and the same
//! tables converted into another cache directory give the same key.
//!
//! ```
//! use std::sync::Arc;
//! use gridkey_fingerprint::{translate_cached, Frontend, KeyInputs, Request, Tiers, TranslationOptions};
//! use gridkey_offsets::{compile_time_offset_provider, Connectivity, Dimension, Entry, IndexTable, OffsetProvider, TableStore};
//!
//! let c2e = IndexTable::from_vec_i32(2, 3, vec![0, 1, 2, 2, 3, 4])?;
//! let mut provider = OffsetProvider::new();
//! let c2e = Connectivity::from_host(Dimension::horizontal("Cell"), Dimension::local("C2EDim"), Dimension::horizontal("Edge"), None, c2e)?;
//! provider.push("C2E", Entry::Gather(Arc::new(c2e)))?;
//! let cache = tempfile::tempdir()?;
//! let view = compile_time_offset_provider(&provider, &TableStore::open(cache.path())?)?;
//!
//! // The fingerprint is a digest of the frontend's translation code (ADR 0020); fixed here.
//! let frontend = Frontend { name: "my-frontend".to_owned(), version: "1.0.0".to_owned(), fingerprint: "f00d".repeat(8) };
//! let options = TranslationOptions::from([("opt_level".to_owned(), "2".to_owned())]);
//! let inputs = KeyInputs::new(&frontend, "div", b"the program's stable encoding", &options, &view);
//! let key = inputs.key();
//!
//! let tiers = Tiers::local(cache.path())?;
//! let accept = |_: &[u8]| Ok::<(), String>(());
//! let request = Request { inputs: &inputs, verify_hits: false, accept: &accept };
//! let first = translate_cached(&tiers, &request, || Ok::<_, std::io::Error>(b"/* C source */".to_vec()))?;
//! assert!(first.translated() && first.key == key);
//! let second = translate_cached(&tiers, &request, || -> Result<Vec<u8>, std::io::Error> {
//!     unreachable!("a hit does not translate")
//! })?;
//! assert_eq!((second.hit.as_deref(), &second.payload), (Some("local"), &first.payload));
//!
//! // No path enters a key: the same tables in another cache directory, the same key.
//! let elsewhere = tempfile::tempdir()?;
//! let view2 = compile_time_offset_provider(&provider, &TableStore::open(elsewhere.path())?)?;
//! assert_eq!(KeyInputs::new(&frontend, "div", b"the program's stable encoding", &options, &view2).key(), key);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Architecture invariant
//!
//! Nothing that varies by runner, machine, path, time, memory order or array library enters a
//! key: [`TranslationKey::of`] never sees a file path, only [`KeyInputs`]. The cache never
//! returns an entry that does not carry its own key and checksum; anything unreadable,
//! truncated, corrupt or of another format version is a miss.

pub mod gt4py;
mod protocol;
pub mod shared;

pub use protocol::{translate_cached, CacheProtocolError, Cached, Request, SiteCache, Tier, Tiers};

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use gridkey_digest::DIGEST_FORMAT_VERSION;
use gridkey_offsets::{CompileTimeOffsetProvider, Entry};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

/// Version of the translation key encoding; hashed first into every key and part of the cache
/// directory name (`translation-v2/`). Changing a key input without bumping it is a bug.
/// Version 2 adds the frontend fingerprint (ADR 0020).
pub const KEY_FORMAT_VERSION: u32 = 2;

/// Name of the translation cache directory under the cache directory.
pub const TRANSLATION_DIR: &str = gridkey_fs::CacheBucket::Translation.name();

/// Version marker of a translation cache entry file.
pub const ENTRY_FORMAT_VERSION: u32 = 1;

/// Magic bytes that start every translation cache entry.
pub const ENTRY_MAGIC: &[u8; 4] = b"GKTE";

/// Errors of keys and the translation cache (ADR 0005). A lookup never fails: what cannot be
/// read is a [`Miss`]; only creating the directory, writing an entry and parsing a key do.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// The cache directory could not be created.
    #[error(
        "cannot use translation cache directory {path}: {source}; point the cache directory at a writable directory"
    )]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Writing an entry failed; nothing was left under the final name.
    #[error("cannot write translation entry {path}: {source}; free space or fix permissions, nothing was left behind")]
    Write {
        /// The entry path.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A tier other than a directory (the shared tier) did not store an entry; the local tier
    /// still has it.
    #[error("the {tier} tier did not store translation entry {key}: {reason}")]
    TierWrite {
        /// The tier's name.
        tier: String,
        /// The key.
        key: TranslationKey,
        /// Why, with what to do.
        reason: String,
    },
    /// Translation-entry bytes that do not hold the entry of `key` ([`decode_entry`]): too
    /// short, another magic or format version, another key, a length or checksum that does not
    /// match. A lookup makes it a [`Miss::Invalid`] with the entry's path.
    #[error("translation entry {key} {problem}; it is a miss, and the next translation of the key writes it again")]
    BadEntry {
        /// The key the bytes were read for.
        key: TranslationKey,
        /// What is wrong with them.
        problem: EntryProblem,
    },
    /// A key text is not 32 hex digits.
    #[error("{text:?} is not a translation key: expected 32 hex digits")]
    ParseKey {
        /// The text.
        text: String,
    },
}

/// What [`decode_entry`] found wrong with an entry's bytes ([`FingerprintError::BadEntry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryProblem {
    /// Fewer bytes than the header and checksum take.
    TooShort {
        /// The bytes there are.
        len: u64,
    },
    /// The bytes do not start with [`ENTRY_MAGIC`].
    Magic,
    /// Another entry format version than [`ENTRY_FORMAT_VERSION`].
    Version {
        /// The version found.
        found: u32,
    },
    /// The header names another key.
    OtherKey,
    /// The announced payload length is not the payload's.
    Length {
        /// The length the header announces, in bytes.
        announced: u64,
        /// The payload bytes there are.
        holds: u64,
    },
    /// The xxh3_64 checksum does not match: the bytes were damaged.
    Checksum,
}

impl fmt::Display for EntryProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryProblem::TooShort { len } => write!(f, "is {len} bytes, shorter than its header"),
            EntryProblem::Magic => write!(f, "is not a translation entry (bad magic)"),
            EntryProblem::Version { found } => {
                write!(f, "has entry format version {found}, this gridkey reads {ENTRY_FORMAT_VERSION}")
            }
            EntryProblem::OtherKey => write!(f, "holds another key"),
            EntryProblem::Length { announced, holds } => {
                write!(f, "announces {announced} payload bytes, holds {holds}")
            }
            EntryProblem::Checksum => write!(f, "fails its checksum (corrupted)"),
        }
    }
}

/// The explicit, stable encoding of key inputs (translation key format v1, ADR 0003):
/// little-endian integers, byte strings as a u64 length then the bytes, tags as one byte; no
/// `usize`, no `HashMap` iteration, no `std::hash::Hash`. [`Self::finish`] is xxh3_128 (seed
/// 0) of the bytes fed, the same as `data/tools/translation_key_witness.py` computes.
pub struct KeyEncoder {
    // The encoding is a few hundred bytes, fed as many small fields: collecting them and hashing
    // once is the same xxh3_128 as streaming them, at a fraction of the per-field cost.
    bytes: Vec<u8>,
}

impl Default for KeyEncoder {
    fn default() -> Self {
        Self { bytes: Vec::with_capacity(1024) }
    }
}

impl KeyEncoder {
    /// Adds one byte (a tag).
    pub fn u8(&mut self, x: u8) {
        self.bytes.push(x);
    }

    /// Adds a u32, little-endian.
    pub fn u32(&mut self, x: u32) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }

    /// Adds a u64, little-endian.
    pub fn u64(&mut self, x: u64) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }

    /// Adds an i64, little-endian.
    pub fn i64(&mut self, x: i64) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }

    /// Adds a byte string: its length as u64, then the bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.bytes.extend_from_slice(b);
    }

    /// Adds a UTF-8 string as [`Self::bytes`].
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// The key of everything fed so far: xxh3_128 of the encoded bytes.
    pub fn finish(&self) -> TranslationKey {
        TranslationKey(xxh3_128(&self.bytes).to_be_bytes())
    }
}

/// A value with a stable key encoding. Never derived from `std::hash::Hash`.
pub trait KeyEncode {
    /// Feeds this value's encoding to `e`.
    fn encode_key(&self, e: &mut KeyEncoder);
}

/// The 128-bit translation key (format v2); displays as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TranslationKey([u8; 16]);

impl TranslationKey {
    /// The key of `inputs`: xxh3_128 over their [`KeyEncode`] encoding.
    pub fn of(inputs: &KeyInputs) -> Self {
        let mut e = KeyEncoder::default();
        inputs.encode_key(&mut e);
        e.finish()
    }

    /// The 16 bytes, most significant first (the order of the hex text).
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The key whose bytes, most significant first, are `bytes`.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The 32 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for TranslationKey {
    /// The same 128-bit hex text as a table digest (most significant byte first).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&gridkey_digest::TableDigest::from_bytes(self.0), f)
    }
}

impl fmt::Debug for TranslationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TranslationKey({self})")
    }
}

impl FromStr for TranslationKey {
    type Err = FingerprintError;

    /// Parses 32 hex digits (the parser of table digests: the text form is the same).
    fn from_str(text: &str) -> Result<Self, FingerprintError> {
        let digest: gridkey_digest::TableDigest =
            text.parse().map_err(|_| FingerprintError::ParseKey { text: text.to_owned() })?;
        Ok(Self(*digest.as_bytes()))
    }
}

/// The frontend (compiler) that translates: its name, version and fingerprint (ADR 0020).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frontend {
    /// Name, e.g. `gridkey-stencil`; another frontend, another key.
    pub name: String,
    /// Version; a new version changes every key.
    pub version: String,
    /// A digest of the code that shapes what the frontend emits (for gridkey-stencil, 32 hex
    /// digits over its translation sources, `gridkey_stencil::FRONTEND_FINGERPRINT`): a rebuilt
    /// frontend whose translation changed gets new keys under the same version. It must depend
    /// on that code only, never on the path, profile or toolchain it was built with.
    pub fingerprint: String,
}

/// Translation options: named settings that shape the emitted code, sorted by name.
pub type TranslationOptions = BTreeMap<String, String>;

/// One offset-provider entry as a key input, taken from the compile-time view (ADR 0003):
/// the canonical dtype and shape and the table digest, never the runtime table's layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OffsetInput {
    /// The offset names a dimension.
    Dimension {
        /// Offset name (`Koff`).
        offset: String,
        /// Dimension name (`K`).
        name: String,
        /// Dimension kind (`vertical`).
        dimension_kind: String,
    },
    /// The offset is a gather connectivity.
    Gather {
        /// Offset name (`C2E`).
        offset: String,
        /// Domain dimension (`Cell`).
        domain: String,
        /// Neighbour dimension (`C2EDim`).
        local: String,
        /// Codomain dimension (`Edge`).
        codomain: String,
        /// Skip value, if any.
        skip_value: Option<i64>,
        /// Compile-time dtype typestr (`<i4`).
        dtype: String,
        /// Shape `(n, k)`.
        shape: [u64; 2],
        /// Table digest, 32 hex digits.
        digest: String,
    },
}

impl KeyEncode for OffsetInput {
    fn encode_key(&self, e: &mut KeyEncoder) {
        match self {
            OffsetInput::Dimension { offset, name, dimension_kind } => {
                e.str(offset);
                e.u8(0);
                e.str(name);
                e.str(dimension_kind);
            }
            OffsetInput::Gather { offset, domain, local, codomain, skip_value, dtype, shape, digest } => {
                e.str(offset);
                e.u8(1);
                e.str(domain);
                e.str(local);
                e.str(codomain);
                match skip_value {
                    None => e.u8(0),
                    Some(v) => {
                        e.u8(1);
                        e.i64(*v);
                    }
                }
                e.str(dtype);
                e.u64(2);
                e.u64(shape[0]);
                e.u64(shape[1]);
                e.str(digest);
            }
        }
    }
}

/// Every input of a translation key, in key order; also the human-readable record kept beside
/// each cache entry so that a miss can be explained (ADR 0003).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInputs {
    /// [`KEY_FORMAT_VERSION`].
    pub key_format_version: u32,
    /// The table digest format version (`gridkey_digest::DIGEST_FORMAT_VERSION`).
    pub digest_format_version: u32,
    /// The frontend that translates (name and version).
    pub frontend: Frontend,
    /// The program's name (also what `gridkey explain --miss` groups entries by).
    pub program: String,
    /// The program's stable encoding, as lowercase hex; the key hashes this text (ADR 0003).
    pub program_encoding: String,
    /// Translation options, hashed sorted by name.
    pub options: TranslationOptions,
    /// The offset-provider entries, in provider order (order is an input).
    pub offsets: Vec<OffsetInput>,
}

/// `bytes` as lowercase hex, two digits per byte, without going through `fmt` per byte (keys
/// are computed on every compilation request, so this is on the hot path of `cargo xtask bench`'s
/// `key` case).
fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

impl KeyInputs {
    /// The inputs of translating `program` (with its stable `encoding`) by `frontend` with
    /// `options` against the compile-time offset provider `provider`.
    pub fn new(
        frontend: &Frontend,
        program: &str,
        encoding: &[u8],
        options: &TranslationOptions,
        provider: &CompileTimeOffsetProvider,
    ) -> Self {
        let offsets = provider
            .entries()
            .iter()
            .map(|(offset, entry)| match entry {
                Entry::Dimension(d) => OffsetInput::Dimension {
                    offset: offset.clone(),
                    name: d.name().to_owned(),
                    dimension_kind: d.kind().as_str().to_owned(),
                },
                Entry::Gather(c) => OffsetInput::Gather {
                    offset: offset.clone(),
                    domain: c.domain().name().to_owned(),
                    local: c.local().name().to_owned(),
                    codomain: c.codomain().name().to_owned(),
                    skip_value: c.skip_value(),
                    dtype: c.dtype().typestr().to_owned(),
                    shape: [c.shape()[0] as u64, c.shape()[1] as u64],
                    digest: c.digest().to_hex(),
                },
            })
            .collect();
        Self {
            key_format_version: KEY_FORMAT_VERSION,
            digest_format_version: DIGEST_FORMAT_VERSION,
            frontend: frontend.clone(),
            program: program.to_owned(),
            program_encoding: lower_hex(encoding),
            options: options.clone(),
            offsets,
        }
    }

    /// The key of these inputs, [`TranslationKey::of`]`(self)`.
    pub fn key(&self) -> TranslationKey {
        TranslationKey::of(self)
    }
}

impl KeyEncode for KeyInputs {
    fn encode_key(&self, e: &mut KeyEncoder) {
        // Destructured, so that a new field that is not encoded here does not compile.
        let KeyInputs {
            key_format_version,
            digest_format_version,
            frontend: Frontend { name, version, fingerprint },
            program,
            program_encoding,
            options,
            offsets,
        } = self;
        e.u32(*key_format_version);
        e.u32(*digest_format_version);
        e.str(name);
        e.str(version);
        e.str(fingerprint);
        e.str(program);
        e.str(program_encoding);
        e.u64(options.len() as u64);
        for (name, value) in options {
            e.str(name);
            e.str(value);
        }
        e.u64(offsets.len() as u64);
        for offset in offsets {
            offset.encode_key(e);
        }
    }
}

/// Why a lookup missed; a miss is never an error (ADR 0012): the caller translates and puts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Miss {
    /// No entry under this key.
    Absent,
    /// An entry exists but is unreadable, truncated, corrupt, for another key, or of another
    /// format version; it will be replaced by the next [`TranslationCache::put`].
    Invalid(String),
}

/// The persistent translation cache: `<cache>/translation-v2/<hex[0..2]>/<hex>.bin`, each
/// entry with its key-input record `<hex>.json` beside it.
///
/// Entry format (ENTRY_FORMAT_VERSION 1): `b"GKTE"`, version u32 LE, the 16 key bytes,
/// payload length u64 LE, the payload, then xxh3_64 of everything before it as u64 LE.
#[derive(Clone, Debug)]
pub struct TranslationCache {
    dir: PathBuf,
    fault: Option<gridkey_fs::Fault>,
}

impl TranslationCache {
    /// Opens (creating if needed) `<cache_dir>/translation-v2`.
    ///
    /// Errors: [`FingerprintError::Directory`].
    pub fn open(cache_dir: &Path) -> Result<Self, FingerprintError> {
        let dir = cache_dir.join(TRANSLATION_DIR);
        gridkey_fs::create_private_dir_all(&dir)
            .map_err(|source| FingerprintError::Directory { path: dir.clone(), source })?;
        Ok(Self { dir, fault: None })
    }

    /// The translation cache `<cache_dir>/translation-v2` of a read-only site cache (ADR 0036):
    /// nothing is created, and a missing directory is a cache in which every key misses. Only
    /// looked up; [`SiteCache`] serves it as a tier that is never written.
    pub fn open_read_only(cache_dir: &Path) -> Self {
        Self { dir: cache_dir.join(TRANSLATION_DIR), fault: None }
    }

    /// This cache with `fault` (the fault matrix's hook, parsed by the caller at its edge;
    /// `None` in normal use) passed to every write it makes ([`gridkey_fs::write_atomic`]).
    pub fn with_fault(mut self, fault: Option<gridkey_fs::Fault>) -> Self {
        self.fault = fault;
        self
    }

    /// The cache directory, `<cache_dir>/translation-v2`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the entry for `key`: `<dir>/<hex[0..2]>/<hex>.bin`.
    pub fn entry_path(&self, key: &TranslationKey) -> PathBuf {
        let hex = key.to_hex();
        self.dir.join(&hex[..2]).join(format!("{hex}.bin"))
    }

    /// Path of the key-input record for `key`: `<dir>/<hex[0..2]>/<hex>.json`.
    pub fn record_path(&self, key: &TranslationKey) -> PathBuf {
        self.entry_path(key).with_extension("json")
    }

    /// The payload stored under `key`, or why there is none. Never fails: an entry that cannot
    /// be read or checked is a [`Miss::Invalid`].
    pub fn get(&self, key: &TranslationKey) -> Result<Vec<u8>, Miss> {
        let path = self.entry_path(key);
        let read = fs::File::open(&path).and_then(|mut f| {
            let mut bytes = Vec::new();
            io::Read::read_to_end(&mut f, &mut bytes)?;
            // Marks the entry as used now, for the collector's live-run rule (ADR 0026).
            gridkey_fs::touch(&f);
            Ok(bytes)
        });
        let bytes = match read {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Miss::Absent),
            Err(e) => return Err(Miss::Invalid(format!("{}: {e}", path.display()))),
        };
        decode_entry(key, &bytes).map(<[u8]>::to_vec).map_err(|why| Miss::Invalid(format!("{}: {why}", path.display())))
    }

    /// Stores `payload` under the key of `inputs`, with the record of `inputs` beside it.
    /// Both are written atomically ([`gridkey_fs::write_atomic`]: temp file, `sync_all`,
    /// read-only, rename; ADR 0047), the record first; when the
    /// entry cannot be written (full disk) the record is removed again, so nothing is left.
    ///
    /// Errors: [`FingerprintError::Write`].
    pub fn put(&self, inputs: &KeyInputs, payload: &[u8]) -> Result<TranslationKey, FingerprintError> {
        let key = inputs.key();
        let record_path = self.write_record(inputs, &key)?;
        let path = self.entry_path(&key);
        let entry = encode_entry(&key, payload);
        if let Err(source) = gridkey_fs::write_atomic(&path, self.fault.as_ref(), |out| out.write_all(&entry)) {
            // Leave nothing behind (ADR 0012): a record without its entry serves no one. A
            // concurrent writer of the same key that lost its record rewrites it on its next miss.
            if !path.is_file() {
                let _ = fs::remove_file(&record_path);
            }
            return Err(FingerprintError::Write { path, source });
        }
        Ok(key)
    }

    /// [`Self::put`] of several entries as one batch of atomic writes
    /// ([`gridkey_fs::write_atomic_all`], ADR 0049): what a node writes when a round trip to the
    /// shared tier brought several entries at once. Every record is renamed before any entry;
    /// an entry that cannot be written has its record removed again, as in [`Self::put`].
    ///
    /// Returns, in the order of `items`, the key stored or [`FingerprintError::Write`] naming the
    /// file that could not be written; the others are stored all the same.
    pub fn put_all(&self, items: &[(&KeyInputs, &[u8])]) -> Vec<Result<TranslationKey, FingerprintError>> {
        let keys: Vec<TranslationKey> = items.iter().map(|(inputs, _)| inputs.key()).collect();
        let records: Vec<Vec<u8>> = items.iter().map(|(inputs, _)| record_bytes(inputs)).collect();
        let entries: Vec<Vec<u8>> =
            keys.iter().zip(items).map(|(key, (_, payload))| encode_entry(key, payload)).collect();
        let record_paths: Vec<PathBuf> = keys.iter().map(|k| self.record_path(k)).collect();
        let entry_paths: Vec<PathBuf> = keys.iter().map(|k| self.entry_path(k)).collect();
        let files: Vec<(&Path, &[u8])> = record_paths
            .iter()
            .zip(&records)
            .chain(entry_paths.iter().zip(&entries))
            .map(|(path, bytes)| (path.as_path(), bytes.as_slice()))
            .collect();
        let mut written = gridkey_fs::write_atomic_all(&files, self.fault.as_ref()).into_iter();
        let record_written: Vec<io::Result<u64>> = written.by_ref().take(items.len()).collect();
        keys.into_iter()
            .zip(record_written.into_iter().zip(written))
            .zip(record_paths.into_iter().zip(entry_paths))
            .map(|((key, (record, entry)), (record_path, path))| match (record, entry) {
                (Err(source), entry) => {
                    // As in `put`, no entry is left without its record.
                    if entry.is_ok() {
                        let _ = fs::remove_file(&path);
                    }
                    Err(FingerprintError::Write { path: record_path, source })
                }
                (Ok(_), Err(source)) => {
                    if !path.is_file() {
                        let _ = fs::remove_file(&record_path);
                    }
                    Err(FingerprintError::Write { path, source })
                }
                (Ok(_), Ok(_)) => Ok(key),
            })
            .collect()
    }

    /// Writes the key-input record of `inputs` beside the entry of `key` (atomically) and
    /// returns its path.
    ///
    /// Errors: [`FingerprintError::Write`].
    pub fn write_record(&self, inputs: &KeyInputs, key: &TranslationKey) -> Result<PathBuf, FingerprintError> {
        let record = record_bytes(inputs);
        let record_path = self.record_path(key);
        gridkey_fs::write_atomic(&record_path, self.fault.as_ref(), |out| out.write_all(&record))
            .map_err(|source| FingerprintError::Write { path: record_path.clone(), source })?;
        Ok(record_path)
    }

    /// Removes the entry of `key` and its key-input record, best effort: what a caller does with
    /// a translation whose kernel computed wrong results, so that it is not served again.
    pub fn remove(&self, key: &TranslationKey) {
        let _ = fs::remove_file(self.entry_path(key));
        let _ = fs::remove_file(self.record_path(key));
    }

    /// Every key that has a key-input record in the cache, sorted; unreadable directories and
    /// names that are not keys are passed over.
    pub fn keys(&self) -> Vec<TranslationKey> {
        keys_under(&self.dir, ".json")
    }

    /// The keys whose hex text starts with `prefix` (case-insensitive), sorted.
    pub fn keys_with_prefix(&self, prefix: &str) -> Vec<TranslationKey> {
        let prefix = prefix.to_ascii_lowercase();
        self.keys().into_iter().filter(|k| k.to_hex().starts_with(&prefix)).collect()
    }

    /// The key-input record stored beside `key`, if readable.
    pub fn record(&self, key: &TranslationKey) -> Option<KeyInputs> {
        let bytes = fs::read(self.record_path(key)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Every key named by a file `<dir>/<shard>/<32 hex digits><suffix>`, sorted: the listing of the
/// translation cache (by its records) and of GT4Py's store (by its entries). Unreadable
/// directories and names that are not keys are passed over.
pub(crate) fn keys_under(dir: &Path, suffix: &str) -> Vec<TranslationKey> {
    let mut out = Vec::new();
    let Ok(shards) = fs::read_dir(dir) else { return out };
    for shard in shards.flatten() {
        let Ok(files) = fs::read_dir(shard.path()) else { continue };
        for file in files.flatten() {
            let name = file.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(suffix)) else { continue };
            if let Ok(key) = stem.parse::<TranslationKey>() {
                out.push(key);
            }
        }
    }
    out.sort();
    out
}

/// The key-input record of `inputs` as stored beside its entry: pretty JSON of [`KeyInputs`].
fn record_bytes(inputs: &KeyInputs) -> Vec<u8> {
    serde_json::to_vec_pretty(inputs).expect("key inputs serialise")
}

/// The bytes of an entry file for `payload` under `key`, entry format
/// [`ENTRY_FORMAT_VERSION`]: [`ENTRY_MAGIC`], the version (u32 LE), the 16 key bytes, the
/// payload length (u64 LE), the payload, then xxh3_64 of all of that (u64 LE); 40 bytes more
/// than the payload.
pub fn encode_entry(key: &TranslationKey, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 40);
    out.extend_from_slice(ENTRY_MAGIC);
    out.extend_from_slice(&ENTRY_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let check = xxh3_64(&out);
    out.extend_from_slice(&check.to_le_bytes());
    out
}

/// The payload of entry bytes from [`encode_entry`], checked against `key`: magic, version,
/// key, length and checksum.
///
/// Errors: [`FingerprintError::BadEntry`] with the [`EntryProblem`] (too short, bad magic,
/// another version or key, a length that does not match, a checksum mismatch);
/// [`TranslationCache::get`] makes it a [`Miss::Invalid`].
pub fn decode_entry<'a>(key: &TranslationKey, bytes: &'a [u8]) -> Result<&'a [u8], FingerprintError> {
    const HEAD: usize = 4 + 4 + 16 + 8;
    let bad = |problem| FingerprintError::BadEntry { key: *key, problem };
    if bytes.len() < HEAD + 8 {
        return Err(bad(EntryProblem::TooShort { len: bytes.len() as u64 }));
    }
    if &bytes[..4] != ENTRY_MAGIC {
        return Err(bad(EntryProblem::Magic));
    }
    let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if version != ENTRY_FORMAT_VERSION {
        return Err(bad(EntryProblem::Version { found: version }));
    }
    if bytes[8..24] != key.0 {
        return Err(bad(EntryProblem::OtherKey));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[24..32]);
    let len = u64::from_le_bytes(len);
    let holds = (bytes.len() - HEAD - 8) as u64;
    if len != holds {
        return Err(bad(EntryProblem::Length { announced: len, holds }));
    }
    let (body, check) = bytes.split_at(bytes.len() - 8);
    if xxh3_64(body).to_le_bytes() != check {
        return Err(bad(EntryProblem::Checksum));
    }
    Ok(&body[HEAD..])
}

/// xxh3_128 of `bytes` as 32 hex digits: the digest used for program encodings and sources.
pub fn content_digest(bytes: &[u8]) -> String {
    format!("{:032x}", xxh3_128(bytes))
}

/// One key input that differs between two keys: which input, and its value in each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputChange {
    /// The input, e.g. `offset C2E: table digest`, `option opt_level`, `frontend version`.
    pub input: String,
    /// Its value under the first key (`absent` when it has none).
    pub before: String,
    /// Its value under the second key (`absent` when it has none).
    pub after: String,
}

impl fmt::Display for InputChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {}", self.input, self.before, self.after)
    }
}

/// The inputs that differ between `a` and `b`, in key order (versions, frontend, program,
/// options, then offsets by name, then their order). Empty when the inputs are identical.
pub fn diff_inputs(a: &KeyInputs, b: &KeyInputs) -> Vec<InputChange> {
    let mut out = Vec::new();
    let mut push = |input: &str, before: String, after: String| {
        if before != after {
            out.push(InputChange { input: input.to_owned(), before, after });
        }
    };
    push("key format version", a.key_format_version.to_string(), b.key_format_version.to_string());
    push("digest format version", a.digest_format_version.to_string(), b.digest_format_version.to_string());
    push("frontend name", a.frontend.name.clone(), b.frontend.name.clone());
    push("frontend version", a.frontend.version.clone(), b.frontend.version.clone());
    push("frontend fingerprint", a.frontend.fingerprint.clone(), b.frontend.fingerprint.clone());
    push("program name", a.program.clone(), b.program.clone());
    push(
        "program encoding digest",
        content_digest(a.program_encoding.as_bytes()),
        content_digest(b.program_encoding.as_bytes()),
    );
    let names: std::collections::BTreeSet<&String> = a.options.keys().chain(b.options.keys()).collect();
    for name in names {
        let value = |o: &TranslationOptions| o.get(name).cloned().unwrap_or_else(|| "absent".to_owned());
        push(&format!("option {name}"), value(&a.options), value(&b.options));
    }
    let find = |k: &KeyInputs, name: &str| k.offsets.iter().find(|o| offset_name(o) == name).cloned();
    let mut seen = std::collections::BTreeSet::new();
    for name in a.offsets.iter().chain(&b.offsets).map(offset_name) {
        if !seen.insert(name.to_owned()) {
            continue;
        }
        let (x, y) = (find(a, name), find(b, name));
        for (field, before, after) in offset_fields(x.as_ref(), y.as_ref()) {
            push(&format!("offset {name}: {field}"), before, after);
        }
    }
    let order = |k: &KeyInputs| k.offsets.iter().map(offset_name).collect::<Vec<_>>().join(", ");
    let sorted = |k: &KeyInputs| {
        let mut names: Vec<&str> = k.offsets.iter().map(offset_name).collect();
        names.sort_unstable();
        names.join(", ")
    };
    // Order matters only when the same names are there in another order.
    if sorted(a) == sorted(b) {
        push("offset order", order(a), order(b));
    }
    out
}

fn offset_name(o: &OffsetInput) -> &str {
    match o {
        OffsetInput::Dimension { offset, .. } | OffsetInput::Gather { offset, .. } => offset,
    }
}

/// `(field, before, after)` for each field of an offset entry; `absent` for a missing entry.
fn offset_fields(a: Option<&OffsetInput>, b: Option<&OffsetInput>) -> Vec<(&'static str, String, String)> {
    fn fields(o: Option<&OffsetInput>) -> Vec<(&'static str, String)> {
        match o {
            None => vec![("entry", "absent".to_owned())],
            Some(OffsetInput::Dimension { name, dimension_kind, .. }) => {
                vec![("entry", "dimension".to_owned()), ("dimension", format!("{name} ({dimension_kind})"))]
            }
            Some(OffsetInput::Gather { domain, local, codomain, skip_value, dtype, shape, digest, .. }) => vec![
                ("entry", "gather".to_owned()),
                ("domain", format!("({domain}, {local})")),
                ("codomain", codomain.clone()),
                ("skip value", skip_value.map_or("none".to_owned(), |v| v.to_string())),
                ("dtype", dtype.clone()),
                ("shape", format!("({}, {})", shape[0], shape[1])),
                ("table digest", digest.clone()),
            ],
        }
    }
    let (fa, fb) = (fields(a), fields(b));
    if fa[0].1 != fb[0].1 {
        return vec![("entry", fa[0].1.clone(), fb[0].1.clone())];
    }
    fa.into_iter().zip(fb).skip(1).map(|((f, x), (_, y))| (f, x, y)).collect()
}
