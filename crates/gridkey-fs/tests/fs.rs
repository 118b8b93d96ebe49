//! The filesystem layer against real files (ADR 0002, ADR 0009, ADR 0012): atomic writes leave
//! the content or nothing, the fault hook applies only where its path part says, locks keep the
//! collector away, and the temp sweep removes only abandoned temp files.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use gridkey_fs::{
    lock, remove_if_unlocked, remove_stale_temps, write_atomic, write_atomic_all, write_temp, Fault, FaultKind,
    FsError, PausePoint, TEMP_PREFIX,
};
use proptest::prelude::*;

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            out.extend(files_under(&entry.path()));
        } else {
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

#[test]
fn an_atomic_write_leaves_the_whole_read_only_file_and_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a").join("b").join("entry.bin");
    let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let len = write_atomic(&path, None, |out| out.write_all(&content)).unwrap();
    assert_eq!(len, content.len() as u64);
    assert_eq!(fs::read(&path).unwrap(), content);
    assert!(fs::metadata(&path).unwrap().permissions().readonly());
    assert_eq!(files_under(dir.path()), ["entry.bin"]);
    // Writing again over a read-only file replaces it (the rename does not need write access).
    write_atomic(&path, None, |out| out.write_all(b"second")).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"second");
}

#[test]
fn a_batch_of_atomic_writes_leaves_every_whole_read_only_file_and_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> =
        (0..12).map(|i| dir.path().join(format!("{:02x}", i % 5)).join(format!("e{i}.bin"))).collect();
    let contents: Vec<Vec<u8>> = (0..12).map(|i| vec![i as u8; 1000 + 4096 * i]).collect();
    let files: Vec<(&Path, &[u8])> =
        paths.iter().map(PathBuf::as_path).zip(contents.iter().map(Vec::as_slice)).collect();
    let written = write_atomic_all(&files, None);
    for ((path, content), w) in paths.iter().zip(&contents).zip(written) {
        assert_eq!(w.unwrap(), content.len() as u64);
        assert_eq!(&fs::read(path).unwrap(), content);
        assert!(fs::metadata(path).unwrap().permissions().readonly());
    }
    assert_eq!(files_under(dir.path()).len(), 12, "no temp file left");
    // A batch over files that exist replaces them, as one write does.
    let again: Vec<(&Path, &[u8])> = paths.iter().map(|p| (p.as_path(), &b"again"[..])).collect();
    assert!(write_atomic_all(&again, None).iter().all(|w| w.as_ref().is_ok_and(|&n| n == 5)));
    assert!(paths.iter().all(|p| fs::read(p).unwrap() == b"again"));
    assert!(write_atomic_all(&[], None).is_empty());
}

#[test]
fn a_file_of_a_batch_that_cannot_be_written_costs_that_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("plain-file"), b"in the way").unwrap();
    let blocked = dir.path().join("plain-file").join("entry.bin");
    let good = [dir.path().join("ab").join("one.bin"), dir.path().join("cd").join("two.bin")];
    let files: Vec<(&Path, &[u8])> = vec![(&good[0], b"one"), (&blocked, b"blocked"), (&good[1], b"two")];
    let written = write_atomic_all(&files, None);
    // A file where its directory should be: creating the temp file in it answers ENOTDIR.
    let blocked_error = written[1].as_ref().unwrap_err();
    assert_eq!(blocked_error.kind(), std::io::ErrorKind::NotADirectory, "{blocked_error}");
    assert_eq!((fs::read(&good[0]).unwrap(), fs::read(&good[1]).unwrap()), (b"one".to_vec(), b"two".to_vec()));
    assert_eq!(files_under(dir.path()), ["one.bin", "plain-file", "two.bin"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Whatever the batch and whichever files a full disk hits (the fault hook's `enospc` with
    /// a path part naming them), every other file is under its name whole and read-only, the hit
    /// ones are absent, and no temp file is left.
    #[test]
    fn a_batch_leaves_whole_files_or_nothing_per_file(
        sizes in proptest::collection::vec(0usize..20_000, 1..10),
        hit in proptest::collection::vec(any::<bool>(), 10),
        at in 0u64..20_000,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = sizes.iter().enumerate()
            .map(|(i, _)| dir.path().join(if hit[i] { "full" } else { "room" }).join(format!("f{i}.bin")))
            .collect();
        let contents: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![(i * 37) as u8; n]).collect();
        let files: Vec<(&Path, &[u8])> = paths.iter().map(PathBuf::as_path).zip(contents.iter().map(Vec::as_slice)).collect();
        let fault = Fault::parse(&format!("enospc:{at}:full")).unwrap();
        let written = write_atomic_all(&files, Some(&fault));
        for (i, w) in written.iter().enumerate() {
            let fails = hit[i] && contents[i].len() as u64 > at;
            match w {
                Ok(n) => {
                    prop_assert!(!fails, "file {} written past the fault", i);
                    prop_assert_eq!(*n, contents[i].len() as u64);
                    prop_assert_eq!(&fs::read(&paths[i]).unwrap(), &contents[i]);
                    prop_assert!(fs::metadata(&paths[i]).unwrap().permissions().readonly());
                }
                Err(e) => {
                    prop_assert!(fails, "file {} failed: {}", i, e);
                    prop_assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
                    prop_assert!(!paths[i].exists());
                }
            }
        }
        prop_assert!(files_under(dir.path()).iter().all(|name| !name.starts_with(TEMP_PREFIX)));
    }
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("entry.bin");
    let err = write_atomic(&path, None, |out| {
        out.write_all(&[1u8; 100])?;
        Err(io::Error::other("the producer failed"))
    })
    .unwrap_err();
    assert_eq!(err.to_string(), "the producer failed");
    assert_eq!(files_under(dir.path()), Vec::<String>::new());
}

#[test]
fn an_enospc_fault_fails_the_write_at_its_byte_count_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("translation-v1").join("ab").join("ab12.bin");
    for spec in ["enospc:0", "enospc:10", "enospc:10:translation-v1", "enospc:4096:.bin"] {
        let fault = Fault::parse(spec).unwrap();
        let err = write_atomic(&path, Some(&fault), |out| out.write_all(&[7u8; 5000])).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{spec}: {err}");
        assert!(!path.exists() && files_under(dir.path()).is_empty(), "{spec}: nothing left");
    }
    // Below its byte count the fault does nothing; elsewhere (another path part) neither.
    let fault = Fault::parse("enospc:5000").unwrap();
    write_atomic(&path, Some(&fault), |out| out.write_all(&[7u8; 5000])).unwrap();
    let fault = Fault::parse("enospc:0:tables-v1").unwrap();
    write_atomic(&path, Some(&fault), |out| out.write_all(b"x")).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"x");
}

#[test]
fn the_two_halves_write_first_and_name_the_file_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let (pending, len) = write_temp(dir.path(), None, |out| out.write_all(b"named later")).unwrap();
    assert_eq!(len, 11);
    let temp = pending.path().to_path_buf();
    assert!(temp.file_name().unwrap().to_string_lossy().starts_with(TEMP_PREFIX));
    // Locked exclusively while pending: the collector keeps it.
    assert!(!remove_if_unlocked(&temp).unwrap());
    let path = dir.path().join("cd").join("named.bin");
    pending.commit(&path, None).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"named later");
    assert!(!temp.exists());
    // A pending file dropped before commit goes away.
    let (pending, _) = write_temp(dir.path(), None, |out| out.write_all(b"dropped")).unwrap();
    let temp = pending.path().to_path_buf();
    drop(pending);
    assert!(!temp.exists());
    assert_eq!(files_under(dir.path()), ["named.bin"]);
    // The fault of a commit is resolved against the final name.
    let (pending, _) = write_temp(dir.path(), None, |out| out.write_all(b"y")).unwrap();
    let fault = Fault::parse("enospc:0:cd").unwrap();
    pending.commit(&dir.path().join("ef.bin"), Some(&fault)).unwrap();
}

fn temp_file(dir: &Path, name: &str, len: usize, age: Duration) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, vec![0u8; len]).unwrap();
    let file = fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
    path
}

#[test]
fn stale_temps_are_removed_only_when_unlocked_and_old_enough() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("store").join("ab");
    fs::create_dir_all(&sub).unwrap();
    let old = Duration::from_secs(600);
    let dead = temp_file(&sub, ".tmp-dead", 10, old);
    let live = temp_file(&sub, ".tmp-live", 20, old);
    let young = temp_file(&sub, ".tmp-young", 30, Duration::ZERO);
    let final_name = temp_file(&sub, "ab00.npy", 40, old);
    let writer = fs::File::open(&live).unwrap();
    lock::lock_exclusive(&writer).unwrap();
    let sweep = remove_stale_temps(dir.path(), Duration::from_secs(60)).unwrap();
    assert_eq!(sweep.removed, vec![dead.clone()]);
    assert_eq!(sweep.bytes, 10);
    assert!(!dead.exists() && live.exists() && young.exists() && final_name.exists());
    drop(writer);
    let sweep = remove_stale_temps(dir.path(), Duration::ZERO).unwrap();
    assert_eq!(sweep.removed.len(), 2, "{sweep:?}");
    assert_eq!(sweep.bytes, 50);
    assert!(!live.exists() && !young.exists() && final_name.exists(), "only temp files go");
    assert_eq!(remove_stale_temps(&dir.path().join("absent"), Duration::ZERO).unwrap().removed.len(), 0);
}

#[test]
fn a_file_used_in_place_is_never_removed_and_a_removed_one_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernel.so");
    write_atomic(&path, None, |out| out.write_all(b"library")).unwrap();
    let used = lock::open_shared(&path).unwrap();
    assert!(!remove_if_unlocked(&path).unwrap(), "a shared lock keeps it");
    assert!(path.exists());
    drop(used);
    // A process another test of this binary spawns meanwhile holds the descriptor until it execs.
    assert!(gridkey_fs::remove_once_unlocked(&path, std::time::Duration::from_secs(10)).unwrap());
    assert_eq!(lock::open_shared(&path).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    assert!(!remove_if_unlocked(&path).unwrap(), "already gone");
}

#[test]
fn open_shared_refuses_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.npy");
    fs::write(&target, b"x").unwrap();
    let link = dir.path().join("link.npy");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert_eq!(lock::open_shared(&link).unwrap_err().raw_os_error(), Some(libc::ELOOP));
}

#[test]
fn a_file_renamed_over_while_it_is_opened_still_opens_as_the_file_under_the_name() {
    // Concurrent writers of one entry rename identical content over each other.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("entry.npy");
    let bytes = vec![5u8; 64 << 10];
    write_atomic(&path, None, |out| out.write_all(&bytes)).unwrap();
    let stop = AtomicBool::new(false);
    let renames = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                write_atomic(&path, None, |out| out.write_all(&bytes)).unwrap();
                renames.fetch_add(1, Ordering::Relaxed);
            }
        });
        let mut opens = 0;
        while opens < 2000 || renames.load(Ordering::Relaxed) < 200 {
            opens += 1;
            match lock::open_shared(&path) {
                Ok(f) => assert_eq!(f.metadata().unwrap().len(), bytes.len() as u64),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    panic!("open {opens} during a concurrent rename: {e}");
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
}

#[test]
fn a_bad_fault_text_is_an_error_naming_it_and_the_accepted_forms() {
    for (text, why) in [
        ("", "has no `:<argument>`"),
        ("pause", "has no `:<argument>`"),
        ("pause:later", "\"later\" is not a pause point"),
        ("enospc:lots", "\"lots\" is not a byte count"),
        ("enospc:-1", "\"-1\" is not a byte count"),
        ("crash:1", "\"crash\" is not a fault kind"),
        ("pause:synced:", "its path part is empty"),
    ] {
        let err = Fault::parse(text).unwrap_err();
        let FsError::Fault { value, reason } = &err;
        assert_eq!(value, text);
        assert!(reason.contains(why), "{text:?}: {reason}");
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("fault hook {text:?} is not valid: ")), "{msg}");
        assert!(msg.ends_with("or enospc:<bytes>[:<path part>]"), "{msg}");
    }
    assert_eq!("enospc:12".parse::<Fault>().unwrap().kind(), FaultKind::NoSpace(12));
    // The path part is everything after the second colon, colons included.
    assert_eq!(Fault::parse("pause:created:a:b").unwrap().path_part(), Some("a:b"));
}

fn fault_strategy() -> impl Strategy<Value = Fault> {
    let kind = prop_oneof![
        proptest::sample::select(PausePoint::ALL.to_vec()).prop_map(FaultKind::Pause),
        any::<u64>().prop_map(FaultKind::NoSpace),
    ];
    (kind, proptest::option::of("[a-z0-9./:-]{1,12}")).prop_map(|(k, part)| Fault::new(k, part))
}

proptest! {
    /// The text form round-trips: what the binary parses at its edge is the fault a worker gets
    /// back from the text that travelled.
    #[test]
    fn the_text_form_of_every_fault_round_trips(fault in fault_strategy()) {
        prop_assert_eq!(Fault::parse(&fault.to_string()).unwrap(), fault);
    }

    /// A fault applies exactly to the paths that contain its path part.
    #[test]
    fn a_fault_applies_to_the_paths_containing_its_part(
        part in "[a-z.]{1,4}", path in "[a-z./]{0,20}"
    ) {
        let fault = Fault::new(FaultKind::NoSpace(0), Some(part.clone()));
        prop_assert_eq!(fault.applies_to(Path::new(&path)), path.contains(&part));
        prop_assert!(Fault::new(FaultKind::NoSpace(0), None).applies_to(Path::new(&path)));
    }
}

#[test]
fn remove_once_unlocked_waits_out_a_holder_that_lets_go_and_not_one_that_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernel.so");
    write_atomic(&path, None, |out| out.write_all(b"library")).unwrap();
    let kept = lock::open_shared(&path).unwrap();
    assert!(!gridkey_fs::remove_once_unlocked(&path, Duration::from_millis(50)).unwrap(), "a holder that stays");
    assert!(path.exists());
    let letting_go = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(kept);
    });
    assert!(gridkey_fs::remove_once_unlocked(&path, Duration::from_secs(10)).unwrap(), "a holder that lets go");
    letting_go.join().unwrap();
    assert!(!path.exists());
    assert!(!gridkey_fs::remove_once_unlocked(&path, Duration::from_secs(10)).unwrap(), "already gone, at once");
}

#[test]
fn an_atomic_write_makes_the_directories_it_needs_the_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bucket").join("ab").join("entry.bin");
    gridkey_fs::write_atomic(&path, None, |out| io::Write::write_all(out, b"x")).unwrap();
    for made in [dir.path().join("bucket"), dir.path().join("bucket").join("ab")] {
        let mode = std::fs::metadata(&made).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} has mode {mode:o}", made.display());
    }
    // A directory that exists keeps its mode.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    gridkey_fs::create_private_dir_all(&open).unwrap();
    assert_eq!(std::fs::metadata(&open).unwrap().permissions().mode() & 0o777, 0o755);
}
