//! The remote settings are a pure function of the variables: defaults, each variable, and a
//! typed error naming the variable for every bad value.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use gridkey_settings::{RemoteSettings, RemoteTrust, Role, Settings, SettingsError, VARIABLES};

fn check(vars: &[(&str, &str)]) -> Result<Option<RemoteSettings>, SettingsError> {
    let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let remote = RemoteSettings::from_vars(|var| map.get(var).cloned());
    // The same, parsed as part of the settings.
    let all = Settings::from_vars(|var| map.get(var).cloned()).map(|s| s.remote);
    assert_eq!(format!("{remote:?}"), format!("{all:?}"));
    remote
}

#[test]
fn no_url_means_no_shared_tier_whatever_else_is_set() {
    assert_eq!(check(&[]).unwrap(), None);
    assert_eq!(check(&[("GRIDKEY_REMOTE_URL", "  "), ("GRIDKEY_REMOTE_WRITER", "1")]).unwrap(), None);
    // A value the switch does not take is an error without a URL too.
    match check(&[("GRIDKEY_REMOTE_WRITER", "maybe")]) {
        Err(e @ SettingsError::BadSetting { .. }) => {
            assert!(e.to_string().starts_with("GRIDKEY_REMOTE_WRITER=\"maybe\" is not valid"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn defaults_are_read_only_unsigned_and_short_timeouts() {
    let s = check(&[("GRIDKEY_REMOTE_URL", "redis://127.0.0.1:6379/")]).unwrap().unwrap();
    assert_eq!(s, RemoteSettings::new("redis://127.0.0.1:6379/"));
    assert_eq!(s.role, Role::ReadOnly);
    assert_eq!((s.signing_key.as_ref(), s.trusted_keys.as_ref()), (None, None));
    assert_eq!((s.connect_timeout, s.timeout), (Duration::from_secs(1), Duration::from_secs(2)));
    assert_eq!((s.lease_ttl, s.lease_wait), (Duration::from_secs(10), Duration::from_secs(60)));
    assert_eq!((s.max_object_bytes, s.namespace.as_str()), (64 << 20, "gridkey"));
    // The documented defaults are these.
    let documented: Vec<&str> =
        VARIABLES.iter().filter(|v| v.name.starts_with("GRIDKEY_REMOTE_")).map(|v| v.default).collect();
    assert_eq!(documented[4..10], ["1", "2", "10", "60", "67108864 (64 MiB)", "`gridkey`"]);
    // Nothing is taken from the shared tier without trusted keys or the ACL opt-in (ADR 0031).
    assert_eq!((s.trust, s.ca_file.as_ref()), (RemoteTrust::Signed, None));
    assert_eq!(documented[10..], ["`signed`", "unset: the system's roots"]);
}

#[test]
fn every_variable_is_read() {
    let s = check(&[
        ("GRIDKEY_REMOTE_URL", "redis://:pw@cache.site:6380/2"),
        ("GRIDKEY_REMOTE_WRITER", "yes"),
        ("GRIDKEY_REMOTE_SIGNING_KEY", "/etc/gridkey/writer.key"),
        ("GRIDKEY_REMOTE_TRUSTED_KEYS", "/etc/gridkey/trusted"),
        ("GRIDKEY_REMOTE_CONNECT_TIMEOUT", "0.25"),
        ("GRIDKEY_REMOTE_TIMEOUT", "3"),
        ("GRIDKEY_REMOTE_LEASE_TTL", "4.5"),
        ("GRIDKEY_REMOTE_LEASE_WAIT", "120"),
        ("GRIDKEY_REMOTE_MAX_OBJECT", "1000"),
        ("GRIDKEY_REMOTE_NAMESPACE", "site-a"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(s.role, Role::Writer);
    assert_eq!(s.signing_key, Some(PathBuf::from("/etc/gridkey/writer.key")));
    assert_eq!(s.trusted_keys, Some(PathBuf::from("/etc/gridkey/trusted")));
    assert_eq!(s.connect_timeout, Duration::from_millis(250));
    assert_eq!(s.timeout, Duration::from_secs(3));
    assert_eq!(s.lease_ttl, Duration::from_millis(4500));
    assert_eq!(s.lease_wait, Duration::from_secs(120));
    assert_eq!((s.max_object_bytes, s.namespace.as_str()), (1000, "site-a"));
    assert_eq!(s.shown_url(), "redis://:***@cache.site:6380/2");
    // VARIABLES lists exactly the variables read here.
    let names: Vec<&str> = VARIABLES.iter().map(|v| v.name).filter(|n| n.starts_with("GRIDKEY_REMOTE_")).collect();
    assert_eq!(names.len(), 12);
}

#[test]
fn bad_values_name_the_variable() {
    let url = ("GRIDKEY_REMOTE_URL", "redis://127.0.0.1/");
    for (var, value) in [
        ("GRIDKEY_REMOTE_WRITER", "maybe"),
        ("GRIDKEY_REMOTE_CONNECT_TIMEOUT", "0"),
        ("GRIDKEY_REMOTE_TIMEOUT", "-1"),
        ("GRIDKEY_REMOTE_TIMEOUT", "soon"),
        ("GRIDKEY_REMOTE_LEASE_TTL", "inf"),
        ("GRIDKEY_REMOTE_LEASE_WAIT", "NaN"),
        ("GRIDKEY_REMOTE_MAX_OBJECT", "0"),
        ("GRIDKEY_REMOTE_MAX_OBJECT", "1e6"),
        ("GRIDKEY_REMOTE_NAMESPACE", "two words"),
        ("GRIDKEY_REMOTE_NAMESPACE", ""),
    ] {
        match check(&[url, (var, value)]) {
            Err(e @ SettingsError::BadSetting { .. }) => {
                let text = e.to_string();
                assert!(text.starts_with(&format!("{var}={value:?} is not valid: expected ")), "{text}");
            }
            other => panic!("{var}={value}: {other:?}"),
        }
    }
}

#[test]
fn passwords_are_hidden_in_every_url_form() {
    let shown = |url: &str| RemoteSettings::new(url).shown_url();
    assert_eq!(shown("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    assert_eq!(shown("redis://:secret@host:1/0"), "redis://:***@host:1/0");
    assert_eq!(shown("redis://user:secret@host/"), "redis://user:***@host/");
    assert_eq!(shown("redis://secret@host/"), "redis://***@host/");
    assert_eq!(shown("redis+unix:///run/redis.sock"), "redis+unix:///run/redis.sock");
    // Unencoded passwords holding what ends an authority, and URLs that do not parse: what a
    // message quotes when the URL cannot be used.
    assert_eq!(shown("redis://reader:Zq8/x+Tk3w==@127.0.0.1:7400/"), "redis://reader:***@127.0.0.1:7400/");
    assert_eq!(shown("redis://reader:a?b#c@d@host:1/"), "redis://reader:***@host:1/");
    assert_eq!(shown("redis:/reader:R-s3cret@host/"), "***@host/");
    assert_eq!(shown("redis//writer:W-s3cret@host/"), "***@host/");
    assert_eq!(shown("reader:R-s3cret@host"), "***@host");
    assert_eq!(shown("reader:/aA0A:@127.0.0.1:6379/"), "***@127.0.0.1:6379/");
    assert_eq!(shown("redis+unix:///run/redis.sock?db=1&pass=s3cret"), "redis+unix:///run/redis.sock?db=1&pass=***");
    // A socket URL's password is a query parameter, which may hold `@` and `&` unencoded.
    assert_eq!(shown("redis+unix:///run/redis.sock?pass=p@ssw0rd"), "redis+unix:///run/redis.sock?pass=***");
    assert_eq!(
        shown("redis+unix:///run/redis.sock?user=gk&pass=Zq8@x/Tk3w==&db=2"),
        "redis+unix:///run/redis.sock?user=gk&pass=***"
    );
    assert_eq!(shown("unix:///s?pass=a&b@c&db=1"), "unix:///s?pass=***");
}

proptest::proptest! {
    /// Whatever a user writes as a password (every printable character, `/`, `?`, `#`, `:` and
    /// `@` included) and whatever is wrong with the URL around it, the password is not shown.
    #[test]
    fn no_password_is_ever_shown(
        password in "[!-~]{6,24}",
        prefix in proptest::sample::select(vec!["redis://", "rediss://", "redis:/", "redis//", "redis:", "", "http://"]),
        user in proptest::sample::select(vec!["", "reader", "gk-writer"]),
        tail in proptest::sample::select(vec!["127.0.0.1:6379/", "host", "[::1]:1/2", "host:1/0?protocol=resp3"]),
    ) {
        // A password is at least as long as this, so it cannot hide inside the rest of the URL.
        proptest::prop_assume!(!format!("{prefix}{user}{tail}").contains(&password));
        let url = format!("{prefix}{user}:{password}@{tail}");
        let shown = RemoteSettings::new(&url).shown_url();
        proptest::prop_assert!(!shown.contains(&password), "{url} shown as {shown}");
    }

    /// The same for a password given as a query parameter of a socket URL (`pass=`, redis-rs's
    /// form for `redis+unix://`), whatever it holds and wherever it stands among the parameters.
    #[test]
    fn no_query_password_is_ever_shown(
        password in "[!-~]{6,24}",
        scheme in proptest::sample::select(vec!["redis+unix://", "unix://", "redis://", "rediss://", ""]),
        before in proptest::sample::select(vec!["", "db=1&", "user=gk&"]),
        after in proptest::sample::select(vec!["", "&db=2", "&protocol=resp3"]),
    ) {
        proptest::prop_assume!(!format!("{scheme}/run/redis.sock?{before}pass={after}").contains(&password));
        let url = format!("{scheme}/run/redis.sock?{before}pass={password}{after}");
        let shown = RemoteSettings::new(&url).shown_url();
        proptest::prop_assert!(!shown.contains(&password), "{url} shown as {shown}");
    }
}

#[test]
fn the_trust_and_the_ca_file_are_read_and_checked() {
    let url = ("GRIDKEY_REMOTE_URL", "rediss://alice:pw@cache.site:6380/");
    let s = check(&[url, ("GRIDKEY_REMOTE_TRUST", "ACL"), ("GRIDKEY_REMOTE_CA_FILE", "/etc/gridkey/ca.pem")])
        .unwrap()
        .unwrap();
    assert_eq!((s.trust, s.ca_file.clone()), (RemoteTrust::Acl, Some(PathBuf::from("/etc/gridkey/ca.pem"))));
    assert_eq!(s.shown_url(), "rediss://alice:***@cache.site:6380/");
    assert_eq!(check(&[url, ("GRIDKEY_REMOTE_TRUST", "signed")]).unwrap().unwrap().trust, RemoteTrust::Signed);
    for (vars, var) in [
        (vec![url, ("GRIDKEY_REMOTE_TRUST", "everyone")], "GRIDKEY_REMOTE_TRUST"),
        // Both would say what is trusted: which one is meant cannot be told.
        (vec![url, ("GRIDKEY_REMOTE_TRUST", "acl"), ("GRIDKEY_REMOTE_TRUSTED_KEYS", "/k")], "GRIDKEY_REMOTE_TRUST"),
        // A CA file a plain connection would not use.
        (vec![("GRIDKEY_REMOTE_URL", "redis://h:1/"), ("GRIDKEY_REMOTE_CA_FILE", "/ca.pem")], "GRIDKEY_REMOTE_CA_FILE"),
    ] {
        match check(&vars) {
            Err(SettingsError::BadSetting { var: found, .. }) => assert_eq!(found, var),
            other => panic!("{vars:?}: {other:?}"),
        }
    }
}
