//! `gridkey cache push`: seeds the shared tier from a local cache (ADR 0018): every translation
//! entry that has its key-input record, and the kernel library built from it with the options
//! of that record by this compiler (under this compiler's identity).

use gridkey_fingerprint::TranslationCache;
use gridkey_remote::{library_key, Kind, Remote, Stored};
use gridkey_settings::Settings;
use serde::{Deserialize, Serialize};

use crate::AppError;

/// Objects uploaded per round trip.
const BATCH: usize = 64;

/// What `gridkey cache push` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushReport {
    /// The shared tier, password hidden.
    pub remote: String,
    /// Translation entries uploaded.
    pub entries: u64,
    /// Kernel libraries uploaded.
    pub libraries: u64,
    /// Object bytes uploaded.
    pub bytes: u64,
    /// Entries not uploaded: unreadable, not checked, without a record, or over the size limit.
    pub skipped: u64,
}

/// Uploads the local cache of `settings` to its shared tier.
///
/// Errors: [`AppError::NoRemote`] without a shared tier; [`AppError::Remote`] when it is
/// misconfigured; [`AppError::RemoteUnreachable`] when it cannot be reached or fails (what was
/// uploaded before stays), or when this client is not a designated writer.
pub fn push(settings: &Settings) -> Result<PushReport, AppError> {
    let remote_settings = settings.remote.as_ref().ok_or(AppError::NoRemote)?;
    let settings = crate::task_settings(settings)?;
    let remote = Remote::connect(remote_settings)?;
    if !remote.is_on() {
        return Err(AppError::RemoteUnreachable(remote.warning().unwrap_or_default()));
    }
    if !remote.is_writer() {
        return Err(AppError::RemoteUnreachable(format!(
            "{} is read-only for this client: push needs a designated writer (--remote-writer or GRIDKEY_REMOTE_WRITER=1)",
            remote.shown_url()
        )));
    }
    let compiler = settings.compiler();
    let cache = TranslationCache::open(settings.cache_dir())?;
    let mut report = PushReport { remote: remote.shown_url().to_owned(), ..Default::default() };
    let mut entries: Vec<([u8; 16], Vec<u8>)> = Vec::new();
    let mut libraries: Vec<([u8; 16], Vec<u8>)> = Vec::new();
    for key in cache.keys() {
        let (Ok(payload), Some(record)) = (cache.get(&key), cache.record(&key)) else {
            report.skipped += 1;
            continue;
        };
        if let Ok(source) = std::str::from_utf8(&payload) {
            let build_key = gridkey_stencil::library_build_key(source, &record.options, compiler);
            if let Ok(build_key) = build_key {
                let path = settings.cache_dir().join(gridkey_stencil::BUILD_DIR).join(format!("{build_key}.so"));
                if let Ok(bytes) = std::fs::read(path) {
                    libraries.push((library_key(&build_key, compiler.identity()), bytes));
                }
            }
        }
        entries.push((*key.as_bytes(), payload));
    }
    // Libraries first: a reader that finds an entry finds its library too.
    for (kind, objects) in [(Kind::KernelLibrary, &libraries), (Kind::TranslationEntry, &entries)] {
        for chunk in objects.chunks(BATCH) {
            let items: Vec<([u8; 16], &[u8])> = chunk.iter().map(|(k, b)| (*k, b.as_slice())).collect();
            for stored in remote.put_many(kind, &items) {
                match stored {
                    Stored::Uploaded(n) => {
                        report.bytes += n;
                        match kind {
                            Kind::KernelLibrary => report.libraries += 1,
                            Kind::TranslationEntry => report.entries += 1,
                        }
                    }
                    Stored::TooLarge { .. } => report.skipped += 1,
                    Stored::ReadOnly | Stored::Off => {}
                }
            }
            if !remote.is_on() {
                return Err(AppError::RemoteUnreachable(remote.warning().unwrap_or_default()));
            }
        }
    }
    remote.publish_stats();
    Ok(report)
}
