//! `gridkey keys` (hidden, for the fault matrix): convert a grid's offset provider into a cache
//! directory and key every program of the main job, without translating. Many processes running
//! it at once on one empty cache must all succeed with identical output (ADR 0012).

use std::collections::BTreeMap;
use std::path::Path;

use gridkey_fingerprint::TranslationOptions;
use gridkey_grid::read_grid;
use gridkey_offsets::{compile_time_offset_provider, Entry};
use gridkey_store::TableStore;
use serde::{Deserialize, Serialize};

use crate::{AppError, Settings};

/// The table digests and translation keys of a grid's main job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysReport {
    /// Offset name to the digest (32 hex digits) of its compile-time table.
    pub tables: BTreeMap<String, String>,
    /// Program name to its translation key (32 hex digits) with default options.
    pub keys: BTreeMap<String, String>,
}

/// Converts the grid at `grid_path` into the cache directory of `settings` (tables stored,
/// mapped; opens verify when `settings.verify_tables`) and keys every program of
/// [`gridkey_stencil::icon_programs`].
///
/// Errors: [`AppError::Grid`], [`AppError::CacheUnusable`], [`AppError::Store`],
/// [`AppError::Offsets`].
pub fn keys(grid_path: &Path, settings: &Settings) -> Result<KeysReport, AppError> {
    let grid = read_grid(grid_path)?;
    crate::cache::check_cache_dir(&settings.cache_dir)?;
    let store = TableStore::open(&settings.cache_dir)?.verifying(settings.verify_tables);
    let ct = compile_time_offset_provider(grid.provider(), &store)?;
    let tables = ct
        .entries()
        .iter()
        .filter_map(|(name, e)| match e {
            Entry::Gather(c) => Some((name.clone(), c.spec().digest.to_hex())),
            Entry::Dimension(_) => None,
        })
        .collect();
    let options = TranslationOptions::new();
    let keys = gridkey_stencil::icon_programs()
        .iter()
        .map(|p| {
            let key = gridkey_stencil::key_inputs(p, &options, &ct)?.key();
            Ok((p.name().to_owned(), key.to_hex()))
        })
        .collect::<Result<_, AppError>>()?;
    Ok(KeysReport { tables, keys })
}
