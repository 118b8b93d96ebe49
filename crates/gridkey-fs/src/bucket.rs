//! The one vocabulary of a cache directory's names (ADR 0043): every directory and file that
//! gridkey keeps directly under a cache directory is a [`CacheBucket`], and its name is spelt
//! only here. A versioned name carries the version of the format it holds (`tables-v1` holds
//! tables of digest format v1); the crates that own the formats define their constants from
//! these names, and `tests/tests/tidy.rs` ties each versioned bucket to its format's version
//! constant, so a format bumped without its bucket fails there.

/// A directory or file directly under a cache directory, as uv's cache buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CacheBucket {
    /// `tables-v1/`: stored tables, `<hex[0..2]>/<hex>.npy` (gridkey-store, digest format v1,
    /// ADR 0001, ADR 0002).
    Tables,
    /// `translation-v2/`: translation entries `<hex[0..2]>/<hex>.bin` and their key-input
    /// records `<hex>.json` (gridkey-fingerprint, key format v2, ADR 0003, ADR 0020).
    Translation,
    /// `build-v2/`: kernel libraries `<build key>.so` (gridkey-stencil, build format v2,
    /// ADR 0022).
    Build,
    /// `gt4py-v1/`: GT4Py's translation entries and built extensions,
    /// `{translation,extension}/<hex[0..2]>/<hex>.bin`, and the build-folder memo
    /// `folder/<hex[0..2]>/<hex>.bin` (gridkey-fingerprint's `gt4py` module, layout version 1,
    /// ADR 0040, ADR 0058).
    Gt4py,
    /// `locks/`: the per-key lock files of [`crate::lock::KeyLocks`] (ADR 0025, ADR 0033).
    Locks,
    /// `runs/`: the registrations of live runs, which `gridkey cache gc` spares (ADR 0026).
    Runs,
    /// `tier-stats-v1`: the local tier's counters summed over runs (a JSON file).
    TierStats,
    /// `remote-quarantine-v1`: shared-tier objects this node refuses to fetch again (a JSON
    /// file, ADR 0030).
    Quarantine,
}

impl CacheBucket {
    /// Every bucket, in the order `gridkey cache stats` lists the stores first.
    pub const ALL: [CacheBucket; 8] = [
        CacheBucket::Tables,
        CacheBucket::Translation,
        CacheBucket::Build,
        CacheBucket::Gt4py,
        CacheBucket::Locks,
        CacheBucket::Runs,
        CacheBucket::TierStats,
        CacheBucket::Quarantine,
    ];

    /// The buckets that hold content-addressed entries, with the extension of an entry's file:
    /// what `gridkey cache stats` counts and `gridkey cache gc` may remove.
    pub const STORES: [(CacheBucket, &'static str); 4] = [
        (CacheBucket::Tables, "npy"),
        (CacheBucket::Translation, "bin"),
        (CacheBucket::Build, "so"),
        (CacheBucket::Gt4py, "bin"),
    ];

    /// Its name under the cache directory.
    pub const fn name(self) -> &'static str {
        match self {
            CacheBucket::Tables => "tables-v1",
            CacheBucket::Translation => "translation-v2",
            CacheBucket::Build => "build-v2",
            CacheBucket::Gt4py => "gt4py-v1",
            CacheBucket::Locks => "locks",
            CacheBucket::Runs => "runs",
            CacheBucket::TierStats => "tier-stats-v1",
            CacheBucket::Quarantine => "remote-quarantine-v1",
        }
    }

    /// The format version its name carries (`tables-v1` → 1), or `None` for an unversioned
    /// name (`locks`, `runs`).
    pub fn version(self) -> Option<u32> {
        let (_, version) = self.name().rsplit_once("-v")?;
        version.parse().ok()
    }
}

impl std::fmt::Display for CacheBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
