//! `gridkey cache push`: seeds the shared tier from a local cache (ADR 0018, ADR 0031): every
//! translation entry that has its key-input record and checks, and the kernel library built
//! from it with the options of that record by this compiler (under this compiler's identity),
//! when that library checks as it does before every load.
//!
//! A writer signs what it pushes, so push checks what it signs: it refuses a cache directory
//! that others can write ([`crate::cache::others_can_write`]), uploads a library only when its
//! checksum trailer matches the very bytes uploaded ([`gridkey_stencil::Kernel::check_library`])
//! and an entry only when its own checksum matches and its library (if built) checks; every
//! object left out is counted and named.
//!
//! GT4Py's entries of the same cache directory (`gt4py-v1/`, ADR 0040) go too, as the objects
//! of GT4Py's kinds (ADR 0041): each translation entry and extension whose entry checks (its
//! key, length and checksum; an extension's bundle of files), extensions first. What failed its
//! check where it was made (a module that did not load, a translation that did not unpickle)
//! was removed from the store then, so what is left is what the adapter would upload itself.

use gridkey_fingerprint::gt4py::{Gt4pyKind, Gt4pyStore};
use gridkey_fingerprint::TranslationCache;
use gridkey_remote::{library_key, Kind, Remote, Stored};
use gridkey_settings::{RemoteSettings, Settings};
use serde::{Deserialize, Serialize};

use crate::AppError;

/// Objects uploaded per round trip.
const BATCH: usize = 64;

/// What `gridkey cache push` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushReport {
    /// The shared tier, password hidden.
    pub remote: String,
    /// What this writer's readers take from the shared tier ([`Remote::trust_statement`]).
    pub trust: String,
    /// Translation entries uploaded.
    pub entries: u64,
    /// Kernel libraries uploaded.
    pub libraries: u64,
    /// GT4Py translation entries uploaded (`gt4py-v1/translation`).
    #[serde(default)]
    pub gt4py_translations: u64,
    /// GT4Py extensions uploaded (`gt4py-v1/extension`).
    #[serde(default)]
    pub gt4py_extensions: u64,
    /// Object bytes uploaded.
    pub bytes: u64,
    /// Entries not uploaded (translation entries, GT4Py's translation entries and extensions):
    /// unreadable, not checked, without a record, with a library that fails its check, or over
    /// the size limit.
    pub skipped: u64,
    /// Each object left out, and why (libraries that fail their check included).
    pub skipped_objects: Vec<PushSkip>,
}

/// One object `gridkey cache push` left out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSkip {
    /// The object's kind: `translation entry`, `kernel library`, `GT4Py translation entry` or
    /// `GT4Py extension` ([`Kind::as_str`]).
    pub kind: String,
    /// The key (32 hex digits) or the library's path.
    pub name: String,
    /// Why it was left out.
    pub reason: String,
}

/// Connects to the shared tier of `remote` for the cache command `command` (`push`,
/// `retract`), which only a designated writer may run.
///
/// Errors: [`AppError::Remote`] when it is misconfigured; [`AppError::RemoteUnreachable`] when
/// it cannot be reached (the tier's warning) or this client is not a designated writer (the
/// message names `command` and how to be one).
pub(crate) fn connect_writer(remote: &RemoteSettings, command: &str) -> Result<Remote, AppError> {
    let remote = Remote::connect(remote)?;
    if !remote.is_on() {
        return Err(stopped(&remote, command));
    }
    if !remote.is_writer() {
        return Err(AppError::RemoteUnreachable(format!(
            "{} is read-only for this client: {command} needs a designated writer (--remote-writer or GRIDKEY_REMOTE_WRITER=1)",
            remote.shown_url()
        )));
    }
    Ok(remote)
}

/// The error of `cache {command}` once the shared tier went off: what failed, and what to do
/// (a command that writes to the tier cannot go on with the local cache, as a run does).
pub(crate) fn stopped(remote: &Remote, command: &str) -> AppError {
    let failed = remote.failure().unwrap_or_else(|| format!("shared cache {}: the tier went off", remote.shown_url()));
    AppError::RemoteUnreachable(format!(
        "{failed}; cache {command} stopped there: run it again once the server answers, as a Redis user that may \
         write (a designated writer's ACL user may SET and DEL)"
    ))
}

/// Uploads the local cache of `settings` to its shared tier.
///
/// Errors: [`AppError::NoRemote`] without a shared tier; [`AppError::Remote`] when it is
/// misconfigured; [`AppError::UnsafePushCache`] when others can write the cache directory or
/// one of its stores; [`AppError::RemoteUnreachable`] when it cannot be reached or fails (what
/// was uploaded before stays), or when this client is not a designated writer.
pub fn push(settings: &Settings) -> Result<PushReport, AppError> {
    let remote_settings = settings.remote.as_ref().ok_or(AppError::NoRemote)?;
    if let Some((path, problem)) = crate::cache::others_can_write(&settings.cache_dir).into_iter().next() {
        return Err(AppError::UnsafePushCache { path, problem });
    }
    let settings = crate::task_settings(settings)?;
    let remote = connect_writer(remote_settings, "push")?;
    let compiler = settings.compiler();
    let cache = TranslationCache::open(settings.cache_dir())?;
    let mut report =
        PushReport { remote: remote.shown_url().to_owned(), trust: remote.trust_statement(), ..Default::default() };
    let skip = |report: &mut PushReport, kind: Kind, name: String, reason: String| {
        // A library is counted with the entry it belongs to.
        if kind != Kind::KernelLibrary {
            report.skipped += 1;
        }
        report.skipped_objects.push(PushSkip { kind: kind.as_str().to_owned(), name, reason });
    };
    let mut entries: Vec<([u8; 16], Vec<u8>)> = Vec::new();
    let mut libraries: Vec<([u8; 16], Vec<u8>)> = Vec::new();
    for key in cache.keys() {
        // `get` checks the entry's own key and checksum.
        let payload = match cache.get(&key) {
            Ok(payload) => payload,
            Err(miss) => {
                let reason = match miss {
                    gridkey_fingerprint::Miss::Invalid(why) => why,
                    gridkey_fingerprint::Miss::Absent => "it went away while pushing".to_owned(),
                };
                skip(&mut report, Kind::TranslationEntry, key.to_string(), reason);
                continue;
            }
        };
        let Some(record) = cache.record(&key) else {
            skip(&mut report, Kind::TranslationEntry, key.to_string(), "it has no key-input record".to_owned());
            continue;
        };
        if let Ok(source) = std::str::from_utf8(&payload) {
            let build_key = gridkey_stencil::library_build_key(source, &record.options, compiler);
            if let Ok(build_key) = build_key {
                let path = settings.cache_dir().join(gridkey_stencil::BUILD_DIR).join(format!("{build_key}.so"));
                if let Ok(bytes) = std::fs::read(&path) {
                    // The bytes checked are the bytes uploaded.
                    if let Err(e) = gridkey_stencil::Kernel::check_library(&path, &bytes) {
                        let reason = e.to_string();
                        skip(&mut report, Kind::KernelLibrary, path.display().to_string(), reason.clone());
                        skip(
                            &mut report,
                            Kind::TranslationEntry,
                            key.to_string(),
                            format!("its library fails: {reason}"),
                        );
                        continue;
                    }
                    libraries.push((library_key(&build_key, compiler.identity()), bytes));
                }
            }
        }
        entries.push((*key.as_bytes(), payload));
    }
    let gt4py = Gt4pyStore::open_existing(settings.cache_dir());
    let [mut gt4py_translations, mut gt4py_extensions] = [Vec::new(), Vec::new()];
    for (kind, objects) in
        [(Gt4pyKind::Translation, &mut gt4py_translations), (Gt4pyKind::Extension, &mut gt4py_extensions)]
    {
        for key in gt4py.keys(kind) {
            // `get` checks the entry (and an extension's bundle), and removes one that fails.
            match gt4py.get(kind, &key) {
                Ok(payload) => objects.push((*key.as_bytes(), payload)),
                Err(gridkey_fingerprint::Miss::Invalid(why)) => {
                    skip(&mut report, kind.object_kind(), key.to_hex(), why)
                }
                Err(gridkey_fingerprint::Miss::Absent) => {}
            }
        }
    }
    // Libraries and extensions first: a reader that finds an entry finds what it builds to too.
    for (kind, objects) in [
        (Kind::KernelLibrary, &libraries),
        (Kind::Gt4pyExtension, &gt4py_extensions),
        (Kind::TranslationEntry, &entries),
        (Kind::Gt4pyTranslation, &gt4py_translations),
    ] {
        for chunk in objects.chunks(BATCH) {
            let items: Vec<([u8; 16], &[u8])> = chunk.iter().map(|(k, b)| (*k, b.as_slice())).collect();
            for ((key, _), stored) in chunk.iter().zip(remote.put_many(kind, &items)) {
                match stored {
                    Stored::Uploaded(n) => {
                        report.bytes += n;
                        *match kind {
                            Kind::KernelLibrary => &mut report.libraries,
                            Kind::TranslationEntry => &mut report.entries,
                            Kind::Gt4pyTranslation => &mut report.gt4py_translations,
                            Kind::Gt4pyExtension => &mut report.gt4py_extensions,
                        } += 1;
                    }
                    Stored::TooLarge { len, max } => skip(
                        &mut report,
                        kind,
                        gridkey_digest::hex(key),
                        format!("the object is {len} bytes, over the limit of {max} (GRIDKEY_REMOTE_MAX_OBJECT)"),
                    ),
                    Stored::Kept => skip(
                        &mut report,
                        kind,
                        gridkey_digest::hex(key),
                        "an object is already under this key, and this writer takes nothing from the shared tier (no \
                         trusted keys), so it does not replace it; set GRIDKEY_REMOTE_TRUSTED_KEYS to check and replace \
                         bad objects"
                            .to_owned(),
                    ),
                    Stored::ReadOnly | Stored::Off => {}
                }
            }
            if !remote.is_on() {
                return Err(stopped(&remote, "push"));
            }
        }
    }
    remote.publish_stats();
    Ok(report)
}
