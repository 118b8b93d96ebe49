//! One deadline per request and per run (ADR 0029) against fake servers on loopback: one that
//! stalls after the handshake, one that trickles a byte at a time, one that announces a 1 TiB
//! reply, and an HTTP server. Each costs at most one reply timeout for a whole run of requests,
//! then the tier is off with one warning that says what happened. Also the lookup script's
//! fakes (ADR 0055): one that answers it with what it was not asked (the tier off), and one that
//! does not run it (`BUSY`, `NOPERM`: the sizes asked first). These need no Redis server.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use gridkey_remote::{Claim, Fetched, Kind, Reject, Remote, RemoteSettings, Role, Stored, Waited};

const TE: Kind = Kind::TranslationEntry;

/// Reply timeout and connect timeout of these tests.
const TIMEOUT: Duration = Duration::from_millis(1000);

/// The run's bound: 1.5 timeouts for the requests plus the connect timeout, a correctness
/// bound with a wide margin (the code under test needs one timeout).
fn bound() -> Duration {
    TIMEOUT * 3 / 2 + TIMEOUT
}

fn keys() -> Vec<[u8; 16]> {
    (0..8u8).map(|n| [n; 16]).collect()
}

/// One command of a client, read off the wire: its words.
fn command(r: &mut BufReader<TcpStream>) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let n: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut words = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut word = vec![0u8; len + 2];
        r.read_exact(&mut word).ok()?;
        word.truncate(len);
        words.push(word);
    }
    Some(words)
}

/// A fake server on a free loopback port: answers the handshake's `PING` with `+PONG`, then
/// hands the connection to `after` with the first command that followed. Every connection
/// is served the same way, on a thread of its own.
fn fake(after: impl Fn(TcpStream, Vec<Vec<u8>>) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let after = Arc::new(after);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let after = after.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut w = stream;
                while let Some(words) = command(&mut r) {
                    if words[0].eq_ignore_ascii_case(b"PING") {
                        let _ = w.write_all(b"+PONG\r\n");
                    } else {
                        after(w, words);
                        return;
                    }
                }
            });
        }
    });
    port
}

fn settings(port: u16, role: Role) -> RemoteSettings {
    let mut s = common::settings(&format!("redis://127.0.0.1:{port}/"), "deadline", role);
    s.timeout = TIMEOUT;
    s.connect_timeout = TIMEOUT;
    s
}

/// One lookup of the 8 keys of [`keys`] by a client with settings `s` (a fake server's), within
/// `limit`: what it answered, and the client.
fn looked_up(s: RemoteSettings, limit: Duration) -> (Vec<Fetched>, Remote) {
    within(limit, move || {
        let remote = Remote::connect(&s).expect("a fake server is not a misconfiguration");
        (remote.get_many(TE, &keys()), remote)
    })
}

/// Runs `f` on a thread and fails the test when it has not returned after `limit` (the code
/// before ADR 0029 hangs on some of these servers; the test must fail, not hang).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("still blocked after {limit:?}"))
}

/// A whole run of requests against the server at `port`: connect, look up, claim, wait,
/// upload, look up again, drop. Returns the elapsed time, whether the tier was on after the
/// connect, whether it is on at the end, the warning and the error count.
fn run(port: u16) -> (Duration, Remote) {
    within(Duration::from_secs(20), move || {
        let t = Instant::now();
        let remote = Remote::connect(&settings(port, Role::Writer)).expect("a fake server is not a misconfiguration");
        let k = keys();
        let first = remote.get_many(TE, &k);
        assert!(first.iter().all(|f| *f == Fetched::Off), "{first:?}");
        assert_eq!(remote.claim(TE, &k), vec![Claim::Off; 8]);
        assert_eq!(remote.wait(TE, &k), vec![Waited::Off; 8]);
        assert_eq!(remote.put(TE, &k[0], b"x"), Stored::Off);
        assert_eq!(remote.get(TE, &k[1]), Fetched::Off);
        (t.elapsed(), remote)
    })
}

/// The checks every bad server gets: one timeout at most, the tier off, one error, and a
/// warning with `says`.
fn check(port: u16, says: &str) {
    let (elapsed, remote) = run(port);
    assert!(elapsed <= bound(), "the run took {elapsed:?}, over {:?}", bound());
    assert!(!remote.is_on());
    assert_eq!(remote.stats().errors, 1);
    let warning = remote.warning().expect("one warning");
    assert!(warning.contains(says), "{warning}");
    assert!(warning.contains(&format!("127.0.0.1:{port}")), "{warning}");
    assert!(warning.contains("off for the rest of this run"), "{warning}");
    let t = Instant::now();
    drop(remote);
    assert!(t.elapsed() < Duration::from_millis(100), "dropping took {:?}", t.elapsed());
}

/// A server that answers a lookup with what it was not asked, fewer replies than keys or an
/// object over the size limit: the tier goes off at once, with one warning that says which,
/// and nothing it sent is taken.
#[test]
fn a_server_that_answers_a_lookup_with_what_it_was_not_asked_turns_the_tier_off() {
    let object = [b"$100\r\n".to_vec(), vec![b'x'; 100], b"\r\n".to_vec()].concat();
    for (reply, says) in [
        (b"*1\r\n:5\r\n".to_vec(), "another number of replies"),
        ([b"*8\r\n".to_vec(), object, b":0\r\n".repeat(7)].concat(), "an object over the size limit"),
    ] {
        let port = fake(move |mut stream, words| {
            assert!(words[0].eq_ignore_ascii_case(b"EVAL_RO"), "a lookup starts with its script");
            let _ = stream.write_all(&reply);
        });
        let mut s = settings(port, Role::Writer);
        s.max_object_bytes = 64;
        let (got, remote) = looked_up(s, Duration::from_secs(20));
        assert!(got.iter().all(|f| *f == Fetched::Off), "{got:?}");
        assert!(!remote.is_on());
        assert_eq!(remote.stats().errors, 1);
        let warning = remote.warning().expect("one warning");
        assert!(warning.contains(says) && warning.contains("off for the rest of this run"), "{warning}");
    }
}

/// What a server answers for one object of a lookup: a `WRONGTYPE` error is that object's
/// (rejected, the tier stays on); any other error (`NOPERM`, `MASTERDOWN`: the server cannot
/// answer lookups now) and any reply a Redis never gives there (a nil, a negative size) turn the
/// tier off with one warning that says it, and count nothing rejected; for the script's replies
/// and for the `GETRANGE` that fetches an object past the script's budget alike.
#[test]
fn a_lookup_answered_with_errors_or_other_replies_turns_the_tier_off_and_wrongtype_is_a_reject() {
    let each = |one: &str| [b"*8\r\n".to_vec(), one.as_bytes().repeat(8)].concat();
    let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    // (reply to the script, reply to GETRANGE, what the warning says; None: the tier stays on)
    let cases: Vec<(Vec<u8>, &'static [u8], Option<&str>)> = vec![
        (each("-NOPERM this user has no permissions to access one of the keys\r\n"), b"", Some("no permissions")),
        (each("$-1\r\n"), b"", Some("the lookup script with something else than a size or an object")),
        (each(":-5\r\n"), b"", Some("the lookup script with a negative size")),
        (each(wrongtype), b"", None),
        // Key 0 holds 10 bytes the script did not send: GETRANGE fetches them.
        ([b"*8\r\n:10\r\n".to_vec(), b":0\r\n".repeat(7)].concat(), b"$-1\r\n", Some("GETRANGE with something else")),
        (
            [b"*8\r\n:10\r\n".to_vec(), b":0\r\n".repeat(7)].concat(),
            b"-MASTERDOWN Link with MASTER is down\r\n",
            Some("Link with MASTER is down"),
        ),
        // What a server's error says is quoted with its control characters escaped: a lying
        // server cannot retitle or redraw the user's terminal through a warning.
        (
            each("-NOPERM \x1b]0;owned\x07 no\x1b[2J permissions\r\n"),
            b"",
            Some("\\u{1b}]0;owned\\u{7} no\\u{1b}[2J permissions"),
        ),
        (each("-WRONGTYPE \x1b]0;owned\x07 wrong kind\r\n"), b"", None),
    ];
    for (script, getrange, says) in cases {
        let port = fake(move |stream, first| {
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut w = stream;
            assert!(first[0].eq_ignore_ascii_case(b"EVAL_RO"), "a lookup starts with its script");
            let _ = w.write_all(&script);
            if command(&mut r).is_some_and(|c| c[0].eq_ignore_ascii_case(b"GETRANGE")) {
                let _ = w.write_all(getrange);
            }
            let mut sink = [0u8; 4096];
            while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
        });
        let s = settings(port, Role::Writer);
        let (got, remote) = looked_up(s, Duration::from_secs(20));
        match says {
            Some(says) => {
                assert!(got.iter().all(|f| *f == Fetched::Off), "{says}: {got:?}");
                assert_eq!((remote.is_on(), remote.stats().errors, remote.stats().rejected), (false, 1, 0), "{says}");
                let warning = remote.warning().expect("one warning");
                assert!(warning.contains(says) && warning.contains("off for the rest of this run"), "{warning}");
            }
            None => {
                assert!(got.iter().all(|f| matches!(f, Fetched::Rejected(Reject::Unreadable { .. }))), "{got:?}");
                assert_eq!((remote.is_on(), remote.stats().rejected, remote.warning()), (true, 8, None));
                // Not silently: the run's one sentence about them counts them and quotes the first.
                let said = remote.rejections().expect("the rejections are said");
                assert!(
                    said.contains("8 objects looked up failed a check here") && said.contains("WRONGTYPE"),
                    "{said}"
                );
                assert!(said.contains("(a writer uploads its own over them while the tier is on)"), "{said}");
            }
        }
        let shown = [remote.warning(), remote.rejections()].into_iter().flatten().collect::<String>();
        assert!(!shown.chars().any(char::is_control), "a control character reaches the terminal: {shown:?}");
    }
}

/// Redis answers the script of a user who may run `EVAL_RO` but not a command the script runs,
/// or not its keys, with an `ERR` whose words changed between versions (7.0: `The user executing
/// the script can't ...`, 7.2: `ACL failure in script: ...`): each is a refusal, so the sizes are
/// asked first from then on, and the script is not sent again.
#[test]
fn a_script_whose_commands_the_user_may_not_run_is_a_refusal() {
    for answer in [
        "-ERR The user executing the script can't run this command or subcommand script: 1a2b, on @user_script:1.\r\n",
        "-ERR The user executing the script can't access at least one of the keys mentioned in the command arguments \
         script: 1a2b, on @user_script:1.\r\n",
        "-ERR ACL failure in script: User reader has no permissions to run the 'getrange' command script: 1a2b, on \
         @user_script:1.\r\n",
        "-ERR ACL failure in script: User reader has no permissions to access the 'ns:obj-v1:te:00' key script: 1a2b, \
         on @user_script:1.\r\n",
    ] {
        a_script_answered_so_is_a_refusal(answer);
    }
}

fn a_script_answered_so_is_a_refusal(answer: &'static str) {
    const N: usize = 8;
    let port = fake(move |stream, first| {
        let mut r = BufReader::new(stream.try_clone().unwrap());
        let mut w = stream;
        assert!(first[0].eq_ignore_ascii_case(b"EVAL_RO"), "a lookup starts with its script");
        let _ = w.write_all(answer.as_bytes());
        // The sizes of lookup 1, then those of lookup 2: never the script again.
        for _ in 0..2 {
            let sizes = commands(&mut r, N);
            assert!(sizes.len() == N && sizes.iter().all(|c| c[0] == b"STRLEN"), "the sizes alone after a refusal");
            let _ = w.write_all(&b":0\r\n".repeat(N));
        }
        let mut sink = [0u8; 4096];
        while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
    });
    let s = settings(port, Role::Writer);
    let remote = within(Duration::from_secs(20), move || Remote::connect(&s).expect("not a misconfiguration"));
    for (lookup, round_trips) in [(1, 2), (2, 1)] {
        let before = remote.stats().round_trips;
        assert_eq!(remote.get_many(TE, &keys()), vec![Fetched::Absent; N], "lookup {lookup}: {answer}");
        assert_eq!(remote.stats().round_trips - before, round_trips, "lookup {lookup}: {answer}");
    }
    assert_eq!((remote.is_on(), remote.stats().errors, remote.warning()), (true, 0, None), "{answer}");
}

/// The next `n` commands of a client (one pipelined request), read off `r`.
fn commands(r: &mut BufReader<TcpStream>, n: usize) -> Vec<Vec<Vec<u8>>> {
    (0..n).map_while(|_| command(r)).collect()
}

/// A server busy with another script answers the lookup script with `BUSY`: that lookup asks
/// the sizes, no error, no warning, and the next lookup tries the script again. A server that
/// refuses it (`NOPERM`) is asked the sizes from then on, and one that answers a size with an
/// object is a lie: the tier goes off.
#[test]
fn a_lookup_script_not_run_asks_the_sizes_and_only_a_refusal_stops_it() {
    const N: usize = 8;
    let zeros = |n: usize| b":0\r\n".repeat(n);
    let port = fake(move |stream, first| {
        let mut r = BufReader::new(stream.try_clone().unwrap());
        let mut w = stream;
        // Lookup 1: BUSY, then 8 STRLEN; lookup 2: the script again, answered.
        assert_eq!(first[0], b"EVAL_RO");
        let _ = w.write_all(b"-BUSY Redis is busy running a script\r\n");
        let sizes = commands(&mut r, N);
        assert!(sizes.iter().all(|c| c[0] == b"STRLEN"), "the sizes alone after BUSY");
        let _ = w.write_all(&zeros(N));
        assert_eq!(command(&mut r).unwrap()[0], b"EVAL_RO", "the script again after BUSY");
        let _ = w.write_all(&[format!("*{N}\r\n").into_bytes(), zeros(N)].concat());
        // Lookup 3: NOPERM, then STRLEN; lookup 4: STRLEN at once, answered with an object.
        assert_eq!(command(&mut r).unwrap()[0], b"EVAL_RO");
        let _ = w.write_all(b"-NOPERM this user has no permissions to run the 'eval_ro' command\r\n");
        let _ = commands(&mut r, N);
        let _ = w.write_all(&zeros(N));
        let sizes = commands(&mut r, N);
        assert!(sizes.iter().all(|c| c[0] == b"STRLEN"), "no script after NOPERM");
        let _ = w.write_all(&[b"$1\r\nx\r\n".to_vec(), zeros(N - 1)].concat());
        let mut sink = [0u8; 4096];
        while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
    });
    let s = settings(port, Role::Writer);
    let remote = within(Duration::from_secs(20), move || Remote::connect(&s).expect("not a misconfiguration"));
    for (lookup, round_trips) in [(1, 2), (2, 1), (3, 2)] {
        let before = remote.stats().round_trips;
        assert_eq!(remote.get_many(TE, &keys()), vec![Fetched::Absent; N], "lookup {lookup}");
        assert_eq!(remote.stats().round_trips - before, round_trips, "lookup {lookup}");
        assert!(remote.is_on() && remote.warning().is_none(), "lookup {lookup}");
    }
    assert_eq!(remote.stats().errors, 0);
    assert_eq!(remote.get_many(TE, &keys()), vec![Fetched::Off; N]);
    let warning = remote.warning().expect("one warning");
    assert!(warning.contains("STRLEN with an object, not a size"), "{warning}");
}

#[test]
fn a_server_that_stalls_after_the_handshake_costs_one_timeout_per_run() {
    let port = fake(|stream, _| {
        // Reads what comes and never answers.
        let mut r = stream;
        let mut sink = [0u8; 4096];
        while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
    });
    check(port, "no complete reply within 1.0 s");
}

#[test]
fn a_server_that_trickles_a_byte_every_300_ms_costs_one_timeout_per_run() {
    let port = fake(|mut stream, _| {
        // A reply that never ends, one byte at a time: each read gets a byte well within the
        // reply timeout, so only a deadline for the whole request ends it. One array of 1000
        // numbers, so that a request of one command waits for it as one of 8 commands does.
        let reply = [b"*1000\r\n".to_vec(), b":1\r\n".repeat(1000)].concat();
        for b in reply {
            if stream.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    check(port, "no complete reply within 1.0 s");
}

#[test]
fn a_server_that_announces_a_1_tib_reply_is_not_buffered() {
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let port = fake(move |mut stream, _| {
        // Announces 1 TiB and sends as fast as the client reads, up to 256 MiB, then stalls.
        let _ = stream.write_all(b"$1099511627776\r\n");
        let chunk = vec![b'x'; 1 << 16];
        for _ in 0..(256 << 20) / chunk.len() {
            if stream.write_all(&chunk).is_err() {
                return;
            }
            counted.fetch_add(chunk.len() as u64, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    // The lookup's first request allows 8 MiB of objects and 1 MiB for the rest of its replies.
    check(port, "larger than the 9437184 bytes this request allows");
    // What the server could send before the client closed its socket: the client's reply
    // bound plus what the kernel's socket buffers hold, far from the 256 MiB a client that
    // believes the header reads.
    let sent = sent.load(Ordering::SeqCst);
    assert!(sent < 48 << 20, "the server sent {sent} bytes before the client hung up");
}

/// A server that answers an object's `GETRANGE` with an array of 20 million nulls (60 MB,
/// within the 64 MiB the request allows for bytes): the client stops reading once the replies
/// hold more values than the request can be answered with, instead of building a value of tens
/// of bytes for each 3-byte null (over a gigabyte), and the tier goes off saying so.
#[test]
fn a_server_that_answers_with_a_flood_of_tiny_values_is_not_parsed_whole() {
    const NULLS: usize = 20_000_000;
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let port = fake(move |stream, first| {
        let mut r = BufReader::new(stream.try_clone().unwrap());
        let mut w = stream;
        assert!(first[0].eq_ignore_ascii_case(b"EVAL_RO"), "a lookup starts with its script");
        // Key 0 holds 60 MB, past the script's budget: the client fetches it with GETRANGE.
        let _ = w.write_all(&[format!("*8\r\n:{}\r\n", NULLS * 3).into_bytes(), b":0\r\n".repeat(7)].concat());
        if command(&mut r).is_some_and(|c| c[0].eq_ignore_ascii_case(b"GETRANGE")) {
            let _ = w.write_all(format!("*{NULLS}\r\n").as_bytes());
            let chunk = b"_\r\n".repeat(1 << 14);
            for _ in 0..NULLS / (1 << 14) {
                if w.write_all(&chunk).is_err() {
                    return;
                }
                counted.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
        }
        let mut sink = [0u8; 4096];
        while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
    });
    let mut s = settings(port, Role::Writer);
    s.max_object_bytes = 64 << 20;
    s.timeout = Duration::from_secs(30);
    let (got, remote) = looked_up(s, Duration::from_secs(60));
    assert!(got.iter().all(|f| *f == Fetched::Off), "{got:?}");
    let warning = remote.warning().expect("one warning");
    assert!(warning.contains("values this request can be answered with"), "{warning}");
    let sent = sent.load(Ordering::SeqCst);
    assert!(sent < 48 << 20, "the server sent {sent} bytes before the client hung up");
}

/// An HTTP server on the port: what it answers to anything.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    port
}

#[test]
fn an_http_server_on_the_port_turns_the_tier_off_and_says_what_answered() {
    let port = http_server();
    check(port, "answered `HTTP/1.1 400 Bad Request`, not Redis");
    // With a password in the URL it is still not called a password problem.
    let mut s = settings(port, Role::Writer);
    s.url = format!("redis://:s3cret@127.0.0.1:{port}/");
    let remote = within(Duration::from_secs(10), move || Remote::connect(&s)).expect("not a misconfiguration");
    assert!(!remote.is_on());
    let warning = remote.warning().unwrap();
    assert!(warning.contains("not Redis") && !warning.contains("password") && !warning.contains("s3cret"), "{warning}");
}

/// An object a writer replaces between the round trip that sized it and the `GETRANGE` that
/// fetches it (past the script's budget) arrives as a part of the new object, or as less than
/// its size: not damaged, a miss, with nothing rejected and no warning; a name that holds
/// another type now (`WRONGTYPE` to the size asked again) too. One whose size did not change and
/// that fails its checks is damaged: rejected, as before. A size answered with another error, or
/// with something else than a size (a negative one too), turns the tier off (ADR 0056).
#[test]
fn an_object_replaced_while_it_was_read_is_a_miss_not_a_damaged_object() {
    /// The GETRANGE reply, the answer to the size asked again (None: not asked), what follows.
    type Case = (&'static [u8], Option<&'static [u8]>, Then);
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Then {
        Miss,
        Rejected,
        Off,
    }
    let wrongtype: &'static [u8] = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    let cases: [Case; 7] = [
        // A longer object now: its first 10 bytes, and a size of 20.
        (b"$10\r\nGKRO-new-o\r\n", Some(b":20\r\n"), Then::Miss),
        // A shorter object now: fewer bytes than asked for, no second question.
        (b"$6\r\nGKRO-n\r\n", None, Then::Miss),
        // A list under the name now.
        (b"$10\r\nGKRO-new-o\r\n", Some(wrongtype), Then::Miss),
        // The same size, bytes that do not check: damaged.
        (b"$10\r\nGKRO-dmged\r\n", Some(b":10\r\n"), Then::Rejected),
        // The server cannot answer now, or answers a size with an object.
        (b"$10\r\nGKRO-new-o\r\n", Some(b"-MASTERDOWN Link with MASTER is down\r\n"), Then::Off),
        (b"$10\r\nGKRO-new-o\r\n", Some(b"$3\r\nabc\r\n"), Then::Off),
        // A negative size is a lie, as it is in the first round trip.
        (b"$10\r\nGKRO-new-o\r\n", Some(b":-20\r\n"), Then::Off),
    ];
    for (getrange, strlen, then) in cases {
        let asked_size = Arc::new(AtomicBool::new(false));
        let asked = asked_size.clone();
        let port = fake(move |stream, first| {
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut w = stream;
            assert!(first[0].eq_ignore_ascii_case(b"EVAL_RO"), "a lookup starts with its script");
            // Key 0 holds 10 bytes the script did not send: GETRANGE fetches them.
            let _ = w.write_all(&[b"*8\r\n:10\r\n".to_vec(), b":0\r\n".repeat(7)].concat());
            assert!(command(&mut r).is_some_and(|c| c[0].eq_ignore_ascii_case(b"GETRANGE")));
            let _ = w.write_all(getrange);
            if let Some(c) = command(&mut r) {
                assert!(c[0].eq_ignore_ascii_case(b"STRLEN"), "{:?}", String::from_utf8_lossy(&c[0]));
                asked.store(true, Ordering::SeqCst);
                let _ = w.write_all(strlen.expect("a size asked for only where the reply had it"));
            }
            let mut sink = [0u8; 4096];
            while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
        });
        let s = settings(port, Role::Writer);
        let (got, remote) = looked_up(s, Duration::from_secs(20));
        let what =
            format!("{} then {}", String::from_utf8_lossy(getrange), String::from_utf8_lossy(strlen.unwrap_or(b"")));
        assert_eq!(asked_size.load(Ordering::SeqCst), strlen.is_some(), "{what}");
        match then {
            Then::Miss => {
                assert!(remote.is_on() && remote.warning().is_none(), "{what}: {:?}", remote.warning());
                assert_eq!(got, vec![Fetched::Absent; 8], "{what}");
                assert_eq!((remote.stats().rejected, remote.rejections()), (0, None), "{what}");
            }
            Then::Rejected => {
                assert!(remote.is_on() && remote.warning().is_none(), "{what}: {:?}", remote.warning());
                assert!(matches!(got[0], Fetched::Rejected(_)), "{what}: {got:?}");
                assert_eq!(remote.stats().rejected, 1, "{what}");
            }
            Then::Off => {
                assert_eq!(got, vec![Fetched::Off; 8], "{what}");
                assert_eq!((remote.is_on(), remote.stats().rejected), (false, 0), "{what}");
                let warning = remote.warning().expect("one warning");
                assert!(warning.contains("off for the rest of this run"), "{warning}");
            }
        }
    }
}
