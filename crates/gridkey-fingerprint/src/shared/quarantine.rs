//! The objects of the shared tier that this node quarantined (ADR 0030): a read-only client
//! cannot retract an object that failed its check here (a kernel that fails the Rust reference,
//! a library or a GT4Py extension that does not load), so it keeps the object's name and trailing checksum in
//! [`QUARANTINE_FILE`] in its cache directory and does not fetch that object again.
//!
//! A quarantine ends when the object under the name changes: before a fetch, the protocol reads
//! only the trailing checksum of each quarantined object (16 bytes); another checksum (a writer
//! uploaded a new object, or retracted the bad one) drops the entry and the object is fetched as
//! usual. So no node fetches the same failed object twice, and a repaired key is used again.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// File of the quarantined objects in the cache directory (JSON: `{"objects": {NAME: {"checksum",
/// "reason"}}}`, NAME the object's Redis name); its lock is `remote-quarantine-v1.lock`.
pub const QUARANTINE_FILE: &str = gridkey_fs::CacheBucket::Quarantine.name();

/// One quarantined object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantined {
    /// The object's trailing checksum (32 hex digits): the quarantine holds while the object
    /// under the name has this checksum.
    pub checksum: String,
    /// Why it was quarantined (the check it failed here).
    pub reason: String,
}

/// The quarantined objects of one cache directory, by Redis object name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    /// Object name to its quarantine.
    pub objects: BTreeMap<String, Quarantined>,
}

impl Quarantine {
    /// The quarantine of `cache_dir`; empty when there is none or the file cannot be read (then
    /// a bad object is fetched once more, and quarantined again).
    pub fn load(cache_dir: &Path) -> Self {
        fs::read(cache_dir.join(QUARANTINE_FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// Applies `change` to the quarantine of `cache_dir` under an exclusive lock of
    /// `remote-quarantine-v1.lock` (so that concurrent runs on one cache directory keep each
    /// other's entries) and writes it atomically; returns the quarantine written.
    ///
    /// Errors: the lock or the file cannot be written.
    pub fn update(cache_dir: &Path, change: impl FnOnce(&mut Quarantine)) -> io::Result<Quarantine> {
        let lock = gridkey_fs::lock::open_lock_file(&cache_dir.join("remote-quarantine-v1.lock"))?;
        gridkey_fs::lock::lock_exclusive(&lock)?;
        let mut q = Self::load(cache_dir);
        change(&mut q);
        let text = serde_json::to_vec_pretty(&q).map_err(io::Error::other)?;
        gridkey_fs::write_atomic(&cache_dir.join(QUARANTINE_FILE), None, |out| out.write_all(&text))?;
        Ok(q)
    }
}

/// Lower-case hex digits of `bytes` (an object checksum in [`Quarantined::checksum`]): the one
/// hex encoder of the workspace, `gridkey_digest::hex`.
pub use gridkey_digest::hex;
