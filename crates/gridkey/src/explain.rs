//! Explaining cache misses: which input of a translation key changed (ADR 0003; docs/design.md "Formats", translation cache entry).
//!
//! Every translation-cache entry keeps the record of its key inputs
//! ([`gridkey_fingerprint::KeyInputs`], JSON beside the entry). Two keys are explained by
//! [`gridkey_fingerprint::diff_inputs`] over their records; a miss is explained against the
//! cached entry of the same program and frontend with the fewest differing inputs.

use std::path::Path;
use std::sync::Arc;

use gridkey_fingerprint::{diff_inputs, InputChange, KeyInputs, TranslationCache, TranslationKey, TranslationOptions};
use gridkey_offsets::compile_time_offset_provider;
use gridkey_store::TableStore;
use serde::{Deserialize, Serialize};

use crate::AppError;

/// `gridkey explain KEY_A KEY_B`: the inputs that differ between two cached keys.
///
/// JSON form (stable, README "gridkey explain"): `{"a", "b", "identical", "differences":
/// [{"input", "before", "after"}]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// The first key, 32 hex digits.
    pub a: String,
    /// The second key, 32 hex digits.
    pub b: String,
    /// Whether the recorded inputs are identical.
    pub identical: bool,
    /// The inputs that differ, in key order.
    pub differences: Vec<InputChange>,
}

/// `gridkey explain --miss PROGRAM`: why a program's key is not in the cache.
///
/// JSON form (stable, README "gridkey explain"): `{"program", "key", "cached", "candidates",
/// "unreadable_records", "nearest", "differences": [{"input", "before", "after"}]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissExplanation {
    /// The program.
    pub program: String,
    /// Its key against the grid, 32 hex digits.
    pub key: String,
    /// Whether the cache holds this key (then there is no miss to explain).
    pub cached: bool,
    /// How many other cached entries of the same program and frontend there are.
    pub candidates: usize,
    /// How many cached entries have a key-input record that cannot be read (damaged or of
    /// another format): they could not be compared.
    pub unreadable_records: usize,
    /// The nearest of them (fewest differing inputs), if any.
    pub nearest: Option<String>,
    /// How the nearest entry's inputs differ from this key's (`before` is the cached entry).
    pub differences: Vec<InputChange>,
}

/// The unique cached key that starts with `prefix`.
///
/// Errors: [`AppError::BadKeyPrefix`] for a prefix no key can start with (empty, over 32
/// characters, not hex digits), [`AppError::UnknownKey`] when none matches,
/// [`AppError::AmbiguousKey`] when several do.
pub fn resolve_key(cache: &TranslationCache, prefix: &str) -> Result<TranslationKey, AppError> {
    the_one(prefix, cache.keys_with_prefix(prefix), cache.dir())
}

/// The one key of `matches` (the keys `prefix` matched in the cache `dir`).
///
/// Errors: [`AppError::BadKeyPrefix`] for a prefix no key can start with,
/// [`AppError::UnknownKey`] for none, [`AppError::AmbiguousKey`] for several.
pub(crate) fn the_one(prefix: &str, mut matches: Vec<TranslationKey>, dir: &Path) -> Result<TranslationKey, AppError> {
    if prefix.is_empty() || prefix.len() > 32 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AppError::BadKeyPrefix { prefix: prefix.to_owned() });
    }
    match matches.len() {
        1 => Ok(matches.remove(0)),
        0 => Err(AppError::UnknownKey { prefix: prefix.to_owned(), dir: dir.to_path_buf() }),
        _ => Err(AppError::AmbiguousKey {
            prefix: prefix.to_owned(),
            matches: matches.iter().map(TranslationKey::to_hex).collect(),
        }),
    }
}

fn record(cache: &TranslationCache, key: &TranslationKey) -> Result<KeyInputs, AppError> {
    cache.record(key).ok_or_else(|| AppError::MissingRecord { key: key.to_hex(), path: cache.record_path(key) })
}

/// Explains two keys (each a unique prefix of a cached key) of the cache in `cache_dir`.
///
/// Errors: [`AppError::UnknownKey`], [`AppError::AmbiguousKey`], [`AppError::MissingRecord`],
/// [`AppError::Cache`].
pub fn explain_keys(cache_dir: &Path, a: &str, b: &str) -> Result<Explanation, AppError> {
    let cache = TranslationCache::open(cache_dir)?;
    let (ka, kb) = (resolve_key(&cache, a)?, resolve_key(&cache, b)?);
    let differences = diff_inputs(&record(&cache, &ka)?, &record(&cache, &kb)?);
    Ok(Explanation { a: ka.to_hex(), b: kb.to_hex(), identical: differences.is_empty(), differences })
}

/// The cached entry of the same program and frontend as `inputs` (other than `inputs`' own
/// key) with the fewest differing inputs, ties broken by key order; how many there were; and
/// how many entries had a record that could not be read.
pub fn nearest_entry(
    cache: &TranslationCache,
    inputs: &KeyInputs,
) -> (usize, usize, Option<(TranslationKey, Vec<InputChange>)>) {
    let own = inputs.key();
    let mut unreadable = 0;
    let candidates: Vec<(TranslationKey, Vec<InputChange>)> = cache
        .keys()
        .into_iter()
        .filter(|k| *k != own)
        .filter_map(|k| {
            let record = cache.record(&k);
            unreadable += usize::from(record.is_none());
            record.map(|r| (k, r))
        })
        .filter(|(_, r)| r.program == inputs.program && r.frontend.name == inputs.frontend.name)
        .map(|(k, r)| (k, diff_inputs(&r, inputs)))
        .collect();
    let count = candidates.len();
    (count, unreadable, candidates.into_iter().min_by_key(|(k, d)| (d.len(), *k)))
}

/// Explains why `program` on the grid at `grid_path` with `options` would miss the cache in
/// `cache_dir` (converting the grid's tables into the cache's store on the way).
///
/// Errors: [`AppError::UnknownProgram`], [`AppError::Options`] for options `gridkey run`
/// rejects, and those of reading the grid and opening the cache.
pub fn explain_miss(
    cache_dir: &Path,
    program: &str,
    grid_path: &Path,
    options: &TranslationOptions,
) -> Result<MissExplanation, AppError> {
    let programs = gridkey_stencil::icon_programs();
    let Some(p) = programs.iter().find(|p| p.name() == program) else {
        return Err(AppError::UnknownProgram {
            name: program.to_owned(),
            known: programs.iter().map(|p| p.name().to_owned()).collect(),
        });
    };
    // The options `gridkey run` accepts, normalised as it keys them: checked before the grid is read.
    gridkey_stencil::normalise_options(options)?;
    let grid = gridkey_grid::read_grid(grid_path)?;
    let store = TableStore::open(cache_dir)?;
    let ct = Arc::new(compile_time_offset_provider(grid.provider(), &store)?);
    let inputs = gridkey_stencil::key_inputs(p, options, &ct)?;
    let cache = TranslationCache::open(cache_dir)?;
    let key = inputs.key();
    let cached = cache.get(&key).is_ok();
    let (candidates, unreadable_records, nearest) = nearest_entry(&cache, &inputs);
    let (nearest, differences) = match nearest {
        Some((k, d)) if !cached => (Some(k.to_hex()), d),
        _ => (None, Vec::new()),
    };
    Ok(MissExplanation {
        program: program.to_owned(),
        key: key.to_hex(),
        cached,
        candidates,
        unreadable_records,
        nearest,
        differences,
    })
}

/// A one-line hint for a program that missed in `gridkey run`: the nearest other cached entry
/// of the same program and the first inputs that differ, or `None` when there is none.
pub fn miss_hint(cache: &TranslationCache, key: &TranslationKey) -> Option<String> {
    let inputs = cache.record(key)?;
    let (_, _, nearest) = nearest_entry(cache, &inputs);
    let (other, differences) = nearest?;
    let shown: Vec<String> = differences.iter().take(3).map(ToString::to_string).collect();
    let more = differences.len().saturating_sub(shown.len());
    let tail = if more > 0 { format!(" (and {more} more)") } else { String::new() };
    Some(format!("{} differs from cached {} in: {}{tail}", inputs.program, &other.to_hex()[..12], shown.join("; ")))
}
