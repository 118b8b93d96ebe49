//! The filesystem layer never reads the environment: a fault hook set in `GRIDKEY_FAULT` does
//! nothing unless a caller parses it and passes it in. It sets a variable of the test process:
//! no other test of the crate reads `GRIDKEY_FAULT`, and std orders its own environment reads
//! and writes under one lock.

#[test]
fn a_fault_in_the_environment_reaches_no_write() {
    std::env::set_var("GRIDKEY_FAULT", "enospc:0");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("entry.bin");
    gridkey_fs::write_atomic(&path, None, |out| out.write_all(b"written")).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"written");
    let fault = gridkey_fs::Fault::parse(&std::env::var("GRIDKEY_FAULT").unwrap()).unwrap();
    let err = gridkey_fs::write_atomic(&path, Some(&fault), |out| out.write_all(b"x")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
}
