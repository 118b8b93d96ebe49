//! `gridkey cache retract`: an operator takes translations back from both tiers (ADR 0030).
//!
//! Each translation key (given as a unique prefix of a locally cached key, as `gridkey explain`
//! takes it, or as all 32 hex digits; or computed for a program on a grid with options, as
//! `gridkey explain --miss` computes it) loses its translation entry and the kernel library this
//! compiler built from it, on the shared tier (a designated writer deletes them) and in the
//! local cache directory. Libraries of other compiler identities are named by keys this node
//! cannot compute; they stay until their own writers retract them or their translation entry's
//! absence makes every node translate and build again (a library is found only through its
//! translation's source).
//!
//! A key may also name GT4Py's objects (ADR 0040, ADR 0041): a GT4Py translation entry or
//! extension of the cache directory's `gt4py-v1/` (a prefix resolves against those keys too),
//! or any 32 hex digits. Every key loses the GT4Py translation entry and the GT4Py extension
//! stored under it, on the shared tier and locally, as it loses the CLI's objects.

use std::path::{Path, PathBuf};

use gridkey_fingerprint::gt4py::{Gt4pyKind, Gt4pyStore};
use gridkey_fingerprint::{TranslationCache, TranslationKey, TranslationOptions};
use gridkey_remote::{library_key, Fetched, Kind, Reject, Retracted};
use gridkey_settings::Settings;
use serde::{Deserialize, Serialize};

use crate::AppError;

/// What to retract.
#[derive(Clone, Debug)]
pub enum RetractTarget {
    /// Translation keys, each a unique prefix of a locally cached key or 32 hex digits.
    Keys(Vec<String>),
    /// The key of `program` on `grid` with `options`, as `gridkey explain --miss` computes it.
    Program {
        /// One of the shipped programs.
        name: String,
        /// The grid file.
        grid: PathBuf,
        /// Translation options.
        options: TranslationOptions,
    },
}

/// What `gridkey cache retract` removed for one key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetractedKey {
    /// The translation key, 32 hex digits.
    pub key: String,
    /// The program of the translation, when known (from the key-input record or `--program`).
    pub program: Option<String>,
    /// The shared tier's translation entry was deleted.
    pub remote_entry: bool,
    /// The shared tier's kernel library (this compiler's) was deleted.
    pub remote_library: bool,
    /// The local translation entry was removed.
    pub local_entry: bool,
    /// The local kernel library (this compiler's) was removed.
    pub local_library: bool,
    /// The GT4Py objects of the key deleted from the shared tier: `translation`, `extension`.
    #[serde(default)]
    pub remote_gt4py: Vec<String>,
    /// The GT4Py entries of the key removed from the local store: `translation`, `extension`.
    #[serde(default)]
    pub local_gt4py: Vec<String>,
    /// Why this node could not name the kernel library of the key, when the local cache holds
    /// no readable entry and the shared tier's entry, which this retraction deleted, failed a
    /// check here (forged, damaged, or signed by a key not trusted here) or was not read (this
    /// writer trusts no key): its library, if one was uploaded, was not deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_unnamed: Option<String>,
}

/// What `gridkey cache retract` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetractReport {
    /// The shared tier, password hidden.
    pub remote: String,
    /// One row per key, in the order given.
    pub keys: Vec<RetractedKey>,
}

/// Retracts `target` from the shared tier of `settings` and from its local cache directory.
///
/// Errors: [`AppError::NoRemote`] without a shared tier; [`AppError::Remote`] when it is
/// misconfigured; [`AppError::RemoteUnreachable`] when it cannot be reached, fails, or this
/// client is not a designated writer; [`AppError::UnknownKey`] / [`AppError::AmbiguousKey`] for
/// a prefix that names no or several local keys; those of `gridkey explain --miss` for a
/// program.
pub fn retract(settings: &Settings, target: &RetractTarget) -> Result<RetractReport, AppError> {
    let remote_settings = settings.remote.as_ref().ok_or(AppError::NoRemote)?;
    let settings = crate::task_settings(settings)?;
    let remote = crate::push::connect_writer(remote_settings, "retract")?;
    let cache = TranslationCache::open(settings.cache_dir())?;
    let gt4py = Gt4pyStore::open_existing(settings.cache_dir());
    let (keys, given): (Vec<TranslationKey>, Option<(String, TranslationOptions)>) = match target {
        RetractTarget::Keys(prefixes) => {
            (prefixes.iter().map(|p| key_of(&cache, &gt4py, p)).collect::<Result<_, _>>()?, None)
        }
        RetractTarget::Program { name, grid, options } => {
            let e = crate::explain::explain_miss(settings.cache_dir(), name, grid, options)?;
            let key =
                e.key.parse().map_err(|_| AppError::UnknownKey { prefix: e.key.clone(), dir: cache.dir().into() })?;
            (vec![key], Some((name.clone(), options.clone())))
        }
    };
    let identity = settings.compiler().identity();
    let mut rows = Vec::new();
    let mut libraries: Vec<Option<(PathBuf, [u8; 16])>> = Vec::new();
    for key in &keys {
        let record = cache.record(key);
        let program = record.as_ref().map(|r| r.program.clone()).or_else(|| given.as_ref().map(|(n, _)| n.clone()));
        let options = record.map(|r| r.options).or_else(|| given.as_ref().map(|(_, o)| o.clone())).unwrap_or_default();
        // The source names the library: the local entry's, else the shared tier's. A shared
        // entry that fails a check here cannot be trusted to name it, and one this client does
        // not read names nothing: said (where the entry was there to delete), not guessed.
        let mut library_unnamed = None;
        let source = cache.get(key).ok().or_else(|| match remote.get(Kind::TranslationEntry, key.as_bytes()) {
            Fetched::Hit(payload) => Some(payload),
            Fetched::Rejected(Reject::NotTrusted) => {
                library_unnamed = Some(unnamed(
                    "this writer trusts no key (GRIDKEY_REMOTE_TRUSTED_KEYS is not set), so it did not read the \
                     shared tier's translation entry",
                ));
                None
            }
            Fetched::Rejected(why) => {
                library_unnamed =
                    Some(unnamed(&format!("the shared tier's translation entry failed a check here ({why})")));
                None
            }
            _ => None,
        });
        let library = match source.as_deref().map(std::str::from_utf8) {
            Some(Ok(source)) => {
                gridkey_stencil::library_build_key(source, &options, settings.compiler()).ok().map(|build_key| {
                    let path = settings.cache_dir().join(gridkey_stencil::BUILD_DIR).join(format!("{build_key}.so"));
                    (path, library_key(&build_key, identity))
                })
            }
            _ => None,
        };
        libraries.push(library);
        rows.push(RetractedKey { key: key.to_hex(), program, library_unnamed, ..Default::default() });
    }
    let entry_keys: Vec<[u8; 16]> = keys.iter().map(|k| *k.as_bytes()).collect();
    let library_keys: Vec<[u8; 16]> = libraries.iter().flatten().map(|(_, k)| *k).collect();
    // Libraries first, as `cache push` uploads them first: a reader never finds an entry
    // without its library because of a retraction half done.
    let deleted_libraries = remote.delete_many(Kind::KernelLibrary, &library_keys);
    // GT4Py's extensions before its translation entries, for the same reason.
    let deleted_gt4py: Vec<(Gt4pyKind, Vec<Retracted>)> = [Gt4pyKind::Extension, Gt4pyKind::Translation]
        .into_iter()
        .map(|kind| (kind, remote.delete_many(kind.object_kind(), &entry_keys)))
        .collect();
    let deleted_entries = remote.delete_many(Kind::TranslationEntry, &entry_keys);
    if !remote.is_on() {
        return Err(crate::push::stopped(&remote, "retract"));
    }
    let mut deleted_libraries = deleted_libraries.into_iter();
    for ((row, library), (key, deleted)) in rows.iter_mut().zip(&libraries).zip(keys.iter().zip(deleted_entries)) {
        row.remote_entry = deleted == Retracted::Deleted;
        // Said only of an entry this retraction deleted: a key with no shared entry had none to
        // name a library with.
        if !row.remote_entry {
            row.library_unnamed = None;
        }
        if let Some((path, _)) = library {
            row.remote_library = deleted_libraries.next() == Some(Retracted::Deleted);
            row.local_library = remove(path);
        }
        row.local_entry = cache.get(key).is_ok() || cache.record(key).is_some();
        cache.remove(key);
        row.local_entry &= cache.get(key).is_err();
    }
    for (i, (row, key)) in rows.iter_mut().zip(&keys).enumerate() {
        for (kind, deleted) in &deleted_gt4py {
            if deleted.get(i) == Some(&Retracted::Deleted) {
                row.remote_gt4py.push(kind.dir().to_owned());
            }
            let path = gt4py.entry_path(*kind, key);
            if path.is_file() && std::fs::remove_file(&path).is_ok() {
                row.local_gt4py.push(kind.dir().to_owned());
            }
        }
    }
    Ok(RetractReport { remote: remote.shown_url().to_owned(), keys: rows })
}

/// [`RetractedKey::library_unnamed`]: `cause`, and what becomes of the library and what to do.
fn unnamed(cause: &str) -> String {
    format!(
        "{cause}, so it cannot name the kernel library built from it, which stays on the shared tier if one was \
         uploaded: a node that translates the key again downloads it and checks it against the reference like any \
         download (a writer retracts it if it fails); to delete it now, retract the key from a writer whose local \
         cache holds the entry"
    )
}

/// The key named by `text`: all 32 hex digits (cached here or not), else a unique prefix of a
/// locally cached key: a translation entry's, or a GT4Py translation entry's or extension's.
fn key_of(cache: &TranslationCache, gt4py: &Gt4pyStore, text: &str) -> Result<TranslationKey, AppError> {
    if let Ok(key) = text.parse::<TranslationKey>() {
        if text.len() == 32 {
            return Ok(key);
        }
    }
    let prefix = text.to_ascii_lowercase();
    let mut matches = cache.keys_with_prefix(&prefix);
    for kind in Gt4pyKind::ALL {
        matches.extend(gt4py.keys(kind).into_iter().filter(|k| k.to_hex().starts_with(&prefix)));
    }
    matches.sort();
    matches.dedup();
    crate::explain::the_one(text, matches, cache.dir())
}

/// Removes the library at `path` unless a running process has it loaded (ADR 0009); whether it
/// was removed.
fn remove(path: &Path) -> bool {
    gridkey_fs::remove_if_unlocked(path).unwrap_or(false)
}
