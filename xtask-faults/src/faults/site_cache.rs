//! The read-only site cache's rows of the fault matrix (ADR 0036): a cache filled by one run and
//! then made read-only (a read-only bind mount when this process may mount, else mode 0555 on
//! every directory, which stops a user other than root) serves its hits, behind a writable
//! cache or alone, and nothing in it changes.
//!
//! A row is **lost** when a file of the read-only cache changed, or a file under a final name
//! of the writable cache is not what its name says.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{bail, Result};
use gridkey::RunReport;

use super::{check_final_files, s, Matrix, Seen};

/// The rows of the read-only site cache.
pub(super) fn rows(m: &mut Matrix) {
    m.row("read-only site cache behind a writable cache", "every hit served, nothing written there", |m| {
        site_cache(m, true)
    });
    m.row("read-only site cache as the only cache", "hits served, misses not cached, one warning", |m| {
        site_cache(m, false)
    });
}

/// A filled cache, read-only, used with a writable cache beside it (`beside`) or alone.
fn site_cache(m: &mut Matrix, beside: bool) -> Result<Seen> {
    let filled = m.filled("site")?;
    let before = snapshot(&filled);
    let (site, how) = read_only(m, &filled)?;
    let local = m.fresh("local");
    let r = if beside { m.run(&local, &["--site-cache", s(&site)], &[]) } else { m.run(&site, &[], &[]) };
    let undone = undo_read_only(m, &filled, &site);
    let r = r?;
    undone?;
    let mut problems = check_final_files(&local);
    if snapshot(&filled) != before {
        problems.push(format!("a file of the read-only cache {} changed", filled.display()));
    }
    let report: Option<RunReport> = serde_json::from_str(&r.stdout).ok();
    let (hits, site_hits) = report
        .as_ref()
        .map_or((0, 0), |r| (r.hits(), r.programs.iter().filter(|p| p.tier.as_deref() == Some("site")).count()));
    let warnings = r.stderr.lines().filter(|l| l.starts_with("gridkey: warning:")).count();
    let survived = r.ok()
        && r.translations() == 0
        && hits == r.programs
        && site_hits == r.programs
        && warnings == usize::from(!beside);
    Ok(Seen::new(
        survived,
        &problems,
        format!("{how}: {}, {site_hits} served by the site cache, {warnings} warning(s)", r.summary()),
    ))
}

/// `filled`, read-only for the runs of the matrix: a read-only bind mount on a new mount point,
/// or, where this process may not mount, `filled` itself with mode 0555 on every directory.
fn read_only(m: &Matrix, filled: &Path) -> Result<(PathBuf, &'static str)> {
    if m.can_mount {
        let mnt = m.fresh("site-ro");
        fs::create_dir_all(&mnt)?;
        let out = Command::new("mount").args(["--bind", "-o", "ro"]).arg(filled).arg(&mnt).output()?;
        if !out.status.success() {
            bail!("cannot bind-mount {} read-only: {}", filled.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        return Ok((mnt, "read-only bind mount"));
    }
    for dir in dirs(filled) {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o555))?;
    }
    Ok((filled.to_path_buf(), "mode 0555"))
}

/// Undoes [`read_only`].
fn undo_read_only(m: &Matrix, filled: &Path, site: &Path) -> Result<()> {
    if m.can_mount {
        super::unmount(site)?;
        return Ok(());
    }
    for dir in dirs(filled) {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// `dir` and every directory under it.
fn dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut at = 0;
    while at < out.len() {
        for e in fs::read_dir(&out[at]).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(e.path());
            }
        }
        at += 1;
    }
    out
}

/// Every file under `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, Option<SystemTime>)> {
    let mut out = BTreeMap::new();
    for d in dirs(dir) {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_file()) {
                let modified = e.metadata().ok().and_then(|m| m.modified().ok());
                out.insert(e.path(), (fs::read(e.path()).unwrap_or_default(), modified));
            }
        }
    }
    out
}
