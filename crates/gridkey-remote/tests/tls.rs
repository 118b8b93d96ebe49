//! `rediss://` against a real `redis-server` that speaks only TLS (ADR 0037): hits and misses,
//! an ACL user, a wrong CA, a certificate for another host, a plain server behind a `rediss://`
//! URL, a TLS server that stalls after the handshake and a handshake that never completes.
//! The certificates are made in each test by Debian's `openssl`; the servers are started with
//! `--port 0 --tls-port P`, so nothing reaches them in plain text.

use crate::common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{connect, settings, PrivateRedis};
use gridkey_remote::{Fetched, Kind, Remote, RemoteError, RemoteSettings, Role, Stored, TlsProblem};

const TE: Kind = Kind::TranslationEntry;

fn key(n: u8) -> [u8; 16] {
    [n; 16]
}

/// The test Redis URL when this machine can make certificates too (`openssl` on `PATH`); else the
/// test skips and says so (and fails when `GRIDKEY_TEST_REQUIRE` names `redis`, as in CI).
fn tls_url(test: &str) -> Option<String> {
    let url = common::shared_url(test)?;
    let found = std::process::Command::new("openssl").arg("version").output().is_ok_and(|o| o.status.success());
    if !found {
        let required = std::env::var("GRIDKEY_TEST_REQUIRE").is_ok_and(|r| r.split(',').any(|s| s == "redis"));
        assert!(!required, "{test}: the TLS tests need `openssl` on PATH to make their certificates");
        eprintln!("gridkey-remote: {test} skipped: no `openssl` on PATH to make its certificates (install openssl)");
        return None;
    }
    Some(url)
}

/// Runs Debian's `openssl` in `dir`; panics with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA `<name>-ca.pem` in `dir`, and, when `names` is given, a server certificate for those
/// subject names (`DNS:localhost,IP:127.0.0.1`) signed by it (`<name>.crt`, `<name>.key`).
fn certificates(dir: &Path, name: &str, names: Option<&str>) -> PathBuf {
    let (ca, ca_key) = (format!("{name}-ca.pem"), format!("{name}-ca.key"));
    let subject = format!("/CN=gridkey test CA {name}");
    openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &ca_key, "-out", &ca, "-days", "2", "-subj",
            &subject,
        ],
    );
    if let Some(names) = names {
        let (crt, key, csr, ext) =
            (format!("{name}.crt"), format!("{name}.key"), format!("{name}.csr"), format!("{name}.ext"));
        openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", "/CN=redis"]);
        std::fs::write(dir.join(&ext), format!("subjectAltName={names}\n")).unwrap();
        let sign = [
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ];
        openssl(dir, &sign);
    }
    dir.join(ca)
}

/// A private `redis-server` that speaks only TLS, with the certificate `name` in `dir`.
fn tls_server(test: &str, dir: &Path, name: &str, extra: &[&str]) -> Option<PrivateRedis> {
    let (crt, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    PrivateRedis::start_with(test, |port| {
        let mut args: Vec<String> = ["--port", "0", "--tls-port"].map(str::to_owned).to_vec();
        args.push(port.to_string());
        args.extend(["--tls-cert-file".to_owned(), crt.display().to_string()]);
        args.extend(["--tls-key-file".to_owned(), key.display().to_string()]);
        args.extend(["--tls-auth-clients".to_owned(), "no".to_owned()]);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    })
}

/// Settings for the TLS server on `port` with `ca` as the CA file.
fn tls_settings(port: u16, userinfo: &str, ca: Option<&Path>, test: &str, role: Role) -> RemoteSettings {
    let url = format!("rediss://{userinfo}127.0.0.1:{port}/");
    RemoteSettings { ca_file: ca.map(Path::to_path_buf), ..settings(&url, test, role) }
}

/// `redis-cli` over TLS, the independent witness of what the server holds.
fn cli(port: u16, ca: &Path, words: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(ca)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(words)
        .output()
        .expect("redis-cli runs");
    assert!(out.status.success(), "redis-cli {words:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The TLS error of connecting with `s`; panics on anything else.
fn tls_error(s: &RemoteSettings) -> (TlsProblem, String) {
    match Remote::connect(s) {
        Err(e @ RemoteError::Tls { problem, .. }) => (problem, e.to_string()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rediss_hits_and_misses_with_the_ca_file() {
    let test = "rediss_hits_and_misses_with_the_ca_file";
    let Some(_) = tls_url(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path(), "site", Some("DNS:localhost,IP:127.0.0.1"));
    let Some(server) = tls_server(test, dir.path(), "site", &[]) else { return };
    let w = tls_settings(server.port, "", Some(&ca), test, Role::Writer);
    let writer = connect(&w);
    let reader = connect(&RemoteSettings { role: Role::ReadOnly, ..w.clone() });
    assert_eq!(reader.get(TE, &key(1)), Fetched::Absent);
    let Stored::Uploaded(len) = writer.put(TE, &key(1), b"int over_tls(void);") else { panic!() };
    assert_eq!(reader.get(TE, &key(1)), Fetched::Hit(b"int over_tls(void);".to_vec()));
    assert_eq!(reader.get(TE, &key(2)), Fetched::Absent);
    let s = reader.stats();
    assert_eq!((s.hits, s.misses, s.errors), (1, 2, 0));
    // The server holds the object, as redis-cli over TLS sees it.
    assert_eq!(cli(server.port, &ca, &["STRLEN", &writer.object_name(TE, &key(1))]), len.to_string());
    // Large objects cross many TLS records, within one request's deadline.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    assert!(matches!(writer.put(TE, &key(3), &big), Stored::Uploaded(_)));
    assert_eq!(reader.get(TE, &key(3)), Fetched::Hit(big));
    assert!(reader.is_on() && writer.is_on(), "{:?}", reader.warning());
    // A name the certificate holds works as well as its IP address.
    let by_name = RemoteSettings { url: format!("rediss://localhost:{}/", server.port), ..w.clone() };
    assert!(matches!(connect(&by_name).get(TE, &key(1)), Fetched::Hit(_)));
}

#[test]
fn an_acl_user_logs_in_over_tls_and_no_message_shows_its_password() {
    let test = "an_acl_user_logs_in_over_tls_and_no_message_shows_its_password";
    let Some(_) = tls_url(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path(), "site", Some("DNS:localhost,IP:127.0.0.1"));
    let password = "pw-Tq9-secret";
    let acl = ["--user", "gkwriter", "on", &format!(">{password}"), "~*", "&*", "+@all", "--user", "default", "off"];
    let Some(server) = tls_server(test, dir.path(), "site", &acl) else { return };
    let writer = connect(&tls_settings(server.port, &format!("gkwriter:{password}@"), Some(&ca), test, Role::Writer));
    assert!(matches!(writer.put(TE, &key(5), b"as an ACL user over TLS"), Stored::Uploaded(_)));
    assert_eq!(writer.get(TE, &key(5)), Fetched::Hit(b"as an ACL user over TLS".to_vec()));
    assert_eq!(writer.shown_url(), format!("rediss://gkwriter:***@127.0.0.1:{}/", server.port));
    // A wrong password over TLS is refused at start, the user named, no password shown.
    let wrong = tls_settings(server.port, "gkwriter:pw-Tq9-wrong@", Some(&ca), test, Role::Writer);
    match Remote::connect(&wrong) {
        Err(e @ RemoteError::Refused { .. }) => {
            let text = e.to_string();
            assert!(text.contains("rediss://gkwriter:***@127.0.0.1") && !text.contains("pw-Tq9"), "{text}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_certificate_of_another_ca_or_host_is_refused_at_start_with_its_fix() {
    let test = "a_certificate_of_another_ca_or_host_is_refused_at_start_with_its_fix";
    let Some(_) = tls_url(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path(), "site", Some("DNS:localhost,IP:127.0.0.1"));
    let wrong_ca = certificates(dir.path(), "other", None);
    let Some(server) = tls_server(test, dir.path(), "site", &[]) else { return };
    let at = format!("127.0.0.1:{}", server.port);
    let (problem, text) = tls_error(&tls_settings(server.port, "u:s3cret@", Some(&wrong_ca), test, Role::Writer));
    assert_eq!(problem, TlsProblem::UnknownIssuer, "{text}");
    assert!(text.contains(&at) && text.contains(&wrong_ca.display().to_string()), "names URL and CA file: {text}");
    assert!(text.contains("rediss://u:***@") && !text.contains("s3cret"), "{text}");
    // Without a CA file the system's roots do not hold the test CA: give the CA file.
    let (problem, text) = tls_error(&tls_settings(server.port, "", None, test, Role::Writer));
    assert_eq!(problem, TlsProblem::UnknownIssuer, "{text}");
    assert!(text.contains(&at) && text.contains("the shared tier's CA file"), "{text}");
    // A certificate of the right CA for another host.
    let dir2 = tempfile::tempdir().unwrap();
    let ca2 = certificates(dir2.path(), "elsewhere", Some("DNS:cache.elsewhere.example"));
    let Some(elsewhere) = tls_server(test, dir2.path(), "elsewhere", &[]) else { return };
    let (problem, text) = tls_error(&tls_settings(elsewhere.port, "", Some(&ca2), test, Role::Writer));
    assert_eq!(problem, TlsProblem::NameMismatch, "{text}");
    assert!(text.contains(&format!("127.0.0.1:{}", elsewhere.port)) && text.contains("host name"), "{text}");
    // A CA file that holds no certificate is its own error, naming the file.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    match Remote::connect(&tls_settings(server.port, "", Some(&empty), test, Role::Writer)) {
        Err(e @ RemoteError::CaFile { .. }) => assert!(e.to_string().contains(&empty.display().to_string()), "{e}"),
        other => panic!("{other:?}"),
    }
    // `#insecure` would turn the checks off: refused.
    let insecure = RemoteSettings {
        url: format!("rediss://127.0.0.1:{}/#insecure", server.port),
        ..tls_settings(server.port, "", Some(&wrong_ca), test, Role::Writer)
    };
    assert!(matches!(Remote::connect(&insecure), Err(RemoteError::Url { .. })));
}

#[test]
fn a_plain_server_behind_a_rediss_url_is_refused_never_used_in_plain_text() {
    let test = "a_plain_server_behind_a_rediss_url_is_refused_never_used_in_plain_text";
    let Some(_) = tls_url(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path(), "site", None);
    let Some(plain) = PrivateRedis::start(test, None) else { return };
    let s = tls_settings(plain.port, "", Some(&ca), test, Role::Writer);
    let at = format!("127.0.0.1:{}", plain.port);
    // Redis reads the ClientHello as an inline command: when its random bytes hold a newline it
    // answers an error, which is not TLS (refused at start, the answer shown); else it waits for
    // the rest of the line, and the handshake's deadline turns the tier off. Either way within
    // the connect timeout, saying that a plain server takes a redis:// URL, and never in plain text.
    for _ in 0..4 {
        let started = Instant::now();
        match Remote::connect(&s) {
            Err(e @ RemoteError::Tls { problem: TlsProblem::NotTls, .. }) => {
                let text = e.to_string();
                assert!(text.contains(&at) && text.contains("answered `-ERR"), "{text}");
                assert!(text.contains("a plain server takes a redis:// URL"), "{text}");
            }
            Ok(remote) => {
                assert!(!remote.is_on());
                let warning = remote.warning().unwrap();
                assert!(warning.contains(&at) && warning.contains("no complete TLS handshake"), "{warning}");
                assert!(warning.contains("a plain one takes a redis:// URL"), "{warning}");
                assert_eq!(remote.get(TE, &key(1)), Fetched::Off);
            }
            Err(other) => panic!("{other:?}"),
        }
        assert!(started.elapsed() < s.connect_timeout * 2, "{:?}", started.elapsed());
    }
    // Nothing was written in plain text: the plain server holds no key.
    assert_eq!(common::raw(plain.port, None, &[b"DBSIZE"]), b":0\r\n");
}

#[test]
fn a_tls_server_that_stalls_after_the_handshake_costs_one_deadline() {
    let test = "a_tls_server_that_stalls_after_the_handshake_costs_one_deadline";
    let Some(_) = tls_url(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path(), "site", Some("IP:127.0.0.1"));
    let Some(server) = tls_server(test, dir.path(), "site", &[]) else { return };
    let s = tls_settings(server.port, "", Some(&ca), test, Role::Writer);
    let remote = connect(&s);
    assert!(matches!(remote.put(TE, &key(7), b"before the stall"), Stored::Uploaded(_)));
    server.signal(libc::SIGSTOP);
    let started = Instant::now();
    let keys: Vec<[u8; 16]> = (10..20).map(key).collect();
    for k in &keys {
        assert!(matches!(remote.get(TE, k), Fetched::Off | Fetched::Absent));
        remote.put(TE, k, b"during the stall");
    }
    let spent = started.elapsed();
    assert!(spent >= s.timeout && spent < s.timeout * 2, "one deadline, not one per request: {spent:?}");
    assert!(!remote.is_on());
    let warning = remote.warning().unwrap();
    assert!(warning.contains("no complete reply within 0.5 s") && warning.contains("off for the rest"), "{warning}");
    assert_eq!(remote.stats().errors, 1);
    server.signal(libc::SIGCONT);
}

#[test]
fn a_tls_handshake_that_never_completes_costs_one_connect_timeout() {
    let test = "a_tls_handshake_that_never_completes_costs_one_connect_timeout";
    let Some(_) = tls_url(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path(), "site", None);
    // A listener that accepts (the kernel does) and never says a word.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let s = tls_settings(port, "", Some(&ca), test, Role::Writer);
    let started = Instant::now();
    let remote = Remote::connect(&s).expect("a silent server is not a misconfiguration");
    let spent = started.elapsed();
    assert!(spent >= s.connect_timeout && spent < s.connect_timeout * 2, "{spent:?}");
    assert!(!remote.is_on());
    let warning = remote.warning().unwrap();
    assert!(warning.contains("no complete TLS handshake within 0.5 s"), "{warning}");
    assert_eq!(remote.get(TE, &key(1)), Fetched::Off);
    drop(silent);
}
