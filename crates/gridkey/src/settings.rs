//! The binary's edge (ADR 0013): the one place `gridkey` reads its process environment. Flags
//! replace their variables, so a bad value left in the environment does not matter when the
//! flag is given; everything else is [`Settings::from_vars`] over the environment, and a compiler
//! wrapper's own variables (`CCACHE_*`, `SCCACHE_*`, `DISTCC_*`, ADR 0032) are passed to the
//! compiler from the listed environment.

use std::path::PathBuf;

use gridkey_settings::{
    BuildJobsMode, Settings, SettingsError, ENV_CACHE_DIR, ENV_JOBS, ENV_MODE, ENV_REMOTE_URL, ENV_REMOTE_WRITER,
    ENV_SITE_CACHE, ENV_VERIFY_TABLES,
};

/// Variable that asks for plain progress lines instead of a bar.
pub const ENV_NO_PROGRESS: &str = "GRIDKEY_NO_PROGRESS";

/// The flags that replace a variable.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--mode`: replaces `GRIDKEY_BUILD_JOBS_MODE`.
    pub mode: Option<BuildJobsMode>,
    /// `--jobs`: replaces `GRIDKEY_BUILD_JOBS`.
    pub jobs: Option<i64>,
    /// `--cache-dir`: replaces `GRIDKEY_CACHE_DIR`.
    pub cache_dir: Option<PathBuf>,
    /// `--site-cache`: replaces `GRIDKEY_SITE_CACHE`.
    pub site_cache: Option<PathBuf>,
    /// `--verify`: switches `GRIDKEY_VERIFY_TABLES` on whatever the variable says.
    pub verify: bool,
    /// `--remote URL`: replaces `GRIDKEY_REMOTE_URL`.
    pub remote: Option<String>,
    /// `--remote-writer`: switches `GRIDKEY_REMOTE_WRITER` on whatever the variable says.
    pub remote_writer: bool,
}

/// The settings of this run: `flags` first, then the process environment.
///
/// Errors: the first variable (not replaced by a flag) whose value is not accepted.
pub fn settings(flags: &Flags) -> Result<Settings, SettingsError> {
    let mut settings = Settings::from_vars(|name| match name {
        ENV_MODE if flags.mode.is_some() => flags.mode.map(|m| m.as_str().to_owned()),
        ENV_JOBS if flags.jobs.is_some() => flags.jobs.map(|n| n.to_string()),
        ENV_CACHE_DIR if flags.cache_dir.is_some() => None,
        ENV_SITE_CACHE if flags.site_cache.is_some() => None,
        ENV_VERIFY_TABLES if flags.verify => Some("1".to_owned()),
        ENV_REMOTE_URL if flags.remote.is_some() => flags.remote.clone(),
        ENV_REMOTE_WRITER if flags.remote_writer => Some("1".to_owned()),
        _ => std::env::var(name).ok(),
    })?;
    if let Some(dir) = &flags.cache_dir {
        settings.cache_dir = dir.clone();
    }
    // A variable whose name or value is not UTF-8 cannot be a wrapper's (their names are ASCII).
    settings.compiler.pass_wrapper_vars(
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    );
    if let Some(dir) = &flags.site_cache {
        settings.site_cache = Some(dir.clone());
    }
    Ok(settings)
}

/// The cache directory alone (for the commands that need nothing else): `--cache-dir`, else
/// `GRIDKEY_CACHE_DIR`, else the default; other variables are not looked at.
pub fn cache_dir(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os(ENV_CACHE_DIR).filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(gridkey_settings::DEFAULT_CACHE_DIR))
}

/// Whether plain progress lines are asked for: `NO_COLOR` or [`ENV_NO_PROGRESS`] set and not
/// empty.
pub fn plain_progress() -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    set("NO_COLOR") || set(ENV_NO_PROGRESS)
}

/// The flag of this binary that replaces `variable`, if it has one.
fn flag_of(variable: &str) -> Option<&'static str> {
    match variable {
        ENV_CACHE_DIR => Some("--cache-dir"),
        ENV_SITE_CACHE => Some("--site-cache"),
        ENV_REMOTE_URL => Some("--remote"),
        _ => None,
    }
}

/// `message` of a lower crate, which names a setting by its role (`the cache directory`), with
/// the variable and flag of this binary that set it ([`gridkey_settings::name_settings`]).
pub fn name_settings(message: &str) -> String {
    gridkey_settings::name_settings(message, flag_of)
}

/// `report` with [`name_settings`] applied to every program's error, every warning and the
/// shared tier's rejections, as it is printed and written as JSON.
pub fn name_settings_in(mut report: gridkey::RunReport) -> gridkey::RunReport {
    for p in &mut report.programs {
        p.error = p.error.as_deref().map(name_settings);
    }
    for w in &mut report.warnings {
        w.message = name_settings(&w.message);
    }
    for t in &mut report.tiers {
        t.rejections = t.rejections.as_deref().map(name_settings);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::name_settings;

    #[test]
    fn the_binary_names_the_variable_and_flag_of_a_role() {
        let check = |lower: &str, shown: &str| assert_eq!(name_settings(lower), shown, "{lower}");
        check(
            "cannot use table store directory /x: denied; point the cache directory at a writable directory",
            "cannot use table store directory /x: denied; point the cache directory (GRIDKEY_CACHE_DIR or --cache-dir) at a writable directory",
        );
        check(
            "build worker (pid 7) ran past the per-task timeout of 0.5 s and was killed",
            "build worker (pid 7) ran past the per-task timeout (GRIDKEY_BUILD_TIMEOUT) of 0.5 s and was killed",
        );
        check(
            "fix the password or user in the shared tier's URL",
            "fix the password or user in the shared tier's URL (GRIDKEY_REMOTE_URL or --remote)",
        );
        // Already named (a message of this crate): left as it is.
        let own = "point GRIDKEY_CACHE_DIR (or --cache-dir) at the cache directory";
        check(own, own);
        check("nothing to name", "nothing to name");
    }
}
