//! `Settings::from_vars`: every variable's accepted values, defaults and errors.

use std::collections::BTreeMap;
use std::time::Duration;

use gridkey_settings::{BuildJobs, BuildJobsMode, Settings, SettingsError, COMPILER_ENV, VARIABLES};
use proptest::prelude::*;

fn parse(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    let vars: BTreeMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Settings::from_vars(|name| vars.get(name).cloned())
}

fn bad_var(vars: &[(&str, &str)]) -> &'static str {
    match parse(vars) {
        Err(SettingsError::BadSetting { var, .. }) => var,
        other => panic!("{vars:?} gave {other:?}, not a bad setting"),
    }
}

#[test]
fn nothing_set_gives_the_defaults() {
    let s = parse(&[]).unwrap();
    assert_eq!(s, Settings::default());
    assert_eq!(s.build_jobs.mode, BuildJobsMode::Process);
    assert_eq!(s.cache_dir.to_str(), Some(".gridkey_cache"));
    assert_eq!(s.compiler.command, ["cc"]);
    assert!(!s.verify_tables && !s.verify_cache_hits);
    assert_eq!(s.test_hooks.fault, None);
}

#[test]
fn switches_read_the_usual_spellings_and_reject_the_rest() {
    for var in ["GRIDKEY_VERIFY_TABLES", "GRIDKEY_VERIFY_CACHE_HITS"] {
        for (value, on) in [
            ("1", true),
            ("true", true),
            ("YES", true),
            (" on ", true),
            ("0", false),
            ("off", false),
            ("", false),
            ("No", false),
        ] {
            let s = parse(&[(var, value)]).unwrap();
            let got = if var == "GRIDKEY_VERIFY_TABLES" { s.verify_tables } else { s.verify_cache_hits };
            assert_eq!(got, on, "{var}={value:?}");
        }
        assert_eq!(bad_var(&[(var, "maybe")]), var);
    }
}

#[test]
fn mode_and_jobs_both_ignore_surrounding_spaces() {
    let s = parse(&[("GRIDKEY_BUILD_JOBS_MODE", " thread "), ("GRIDKEY_BUILD_JOBS", " 3 ")]).unwrap();
    assert_eq!(s.build_jobs, BuildJobs::new(BuildJobsMode::Thread, 3));
    assert_eq!(bad_var(&[("GRIDKEY_BUILD_JOBS_MODE", "fast")]), "GRIDKEY_BUILD_JOBS_MODE");
    assert_eq!(bad_var(&[("GRIDKEY_BUILD_JOBS", "many")]), "GRIDKEY_BUILD_JOBS");
}

#[test]
fn zero_or_negative_jobs_mean_serial() {
    for n in ["0", "-1", "-100"] {
        let s = parse(&[("GRIDKEY_BUILD_JOBS_MODE", "process"), ("GRIDKEY_BUILD_JOBS", n)]).unwrap();
        assert_eq!(s.build_jobs, BuildJobs::new(BuildJobsMode::Serial, 1), "{n}");
    }
}

#[test]
fn timeout_is_seconds_and_zero_is_none() {
    assert_eq!(
        parse(&[("GRIDKEY_BUILD_TIMEOUT", "2.5")]).unwrap().build_jobs.timeout,
        Some(Duration::from_millis(2500))
    );
    assert_eq!(parse(&[("GRIDKEY_BUILD_TIMEOUT", "0")]).unwrap().build_jobs.timeout, None);
    for bad in ["-1", "soon", "inf", "NaN"] {
        assert_eq!(bad_var(&[("GRIDKEY_BUILD_TIMEOUT", bad)]), "GRIDKEY_BUILD_TIMEOUT", "{bad}");
    }
}

#[test]
fn a_blank_compiler_is_one_usage_error() {
    for blank in ["", "   "] {
        let err = parse(&[("CC", blank)]).unwrap_err();
        assert!(matches!(err, SettingsError::BadSetting { var: "CC", .. }), "{err}");
        assert!(err.to_string().contains("unset it for cc"), "{err}");
    }
    let s = parse(&[("CC", " ccache  gcc ")]).unwrap();
    assert_eq!(s.compiler.command, ["ccache", "gcc"]);
}

#[test]
fn only_the_allowlisted_variables_reach_the_compiler() {
    let s = parse(&[("PATH", "/usr/bin"), ("TMPDIR", "/tmp"), ("LD_PRELOAD", "/evil.so"), ("HOME", "/root")]).unwrap();
    let names: Vec<&str> = s.compiler.env.keys().map(String::as_str).collect();
    assert_eq!(names, ["PATH", "TMPDIR"]);
    assert!(COMPILER_ENV.iter().all(|v| !v.starts_with("LD_")));
}

#[test]
fn a_wrappers_variables_pass_by_prefix_and_nothing_else() {
    let mut s = parse(&[("PATH", "/usr/bin")]).unwrap();
    let listed = [
        ("SCCACHE_REDIS", "redis://cache:6379"),
        ("CCACHE_DIR", "/srv/ccache"),
        ("DISTCC_HOSTS", "a b"),
        ("SCCACHE", "not a prefix match"),
        ("MY_SCCACHE_DIR", "prefix, not infix"),
        ("LD_PRELOAD", "/evil.so"),
        ("PATH", "/somewhere/else"),
    ];
    s.compiler.pass_wrapper_vars(listed.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let env: Vec<(&str, &str)> = s.compiler.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        env,
        [
            ("CCACHE_DIR", "/srv/ccache"),
            ("DISTCC_HOSTS", "a b"),
            ("PATH", "/usr/bin"),
            ("SCCACHE_REDIS", "redis://cache:6379")
        ]
    );
    assert_eq!(gridkey_settings::COMPILER_ENV_PREFIXES, ["CCACHE_", "SCCACHE_", "DISTCC_"]);
}

#[test]
fn the_compiler_resolves_on_the_given_path_not_the_process_one() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("mycc");
    std::fs::write(&exe, "#!/bin/sh\n").unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(&mut std::fs::metadata(&exe).unwrap().permissions(), 0o755);
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = dir.path().to_str().unwrap();
    let mut s = parse(&[("CC", "mycc -O1"), ("PATH", path)]).unwrap();
    let resolved = s.compiler.resolve(dir.path()).unwrap().clone();
    assert_eq!(resolved.program, exe);
    assert_eq!(s.compiler.resolved, Some(resolved));
    let mut missing = parse(&[("CC", "no-such-compiler-xyz"), ("PATH", path)]).unwrap();
    let err = missing.compiler.resolve(dir.path()).unwrap_err();
    assert!(matches!(err, SettingsError::CompilerNotFound { .. }), "{err}");
    assert!(err.to_string().contains("no-such-compiler-xyz") && err.to_string().contains(path), "{err}");
}

#[test]
fn settings_cross_a_process_boundary_unchanged() {
    let mut s = parse(&[
        ("GRIDKEY_BUILD_JOBS_MODE", "thread"),
        ("GRIDKEY_BUILD_TIMEOUT", "1.5"),
        ("GRIDKEY_VERIFY_TABLES", "on"),
        ("GRIDKEY_FAULT", "pause:table:written"),
        ("CC", "gcc"),
        ("PATH", "/usr/bin:/bin"),
    ])
    .unwrap();
    s.compiler.resolve(std::path::Path::new("/")).unwrap();
    let bytes = postcard::to_stdvec(&s).unwrap();
    assert_eq!(postcard::from_bytes::<Settings>(&bytes).unwrap(), s);
}

#[test]
fn every_variable_is_listed_once() {
    let mut names: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n);
    assert!(VARIABLES.iter().all(|v| !v.meaning.is_empty() && !v.default.is_empty()));
}

proptest! {
    #[test]
    fn any_integer_count_parses(n in any::<i64>(), mode in prop::sample::select(vec!["serial", "thread", "process"])) {
        let s = parse(&[("GRIDKEY_BUILD_JOBS_MODE", mode), ("GRIDKEY_BUILD_JOBS", &n.to_string())]).unwrap();
        let serial = n <= 0 || mode == "serial";
        prop_assert_eq!(s.build_jobs.mode == BuildJobsMode::Serial, serial);
        prop_assert!(s.build_jobs.jobs >= 1);
    }

    #[test]
    fn unknown_variables_change_nothing(name in "[A-Z_]{1,12}", value in ".*") {
        prop_assume!(!VARIABLES.iter().any(|v| v.name == name) && !COMPILER_ENV.contains(&name.as_str()));
        prop_assert_eq!(parse(&[(&name, &value)]).unwrap(), Settings::default());
    }
}

#[test]
fn the_lock_wait_is_seconds_60_by_default_and_a_bad_value_names_the_variable() {
    use gridkey_settings::ENV_LOCK_WAIT;
    let with = |value: &str| Settings::from_vars(|name| (name == ENV_LOCK_WAIT).then(|| value.to_owned()));
    assert_eq!(Settings::from_vars(|_| None).unwrap().key_lock_wait, std::time::Duration::from_secs(60));
    assert_eq!(with("2.5").unwrap().key_lock_wait, std::time::Duration::from_millis(2500));
    assert_eq!(with("0").unwrap().key_lock_wait, std::time::Duration::ZERO);
    for bad in ["-1", "soon", "NaN", "inf"] {
        let err = with(bad).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{ENV_LOCK_WAIT}={bad:?} is not valid")), "{err}");
    }
}
