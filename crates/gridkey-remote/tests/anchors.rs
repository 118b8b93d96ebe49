//! Trust anchors (the trusted keys, the signing key, the CA file) are checked like an ssh key
//! (ADR 0031): symlinks resolved, the file and every directory on the resolved path owned by this
//! user or root and writable by no one else, a shared sticky directory such as `/tmp` refused as
//! the file's own directory. No server needed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gridkey_remote::{trust, RemoteError};

/// A trusted-keys file with one good key, in `dir`, with `mode`.
fn keys_file(dir: &Path, name: &str, mode: u32) -> PathBuf {
    let dir_of_key = tempfile::tempdir().unwrap();
    let public = trust::generate_signing_key(&dir_of_key.path().join("k")).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("{public} writer\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// The error of loading `path` as trusted keys, which must be [`RemoteError::UnsafeAnchor`] whose
/// problem names `component` and contains `says`.
fn check_refused(path: &Path, component: &Path, says: &str) {
    match trust::load_trusted_keys(path) {
        Err(e @ RemoteError::UnsafeAnchor { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&path.display().to_string()), "names the file: {text}");
            assert!(text.contains(&component.display().to_string()), "names {}: {text}", component.display());
            assert!(text.contains(says), "says {says:?}: {text}");
            assert!(!text.ends_with('.'), "{text}");
        }
        other => panic!("{}: {other:?}", path.display()),
    }
}

#[test]
fn a_private_trusted_keys_file_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = keys_file(dir.path(), "trusted", 0o644);
    assert_eq!(trust::load_trusted_keys(&path).unwrap().len(), 1);
    // Through a symlink of its own directory to it, too.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert_eq!(trust::load_trusted_keys(&link).unwrap().len(), 1);
}

#[test]
fn a_trusted_keys_file_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for mode in [0o666, 0o646, 0o664] {
        let path = keys_file(dir.path(), &format!("trusted-{mode:o}"), mode);
        check_refused(&path, &path, "writable by group or others");
    }
}

#[test]
fn a_trusted_keys_file_in_a_directory_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let path = keys_file(&shared, "trusted", 0o644);
    for mode in [0o777, 0o775, 0o1777] {
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(mode)).unwrap();
        check_refused(&path, &shared, "writable by group or others");
    }
}

#[test]
fn a_symlink_into_tmp_is_refused() {
    // The link is in a private directory; what it points to sits in /tmp, a world-writable
    // sticky directory, where anyone could have made the file before it was written.
    let dir = tempfile::tempdir().unwrap();
    let tmp = Path::new("/tmp");
    let target = keys_file(tmp, &format!("gridkey-anchor-test-{}", std::process::id()), 0o644);
    let link = dir.path().join("trusted");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let refused = std::panic::catch_unwind(|| check_refused(&link, tmp, "sticky directory"));
    std::fs::remove_file(&target).unwrap();
    refused.unwrap();
}

#[test]
fn a_trusted_keys_file_of_another_user_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = keys_file(dir.path(), "trusted", 0o644);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Only root can give a file away; as another user, an own file is all there is.
        assert_eq!(trust::load_trusted_keys(&path).unwrap().len(), 1);
        return;
    }
    std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
    check_refused(&path, &path, "owned by user 65534");
}

#[test]
fn the_signing_key_and_the_ca_file_are_anchors_too() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let key = shared.join("writer.key");
    trust::generate_signing_key(&key).unwrap();
    assert!(trust::load_signing_key(&key).is_ok());
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(trust::load_signing_key(&key), Err(RemoteError::UnsafeAnchor { what: "signing key", .. })));
    let ca = shared.join("ca.pem");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
    assert!(matches!(trust::check_anchor(&ca, "CA"), Err(RemoteError::UnsafeAnchor { what: "CA", .. })));
}

#[test]
fn a_new_signing_key_never_replaces_a_file_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("writer.key");
    trust::generate_signing_key(&key).unwrap();
    let before = std::fs::read(&key).unwrap();
    match trust::generate_signing_key(&key) {
        Err(e @ RemoteError::NewKeyFile { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&key.display().to_string()) && text.contains("never replaced"), "{text}");
            assert!(!text.contains("cannot read") && !text.contains("trusted keys"), "{text}");
        }
        other => panic!("expected NewKeyFile, got {other:?}"),
    }
    assert_eq!(std::fs::read(&key).unwrap(), before, "the existing key is left as it was");
    let missing_dir = dir.path().join("no-such-dir").join("writer.key");
    assert!(matches!(
        trust::generate_signing_key(&missing_dir),
        Err(RemoteError::NewKeyFile { fix, .. }) if fix.contains("directory you can write")
    ));
}
