//! The cache protocol: look up, translate on a miss under the key's lock, verify a hit when
//! asked, put with the key-input record, over an ordered list of tiers (ADR 0013, ADR 0025).

use std::fmt;

use gridkey_fs::lock::{Acquired, KeyLocks};

use crate::{FingerprintError, KeyInputs, Miss, TranslationCache, TranslationKey};

/// One tier of the translation cache, in lookup order (the local directory first; a read-only
/// site cache or a shared remote after it).
pub trait Tier: Send + Sync {
    /// Short name for reports: `local`, `read-only`, `remote`.
    fn name(&self) -> &str;

    /// The payload stored under `key`, checked (format, key, length, checksum), or why there is
    /// none. Never an error: anything that cannot be read or checked is a [`Miss::Invalid`].
    fn get(&self, key: &TranslationKey) -> Result<Vec<u8>, Miss>;

    /// Stores `payload` under the key of `inputs`, with the record of `inputs`.
    ///
    /// Errors: [`FingerprintError::Write`] when nothing could be stored (nothing is left behind).
    fn put(&self, inputs: &KeyInputs, payload: &[u8]) -> Result<(), FingerprintError>;

    /// Whether [`Tier::put`] stores anything; a read-only tier is only looked up.
    fn writable(&self) -> bool {
        true
    }

    /// Whether what this tier stores reaches other nodes (a shared remote): [`translate_cached`]
    /// then never puts into it itself; the frontend does, through [`Tiers::accept`], once its
    /// own check of the result (the kernel against its reference) passed, so that only
    /// accepted translations travel (ADR 0030). Local and site tiers are not shared.
    fn shared(&self) -> bool {
        false
    }

    /// Whether a hit from this tier is written back to the earlier writable tiers. A site cache
    /// serves its hits in place, so that the local tier holds only what is new (ADR 0036).
    fn copied_forward(&self) -> bool {
        true
    }

    /// Told when this tier served a hit for `inputs`: the local tier rewrites a key-input record
    /// that was deleted or cannot be read, so that `gridkey explain` finds the entry again.
    fn served(&self, _inputs: &KeyInputs, _key: &TranslationKey) {}
}

impl Tier for TranslationCache {
    fn name(&self) -> &str {
        "local"
    }

    fn get(&self, key: &TranslationKey) -> Result<Vec<u8>, Miss> {
        TranslationCache::get(self, key)
    }

    fn put(&self, inputs: &KeyInputs, payload: &[u8]) -> Result<(), FingerprintError> {
        TranslationCache::put(self, inputs, payload).map(|_| ())
    }

    fn served(&self, inputs: &KeyInputs, key: &TranslationKey) {
        if self.record(key).is_none() {
            // Best effort: a record that cannot be written leaves the entry as it was.
            let _ = self.write_record(inputs, key);
        }
    }
}

/// A read-only site cache's translation cache as a tier (ADR 0036): looked up after the local
/// tier, checked as every entry is (format, key, length, checksum), never written, and its hits
/// served in place, not copied into the local tier. Named `site` in reports.
#[derive(Clone, Debug)]
pub struct SiteCache(TranslationCache);

impl SiteCache {
    /// The translation cache of the site cache `cache_dir` ([`TranslationCache::open_read_only`]).
    pub fn open(cache_dir: &std::path::Path) -> Self {
        Self(TranslationCache::open_read_only(cache_dir))
    }

    /// The translation cache it reads.
    pub fn cache(&self) -> &TranslationCache {
        &self.0
    }
}

impl Tier for SiteCache {
    fn name(&self) -> &str {
        "site"
    }

    fn get(&self, key: &TranslationKey) -> Result<Vec<u8>, Miss> {
        self.0.get(key)
    }

    fn put(&self, _inputs: &KeyInputs, _payload: &[u8]) -> Result<(), FingerprintError> {
        Ok(())
    }

    fn writable(&self) -> bool {
        false
    }

    fn copied_forward(&self) -> bool {
        false
    }
}

/// The tiers of a translation cache, in lookup order, and the per-key locks under which a miss
/// is translated.
#[derive(Default)]
pub struct Tiers {
    tiers: Vec<Box<dyn Tier>>,
    locks: Option<KeyLocks>,
}

impl fmt::Debug for Tiers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tiers.iter().map(|t| t.name())).finish()
    }
}

impl Tiers {
    /// The given tiers, looked up in this order, without per-key locks.
    pub fn new(tiers: Vec<Box<dyn Tier>>) -> Self {
        Self { tiers, locks: None }
    }

    /// One local tier, the [`TranslationCache`] of `cache_dir`, with the per-key locks of
    /// `cache_dir` ([`KeyLocks`]).
    ///
    /// Errors: [`FingerprintError::Directory`] when `<cache_dir>/translation-v2` cannot be created.
    pub fn local(cache_dir: &std::path::Path) -> Result<Self, FingerprintError> {
        Ok(Self::new(vec![Box::new(TranslationCache::open(cache_dir)?)]).with_locks(KeyLocks::new(cache_dir)))
    }

    /// These tiers with a miss translated under the key's lock in `locks` (ADR 0025): of the
    /// processes that miss one key at once, one translates while the others wait, look up
    /// again and hit.
    pub fn with_locks(mut self, locks: KeyLocks) -> Self {
        self.locks = Some(locks);
        self
    }

    /// The per-key locks, if any.
    pub fn locks(&self) -> Option<&KeyLocks> {
        self.locks.as_ref()
    }

    /// Adds `tier` after the others: it is looked up last.
    pub fn push(&mut self, tier: Box<dyn Tier>) {
        self.tiers.push(tier);
    }

    /// The tiers, in lookup order.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Tier> {
        self.tiers.iter().map(|t| t.as_ref())
    }

    /// Whether some tier holds a checked entry for `key` (no write-back, no record).
    pub fn contains(&self, key: &TranslationKey) -> bool {
        self.iter().any(|t| t.get(key).is_ok())
    }

    /// The frontend's acceptance of what [`translate_cached`] returned for `inputs`: its own
    /// check of the result passed (in `gridkey run`, the kernel against the Rust reference), so
    /// the translation may travel. Puts `cached.payload` into every writable [`Tier::shared`]
    /// tier other than the one that served it, which [`translate_cached`] left out (ADR 0030).
    /// A frontend that never calls this shares nothing; one whose check fails does not call it.
    ///
    /// Returns the tiers that could not be written, `tier: error` (the result is still good).
    pub fn accept(&self, inputs: &KeyInputs, cached: &Cached) -> Vec<String> {
        self.iter()
            .filter(|t| t.shared() && t.writable() && cached.hit.as_deref() != Some(t.name()))
            .filter_map(|t| t.put(inputs, &cached.payload).err().map(|e| format!("{}: {e}", t.name())))
            .collect()
    }
}

/// What a frontend asks of [`translate_cached`].
pub struct Request<'a> {
    /// The key inputs of the translation (the key is computed from them once).
    pub inputs: &'a KeyInputs,
    /// Translate again on a hit and compare byte for byte (`verify_cache_hits`).
    pub verify_hits: bool,
    /// The frontend's check of a cached payload (for example, that it is UTF-8 C source); a
    /// payload it rejects is a miss, translated again and replaced.
    pub accept: &'a dyn Fn(&[u8]) -> Result<(), String>,
}

/// What [`translate_cached`] did: the key, the payload, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cached {
    /// The key of the request's inputs ([`KeyInputs::key`]).
    pub key: TranslationKey,
    /// The translation: from a tier on a hit, fresh on a miss.
    pub payload: Vec<u8>,
    /// The tier that served the hit; `None` on a miss.
    pub hit: Option<String>,
    /// On a miss, why each tier could not serve the key, `tier: reason`, joined by `; `.
    pub miss_reason: Option<String>,
    /// Whether the lookup waited for the key's lock (another process or thread was translating
    /// the same key); a hit after waiting is that translation.
    pub waited: bool,
    /// Time spent taking the key's lock (waiting included); zero on a hit found without it
    /// (a hit takes no lock, ADR 0025). `cargo xtask bench` reports it (case `warm_run`).
    pub lock_time: std::time::Duration,
    /// Tiers that could not be written (a write-back after a later tier's hit, or a put after
    /// a miss beyond the first writable tier), `tier: error`; the result is still good.
    pub warnings: Vec<String>,
    /// The key's lock file, when its lock could not be had (held by another process for the
    /// whole bound of the wait, or not a lock file that can be locked), and why: the miss was
    /// translated without it (ADR 0033). Not in `warnings`, so that a report can name the path.
    pub unlocked: Option<(std::path::PathBuf, String)>,
}

impl Cached {
    /// Whether this was a miss that translated (`hit` is `None`).
    pub fn translated(&self) -> bool {
        self.hit.is_none()
    }
}

/// Errors of [`translate_cached`]; `E` is the frontend's translation error.
#[derive(Debug, thiserror::Error)]
pub enum CacheProtocolError<E: std::error::Error + 'static> {
    /// The frontend's translate function failed.
    #[error(transparent)]
    Translate(E),
    /// No writable tier could store the fresh translation (the first error).
    #[error(transparent)]
    Put(FingerprintError),
    /// `verify_hits`: the cached entry differs from a fresh translation.
    #[error("translation-cache entry {key} in the {tier} tier differs from a fresh translation at byte {first_difference}; the cache was written by another translator or tampered with: remove the entry (or the cache directory) and run again")]
    VerifyMismatch {
        /// The key.
        key: TranslationKey,
        /// The tier that served it.
        tier: String,
        /// Offset of the first differing byte.
        first_difference: usize,
    },
}

/// The cache protocol (ADR 0013, ADR 0025, ADR 0030): looks `request.inputs`' key up in each
/// tier in order; a hit that the frontend accepts is written back to the earlier writable tiers
/// and returned (after a byte-for-byte comparison with a fresh translation when `verify_hits`).
/// On a miss, takes the key's lock (when the tiers have [`KeyLocks`]), looks up again (a
/// process that held the lock meanwhile has put the entry: a hit), and only when still missing
/// calls `translate` once and puts the result, with its key-input record, into every writable
/// tier before releasing the lock. Shared tiers ([`Tier::shared`]) are left out of both writes:
/// the order is look up, translate, put locally, the frontend's check of the result, then
/// [`Tiers::accept`] puts into the shared tiers. A lock that cannot be taken (a file system
/// without locks, a directory in its place) or that another process holds past the bound of the
/// wait ([`gridkey_fs::lock::LockWait`], ADR 0033) is [`Cached::unlocked`], and the miss is
/// translated without it.
///
/// Errors: [`CacheProtocolError::Translate`] from `translate`; [`CacheProtocolError::Put`] when
/// there are writable tiers and none could store the translation;
/// [`CacheProtocolError::VerifyMismatch`].
pub fn translate_cached<E: std::error::Error + 'static>(
    tiers: &Tiers,
    request: &Request<'_>,
    mut translate: impl FnMut() -> Result<Vec<u8>, E>,
) -> Result<Cached, CacheProtocolError<E>> {
    let key = request.inputs.key();
    let mut warnings = Vec::new();
    let mut misses = Vec::new();
    if let Some(cached) = look_up(tiers, request, &key, &mut translate, &mut misses, &mut warnings)? {
        return Ok(cached);
    }
    let mut waited = false;
    let locking = std::time::Instant::now();
    let mut unlocked = None;
    let _held = match &tiers.locks {
        None => None,
        Some(locks) => match locks.lock(&format!("translation-{key}")) {
            Ok((Acquired::Held(held), wait)) => {
                waited = !wait.is_zero();
                Some(held)
            }
            Ok((Acquired::GaveUp { path }, wait)) => {
                waited = true;
                let why = format!(
                    "lock of translation key {key} held by another process (stopped or slow) for {:.1} s, the \
                     longest wait; translated without it: if this repeats, find the holder (`fuser` on the lock \
                     file) or raise the lock wait",
                    wait.as_secs_f64()
                );
                unlocked = Some((path, why));
                None
            }
            Err(e) if gridkey_fs::lock::is_no_locks(&e) => {
                warnings.push(format!("cannot take the lock of key {key} in {}: {e}", locks.dir().display()));
                None
            }
            Err(e) => {
                let why = format!(
                    "cannot take the lock of translation key {key} ({e}); translated without it: remove what is \
                     in the lock file's place"
                );
                unlocked = Some((locks.path(&format!("translation-{key}")), why));
                None
            }
        },
    };
    let lock_time = if tiers.locks.is_some() { locking.elapsed() } else { std::time::Duration::ZERO };
    if _held.is_some() {
        let mut again = Vec::new();
        if let Some(cached) = look_up(tiers, request, &key, &mut translate, &mut again, &mut warnings)? {
            return Ok(Cached { waited, lock_time, unlocked, ..cached });
        }
    }
    let payload = translate().map_err(CacheProtocolError::Translate)?;
    let mut first_error = None;
    let mut stored = false;
    // A shared tier is written only once the frontend accepted the result ([`Tiers::accept`]).
    for tier in tiers.tiers.iter().filter(|t| t.writable() && !t.shared()) {
        match tier.put(request.inputs, &payload) {
            Ok(()) => stored = true,
            Err(e) if first_error.is_none() => first_error = Some(e),
            Err(e) => warnings.push(format!("{}: {e}", tier.name())),
        }
    }
    match first_error {
        Some(e) if !stored => return Err(CacheProtocolError::Put(e)),
        Some(e) => warnings.push(e.to_string()),
        None => {}
    }
    let miss_reason = Some(if misses.is_empty() { "no cache tier".to_owned() } else { misses.join("; ") });
    Ok(Cached { key, payload, hit: None, miss_reason, waited, lock_time, warnings, unlocked })
}

/// One lookup in every tier, in order: the hit (verified, written back), or `None` with the
/// reason of each tier's miss pushed to `misses`.
fn look_up<E: std::error::Error + 'static>(
    tiers: &Tiers,
    request: &Request<'_>,
    key: &TranslationKey,
    translate: &mut impl FnMut() -> Result<Vec<u8>, E>,
    misses: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Option<Cached>, CacheProtocolError<E>> {
    for (index, tier) in tiers.tiers.iter().enumerate() {
        let payload = match tier.get(key).and_then(|p| (request.accept)(&p).map(|()| p).map_err(Miss::Invalid)) {
            Ok(payload) => payload,
            Err(Miss::Absent) => {
                misses.push(format!("{}: no translation entry for key {key}", tier.name()));
                continue;
            }
            Err(Miss::Invalid(why)) => {
                misses.push(format!("{}: unusable translation entry: {why}", tier.name()));
                continue;
            }
        };
        if request.verify_hits {
            let fresh = translate().map_err(CacheProtocolError::Translate)?;
            if fresh != payload {
                let first_difference =
                    fresh.iter().zip(&payload).position(|(a, b)| a != b).unwrap_or(fresh.len().min(payload.len()));
                return Err(CacheProtocolError::VerifyMismatch {
                    key: *key,
                    tier: tier.name().to_owned(),
                    first_difference,
                });
            }
        }
        tier.served(request.inputs, key);
        let earlier_tiers: &[Box<dyn Tier>] = if tier.copied_forward() { &tiers.tiers[..index] } else { &[] };
        for earlier in earlier_tiers.iter().filter(|t| t.writable() && !t.shared()) {
            if let Err(e) = earlier.put(request.inputs, &payload) {
                warnings.push(format!("{}: {e}", earlier.name()));
            }
        }
        return Ok(Some(Cached {
            key: *key,
            payload,
            hit: Some(tier.name().to_owned()),
            miss_reason: None,
            waited: false,
            lock_time: std::time::Duration::ZERO,
            warnings: std::mem::take(warnings),
            unlocked: None,
        }));
    }
    Ok(None)
}
