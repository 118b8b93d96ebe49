//! A read-only site cache serves its hits (ADR 0036), through the real `gridkey` binary and a
//! real read-only cache filled by an earlier run: a read-only bind mount in a private mount
//! namespace (`unshare -m`, `mount --bind -o ro`), and the same cache used by another user
//! (`setpriv` to `nobody`), for whom its directories are not writable. Each way is skipped, with
//! a message, where this machine does not allow it (mounting and changing user need root).

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

/// The user and group `nobody` of Debian, as whom the other-user way runs.
const NOBODY: u32 = 65534;

/// How a test makes the filled cache read-only for the `gridkey` it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// A read-only bind mount of the cache in a private mount namespace of the run.
    BindMount,
    /// The run as user `nobody`: the cache's directories belong to root, mode 0755.
    OtherUser,
}

impl Via {
    const ALL: [Via; 2] = [Via::BindMount, Via::OtherUser];

    /// Whether this machine allows this way; if not, says why on stderr.
    fn available(self, test: &str) -> bool {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("{test}: skipped {self:?}: needs root (to mount, or to run as another user)");
            return false;
        }
        let probe = match self {
            Via::BindMount => {
                Command::new("unshare").args(["-m", "mount", "--bind", "-o", "ro", "/tmp", "/tmp"]).output()
            }
            Via::OtherUser => Command::new("setpriv")
                .args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups", "true"])
                .output(),
        };
        let ok = probe.as_ref().is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("{test}: skipped {self:?}: this machine refuses it ({probe:?})");
        }
        ok
    }
}

/// A test's directories: `base` holds the filled cache and whatever else the test needs.
struct Place {
    base: tempfile::TempDir,
}

impl Place {
    fn new() -> Self {
        let base = tempfile::tempdir().unwrap();
        // Readable by `nobody` (a temp directory is 0700).
        fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755)).unwrap();
        Place { base }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.base.path().join(name)
    }

    /// An empty directory `name` that the way's user can write.
    fn writable(&self, name: &str, via: Via) -> PathBuf {
        let dir = self.path(name);
        fs::create_dir_all(&dir).unwrap();
        if via == Via::OtherUser {
            std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        dir
    }
}

/// `gridkey ARGS` where the cache `site` is read-only: `ARGS` name it as `{ro}`. With a bind
/// mount, `{ro}` is a mount point (`<site>.ro`) showing `site` read-only to this run alone.
fn gridkey_read_only(via: Via, site: &Path, args: &[&str]) -> Output {
    let exe = env!("CARGO_BIN_EXE_gridkey");
    let (ro, mut cmd) = match via {
        Via::BindMount => {
            let ro = site.with_extension("ro");
            fs::create_dir_all(&ro).unwrap();
            let script = r#"mount --bind -o ro "$1" "$2" && shift 2 && exec "$@""#;
            let mut cmd = Command::new("unshare");
            cmd.args(["-m", "sh", "-c", script, "sh"]).arg(site).arg(&ro).arg(exe);
            (ro, cmd)
        }
        Via::OtherUser => {
            let mut cmd = Command::new("setpriv");
            cmd.args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups"]).arg(exe);
            (site.to_path_buf(), cmd)
        }
    };
    // As `common::gridkey_command`: the caller's environment cannot change the outcome.
    for var in gridkey::environment() {
        cmd.env_remove(var);
    }
    let ro = ro.to_str().unwrap().to_owned();
    cmd.args(args.iter().map(|a| a.replace("{ro}", &ro)));
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn grid() -> String {
    common::data("grids/icon_grid_0013_R02B04_R.nc").to_str().unwrap().to_owned()
}

/// Fills `cache` with a run of the eight programs (serial mode) and returns its report.
fn fill(cache: &Path) -> serde_json::Value {
    let grid = grid();
    let args = ["run", "--grid", &grid, "--cache-dir", cache.to_str().unwrap(), "--mode", "serial", "--json"];
    let out = common::gridkey_command(&args, &[]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(translations(&report), 8, "a fresh cache translates every program");
    // What a site's owner does to share the cache: its files are written readable by their
    // owner alone.
    let shared = Command::new("chmod").args(["-R", "a+rX"]).arg(cache).status().unwrap();
    assert!(shared.success());
    report
}

/// Every file under `dir` with its bytes and modification time: what "nothing was written"
/// compares.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let meta = fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                todo.push(e.path());
            } else {
                out.insert(e.path(), (fs::read(e.path()).unwrap_or_default(), meta.modified().unwrap()));
            }
        }
    }
    out
}

/// The files under `dir` whose name ends with `ext`.
fn entries(dir: &Path, ext: &str) -> usize {
    if !dir.exists() {
        return 0;
    }
    snapshot(dir).keys().filter(|p| p.to_string_lossy().ends_with(ext)).count()
}

fn programs(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["programs"].as_array().unwrap()
}

fn count(report: &serde_json::Value, field: &str) -> usize {
    programs(report).iter().filter(|p| p[field] == true).count()
}

fn translations(report: &serde_json::Value) -> usize {
    count(report, "translated")
}

fn report_of(out: &Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

fn warning_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("gridkey: warning:"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_read_only_site_cache_behind_a_writable_cache_serves_every_hit_and_is_not_written() {
    let test = "a_read_only_site_cache_behind_a_writable_cache_serves_every_hit_and_is_not_written";
    let place = Place::new();
    let site = place.path("site");
    let filled = fill(&site);
    let before = snapshot(&site);
    let grid = grid();
    for via in Via::ALL.into_iter().filter(|v| v.available(test)) {
        let local = place.writable(&format!("local-{via:?}"), via);
        let local_arg = local.to_str().unwrap();
        let args = [
            "run",
            "--grid",
            &grid,
            "--mode",
            "process",
            "--jobs",
            "2",
            "--json",
            "--cache-dir",
            local_arg,
            "--site-cache",
            "{ro}",
        ];
        let out = gridkey_read_only(via, &site, &args);
        let report = report_of(&out);
        assert_eq!(count(&report, "verified"), 8, "{via:?}: {}", text(&out));
        assert_eq!(count(&report, "cache_hit"), 8, "{via:?}: 8/8 hits: {}", text(&out));
        assert_eq!(translations(&report), 0, "{via:?}: no translation: {}", text(&out));
        assert_eq!(count(&report, "built"), 0, "{via:?}: every library served by the site cache");
        for (p, f) in programs(&report).iter().zip(programs(&filled)) {
            assert_eq!(p["key"], f["key"], "{via:?}: the key of {} is the filling run's", p["program"]);
            assert_eq!(p["tier"], "site", "{via:?}: {} served by the site cache", p["program"]);
        }
        let site_tier = report["tiers"].as_array().unwrap().iter().find(|t| t["tier"] == "site").expect("a site tier");
        assert_eq!(site_tier["hits"], 8, "{via:?}");
        assert!(warning_lines(&out).is_empty(), "{via:?}: a writable cache beside it, no warning: {}", text(&out));
        assert!(snapshot(&site) == before, "{via:?}: nothing written to the read-only cache");
        // What the site cache served stays there: the local cache holds only what is new.
        assert_eq!(entries(&local.join("translation-v2"), ".bin"), 0, "{via:?}");
        assert_eq!(entries(&local.join("build-v2"), ".so"), 0, "{via:?}");
        assert_eq!(entries(&local.join("tables-v1"), ".npy"), 0, "{via:?}: every table mapped from the site cache");
    }
}

#[test]
fn a_read_only_cache_alone_serves_its_hits_translates_the_misses_and_caches_nothing() {
    let test = "a_read_only_cache_alone_serves_its_hits_translates_the_misses_and_caches_nothing";
    let place = Place::new();
    let site = place.path("site");
    let filled = fill(&site);
    // Three programs' translation entries go, so that the read-only cache has five hits and
    // three misses; their libraries stay, and serve the translations made here.
    for p in programs(&filled).iter().take(3) {
        let key = p["key"].as_str().unwrap();
        for ext in ["bin", "json"] {
            fs::remove_file(site.join("translation-v2").join(&key[..2]).join(format!("{key}.{ext}"))).unwrap();
        }
    }
    let before = snapshot(&site);
    let grid = grid();
    for via in Via::ALL.into_iter().filter(|v| v.available(test)) {
        for round in 0..2 {
            let args = ["run", "--grid", &grid, "--mode", "process", "--jobs", "2", "--json", "--cache-dir", "{ro}"];
            let out = gridkey_read_only(via, &site, &args);
            let report = report_of(&out);
            assert_eq!(count(&report, "verified"), 8, "{via:?}: {}", text(&out));
            assert_eq!(
                count(&report, "cache_hit"),
                5,
                "{via:?} run {round}: the five entries left hit: {}",
                text(&out)
            );
            // Nothing of the first run was cached: the second translates the same three again.
            assert_eq!(translations(&report), 3, "{via:?} run {round}: the three misses translated");
            assert_eq!(count(&report, "built"), 0, "{via:?} run {round}: their libraries served by the cache");
            let warnings = warning_lines(&out);
            assert_eq!(warnings.len(), 1, "{via:?} run {round}: one warning: {}", text(&out));
            assert!(
                warnings[0].contains("read-only") && warnings[0].contains("nothing new is cached"),
                "{via:?}: {}",
                warnings[0]
            );
            assert!(snapshot(&site) == before, "{via:?} run {round}: nothing written to the read-only cache");
        }
    }
}

#[test]
fn cache_stats_reads_a_read_only_cache_and_gc_refuses_it_naming_it() {
    let test = "cache_stats_reads_a_read_only_cache_and_gc_refuses_it_naming_it";
    let place = Place::new();
    let site = place.path("site");
    fill(&site);
    let before = snapshot(&site);
    for via in Via::ALL.into_iter().filter(|v| v.available(test)) {
        let out = gridkey_read_only(via, &site, &["cache", "stats", "--json", "--cache-dir", "{ro}"]);
        let stats = report_of(&out);
        let entries: Vec<u64> =
            stats["stores"].as_array().unwrap().iter().map(|s| s["entries"].as_u64().unwrap()).collect();
        assert_eq!(
            entries,
            [8, 8, 8, 0],
            "{via:?}: tables, translation entries, libraries, GT4Py entries: {}",
            text(&out)
        );

        let out = gridkey_read_only(via, &site, &["cache", "gc", "--max-size", "0", "--cache-dir", "{ro}"]);
        assert_eq!(out.status.code(), Some(2), "{via:?}: {}", text(&out));
        let shown = if via == Via::BindMount { site.with_extension("ro") } else { site.clone() };
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(shown.to_str().unwrap()), "{via:?}: names the directory: {err}");
        assert!(err.contains("is read-only here") && err.contains("cannot clean it"), "{via:?}: says why: {err}");
        assert!(snapshot(&site) == before, "{via:?}: nothing removed");
    }
}

#[test]
fn a_site_cache_entry_this_user_cannot_read_is_warned_about_once_and_translated_here() {
    let test = "a_site_cache_entry_this_user_cannot_read_is_warned_about_once_and_translated_here";
    let place = Place::new();
    let site = place.path("site");
    let filled = fill(&site);
    // One entry its owner did not share: mode 000. As root, the run is another user's
    // (`nobody`), for whom the mode holds; as anyone else, the mode holds for this user too.
    let key = programs(&filled)[0]["key"].as_str().unwrap().to_owned();
    let entry = site.join("translation-v2").join(&key[..2]).join(format!("{key}.bin"));
    fs::set_permissions(&entry, fs::Permissions::from_mode(0o000)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root && !Via::OtherUser.available(test) {
        return;
    }
    let grid = grid();
    let local = place.writable("local", if root { Via::OtherUser } else { Via::BindMount });
    let site_arg = site.to_str().unwrap();
    let args = [
        "run",
        "--grid",
        &grid,
        "--mode",
        "serial",
        "--json",
        "--cache-dir",
        local.to_str().unwrap(),
        "--site-cache",
        site_arg,
    ];
    let out = if root {
        gridkey_read_only(Via::OtherUser, &site, &args)
    } else {
        common::gridkey_command(&args, &[]).output().unwrap()
    };
    let report = report_of(&out);
    assert_eq!(count(&report, "verified"), 8, "{}", text(&out));
    assert_eq!(translations(&report), 1, "the unreadable entry is translated here: {}", text(&out));
    assert_eq!(count(&report, "cache_hit"), 7, "{}", text(&out));
    let p = programs(&report).iter().find(|p| p["key"] == key.as_str()).unwrap();
    assert_eq!(p["translated"], true, "{p}");
    let warned: Vec<String> = warning_lines(&out).into_iter().filter(|l| l.contains("cannot read")).collect();
    assert_eq!(warned.len(), 1, "one warning: {}", text(&out));
    let line = &warned[0];
    assert!(line.contains(&format!("gridkey: warning: {site_arg}: site cache holds 1 translation entry")), "{line}");
    assert!(line.contains(&entry.display().to_string()), "names the entry: {line}");
    assert!(line.contains(&format!("chmod -R a+rX {site_arg}")), "says the fix: {line}");
    assert_eq!(entries(&local.join("translation-v2"), ".bin"), 1, "the translation is cached locally");
}
