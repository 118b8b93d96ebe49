//! The cache directories of one `gridkey run` (ADR 0036): the writable cache directory, in
//! front of an optional read-only site cache whose translation entries and kernel libraries are
//! served after the local ones and which is never written.
//!
//! A cache directory this process cannot write (found by trying: a read-only mount, another
//! user's directory of mode 0555) is not an error: it serves its hits as a site cache, and the
//! run works in a directory private to it, removed when the run ends, so that nothing new is
//! cached, no run is registered and no per-key lock is taken; one warning says so.

use std::path::{Path, PathBuf};

use crate::cache::{self, CacheAccess, CacheWarning};
use crate::{AppError, Settings};

/// The caches of one run, checked: where it writes, where it only reads, and the warnings.
#[derive(Debug)]
pub struct RunCaches {
    cache_dir: PathBuf,
    site_cache: Option<PathBuf>,
    warnings: Vec<CacheWarning>,
    // The directory private to this run when no writable cache was given; removed on drop.
    private: Option<tempfile::TempDir>,
}

impl RunCaches {
    /// Checks `settings.cache_dir` ([`cache::probe_cache_dir`]) and `settings.site_cache`
    /// ([`cache::check_site_cache`]). A read-only cache directory without a site cache becomes
    /// the site cache, in front of a new private directory in the compiler's `TMPDIR` (the
    /// parsed [`gridkey_settings::CompilerSettings::env`]), else `/tmp`.
    ///
    /// Errors: those of [`cache::probe_cache_dir`] and [`cache::check_site_cache`];
    /// [`AppError::TwoReadOnlyCaches`] when the cache directory is read-only and a site cache is
    /// given too; [`AppError::CacheDir`] when a directory cannot be made absolute or the
    /// private directory cannot be created.
    pub fn open(settings: &Settings) -> Result<Self, AppError> {
        let absolute = |path: &Path| {
            std::fs::canonicalize(path).map_err(|source| AppError::CacheDir { path: path.to_path_buf(), source })
        };
        let mut warnings = Vec::new();
        let site_cache = match &settings.site_cache {
            Some(site) => {
                warnings.extend(cache::check_site_cache(site)?);
                Some(absolute(site)?)
            }
            None => None,
        };
        match cache::probe_cache_dir(&settings.cache_dir)? {
            CacheAccess::Writable(w) => {
                warnings.extend(w);
                Ok(Self { cache_dir: settings.cache_dir.clone(), site_cache, warnings, private: None })
            }
            CacheAccess::ReadOnly(why) => {
                if let Some(site_cache) = site_cache {
                    return Err(AppError::TwoReadOnlyCaches { cache_dir: settings.cache_dir.clone(), site_cache });
                }
                let site = absolute(&settings.cache_dir)?;
                warnings.extend(cache::check_site_cache(&site)?);
                // Where the compiler's temp files go too: the parsed TMPDIR, else /tmp.
                let temp = settings.compiler.env.get("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
                let private = tempfile::Builder::new()
                    .prefix("gridkey-run-")
                    .tempdir_in(&temp)
                    .map_err(|source| AppError::CacheDir { path: temp.clone(), source })?;
                warnings.push(CacheWarning {
                    path: site.clone(),
                    message: format!(
                        "cache directory is read-only here ({why}): its entries are served, nothing new is cached (this run translates and builds in {} and removes it at its end), and the run registers nothing and takes no locks; give a writable --cache-dir and this one as --site-cache to keep what is new",
                        private.path().display()
                    ),
                });
                Ok(Self {
                    cache_dir: private.path().to_path_buf(),
                    site_cache: Some(site),
                    warnings,
                    private: Some(private),
                })
            }
        }
    }

    /// The directory this run writes: the cache directory, or the private one.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The read-only site cache, absolute, if any.
    pub fn site_cache(&self) -> Option<&Path> {
        self.site_cache.as_deref()
    }

    /// Whether [`Self::cache_dir`] is private to this run (no writable cache was given): the
    /// run registers nothing there and takes no locks.
    pub fn is_private(&self) -> bool {
        self.private.is_some()
    }

    /// The warnings about the directories (one when the run is private, ADR 0036).
    pub fn warnings(&self) -> &[CacheWarning] {
        &self.warnings
    }

    /// `settings` with these directories: the cache directory this run writes, the site cache,
    /// and whether the cache directory is private ([`Settings::private_cache`]).
    pub fn settings(&self, settings: &Settings) -> Settings {
        Settings {
            cache_dir: self.cache_dir.clone(),
            site_cache: self.site_cache.clone(),
            private_cache: self.is_private(),
            ..settings.clone()
        }
    }
}

/// The one warning of a run about translation entries of the site cache `site` that exist but
/// this user cannot read (a file of mode 0400 owned by the user who filled it): each of `missed`
/// (keys neither cache served) is looked for, and the warning names the directory, how many
/// there were, the first one and the fix; `None` when there are none. Such an entry is a miss
/// here, translated and cached locally, and the run goes on correctly (ADR 0036).
pub fn unreadable_entries<'a>(
    site: &gridkey_fingerprint::SiteCache,
    missed: impl Iterator<Item = &'a gridkey_fingerprint::TranslationKey>,
) -> Option<CacheWarning> {
    let unreadable: Vec<std::path::PathBuf> = missed
        .map(|key| site.cache().entry_path(key))
        .filter(|path| std::fs::File::open(path).is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied))
        .collect();
    let first = unreadable.first()?;
    let dir = site.cache().dir().parent().unwrap_or(site.cache().dir());
    Some(CacheWarning {
        path: dir.to_path_buf(),
        message: format!(
            "site cache holds {} translation {} this user cannot read (the first: {}), translated here instead; \
             its owner makes it readable to all with `chmod -R a+rX {}` (README \"Site cache\")",
            unreadable.len(),
            if unreadable.len() == 1 { "entry" } else { "entries" },
            first.display(),
            dir.display()
        ),
    })
}
