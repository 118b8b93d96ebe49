//! Per-key locks (ADR 0025) and the collector's live-run rule (ADR 0026) against real files and
//! real processes.

use std::fs;
use std::path::Path;
use std::process::Command;

/// Creates a file `name` in `dir` with `len` bytes, modified `age` ago.
fn temp_file(dir: &Path, name: &str, len: usize, age: std::time::Duration) -> std::path::PathBuf {
    let path = dir.join(name);
    fs::write(&path, vec![7u8; len]).unwrap();
    fs::File::open(&path).unwrap().set_modified(std::time::SystemTime::now() - age).unwrap();
    path
}

#[test]
fn a_key_lock_is_held_by_one_at_a_time_and_released_when_its_holder_dies() {
    use gridkey_fs::lock::{Acquired, KeyLocks};
    let cache = tempfile::tempdir().unwrap();
    let locks = KeyLocks::new(cache.path());
    let (Acquired::Held(held), waited) = locks.lock("k").unwrap() else { panic!("a free lock is taken") };
    assert!(waited.is_zero());
    let path = held.path().to_path_buf();
    // Another process cannot take it meanwhile (util-linux `flock -n` fails at once).
    assert!(!Command::new("flock").args(["-n"]).arg(&path).arg("true").status().unwrap().success());
    drop(held);
    assert!(!path.exists(), "the holder removes its lock file");
    // A holder that dies releases it at once: a child process holds the lock until it is killed.
    let dir = cache.path().join(gridkey_fs::lock::LOCKS_DIR);
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("k.lock");
    fs::write(&file, b"").unwrap();
    let script = format!("exec 9<>'{}' && flock 9 && exec sleep 600", file.display());
    let mut child = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let held_by_child = || !Command::new("flock").args(["-n"]).arg(&file).arg("true").status().unwrap().success();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !held_by_child() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(held_by_child(), "the child holds the lock");
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            let (held, waited) = locks.lock("k").unwrap();
            tx.send(matches!(held, Acquired::Held(_)) && !waited.is_zero()).unwrap();
            drop(held);
        })
    };
    assert!(rx.recv_timeout(std::time::Duration::from_millis(300)).is_err(), "waits while the holder lives");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)), Ok(true), "taken once the holder died");
    waiter.join().unwrap();
    assert!(!file.exists(), "and its file removed by the new holder");
}

#[test]
fn an_entry_used_after_the_oldest_live_run_started_is_kept() {
    use gridkey_fs::{remove_if_unused, touch, Removal};
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let old = temp_file(dir.path(), "old.bin", 10, Duration::from_secs(3600));
    let used = temp_file(dir.path(), "used.bin", 10, Duration::from_secs(3600));
    let an_hour_ago = fs::FileTimes::new().set_accessed(SystemTime::now() - Duration::from_secs(3600));
    for path in [&old, &used] {
        fs::File::open(path).unwrap().set_times(an_hour_ago).unwrap();
    }
    let start = SystemTime::now() - Duration::from_secs(60);
    // A live run marks `used` (under its shared lock, here released again).
    let reader = fs::File::open(&used).unwrap();
    touch(&reader);
    drop(reader);
    assert_eq!(remove_if_unused(&used, || Ok(Some(start))).unwrap(), Removal::Recent);
    assert_eq!(remove_if_unused(&old, || Ok(Some(start))).unwrap(), Removal::Removed);
    assert!(used.exists() && !old.exists());
    // Held by a reader: kept, whatever its age; without live runs and unheld: removed.
    let held = fs::File::open(&used).unwrap();
    gridkey_fs::lock::lock_shared(&held).unwrap();
    assert_eq!(remove_if_unused(&used, || Ok(None)).unwrap(), Removal::Locked);
    drop(held);
    assert_eq!(remove_if_unused(&used, || Ok(None)).unwrap(), Removal::Removed);
    assert_eq!(remove_if_unused(&used, || Ok(None)).unwrap(), Removal::Gone);
}

/// Lock files and waits told to [`notice`], for the bounded-wait test.
static NOTICES: std::sync::Mutex<Vec<(std::path::PathBuf, std::time::Duration)>> = std::sync::Mutex::new(Vec::new());

fn notice(path: &Path, waited: std::time::Duration) {
    NOTICES.lock().unwrap().push((path.to_path_buf(), waited));
}

#[test]
fn a_key_lock_held_by_a_stopped_process_is_given_up_after_the_bound_and_the_wait_is_told() {
    use gridkey_fs::lock::{Acquired, KeyLocks, LockWait, LOCK_NOTICE_EVERY};
    use std::time::{Duration, Instant};
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().join(gridkey_fs::lock::LOCKS_DIR);
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("k.lock");
    fs::write(&file, b"").unwrap();
    // A holder that takes the lock, then is stopped: it never releases it while stopped.
    let script = format!("exec 9<>'{}' && flock 9 && kill -STOP $$ && exec sleep 600", file.display());
    let mut child = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let held_by_child = || !Command::new("flock").args(["-n"]).arg(&file).arg("true").status().unwrap().success();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !held_by_child() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(held_by_child(), "the child holds the lock");
    let limit = LOCK_NOTICE_EVERY + Duration::from_millis(500);
    let locks = KeyLocks::new(cache.path()).with_wait(LockWait { limit, notice: Some(notice) });
    // The wait runs in a thread, so that the code before the bound (a wait without end) fails
    // here instead of hanging the test.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let got = locks.lock("k").unwrap();
        tx.send((got, started.elapsed())).unwrap();
    });
    let outcome = rx.recv_timeout(limit + Duration::from_secs(10));
    child.kill().unwrap();
    child.wait().unwrap();
    let ((acquired, waited), elapsed) = outcome.expect("the wait ends after its bound");
    match acquired {
        Acquired::GaveUp { path } => assert_eq!(path, file),
        Acquired::Held(_) => panic!("a lock held by a stopped process is not taken"),
    }
    assert!(waited >= limit && elapsed >= limit, "{waited:?} {elapsed:?}");
    assert!(elapsed < limit + Duration::from_secs(2), "{elapsed:?}");
    let told = NOTICES.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "one notice per {LOCK_NOTICE_EVERY:?} of waiting: {told:?}");
    assert_eq!(told[0].0, file);
    assert!(told[0].1 >= LOCK_NOTICE_EVERY);
    // Free again (the holder is dead): taken at once, and a zero bound never waits.
    let locks = KeyLocks::new(cache.path()).with_wait(LockWait { limit: Duration::ZERO, notice: None });
    assert!(matches!(locks.lock("k").unwrap(), (Acquired::Held(_), w) if w.is_zero()));
}
