//! The client against a real Redis server (README "The shared tier"): lookups, uploads, every
//! bad object, leases, the read-only role, trust, timeouts and the circuit breaker.
//! Without `GRIDKEY_TEST_REDIS_URL` each test says that it skipped and how to run it.

use crate::common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::{connect, port_of, raw, settings, PrivateRedis};
use gridkey_remote::{
    object, trust, Claim, Fetched, Kind, Reject, Remote, RemoteError, RemoteTrust, Role, Stored, Trust, Waited,
};

const TE: Kind = Kind::TranslationEntry;
const KL: Kind = Kind::KernelLibrary;

fn key(n: u8) -> [u8; 16] {
    [n; 16]
}

/// Puts raw bytes under the object name of `key` (what a hostile or broken writer could do).
fn plant(url: &str, remote: &Remote, kind: Kind, key: &[u8; 16], bytes: &[u8]) {
    let name = remote.object_name(kind, key);
    let reply = raw(port_of(url), None, &[b"SET", name.as_bytes(), bytes]);
    assert_eq!(reply, b"+OK\r\n");
}

#[test]
fn an_uploaded_object_is_a_hit_for_another_client_and_counted() {
    let Some(url) = common::shared_url("an_uploaded_object_is_a_hit_for_another_client_and_counted") else { return };
    let w = settings(&url, "roundtrip", Role::Writer);
    let writer = connect(&w);
    let reader = connect(&gridkey_remote::RemoteSettings { role: Role::ReadOnly, ..w.clone() });
    assert_eq!(reader.get(TE, &key(1)), Fetched::Absent);
    let stored = writer.put(TE, &key(1), b"void kernel(void) {}");
    let Stored::Uploaded(len) = stored else { panic!("{stored:?}") };
    assert_eq!(len as usize, object::HEADER_BYTES + 20 + object::CHECKSUM_BYTES);
    assert_eq!(reader.get(TE, &key(1)), Fetched::Hit(b"void kernel(void) {}".to_vec()));
    // The same key of the other kind is another object.
    assert_eq!(reader.get(KL, &key(1)), Fetched::Absent);
    let s = reader.stats();
    assert_eq!((s.hits, s.misses, s.fetches, s.bytes_in, s.errors), (1, 2, 1, len, 0));
    let s = writer.stats();
    assert_eq!((s.uploads, s.bytes_out), (1, len));
    let before = reader.stats().round_trips;
    let got = reader.get_many(TE, &[key(1), key(2), key(1)]);
    assert_eq!(got[1], Fetched::Absent);
    assert!(matches!(got[2], Fetched::Hit(_)));
    // Several keys, each within the limit: their sizes and objects in one round trip.
    assert_eq!(reader.stats().round_trips, before + 1);
}

#[test]
fn a_read_only_client_uploads_nothing() {
    let Some(url) = common::shared_url("a_read_only_client_uploads_nothing") else { return };
    let s = settings(&url, "readonly", Role::ReadOnly);
    let reader = connect(&s);
    assert_eq!(reader.put(TE, &key(3), b"x"), Stored::ReadOnly);
    assert_eq!(reader.claim(TE, &[key(3)]), vec![Claim::Free]);
    let writer = connect(&gridkey_remote::RemoteSettings { role: Role::Writer, ..s.clone() });
    assert_eq!(writer.get(TE, &key(3)), Fetched::Absent);
    assert_eq!(reader.stats().uploads + reader.stats().leases, 0);
}

#[test]
fn every_bad_object_is_a_reported_miss() {
    let Some(url) = common::shared_url("every_bad_object_is_a_reported_miss") else { return };
    let s = settings(&url, "bad", Role::Writer);
    let remote = connect(&s);
    let good = object::encode(TE, &key(5), b"source text", &Trust::acl());
    type Expect = fn(&Reject) -> bool;
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        ("truncated", good[..good.len() - 3].to_vec(), |r| matches!(r, Reject::Length { .. })),
        ("too short", good[..10].to_vec(), |r| matches!(r, Reject::Truncated { .. })),
        (
            "corrupted",
            {
                let mut b = good.clone();
                b[object::HEADER_BYTES + 2] ^= 1;
                b
            },
            |r| *r == Reject::Checksum,
        ),
        ("swapped", object::encode(TE, &key(6), b"source text", &Trust::acl()), |r| matches!(r, Reject::Key { .. })),
        ("other kind", object::encode(KL, &key(5), b"source text", &Trust::acl()), |r| {
            matches!(r, Reject::Kind { .. })
        }),
        ("foreign", b"this is some other program's value, not a gridkey object at all".to_vec(), |r| {
            *r == Reject::Magic
        }),
    ];
    for (what, bytes, expected) in cases {
        plant(&url, &remote, TE, &key(5), &bytes);
        match remote.get(TE, &key(5)) {
            Fetched::Rejected(r) => assert!(expected(&r), "{what}: {r}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    // Another Redis type under the name.
    let name = remote.object_name(TE, &key(7));
    raw(port_of(&url), None, &[b"RPUSH", name.as_bytes(), b"a"]);
    assert!(matches!(remote.get(TE, &key(7)), Fetched::Rejected(Reject::Unreadable { .. })));
    assert!(remote.is_on(), "a bad object does not turn the tier off");
    let st = remote.stats();
    assert_eq!((st.hits, st.rejected, st.errors), (0, 7, 0));
    // A writer replaces a bad object with a good one.
    remote.put(TE, &key(5), b"source text");
    assert_eq!(remote.get(TE, &key(5)), Fetched::Hit(b"source text".to_vec()));
}

#[test]
fn objects_over_the_size_limit_are_neither_uploaded_nor_downloaded() {
    let Some(url) = common::shared_url("objects_over_the_size_limit_are_neither_uploaded_nor_downloaded") else {
        return;
    };
    let mut s = settings(&url, "size", Role::Writer);
    s.max_object_bytes = 1000;
    let small = connect(&s);
    let big = vec![7u8; 2000];
    assert!(matches!(small.put(KL, &key(8), &big), Stored::TooLarge { max: 1000, .. }));
    assert_eq!(small.get(KL, &key(8)), Fetched::Absent);
    let roomy = connect(&gridkey_remote::RemoteSettings { max_object_bytes: 1 << 20, ..s.clone() });
    assert!(matches!(roomy.put(KL, &key(8), &big), Stored::Uploaded(_)));
    let before = small.stats().bytes_in;
    assert!(matches!(small.get(KL, &key(8)), Fetched::Rejected(Reject::TooLarge { max: 1000, .. })));
    assert_eq!(small.stats().bytes_in, before, "an oversize object is not downloaded");
}

#[test]
fn one_writer_wins_the_lease_and_the_others_wait_for_its_object() {
    let Some(url) = common::shared_url("one_writer_wins_the_lease_and_the_others_wait_for_its_object") else { return };
    let s = settings(&url, "lease", Role::Writer);
    let a = connect(&s);
    let b = connect(&s);
    assert_eq!(a.claim(TE, &[key(9)]), vec![Claim::Won]);
    assert_eq!(b.claim(TE, &[key(9)]), vec![Claim::Held]);
    // The heartbeat keeps the lease past its time to live.
    std::thread::sleep(s.lease_ttl * 3);
    assert_eq!(b.claim(TE, &[key(9)]), vec![Claim::Held]);
    let waiter = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| b.wait(TE, &[key(9)]));
        std::thread::sleep(Duration::from_millis(100));
        a.put(TE, &key(9), b"translated once");
        waiting.join().unwrap()
    });
    assert_eq!(waiter, vec![Waited::Arrived(b"translated once".to_vec())]);
    // The upload released the lease, and a later claim sees the object.
    assert_eq!(b.claim(TE, &[key(9)]), vec![Claim::Present]);
    let st = b.stats();
    assert_eq!((st.lease_waits, st.fetches, st.leases), (1, 1, 0));
    assert_eq!(a.stats().leases, 1);
}

#[test]
fn a_lease_whose_holder_died_is_taken_over() {
    let Some(url) = common::shared_url("a_lease_whose_holder_died_is_taken_over") else { return };
    let s = settings(&url, "takeover", Role::Writer);
    let waiter = connect(&s);
    // A holder that died: its lease is there, nobody renews it.
    let lease = waiter.lease_name(TE, &key(10));
    let ttl = s.lease_ttl.as_millis().to_string();
    raw(port_of(&url), None, &[b"SET", lease.as_bytes(), b"dead-holder", b"PX", ttl.as_bytes()]);
    assert_eq!(waiter.claim(TE, &[key(10)]), vec![Claim::Held]);
    let t = Instant::now();
    assert_eq!(waiter.wait(TE, &[key(10)]), vec![Waited::TakenOver]);
    assert!(t.elapsed() < s.lease_ttl + Duration::from_millis(500), "took over {:?}", t.elapsed());
    assert_eq!(waiter.stats().takeovers, 1);
    // Dropping the new holder releases its lease.
    drop(waiter);
    let other = connect(&s);
    assert_eq!(other.claim(TE, &[key(10)]), vec![Claim::Won]);
}

#[test]
fn a_live_holder_past_the_wait_cap_and_a_read_only_waiter() {
    let Some(url) = common::shared_url("a_live_holder_past_the_wait_cap_and_a_read_only_waiter") else { return };
    let mut s = settings(&url, "cap", Role::Writer);
    s.lease_wait = Duration::from_millis(400);
    let holder = connect(&s);
    let waiter = connect(&s);
    assert_eq!(holder.claim(TE, &[key(11)]), vec![Claim::Won]);
    let t = Instant::now();
    assert_eq!(waiter.wait(TE, &[key(11)]), vec![Waited::TimedOut]);
    assert!(t.elapsed() >= s.lease_wait);
    let reader = connect(&gridkey_remote::RemoteSettings { role: Role::ReadOnly, ..s.clone() });
    assert_eq!(reader.claim(TE, &[key(11)]), vec![Claim::Held]);
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| reader.wait(TE, &[key(11)]));
        std::thread::sleep(Duration::from_millis(100));
        holder.release(TE, &[key(11)]);
        assert_eq!(waiting.join().unwrap(), vec![Waited::Gone]);
    });
    assert_eq!(reader.stats().leases, 0);
}

#[test]
fn eviction_of_every_key_is_a_miss_not_an_error() {
    let Some(_) = common::shared_url("eviction_of_every_key_is_a_miss_not_an_error") else { return };
    let Some(server) = PrivateRedis::start("eviction_of_every_key_is_a_miss_not_an_error", None) else { return };
    let s = settings(&server.url(), "flush", Role::Writer);
    let remote = connect(&s);
    remote.put(TE, &key(12), b"a");
    remote.put(KL, &key(12), b"b");
    assert_eq!(raw(server.port, None, &[b"FLUSHALL"]), b"+OK\r\n");
    assert_eq!(remote.get_many(TE, &[key(12)]), vec![Fetched::Absent]);
    assert_eq!(remote.get(KL, &key(12)), Fetched::Absent);
    assert!(remote.is_on());
    remote.put(TE, &key(12), b"a");
    assert_eq!(remote.get(TE, &key(12)), Fetched::Hit(b"a".to_vec()));
}

/// Writes `text` to a new file with `mode`.
fn file(dir: &std::path::Path, name: &str, text: &str, mode: u32) -> std::path::PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn readers_with_trusted_keys_take_only_objects_signed_by_them() {
    let Some(url) = common::shared_url("readers_with_trusted_keys_take_only_objects_signed_by_them") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (sk, other_sk) = (dir.path().join("writer.key"), dir.path().join("other.key"));
    let public = trust::generate_signing_key(&sk).unwrap();
    let other_public = trust::generate_signing_key(&other_sk).unwrap();
    let trusted = file(dir.path(), "trusted", &format!("# the site's writers\n{public} ci-writer\n"), 0o644);
    let base = settings(&url, "trust", Role::Writer);
    let signed = connect(&gridkey_remote::RemoteSettings { signing_key: Some(sk.clone()), ..base.clone() });
    let forger = connect(&gridkey_remote::RemoteSettings { signing_key: Some(other_sk), ..base.clone() });
    let unsigned = connect(&base);
    let reader =
        connect(&gridkey_remote::RemoteSettings { role: Role::ReadOnly, trusted_keys: Some(trusted), ..base.clone() });
    let trusting_nobody = connect(&gridkey_remote::RemoteSettings { role: Role::ReadOnly, ..base.clone() });

    signed.put(TE, &key(20), b"by the writer");
    assert_eq!(reader.get(TE, &key(20)), Fetched::Hit(b"by the writer".to_vec()));
    forger.put(TE, &key(21), b"by someone else");
    assert_eq!(reader.get(TE, &key(21)), Fetched::Rejected(Reject::Untrusted { signer: other_public }));
    // A reader that trusts no key in particular takes any object that checks.
    assert!(matches!(trusting_nobody.get(TE, &key(21)), Fetched::Hit(_)));
    unsigned.put(TE, &key(22), b"unsigned");
    assert_eq!(reader.get(TE, &key(22)), Fetched::Rejected(Reject::Unsigned));
    // A signed object whose payload was changed and whose checksum was recomputed: the
    // signature no longer verifies.
    let good = object::encode(
        TE,
        &key(23),
        b"by the writer",
        &Trust::new(Some(trust::load_signing_key(&sk).unwrap()), None, RemoteTrust::Signed),
    );
    let mut forged = good[..good.len() - object::CHECKSUM_BYTES].to_vec();
    forged[object::HEADER_BYTES] ^= 0x20;
    let check = xxhash_rust::xxh3::xxh3_128(&forged).to_le_bytes();
    forged.extend_from_slice(&check);
    plant(&url, &reader, TE, &key(23), &forged);
    assert!(matches!(reader.get(TE, &key(23)), Fetched::Rejected(Reject::Signature { .. })));
    assert!(matches!(trusting_nobody.get(TE, &key(23)), Fetched::Rejected(Reject::Signature { .. })));
}

#[test]
fn misconfigurations_are_errors_at_start() {
    let Some(_) = common::shared_url("misconfigurations_are_errors_at_start") else { return };
    let Some(server) = PrivateRedis::start("misconfigurations_are_errors_at_start", Some("s3cret")) else { return };
    let at = |url: String| settings(&url, "config", Role::Writer);
    let right = Remote::connect(&at(format!("redis://:s3cret@127.0.0.1:{}/", server.port))).unwrap();
    assert!(right.is_on());
    for url in [format!("redis://:wrong@127.0.0.1:{}/", server.port), server.url()] {
        match Remote::connect(&at(url.clone())) {
            Err(e @ RemoteError::Refused { .. }) => {
                let text = e.to_string();
                assert!(!text.contains("wrong"), "the password is not shown: {text}");
                assert!(text.ends_with("fix the password or user in the shared tier's URL"), "{text}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    for url in ["not a url", "http://127.0.0.1:6379/", "redis://127.0.0.1:6379/notadb"] {
        assert!(matches!(Remote::connect(&at(url.to_owned())), Err(RemoteError::Url { .. })), "{url}");
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.key");
    let good = at(server.url().replace("redis://", "redis://:s3cret@"));
    let err = Remote::connect(&gridkey_remote::RemoteSettings { signing_key: Some(missing.clone()), ..good.clone() });
    assert!(matches!(err, Err(RemoteError::KeyFile { ref path, .. }) if *path == missing), "{err:?}");
    // The message names the setting of the file it could not read, and no other.
    let text = err.unwrap_err().to_string();
    assert!(text.contains("the shared tier's signing key") && !text.contains("trusted keys"), "{text}");
    let err = Remote::connect(&gridkey_remote::RemoteSettings { trusted_keys: Some(missing.clone()), ..good.clone() });
    assert!(matches!(err, Err(RemoteError::KeyFile { .. })), "{err:?}");
    let text = err.unwrap_err().to_string();
    assert!(text.contains("the shared tier's trusted keys") && !text.contains("signing key"), "{text}");
    let open_key = file(dir.path(), "open.key", &"ab".repeat(32), 0o644);
    let err = Remote::connect(&gridkey_remote::RemoteSettings { signing_key: Some(open_key), ..good.clone() });
    assert!(matches!(err, Err(RemoteError::KeyPermissions { mode: 0o644, .. })), "{err:?}");
    let bad_trusted = file(dir.path(), "trusted", "# nothing\n\nnot-a-key\n", 0o644);
    let err = Remote::connect(&gridkey_remote::RemoteSettings { trusted_keys: Some(bad_trusted), ..good.clone() });
    assert!(matches!(err, Err(RemoteError::KeyFormat { line: 3, .. })), "{err:?}");
    let empty = file(dir.path(), "empty", "# no keys yet\n", 0o644);
    let err = Remote::connect(&gridkey_remote::RemoteSettings { trusted_keys: Some(empty), ..good });
    assert!(matches!(err, Err(RemoteError::KeyFormat { line: 0, .. })), "{err:?}");
}

#[test]
fn a_server_down_at_start_turns_the_tier_off_with_one_warning() {
    let Some(_) = common::shared_url("a_server_down_at_start_turns_the_tier_off_with_one_warning") else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let s = settings(&format!("redis://127.0.0.1:{port}/"), "down", Role::Writer);
    let remote = Remote::connect(&s).unwrap();
    assert!(!remote.is_on());
    assert_eq!(remote.get(TE, &key(1)), Fetched::Off);
    assert_eq!(remote.claim(TE, &[key(1)]), vec![Claim::Off]);
    assert_eq!(remote.put(TE, &key(1), b"x"), Stored::Off);
    let st = remote.stats();
    assert_eq!((st.errors, st.round_trips), (1, 1));
    assert!(remote.warning().unwrap().contains(&format!("127.0.0.1:{port}")));
}

/// A server that stops answering costs one reply timeout; every later call is off at once.
fn costs_one_timeout(test: &str, stall: impl FnOnce(&PrivateRedis)) {
    let Some(_) = common::shared_url(test) else { return };
    let Some(server) = PrivateRedis::start(test, None) else { return };
    let s = settings(&server.url(), test, Role::Writer);
    let remote = connect(&s);
    remote.put(TE, &key(30), b"before");
    assert_eq!(remote.get(TE, &key(30)), Fetched::Hit(b"before".to_vec()));
    stall(&server);
    let t = Instant::now();
    assert_eq!(remote.get(TE, &key(30)), Fetched::Off);
    let first = t.elapsed();
    assert!(first >= s.timeout && first < s.timeout * 3, "first call took {first:?}");
    let t = Instant::now();
    for i in 0..20 {
        assert_eq!(remote.get(TE, &key(i)), Fetched::Off);
        assert_eq!(remote.claim(TE, &[key(i)]), vec![Claim::Off]);
        assert_eq!(remote.wait(TE, &[key(i)]), vec![Waited::Off]);
    }
    assert!(t.elapsed() < Duration::from_millis(50), "later calls took {:?}", t.elapsed());
    assert_eq!(remote.stats().errors, 1);
    assert!(remote.warning().unwrap().contains("off for the rest of this run"));
}

#[test]
fn a_black_holed_server_costs_one_timeout() {
    costs_one_timeout("a_black_holed_server_costs_one_timeout", |server| server.signal(libc::SIGSTOP));
}

#[test]
fn a_paused_server_costs_one_timeout() {
    costs_one_timeout("a_paused_server_costs_one_timeout", |server| {
        assert_eq!(raw(server.port, None, &[b"CLIENT", b"PAUSE", b"3000", b"ALL"]), b"+OK\r\n");
    });
}

#[test]
fn a_server_killed_mid_run_turns_the_tier_off_at_once() {
    let Some(_) = common::shared_url("a_server_killed_mid_run_turns_the_tier_off_at_once") else { return };
    let Some(mut server) = PrivateRedis::start("a_server_killed_mid_run_turns_the_tier_off_at_once", None) else {
        return;
    };
    let remote = connect(&settings(&server.url(), "killed", Role::Writer));
    assert_eq!(remote.claim(TE, &[key(31)]), vec![Claim::Won]);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let t = Instant::now();
    assert_eq!(remote.put(TE, &key(31), b"x"), Stored::Off);
    assert!(t.elapsed() < Duration::from_millis(400), "{:?}", t.elapsed());
    assert_eq!(remote.get(TE, &key(31)), Fetched::Off);
    assert_eq!(remote.stats().errors, 1);
    // Dropping the client with a lease still held does not block or fail.
    let t = Instant::now();
    drop(remote);
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn counters_are_published_and_read_back_with_the_server_inventory() {
    let Some(url) = common::shared_url("counters_are_published_and_read_back_with_the_server_inventory") else {
        return;
    };
    let s = settings(&url, "stats", Role::Writer);
    let remote = connect(&s);
    remote.put(TE, &key(40), b"abc");
    remote.put(KL, &key(41), b"library bytes");
    remote.get(TE, &key(40));
    remote.get(TE, &key(42));
    remote.publish_stats();
    let other = connect(&s);
    other.get(KL, &key(41));
    other.publish_stats();
    let server = other.server_stats().unwrap();
    assert_eq!(server.runs, 2);
    assert_eq!((server.totals.hits, server.totals.misses, server.totals.uploads), (2, 1, 2));
    let te = &server.kinds[0];
    assert_eq!((te.kind.as_str(), te.objects), ("translation entry", 1));
    assert_eq!(te.bytes as usize, object::HEADER_BYTES + 3 + object::CHECKSUM_BYTES);
    assert_eq!(server.kinds[1].objects, 1);
}

/// Bytes the server at `port` has sent to its clients (`INFO stats`, `total_net_output_bytes`).
fn server_output_bytes(port: u16) -> u64 {
    let info = String::from_utf8(raw(port, None, &[b"INFO", b"stats"])).unwrap();
    let line = info.lines().find_map(|l| l.strip_prefix("total_net_output_bytes:")).expect("INFO stats");
    line.trim().parse().unwrap()
}

#[test]
fn oversize_objects_are_sized_and_never_sent() {
    let Some(_) = common::shared_url("oversize_objects_are_sized_and_never_sent") else { return };
    let Some(server) = PrivateRedis::start("oversize_objects_are_sized_and_never_sent", None) else { return };
    let mut s = settings(&server.url(), "oversize", Role::Writer);
    s.max_object_bytes = 1 << 20;
    let roomy = connect(&gridkey_remote::RemoteSettings { max_object_bytes: 4 << 20, ..s.clone() });
    let keys: Vec<[u8; 16]> = (50..58).map(key).collect();
    for k in &keys {
        assert!(matches!(roomy.put(KL, k, &vec![9u8; 2 << 20]), Stored::Uploaded(_)));
    }
    let small = connect(&s);
    // The server is the witness of what the client held: what it sent is what was read.
    let before = server_output_bytes(server.port);
    let got = small.get_many(KL, &keys);
    let sent = server_output_bytes(server.port) - before;
    for g in &got {
        assert!(matches!(g, Fetched::Rejected(Reject::TooLarge { max, .. }) if *max == 1 << 20), "{g:?}");
    }
    // Eight sizes and one INFO reply (a few kB), not eight objects of up to the limit (8 MiB).
    assert!(sent < 64 << 10, "the server sent {sent} bytes for eight oversize objects");
    assert_eq!(small.stats().bytes_in, 0);
    assert!(small.is_on());
}

/// The lookup script brings objects until its 8 MiB budget is spent and sizes the rest, which
/// follow in one more round trip: three objects of 3 MiB are two round trips, all three hits.
#[test]
fn objects_past_the_first_budget_follow_in_one_more_round_trip() {
    let Some(url) = common::shared_url("objects_past_the_first_budget_follow_in_one_more_round_trip") else { return };
    let mut s = settings(&url, "budget", Role::Writer);
    s.max_object_bytes = 4 << 20;
    let remote = connect(&s);
    let keys: Vec<[u8; 16]> = (70..73).map(key).collect();
    for (n, k) in keys.iter().enumerate() {
        assert!(matches!(remote.put(KL, k, &vec![n as u8; 3 << 20]), Stored::Uploaded(_)));
    }
    let before = remote.stats().round_trips;
    let got = remote.get_many(KL, &keys);
    assert_eq!(remote.stats().round_trips, before + 2);
    for (n, g) in got.iter().enumerate() {
        assert_eq!(*g, Fetched::Hit(vec![n as u8; 3 << 20]), "object {n}");
    }
}

#[test]
fn a_server_stopped_mid_run_costs_one_timeout_with_the_heartbeat_in_flight() {
    let test = "a_server_stopped_mid_run_costs_one_timeout_with_the_heartbeat_in_flight";
    let Some(_) = common::shared_url(test) else { return };
    let Some(server) = PrivateRedis::start(test, None) else { return };
    let s = settings(&server.url(), "stopped", Role::Writer);
    let remote = connect(&s);
    let keys: Vec<[u8; 16]> = (60..68).map(key).collect();
    // Leases held: the heartbeat renews them every lease_ttl / 3 (200 ms).
    assert_eq!(remote.claim(TE, &keys), vec![Claim::Won; 8]);
    server.signal(libc::SIGSTOP);
    let t = Instant::now();
    // The heartbeat's renewal is in flight by now; the run's own requests meet the same stall.
    std::thread::sleep(s.lease_ttl / 2);
    let got = remote.get_many(TE, &keys);
    assert!(got.iter().all(|g| *g == Fetched::Off), "{got:?}");
    assert!(remote
        .put_many(TE, &keys.iter().map(|k| (*k, b"x".as_slice())).collect::<Vec<_>>())
        .iter()
        .all(|st| *st == Stored::Off));
    assert_eq!(remote.wait(TE, &keys), vec![Waited::Off; 8]);
    let warning = remote.warning().unwrap();
    let errors = remote.stats().errors;
    drop(remote);
    let elapsed = t.elapsed();
    server.signal(libc::SIGCONT);
    assert!(elapsed <= s.timeout * 3 / 2 + s.lease_ttl / 2, "the run took {elapsed:?} after the stop");
    assert_eq!(errors, 1);
    assert!(warning.contains("no complete reply within 0.5 s"), "{warning}");
}

#[test]
fn a_reader_without_trusted_keys_takes_nothing_by_default() {
    // The README's first quick start: every reader holds a password that can write, so a plain
    // Redis client can plant objects; without trusted keys a default reader downloads none.
    let Some(url) = common::shared_url("a_reader_without_trusted_keys_takes_nothing_by_default") else { return };
    let acl = settings(&url, "default-trust", Role::Writer);
    let writer = connect(&acl);
    let planted = object::encode(TE, &key(30), b"int planted(void) { return 1; }", &Trust::acl());
    plant(&url, &writer, TE, &key(30), &planted);
    plant(&url, &writer, KL, &key(31), &object::encode(KL, &key(31), b"\x7fELF", &Trust::acl()));
    let default = gridkey_remote::RemoteSettings { role: Role::ReadOnly, trust: RemoteTrust::Signed, ..acl.clone() };
    let reader = connect(&default);
    assert!(!reader.trust().accepts_any());
    assert_eq!(reader.get(TE, &key(30)), Fetched::Rejected(Reject::NotTrusted));
    assert_eq!(reader.get(KL, &key(31)), Fetched::Rejected(Reject::NotTrusted));
    let s = reader.stats();
    assert_eq!((s.hits, s.fetches, s.bytes_in, s.misses), (0, 0, 0, 2), "nothing downloaded");
    let line = reader.trust_statement();
    assert!(line.contains("no trusted keys: nothing is taken from the shared tier"), "{line}");
    assert!(line.contains("set the shared tier's trust mode to acl"), "{line}");
    // The opt-in takes it, and says so.
    let opted = connect(&gridkey_remote::RemoteSettings { role: Role::ReadOnly, ..acl.clone() });
    assert!(matches!(opted.get(TE, &key(30)), Fetched::Hit(_)));
    assert!(opted.trust_statement().contains("trusting every object the Redis ACL lets in"));
    // A writer without trusted keys still uploads (signed when it has a key), and takes nothing.
    let default_writer = connect(&gridkey_remote::RemoteSettings { role: Role::Writer, ..default.clone() });
    assert!(matches!(default_writer.put(TE, &key(32), b"int mine;"), Stored::Uploaded(_)));
    assert_eq!(default_writer.get(TE, &key(32)), Fetched::Rejected(Reject::NotTrusted));
    assert!(matches!(opted.get(TE, &key(32)), Fetched::Hit(_)));
}

#[test]
fn a_writer_that_takes_nothing_fills_empty_keys_and_never_replaces_an_object() {
    // A designated writer without trusted keys cannot check what the tier holds: uploading over
    // a signed object would make every reader that trusts its signer miss and build again.
    let test = "a_writer_that_takes_nothing_fills_empty_keys_and_never_replaces_an_object";
    let Some(url) = common::shared_url(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let sk = dir.path().join("writer.key");
    let public = trust::generate_signing_key(&sk).unwrap();
    let trusted = file(dir.path(), "trusted", &format!("{public} writer\n"), 0o644);
    let base = gridkey_remote::RemoteSettings { trust: RemoteTrust::Signed, ..settings(&url, "keep", Role::Writer) };
    let signer =
        connect(&gridkey_remote::RemoteSettings { signing_key: Some(sk), trusted_keys: Some(trusted), ..base.clone() });
    let blind = connect(&base);
    assert!(!blind.trust().accepts_any());
    assert!(matches!(signer.put(TE, &key(40), b"signed"), Stored::Uploaded(_)));
    // One round trip: the key that holds an object is kept, the empty one is filled.
    let stored = blind.put_many(TE, &[(key(40), b"its own".as_slice()), (key(41), b"its own".as_slice())]);
    assert_eq!(stored[0], Stored::Kept);
    assert!(matches!(stored[1], Stored::Uploaded(_)), "{stored:?}");
    assert_eq!(signer.get(TE, &key(40)), Fetched::Hit(b"signed".to_vec()));
    assert_eq!(blind.stats().uploads, 1, "only the filled key counts as uploaded");
    // A writer that checks replaces what fails its check: the unsigned object under key 41.
    assert_eq!(signer.get(TE, &key(41)), Fetched::Rejected(Reject::Unsigned));
    assert!(matches!(signer.put(TE, &key(41), b"signed too"), Stored::Uploaded(_)));
    assert_eq!(signer.get(TE, &key(41)), Fetched::Hit(b"signed too".to_vec()));
    // Its lease on a key is released with its upload, kept or not.
    assert_eq!(blind.claim(KL, &[key(42)]), vec![Claim::Won]);
    assert!(matches!(signer.put(KL, &key(42), b"\x7fELF"), Stored::Uploaded(_)));
    assert_eq!(blind.put(KL, &key(42), b"\x7fELF mine"), Stored::Kept);
    assert_eq!(signer.get(KL, &key(42)), Fetched::Hit(b"\x7fELF".to_vec()));
    raw(port_of(&url), None, &[b"DEL", blind.object_name(KL, &key(42)).as_bytes()]);
    assert_eq!(signer.claim(KL, &[key(42)]), vec![Claim::Won], "the lease went with the upload");
}

#[test]
fn an_acl_user_logs_in_and_no_message_shows_its_password() {
    let test = "an_acl_user_logs_in_and_no_message_shows_its_password";
    let Some(_) = common::shared_url(test) else { return };
    let password = "pw-Xq7-secret";
    let user = format!(">{password}");
    let Some(server) = acl_server(test, &["--user", "gkwriter", "on", &user, "~*", "&*", "+@all"]) else { return };
    let at =
        |userinfo: &str| settings(&format!("redis://{userinfo}127.0.0.1:{}/", server.port), "acl-user", Role::Writer);
    let writer = connect(&at(&format!("gkwriter:{password}@")));
    assert!(matches!(writer.put(TE, &key(50), b"as an ACL user"), Stored::Uploaded(_)));
    assert_eq!(writer.get(TE, &key(50)), Fetched::Hit(b"as an ACL user".to_vec()));
    assert_eq!(writer.shown_url(), format!("redis://gkwriter:***@127.0.0.1:{}/", server.port));
    assert!(!format!("{writer:?} {}", writer.trust_statement()).contains(password));
    // A wrong password, the default user (switched off), a user that does not exist: refused at
    // start, the user name shown, never a password.
    let wrong = "pw-Xq7-wrong";
    for userinfo in [format!("gkwriter:{wrong}@"), String::new(), format!("nobody:{password}@")] {
        match Remote::connect(&at(&userinfo)) {
            Err(e @ RemoteError::Refused { .. }) => {
                let text = format!("{e} {e:?}");
                assert!(!text.contains(password) && !text.contains(wrong), "{text}");
            }
            other => panic!("{userinfo}: {other:?}"),
        }
    }
}

/// A private server whose users are `users` (`--user` arguments) and no default user; `None`
/// (the test skips) without a test Redis.
fn acl_server(test: &str, users: &[&str]) -> Option<PrivateRedis> {
    let users: Vec<String> = users.iter().map(|a| (*a).to_owned()).collect();
    PrivateRedis::start_with(test, |port| {
        let mut args = vec!["--port".to_owned(), port.to_string()];
        args.extend(users.iter().cloned());
        args.extend(["--user", "default", "off"].map(str::to_owned));
        args
    })
}

/// A reader whose ACL user may not run scripts (`+@read +ping +exists`, without the `+eval_ro`
/// the README gives its reader) looks objects up as one that may, with the sizes asked first; the
/// server's refusal of the one-round-trip script is neither an error nor a warning, and is not
/// asked again.
#[test]
fn a_reader_that_may_not_run_scripts_looks_up_with_sizes_first() {
    let test = "a_reader_that_may_not_run_scripts_looks_up_with_sizes_first";
    let users = [
        "--user", "gkwriter", "on", ">w-pw", "~*", "&*", "+@all", "--user", "gkreader", "on", ">r-pw", "~*", "+@read",
        "+ping", "+exists",
    ];
    let Some(server) = acl_server(test, &users) else { return };
    let w = settings(&format!("redis://gkwriter:w-pw@127.0.0.1:{}/", server.port), "acl-read", Role::Writer);
    let r = gridkey_remote::RemoteSettings {
        url: format!("redis://gkreader:r-pw@127.0.0.1:{}/", server.port),
        role: Role::ReadOnly,
        ..w.clone()
    };
    let (writer, reader) = (connect(&w), connect(&r));
    for n in [60, 61] {
        assert!(matches!(writer.put(TE, &key(n), &[n; 100]), Stored::Uploaded(_)));
    }
    let wanted = [key(60), key(62), key(61)];
    let expected = vec![Fetched::Hit(vec![60; 100]), Fetched::Absent, Fetched::Hit(vec![61; 100])];
    // The writer may run scripts: sizes and objects in one round trip.
    let before = writer.stats().round_trips;
    assert_eq!(writer.get_many(TE, &wanted), expected);
    assert_eq!(writer.stats().round_trips, before + 1);
    // The reader: the refused script, the sizes, the objects; then sizes and objects only.
    let before = reader.stats().round_trips;
    assert_eq!(reader.get_many(TE, &wanted), expected);
    assert_eq!(reader.stats().round_trips, before + 3);
    assert_eq!(reader.get_many(TE, &wanted), expected);
    assert_eq!(reader.stats().round_trips, before + 5);
    assert!(reader.is_on());
    assert_eq!((reader.stats().errors, reader.warning()), (0, None));
}

/// A reader looks up with what its ACL user allows. One allowed `EVAL_RO` and the commands of a
/// lookup without it (`STRLEN`, `GETRANGE`), but not `GET`, runs the script: one round trip per
/// lookup. One whose key pattern does not cover the namespace is told `NOPERM` for every object:
/// that is the server refusing lookups, not objects that failed their checks, so the tier goes
/// off with one warning quoting it, and nothing is counted rejected.
#[test]
fn a_reader_runs_the_script_with_what_its_acl_allows_and_a_refused_lookup_turns_the_tier_off() {
    let test = "a_reader_runs_the_script_with_what_its_acl_allows_and_a_refused_lookup_turns_the_tier_off";
    let users = [
        "--user",
        "gkwriter",
        "on",
        ">w-pw",
        "~*",
        "&*",
        "+@all",
        "--user",
        "gkexact",
        "on",
        ">e-pw",
        "~*",
        "+eval_ro",
        "+strlen",
        "+getrange",
        "+ping",
        "+exists",
        "--user",
        "gkblind",
        "on",
        ">b-pw",
        "~other:*",
        "+@read",
        "+eval_ro",
        "+ping",
    ];
    let Some(server) = acl_server(test, &users) else { return };
    let w = settings(&format!("redis://gkwriter:w-pw@127.0.0.1:{}/", server.port), "acl-exact", Role::Writer);
    let reader = |user: &str| {
        connect(&gridkey_remote::RemoteSettings {
            url: format!("redis://{user}@127.0.0.1:{}/", server.port),
            role: Role::ReadOnly,
            ..w.clone()
        })
    };
    let writer = connect(&w);
    for n in [70, 71] {
        assert!(matches!(writer.put(TE, &key(n), &[n; 100]), Stored::Uploaded(_)));
    }
    let wanted = [key(70), key(72), key(71)];
    let expected = vec![Fetched::Hit(vec![70; 100]), Fetched::Absent, Fetched::Hit(vec![71; 100])];
    let exact = reader("gkexact:e-pw");
    for lookup in 0..2 {
        let before = exact.stats().round_trips;
        assert_eq!(exact.get_many(TE, &wanted), expected, "lookup {lookup}");
        assert_eq!(exact.stats().round_trips, before + 1, "lookup {lookup}: the script, run");
    }
    assert_eq!((exact.stats().errors, exact.warning()), (0, None));
    let blind = reader("gkblind:b-pw");
    assert_eq!(blind.get_many(TE, &wanted), vec![Fetched::Off; 3]);
    assert!(!blind.is_on());
    assert_eq!((blind.stats().errors, blind.stats().rejected), (1, 0));
    let warning = blind.warning().expect("one warning");
    assert!(warning.contains("no permissions") && warning.contains("off for the rest of this run"), "{warning}");
}
