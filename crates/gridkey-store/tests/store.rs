//! The table store against real files: round trips, the `.npy` layout NumPy expects, and every
//! kind of bad file giving its typed error (ADR 0002).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use gridkey_digest::{digest_table, Dtype};
use gridkey_store::{StoreError, TableSpec, TableStore, TableView};
use ndarray::{Array2, ShapeBuilder};

fn table(n: usize, k: usize) -> Array2<i32> {
    Array2::from_shape_fn((n, k), |(i, j)| (i * 7 + j * 3) as i32 % 1000 - 1)
}

fn stored(store: &TableStore, t: &Array2<i32>) -> TableSpec {
    let digest = digest_table(t.view());
    store.put_table(digest, t.view()).unwrap();
    TableSpec { digest, dtype: Dtype::I32, shape: [t.nrows(), t.ncols()] }
}

/// Replaces the stored file of `spec` by `bytes` (store files are read-only).
fn overwrite(store: &TableStore, spec: &TableSpec, bytes: &[u8]) {
    let path = store.path_of(&spec.digest);
    let _ = fs::remove_file(&path);
    fs::write(&path, bytes).unwrap();
}

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
    out
}

#[test]
fn round_trip_in_c_order_with_aligned_data_and_read_only_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(1000, 3);
    let spec = stored(&store, &t);
    let path = store.path_of(&spec.digest);
    let hex = spec.digest.to_hex();
    assert!(path.ends_with(format!("tables-v1/{}/{hex}.npy", &hex[..2])), "{}", path.display());
    let bytes = fs::read(&path).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let header_len = bytes.len() - 1000 * 3 * 4;
    assert_eq!(header_len % 64, 0, "data starts at a multiple of 64 bytes");
    let header = String::from_utf8_lossy(&bytes[10..header_len]);
    assert!(
        header.contains("'descr': '<i4'") && header.contains("'fortran_order': False") && header.contains("(1000, 3)"),
        "{header}"
    );
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o222, 0, "stored tables are read-only");
    let mapped = store.open_verified(&spec).unwrap();
    let TableView::I32(v) = mapped.view() else { panic!("int32 table") };
    assert_eq!(v, t.view());
    assert!(files_under(store.dir()).iter().all(|f| !f.starts_with(".tmp-")));
}

#[test]
fn fortran_input_is_stored_in_c_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(50, 4);
    let mut f = Array2::<i32>::zeros((50, 4).f());
    f.assign(&t);
    let digest = digest_table(f.view());
    store.put_table(digest, f.view()).unwrap();
    let spec = TableSpec { digest, dtype: Dtype::I32, shape: [50, 4] };
    let mapped = store.open_verified(&spec).unwrap();
    let TableView::I32(v) = mapped.view() else { panic!("int32 table") };
    assert!(v.is_standard_layout());
    assert_eq!(v, t.view());
}

/// The single place that opens a bad file and checks which error comes back.
fn check_bad(store: &TableStore, spec: &TableSpec, expect: fn(&StoreError) -> bool, what: &str) {
    let err = store.open_table(spec).and_then(|_| store.open_verified(spec)).unwrap_err();
    assert!(expect(&err), "{what}: unexpected error {err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&spec.digest.to_hex()), "{what}: the message names the file: {msg}");
}

#[test]
fn every_kind_of_bad_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(100, 3);
    let spec = stored(&store, &t);
    let good = fs::read(store.path_of(&spec.digest)).unwrap();

    overwrite(&store, &spec, &good[..good.len() - 5]);
    check_bad(&store, &spec, |e| matches!(e, StoreError::Format { .. }), "truncated");

    overwrite(&store, &spec, b"");
    check_bad(&store, &spec, |e| matches!(e, StoreError::Format { .. }), "zero-length");

    let mut tampered = good.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 0x01;
    overwrite(&store, &spec, &tampered);
    assert!(store.open_table(&spec).is_ok(), "a checked open does not read the data");
    check_bad(&store, &spec, |e| matches!(e, StoreError::Digest { .. }), "tampered content");

    // Another dtype under the name: an int64 table of the same shape.
    let other = TableStore::open(&dir.path().join("other")).unwrap();
    let wide = t.mapv(i64::from);
    let wd = digest_table(wide.view());
    other.put_table(wd, wide.view()).unwrap();
    overwrite(&store, &spec, &fs::read(other.path_of(&wd)).unwrap());
    check_bad(&store, &spec, |e| matches!(e, StoreError::Format { .. }), "other dtype");

    // Another shape under the name.
    let small = table(10, 3);
    let sd = digest_table(small.view());
    other.put_table(sd, small.view()).unwrap();
    overwrite(&store, &spec, &fs::read(other.path_of(&sd)).unwrap());
    check_bad(&store, &spec, |e| matches!(e, StoreError::Shape { found: [10, 3], .. }), "other shape");

    // The same dtype and shape in Fortran order: refused, never read as C order.
    let (needle, replacement) = (b"'fortran_order': False", b"'fortran_order': True ");
    let at = good.windows(needle.len()).position(|w| w == needle).expect("a C-order header");
    let mut fortran = good.clone();
    fortran[at..at + needle.len()].copy_from_slice(replacement);
    overwrite(&store, &spec, &fortran);
    check_bad(
        &store,
        &spec,
        |e| matches!(e, StoreError::Format { reason, .. } if reason.contains("fortran_order")),
        "Fortran order",
    );

    // A directory, then a symlink, where the file should be.
    let path = store.path_of(&spec.digest);
    fs::remove_file(&path).unwrap();
    fs::create_dir(&path).unwrap();
    check_bad(&store, &spec, |e| matches!(e, StoreError::NotAFile { .. }), "directory");
    // A put cannot replace the directory, and says what to do about it.
    let put = store.put_table(spec.digest, table(4, 3).view()).unwrap_err().to_string();
    assert!(put.contains("remove the directory in the way") && !put.contains("free space"), "{put}");
    fs::remove_dir(&path).unwrap();
    std::os::unix::fs::symlink(other.path_of(&sd), &path).unwrap();
    check_bad(&store, &spec, |e| matches!(e, StoreError::NotAFile { .. }), "symlink");
    fs::remove_file(&path).unwrap();

    check_bad(&store, &spec, |e| matches!(e, StoreError::Missing { .. }), "missing");
}

/// A valid `.npy` header in another spelling than the store's own (the writer of the file is not
/// the store: other spacing in the dictionary, the same length) is parsed and checked, not
/// compared: the table opens, and a header that says another shape in that spelling is still a
/// shape error.
#[test]
fn a_valid_header_in_another_spelling_is_parsed_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(100, 3);
    let spec = stored(&store, &t);
    let good = fs::read(store.path_of(&spec.digest)).unwrap();
    let respell = |from: &[u8], to: &[u8]| {
        assert_eq!(from.len(), to.len());
        let at = good.windows(from.len()).position(|w| w == from).expect("the store's own header");
        let mut bytes = good.clone();
        bytes[at..at + from.len()].copy_from_slice(to);
        bytes
    };
    overwrite(&store, &spec, &respell(b"'shape': (100, 3)", b"'shape':(100,  3)"));
    let opened = store.open_table(&spec).expect("a valid header in another spelling");
    assert!(opened.verify().is_ok());
    match opened.view() {
        TableView::I32(v) => assert_eq!(v, t.view()),
        TableView::I64(_) => panic!("an int32 table opened as int64"),
    }
    drop(opened);
    overwrite(&store, &spec, &respell(b"'shape': (100, 3)", b"'shape':(150,  2)"));
    check_bad(&store, &spec, |e| matches!(e, StoreError::Shape { found: [150, 2], .. }), "other shape, respelled");
}

#[test]
fn put_replaces_a_bad_file_under_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(100, 3);
    let spec = stored(&store, &t);
    let good = fs::read(store.path_of(&spec.digest)).unwrap();
    overwrite(&store, &spec, &good[..100]);
    store.put_table(spec.digest, t.view()).unwrap();
    store.open_verified(&spec).unwrap();
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(10, 3);
    let spec = TableSpec { digest: digest_table(t.view()), dtype: Dtype::I32, shape: [10, 3] };
    let err = store
        .put_with(&spec, |out| {
            out.write_all(&[0u8; 16])?;
            Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device"))
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::Write { .. }), "{err:?}");
    assert!(err.to_string().contains("no space left"), "{err}");
    let err = store.put_with(&spec, |out| out.write_all(&[0u8; 8])).unwrap_err();
    assert!(err.to_string().contains("header announces"), "{err}");
    assert_eq!(files_under(store.dir()), Vec::<String>::new(), "no temp file, no final file");
}

#[test]
fn a_cache_path_that_is_a_file_is_a_directory_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cache");
    fs::write(&file, b"not a directory").unwrap();
    let err = TableStore::open(&file).unwrap_err();
    assert!(matches!(err, StoreError::Directory { .. }), "{err:?}");
    // The store names the setting by its role; the entry points name their variable.
    assert!(err.to_string().ends_with("point the cache directory at a writable directory"), "{err}");
    assert!(!err.to_string().contains("GRIDKEY_"), "{err}");
}

#[test]
fn numpy_reads_a_stored_table_back_equal() {
    // `cargo xtask test` names the interpreter of its virtual environment and requires numpy.
    let python = std::env::var("GRIDKEY_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let has_numpy = Command::new(&python).args(["-c", "import numpy"]).output().is_ok_and(|o| o.status.success());
    if !has_numpy {
        let required = std::env::var("GRIDKEY_TEST_REQUIRE").is_ok_and(|r| r.split(',').any(|s| s == "numpy"));
        assert!(!required, "numpy is required (GRIDKEY_TEST_REQUIRE) but {python} cannot import it");
        eprintln!(
            "skipped: {python} has no numpy; run `cargo xtask test`, which sets up a virtual environment with it"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    for t in [table(1000, 3), table(0, 6), table(7, 1)] {
        let spec = stored(&store, &t);
        let wide = t.mapv(i64::from);
        let wd = digest_table(wide.view());
        store.put_table(wd, wide.view()).unwrap();
        for (path, dtype) in [(store.path_of(&spec.digest), "int32"), (store.path_of(&wd), "int64")] {
            let script = "import sys, numpy as np\n\
                a = np.load(sys.argv[1], mmap_mode='r')\n\
                print(a.dtype, a.shape[0], a.shape[1], bool(a.flags['C_CONTIGUOUS']), int(a.astype('i8').sum()), ','.join(str(int(x)) for x in a.ravel()[:5]))";
            let out = Command::new(&python).args(["-c", script]).arg(&path).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let first: Vec<String> = t.iter().take(5).map(|x| x.to_string()).collect();
            let expect = format!(
                "{dtype} {} {} True {} {}",
                t.nrows(),
                t.ncols(),
                t.iter().map(|&x| i64::from(x)).sum::<i64>(),
                first.join(",")
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expect.trim());
        }
    }
}

#[test]
fn a_verifying_store_refuses_and_rewrites_a_table_modified_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(100, 3);
    let spec = stored(&store, &t);
    let path = store.path_of(&spec.digest);
    // In place: same inode, one element changed, header intact.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let len = f.metadata().unwrap().len();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(len - 4)).unwrap();
    std::io::Write::write_all(&mut f, &12345i32.to_le_bytes()).unwrap();
    drop(f);
    assert!(store.open_table(&spec).is_ok(), "a checked open trusts the name for the content");
    let verifying = store.clone().verifying(true);
    assert!(verifying.verifies());
    check_bad(&verifying, &spec, |e| matches!(e, StoreError::Digest { .. }), "modified in place");
    verifying.put_table(spec.digest, t.view()).unwrap();
    let mapped = verifying.open_table(&spec).unwrap();
    let TableView::I32(v) = mapped.view() else { panic!("int32 table") };
    assert_eq!(v, t.view(), "the verifying put rewrote the table");
}

#[test]
fn a_mapped_table_is_never_removed_and_a_removed_one_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let spec = stored(&store, &table(50, 2));
    let path = store.path_of(&spec.digest);
    let mapped = store.open_table(&spec).unwrap();
    assert!(!gridkey_fs::remove_if_unlocked(&path).unwrap(), "a mapped table holds a shared lock");
    assert!(path.exists());
    drop(mapped);
    // A process another test of this binary spawns meanwhile holds the descriptor until it execs.
    assert!(gridkey_fs::remove_once_unlocked(&path, std::time::Duration::from_secs(10)).unwrap());
    check_bad(&store, &spec, |e| matches!(e, StoreError::Missing { .. }), "removed");
    assert!(!gridkey_fs::remove_if_unlocked(&path).unwrap(), "already gone");
}

#[test]
fn a_table_renamed_over_while_it_is_opened_still_opens() {
    // Concurrent writers of one table rename identical content over each other.
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(200, 4);
    let spec = stored(&store, &t);
    let path = store.path_of(&spec.digest);
    let bytes = fs::read(&path).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let renames = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                gridkey_fs::write_atomic(&path, None, |out| out.write_all(&bytes)).unwrap();
                renames.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        // Open until the writer has renamed over the file many times.
        let mut opens = 0;
        while opens < 2000 || renames.load(std::sync::atomic::Ordering::Relaxed) < 200 {
            opens += 1;
            if let Err(e) = store.open_table(&spec) {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                panic!("open {opens} during a concurrent rename: {e}");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

proptest::proptest! {
    /// Fuzz target for the `.npy` header parser behind every open: arbitrary bytes, and valid
    /// files with arbitrary bytes overwritten, under a table's name give a typed error or the
    /// right table, never a panic and never a wrong table.
    #[test]
    fn opening_arbitrary_bytes_is_a_typed_error_or_the_right_table(
        noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        at in 0usize..400,
        patch in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..16),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::open(dir.path()).unwrap();
        let t = table(20, 3);
        let spec = stored(&store, &t);
        let good = fs::read(store.path_of(&spec.digest)).unwrap();
        let mut patched = good.clone();
        let at = at % good.len();
        let end = (at + patch.len()).min(good.len());
        patched[at..end].copy_from_slice(&patch[..end - at]);
        let mut prefixed = good[..at.min(128)].to_vec();
        prefixed.extend_from_slice(&noise);
        for bytes in [&noise, &patched, &prefixed] {
            overwrite(&store, &spec, bytes);
            match store.open_verified(&spec) {
                Ok(m) => {
                    let TableView::I32(v) = m.view() else { panic!("int32 table") };
                    proptest::prop_assert_eq!(v, t.view());
                }
                Err(e) => proptest::prop_assert!(e.to_string().contains(&spec.digest.to_hex())),
            }
            let _ = store.open_table(&spec);
        }
    }
}

fn le_bytes(t: &Array2<i32>) -> Vec<u8> {
    t.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Rows of a 4-column int32 table just over [`gridkey_store::CANDIDATE_MIN_BYTES`] (and over
/// one 8 MiB write chunk): `put_slice` looks for a stored file of it before writing.
const LARGE_ROWS: usize = gridkey_store::CANDIDATE_MIN_BYTES / 16 + 4096;

#[test]
fn put_slice_writes_while_hashing_and_the_file_equals_put_table() {
    // Larger than one write chunk (8 MiB), so the digest is known in the middle of the write.
    let t = table(LARGE_ROWS, 4);
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let (spec, path) = store.put_slice(Dtype::I32, [LARGE_ROWS, 4], &le_bytes(&t), || digest_table(t.view())).unwrap();
    assert_eq!(spec, TableSpec { digest: digest_table(t.view()), dtype: Dtype::I32, shape: [LARGE_ROWS, 4] });
    assert_eq!(path, store.path_of(&spec.digest));
    store.open_verified(&spec).expect("the stored bytes have the digest in the name");
    // The same file as the sequential writer, byte for byte.
    let other = tempfile::tempdir().unwrap();
    let reference = TableStore::open(other.path()).unwrap();
    let reference_spec = stored(&reference, &t);
    assert_eq!(fs::read(&path).unwrap(), fs::read(reference.path_of(&reference_spec.digest)).unwrap());
    assert_eq!(files_under(store.dir()), vec![format!("{}.npy", spec.digest)], "no temp file is left");
}

#[test]
fn put_slice_of_a_stored_table_keeps_the_file_and_leaves_no_temp_file() {
    let t = table(600_000, 4);
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let spec = stored(&store, &t);
    let path = store.path_of(&spec.digest);
    let modified = fs::metadata(&path).unwrap().modified().unwrap();
    let (again, again_path) =
        store.put_slice(Dtype::I32, [600_000, 4], &le_bytes(&t), || digest_table(t.view())).unwrap();
    assert_eq!((again, again_path), (spec, path.clone()));
    assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), modified, "the stored file was not rewritten");
    assert_eq!(files_under(store.dir()).len(), 1, "no temp file is left: {:?}", files_under(store.dir()));
}

#[test]
fn a_stored_large_table_is_hashed_and_compared_in_one_pass_and_kept_without_a_temp_file() {
    let t = table(LARGE_ROWS, 4);
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let spec = stored(&store, &t);
    // Another table of the same size in the store, whose first bytes differ: not a candidate.
    stored(&store, &t.mapv(|x| x + 1));
    let path = store.path_of(&spec.digest);
    let modified = fs::metadata(&path).unwrap().modified().unwrap();
    let (again, again_path) = store
        .put_slice(Dtype::I32, [LARGE_ROWS, 4], &le_bytes(&t), || unreachable!("the one pass computes the digest"))
        .unwrap();
    assert_eq!((again, again_path), (spec, path.clone()), "the digest of the one pass is digest_table's");
    assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), modified, "the stored file was not rewritten");
    assert_eq!(files_under(store.dir()).len(), 2, "no temp file: {:?}", files_under(store.dir()));
    assert!(store.repaired().is_empty());
}

#[test]
fn a_large_stored_table_changed_after_its_first_bytes_is_detected_and_replaced() {
    // Same name, size, header and first page as the table: a candidate, compared to the end.
    let t = table(LARGE_ROWS, 4);
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let spec = stored(&store, &t);
    let path = store.path_of(&spec.digest);
    let good = fs::read(&path).unwrap();
    for at in [good.len() - 1, good.len() / 2] {
        let mut tampered = good.clone();
        tampered[at] ^= 0x40;
        overwrite(&store, &spec, &tampered);
        assert!(store.open_table(&spec).is_ok(), "the tampered file passes a checked open");
        let before = store.repaired().len();
        let (again, again_path) =
            store.put_slice(Dtype::I32, [LARGE_ROWS, 4], &le_bytes(&t), || digest_table(t.view())).unwrap();
        assert_eq!((again, &again_path), (spec, &path));
        assert_eq!(fs::read(&path).unwrap(), good, "byte {at}: the file holds the table again");
        store.open_verified(&spec).unwrap();
        assert_eq!(store.repaired()[before..], *std::slice::from_ref(&path), "byte {at}: the replacement is reported");
        assert!(files_under(store.dir()).iter().all(|f| !f.starts_with(".tmp-")));
    }
}

#[test]
fn a_file_with_the_tables_bytes_under_another_name_is_never_taken_for_the_table() {
    // The bytes of `t` planted under the name of `other`: every byte of it equals `t`, but its
    // name is not the digest of `t`, so it is not `t`'s file; `t` is stored under its own name.
    let (t, other) = (table(LARGE_ROWS, 4), table(LARGE_ROWS, 4).mapv(|x| x + 1));
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let other_spec = stored(&store, &other);
    let scratch = tempfile::tempdir().unwrap();
    let source = TableStore::open(scratch.path()).unwrap();
    let t_spec = stored(&source, &t);
    overwrite(&store, &other_spec, &fs::read(source.path_of(&t_spec.digest)).unwrap());
    let (spec, path) = store.put_slice(Dtype::I32, [LARGE_ROWS, 4], &le_bytes(&t), || digest_table(t.view())).unwrap();
    assert_eq!(spec, t_spec);
    assert_eq!(path, store.path_of(&t_spec.digest));
    store.open_verified(&spec).expect("t is under its own name, with its own bytes");
    // And `other`, whose name holds `t`'s bytes, gets its own bytes back.
    store.put_slice(Dtype::I32, [LARGE_ROWS, 4], &le_bytes(&other), || digest_table(other.view())).unwrap();
    store.open_verified(&other_spec).expect("the planted file was replaced");
    assert_eq!(store.repaired(), [store.path_of(&other_spec.digest)]);
}

#[test]
fn put_slice_with_the_wrong_length_is_a_write_error_and_leaves_nothing() {
    let t = table(10, 3);
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let bytes = le_bytes(&t);
    let err = store.put_slice(Dtype::I32, [10, 3], &bytes[..bytes.len() - 4], || digest_table(t.view())).unwrap_err();
    assert!(matches!(err, StoreError::Write { .. }), "{err}");
    assert!(err.to_string().contains("need 120"), "{err}");
    assert!(files_under(store.dir()).is_empty(), "{:?}", files_under(store.dir()));
}

#[test]
fn a_file_under_the_name_with_other_bytes_is_replaced_by_every_put() {
    // Same size, same header, other content: a checked open trusts it, a put must not.
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let (t, other) = (table(1000, 3), table(1000, 3).mapv(|x| x + 1));
    let spec = stored(&store, &t);
    let impostor = TableStore::open(&dir.path().join("impostor")).unwrap();
    let ispec = stored(&impostor, &other);
    let planted = fs::read(impostor.path_of(&ispec.digest)).unwrap();
    let put = |how: &str| match how {
        "put_table" => drop(store.put_table(spec.digest, t.view()).unwrap()),
        _ => drop(store.put_slice(Dtype::I32, [1000, 3], &le_bytes(&t), || digest_table(t.view())).unwrap()),
    };
    let path = store.path_of(&spec.digest);
    for (n, how) in ["put_table", "put_slice"].into_iter().enumerate() {
        overwrite(&store, &spec, &planted);
        assert!(store.open_table(&spec).is_ok(), "the planted file passes a checked open");
        put(how);
        store.open_verified(&spec).unwrap_or_else(|e| panic!("{how}: {e}"));
        assert!(files_under(store.dir()).iter().all(|f| !f.starts_with(".tmp-")), "{how}");
        // Not without a word: the store says which file it replaced, once per replacement.
        assert_eq!(store.repaired(), vec![path.clone(); n + 1], "{how}");
        // The good file is kept as it is, and that is no repair.
        put(how);
        assert_eq!(store.repaired().len(), n + 1, "{how}: a put of a stored table repairs nothing");
    }
}

#[test]
fn a_truncated_file_under_the_name_is_a_repair_and_a_first_store_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(100, 3);
    let spec = stored(&store, &t);
    assert!(store.repaired().is_empty(), "storing a new table repairs nothing");
    let good = fs::read(store.path_of(&spec.digest)).unwrap();
    overwrite(&store, &spec, &good[..100]);
    let clone = store.clone();
    clone.put_slice(Dtype::I32, [100, 3], &le_bytes(&t), || digest_table(t.view())).unwrap();
    assert_eq!(store.repaired(), [store.path_of(&spec.digest)], "clones share what they repaired");
}

#[test]
fn a_store_passes_its_fault_hook_to_every_write_and_a_full_disk_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(300, 4);
    let digest = digest_table(t.view());
    let spec = TableSpec { digest, dtype: Dtype::I32, shape: [300, 4] };
    for hook in ["enospc:100", "enospc:100:tables-v1"] {
        let store = TableStore::open(dir.path()).unwrap().with_fault(Some(gridkey_fs::Fault::parse(hook).unwrap()));
        let err = store.put_table(digest, t.view()).unwrap_err();
        assert!(
            matches!(&err, StoreError::Write { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)),
            "{hook}: {err:?}"
        );
        let err = store.put_slice(Dtype::I32, [300, 4], &le_bytes(&t), || digest).unwrap_err();
        assert!(matches!(&err, StoreError::Write { .. }), "{hook}: {err:?}");
        assert_eq!(files_under(store.dir()), Vec::<String>::new(), "{hook}: no temp file, no final file");
        assert!(matches!(store.open_table(&spec), Err(StoreError::Missing { .. })));
    }
    // A hook for another store's paths leaves this one alone.
    let store =
        TableStore::open(dir.path()).unwrap().with_fault(Some(gridkey_fs::Fault::parse("enospc:0:.bin").unwrap()));
    store.put_table(digest, t.view()).unwrap();
    store.open_verified(&spec).unwrap();
}

/// Every byte of a mapped table's header changed in place, one at a time, at the same size: the
/// mapping's view keeps the data it was checked with (never a panic), and `verify` reports the
/// change as a typed error naming the file, so the run that holds it repairs it (ADR 0024).
#[test]
fn a_header_changed_in_place_under_a_mapping_is_a_typed_error_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(100, 3);
    let spec = stored(&store, &t);
    let path = store.path_of(&spec.digest);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let header_len = fs::metadata(&path).unwrap().len() as usize - t.len() * 4;
    for at in 0..header_len {
        let mapped = store.open_table(&spec).unwrap();
        let good = fs::read(&path).unwrap();
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        // In place: the same inode, so the mapping sees it.
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &bad))
            .unwrap();
        let TableView::I32(v) = mapped.view() else { panic!("int32 table") };
        assert_eq!(v, t.view(), "byte {at}: the view is the data checked when mapped");
        match mapped.verify() {
            Err(e @ StoreError::Format { .. }) => assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}"),
            other => panic!("byte {at}: verify gave {other:?}"),
        }
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &good))
            .unwrap();
        assert!(mapped.verify().is_ok(), "byte {at}: restored");
    }
}

/// ADR 0028: a store checked by its readers keeps a file under the name after the checked open
/// alone (whatever its bytes), for tables under and over the candidate threshold, and one that
/// also verifies rewrites it; a file of the table's size and first bytes under another name is
/// never taken for the table.
#[test]
fn a_store_checked_by_readers_keeps_the_file_under_the_name_and_a_verifying_one_rewrites_it() {
    for rows in [1000, LARGE_ROWS] {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::open(dir.path()).unwrap().checked_by_readers(true);
        assert!(store.trusts_names() && !store.clone().verifying(true).trusts_names());
        let t = table(rows, 4);
        let mut other = t.clone();
        other[[rows - 1, 3]] += 1; // the same first bytes, another table
        let spec = stored(&store, &t);
        let ospec = stored(&TableStore::open(&dir.path().join("other")).unwrap(), &other);
        let planted = fs::read(TableStore::open(&dir.path().join("other")).unwrap().path_of(&ospec.digest)).unwrap();
        overwrite(&store, &spec, &planted);
        let bytes = le_bytes(&t);
        let (got, _) = store.put_slice(Dtype::I32, [rows, 4], &bytes, || digest_table(t.view())).unwrap();
        assert_eq!(got, spec, "{rows} rows");
        assert!(matches!(store.open_verified(&spec), Err(StoreError::Digest { .. })), "{rows} rows: kept as found");
        assert!(store.repaired().is_empty(), "{rows} rows");
        store.put_table(spec.digest, t.view()).unwrap();
        assert!(store.open_verified(&spec).is_err(), "{rows} rows: put_table keeps it too");
        // A verifying put rewrites it, and says so.
        let verifying = store.clone().verifying(true);
        verifying.put_slice(Dtype::I32, [rows, 4], &bytes, || digest_table(t.view())).unwrap();
        store.open_verified(&spec).unwrap_or_else(|e| panic!("{rows} rows: {e}"));
        assert_eq!(store.repaired(), [store.path_of(&spec.digest)], "{rows} rows");
        // `other`, whose first bytes and size are `t`'s, is stored under its own name.
        let (got, path) =
            store.put_slice(Dtype::I32, [rows, 4], &le_bytes(&other), || digest_table(other.view())).unwrap();
        assert_eq!((got, path), (ospec, store.path_of(&ospec.digest)));
        store.open_verified(&ospec).unwrap();
        assert!(files_under(store.dir()).iter().all(|f| !f.starts_with(".tmp-")), "{rows} rows");
    }
}

/// A table source whose bytes change while it is read: every piece it feeds is the table with
/// one more element incremented, as another thread writing the array would make it.
struct Shifting {
    base: Vec<u8>,
    reads: std::sync::atomic::AtomicU32,
}

impl Shifting {
    fn new(t: &Array2<i32>) -> Self {
        Self { base: le_bytes(t), reads: Default::default() }
    }
}

impl gridkey_store::TableBytes for Shifting {
    fn feed(&self, sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
        // Each piece is taken from a fresh state of the table, so no two reads agree.
        for (i, piece) in self.base.chunks(100_000).enumerate() {
            let n = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut changed = piece.to_vec();
            changed[(n as usize * 4) % piece.len()] ^= 1 + (i as u8);
            sink(&changed)?;
        }
        Ok(())
    }
}

/// The digest the stored file of `spec` has, recomputed from the file.
fn file_digest(store: &TableStore, spec: &TableSpec) -> gridkey_digest::TableDigest {
    let mapped = store.open_table(spec).unwrap();
    let TableView::I32(view) = mapped.view() else { panic!("stored as int32") };
    digest_table(view)
}

#[test]
fn put_blocks_stores_the_bytes_its_name_was_computed_from_while_the_source_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    // Below and above the size at which a stored file is looked for by its first bytes.
    for t in [table(1000, 3), table(1_500_000, 3)] {
        let source = Shifting::new(&t);
        for _ in 0..3 {
            let (spec, path) = store.put_blocks(Dtype::I32, [t.nrows(), t.ncols()], &source).unwrap();
            assert_eq!(path, store.path_of(&spec.digest));
            assert_eq!(file_digest(&store, &spec), spec.digest, "{}", path.display());
        }
        // A source that does not change is found stored and kept, its file untouched.
        let (spec, _) = store.put_blocks(Dtype::I32, [t.nrows(), t.ncols()], &le_bytes(&t)).unwrap();
        assert_eq!(spec.digest, digest_table(t.view()));
        let again = store.put_blocks(Dtype::I32, [t.nrows(), t.ncols()], &le_bytes(&t)).unwrap();
        assert_eq!(again.0, spec);
    }
    assert!(store.repaired().is_empty());
    assert!(!files_under(dir.path()).iter().any(|f| f.starts_with(".tmp")));
}

/// A source that fails after `after` bytes, as the Python package's does on Ctrl-C.
struct Failing {
    base: Vec<u8>,
    after: usize,
}

impl gridkey_store::TableBytes for Failing {
    fn feed(&self, sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
        sink(&self.base[..self.after])?;
        Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "stopped"))
    }
}

#[test]
fn put_blocks_of_a_failing_or_short_source_is_a_temp_write_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    // Below the candidate size (copied whole, then written) and above it (streamed).
    for (t, after) in [(table(1000, 3), 5000), (table(1_500_000, 3), 5 << 20)] {
        let failing = Failing { base: le_bytes(&t), after };
        let err = store.put_blocks(Dtype::I32, [t.nrows(), t.ncols()], &failing).unwrap_err();
        assert!(
            matches!(&err, StoreError::WriteTemp { source, .. } if source.kind() == std::io::ErrorKind::Interrupted),
            "{err}"
        );
        let data = le_bytes(&t);
        for wrong in [[t.nrows(), t.ncols() + 1], [t.nrows(), t.ncols() - 1]] {
            let err = store.put_blocks(Dtype::I32, wrong, &data).unwrap_err();
            assert!(matches!(&err, StoreError::WriteTemp { .. }), "{err}");
            assert!(err.to_string().contains("need") && !err.to_string().ends_with('.'), "{err}");
        }
    }
    assert_eq!(files_under(dir.path()), Vec::<String>::new());
}

/// A source that counts how often it is read.
struct Counted {
    base: Vec<u8>,
    reads: std::sync::atomic::AtomicU32,
}

impl gridkey_store::TableBytes for Counted {
    fn feed(&self, sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.base.chunks(70_000).try_for_each(sink)
    }
}

#[test]
fn a_table_under_the_candidate_size_is_read_once_whether_new_or_stored_before() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(20_000, 4);
    let source = Counted { base: le_bytes(&t), reads: Default::default() };
    for round in 1..=3 {
        let (spec, path) = store.put_blocks(Dtype::I32, [t.nrows(), t.ncols()], &source).unwrap();
        assert_eq!(spec.digest, digest_table(t.view()), "the witness digest");
        assert_eq!(file_digest(&store, &spec), spec.digest, "{}", path.display());
        assert_eq!(source.reads.load(std::sync::atomic::Ordering::SeqCst), round, "one read per put");
    }
    // A file planted under the name with other bytes is compared, found different and replaced.
    let path = store.path_of(&digest_table(t.view()));
    let mut planted = std::fs::read(&path).unwrap();
    let last = planted.len() - 1;
    planted[last] ^= 0x40;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, &planted).unwrap();
    let (spec, _) = store.put_blocks(Dtype::I32, [t.nrows(), t.ncols()], &source).unwrap();
    assert_eq!(file_digest(&store, &spec), spec.digest);
    assert_eq!(store.repaired().len(), 1, "the planted file is named as repaired");
}

/// A stored table truncated in place (the same inode) while it is mapped: `verify` reads the file
/// through `pread` and says it is truncated, where a read of the mapping would end this process
/// with `SIGBUS` (ADR 0034); a new open is a format error naming the file, and a put rewrites it.
#[test]
fn a_table_truncated_while_mapped_is_an_error_of_verify_and_of_open() {
    let t = table(100_000, 3);
    for keep in [0usize, 600_000] {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::open(dir.path()).unwrap();
        let spec = stored(&store, &t);
        let path = store.path_of(&spec.digest);
        let mapped = store.open_table(&spec).unwrap();
        mapped.verify().unwrap();
        let len = fs::metadata(&path).unwrap().len();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(keep as u64).unwrap();
        match mapped.verify() {
            Err(StoreError::Truncated { path: p, expected, found }) => {
                assert_eq!((p, expected, found), (path.clone(), len, keep as u64), "keep {keep}");
            }
            other => panic!("keep {keep}: {other:?}"),
        }
        let message = mapped.verify().unwrap_err().to_string();
        assert!(message.contains(&path.display().to_string()) && message.ends_with("so it is rebuilt"), "{message}");
        assert!(
            matches!(store.open_table(&spec), Err(StoreError::Format { path: ref p, .. }) if *p == path),
            "keep {keep}: a new open of the cut file is a format error naming it"
        );
        store.put_table(spec.digest, t.view()).unwrap();
        assert_eq!(store.repaired(), vec![path.clone()], "keep {keep}");
        store.clone().verifying(true).open_table(&spec).unwrap();
    }
}

#[test]
fn a_site_table_is_verified_before_use_and_a_bad_one_is_stored_here() {
    // A site cache with two tables, one of them changed in place after it was stored (ADR 0036).
    let site = tempfile::tempdir().unwrap();
    let filler = TableStore::open(site.path()).unwrap();
    let (good, bad) = (table(500, 3), table(400, 4));
    let good_spec = stored(&filler, &good);
    let bad_spec = stored(&filler, &bad);
    let mut changed = fs::read(filler.path_of(&bad_spec.digest)).unwrap();
    let last = changed.len() - 1;
    changed[last] ^= 0x10;
    overwrite(&filler, &bad_spec, &changed);
    let site_files = |dir: &Path| {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        for name in files_under(&dir.join("tables-v1")) {
            let hex = name.trim_end_matches(".npy");
            files.push((name.clone(), fs::read(dir.join("tables-v1").join(&hex[..2]).join(&name)).unwrap()));
        }
        files.sort();
        files
    };
    let before = site_files(site.path());

    let local = tempfile::tempdir().unwrap();
    let store = TableStore::open(local.path()).unwrap().with_site(Some(site.path())).checked_by_readers(true);
    // The good table is opened in the site cache and put there already: nothing is written here.
    let mapped = store.open_table(&good_spec).unwrap();
    assert_eq!(mapped.path(), filler.path_of(&good_spec.digest));
    let TableView::I32(view) = mapped.view() else { panic!("opened as int32") };
    assert_eq!(view, good);
    stored(&store, &good);
    assert!(files_under(store.dir()).is_empty(), "a table the site has is not stored here");

    // The changed one fails its digest there, even on a store that trusts names, and a put
    // stores the table here, where the next open finds it.
    assert!(matches!(store.open_table(&bad_spec), Err(StoreError::Digest { .. })));
    stored(&store, &bad);
    let mapped = store.open_table(&bad_spec).unwrap();
    assert_eq!(mapped.path(), store.path_of(&bad_spec.digest));
    mapped.verify().unwrap();
    assert_eq!(site_files(site.path()), before, "nothing written to the site cache");

    // A table in neither is the local store's Missing error.
    let other = TableSpec { digest: digest_table(table(3, 3).view()), dtype: Dtype::I32, shape: [3, 3] };
    match store.open_table(&other) {
        Err(StoreError::Missing { path, .. }) => assert_eq!(path, store.path_of(&other.digest)),
        r => panic!("expected Missing, got {r:?}"),
    }
}

/// Temp files (`.tmp-*`) and table files under `dir`.
fn temps_and_tables(dir: &Path) -> (usize, usize) {
    let names = files_under(dir);
    let temps = names.iter().filter(|n| n.starts_with(gridkey_fs::TEMP_PREFIX)).count();
    (temps, names.len() - temps)
}

#[test]
fn a_deferring_store_names_no_table_before_its_batch_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let batch = store.deferring();
    let tables: Vec<Array2<i32>> = (1..4).map(|n| table(40 * n, 3)).collect();
    let specs: Vec<TableSpec> = tables.iter().map(|t| stored(&batch, t)).collect();
    // Written to temp files, none under its name yet, none visible to an open.
    assert_eq!(temps_and_tables(store.dir()), (3, 0));
    assert!(specs.iter().all(|s| matches!(store.open_table(s), Err(StoreError::Missing { .. }))));
    let committed = batch.commit_deferred();
    assert_eq!(committed.iter().map(|(s, _)| *s).collect::<Vec<_>>(), specs, "in the order of the puts");
    for ((spec, result), t) in committed.iter().zip(&tables) {
        assert_eq!(result.as_ref().unwrap(), &store.path_of(&spec.digest));
        let opened = store.open_verified(spec).unwrap();
        assert!(matches!(opened.view(), TableView::I32(v) if v == t.view()));
        assert!(fs::metadata(opened.path()).unwrap().permissions().readonly());
    }
    assert_eq!(temps_and_tables(store.dir()), (0, 3));
    // A table stored before defers nothing: it is found, and the next commit is empty.
    stored(&batch, &tables[0]);
    assert!(batch.commit_deferred().is_empty());
    assert!(store.commit_deferred().is_empty(), "a store that does not defer has nothing to commit");
}

#[test]
fn a_deferring_store_dropped_before_its_commit_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let batch = store.deferring();
    let spec = stored(&batch, &table(50, 4));
    assert_eq!(temps_and_tables(store.dir()), (1, 0));
    drop(batch);
    assert_eq!(temps_and_tables(store.dir()), (0, 0));
    assert!(matches!(store.open_table(&spec), Err(StoreError::Missing { .. })));
}

/// The copy and compare buffers a thread keeps from one put to the next carry nothing from one
/// table to the next: small tables put by `put_blocks` one after the other in one thread, larger
/// then smaller (a shorter table over the bytes of a longer one) and each stored file tampered
/// once in its last byte, are each stored under the digest of their own bytes, the tampered file
/// is found and replaced, and a larger table than a thread keeps is stored as well.
#[test]
fn tables_put_one_after_the_other_in_a_thread_are_each_stored_and_compared_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    // 1.2 MB, 12 kB, 240 kB, 4 kB and 4.8 MB (over the 4 MiB a thread keeps) of element data.
    let tables = [table(100_000, 3), table(1000, 3), table(20_000, 3), table(1000, 1), table(400_000, 3)];
    let mut repaired = 0;
    for round in 0..2 {
        for t in &tables {
            let shape = [t.nrows(), t.ncols()];
            let (spec, path) = store.put_blocks(Dtype::I32, shape, &le_bytes(t)).unwrap();
            assert_eq!(spec.digest, digest_table(t.view()), "round {round}, {shape:?}");
            assert_eq!(file_digest(&store, &spec), spec.digest, "round {round}: {}", path.display());
            if round == 0 {
                // The last element changed under the name: only a compare of the whole table sees it.
                let mut tampered = fs::read(&path).unwrap();
                *tampered.last_mut().unwrap() ^= 0x01;
                overwrite(&store, &spec, &tampered);
                repaired += 1;
            }
        }
    }
    assert_eq!(store.repaired().len(), repaired, "every tampered file was replaced: {:?}", store.repaired());
}
