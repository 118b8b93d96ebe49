//! Tables kept unstored (ADR 0053): a canonical runtime table not stored yet is hashed once and
//! kept in place, named by the digest a stored conversion gives it; `store_kept` writes it from
//! those bytes without hashing it again; a table found stored is mapped; any other store, or a
//! table that needs a copy, converts as before. The witness of digests and bytes is the plain
//! conversion (`compile_time_offset_provider`) into a store of its own.

use std::sync::Arc;

use gridkey_offsets::{
    compile_time_offset_provider, CompileTimeTable, Connectivity, ConversionMemo, Dimension, Entry, IndexTable,
    OffsetProvider,
};
use gridkey_store::TableStore;
use ndarray::Array2;

/// The gather `name` from `domain` to `codomain` (local dimension `<name>Dim`) over `table`.
fn gather(name: &str, domain: &str, codomain: &str, skip: Option<i64>, table: IndexTable) -> Entry<Arc<Connectivity>> {
    Entry::Gather(Arc::new(
        Connectivity::from_host(
            Dimension::horizontal(domain),
            Dimension::local(format!("{name}Dim")),
            Dimension::horizontal(codomain),
            skip,
            table,
        )
        .unwrap(),
    ))
}

/// C2E in C order, int32 (kept); E2C as int64 (needs a converting copy: stored at conversion).
fn provider() -> OffsetProvider {
    let c2e = Array2::from_shape_fn((300, 3), |(i, j)| ((i * 3 + j) % 450) as i32);
    let e2c = Array2::from_shape_fn((450, 2), |(i, j)| if j == 1 && i % 7 == 0 { -1 } else { (i % 300) as i64 });
    let mut p = OffsetProvider::new();
    p.push("C2E", gather("C2E", "Cell", "Edge", None, IndexTable::I32(c2e.into_shared()))).unwrap();
    p.push("E2C", gather("E2C", "Edge", "Cell", Some(-1), IndexTable::I64(e2c.into_shared()))).unwrap();
    p
}

fn npy_files(dir: &std::path::Path) -> usize {
    walk(&dir.join("tables-v1")).into_iter().filter(|p| p.extension().is_some_and(|e| e == "npy")).count()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] }).collect()
}

#[test]
fn a_canonical_table_not_stored_is_kept_until_stored_from_the_bytes_hashed_once() {
    let p = provider();
    let witness_dir = tempfile::tempdir().unwrap();
    let witness = compile_time_offset_provider(&p, &TableStore::open(witness_dir.path()).unwrap()).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap().checked_by_readers(true);
    let memo = ConversionMemo::new();
    let ct = memo.provider_unstored(&p, &store).unwrap();
    let (c2e, e2c) = (ct.gather("C2E").unwrap(), ct.gather("E2C").unwrap());
    assert!(!c2e.is_stored() && e2c.is_stored());
    assert_eq!((ct.kept_tables(), npy_files(dir.path())), (1, 1));
    assert!(!c2e.table_path().exists());
    for name in ["C2E", "E2C"] {
        assert_eq!(ct.gather(name).unwrap().spec(), witness.gather(name).unwrap().spec(), "{name}");
    }
    let (CompileTimeTable::I32(kept), CompileTimeTable::I32(want)) =
        (c2e.table(), witness.gather("C2E").unwrap().table())
    else {
        panic!("int32 tables")
    };
    assert_eq!(kept, want);
    c2e.verify().unwrap();
    assert_eq!(memo.stats().tables_hashed, 2);

    // Stored from the kept bytes, hashed nothing more; the file is the witness's.
    let stored = memo.store_kept(&ct, &store).unwrap();
    let now = stored.gather("C2E").unwrap();
    assert!(now.is_stored());
    assert_eq!(stored.kept_tables(), 0);
    assert!(Arc::ptr_eq(stored.gather("E2C").unwrap(), e2c));
    assert_eq!(memo.stats().tables_hashed, 2);
    assert_eq!(
        std::fs::read(now.table_path()).unwrap(),
        std::fs::read(witness.gather("C2E").unwrap().table_path()).unwrap()
    );
    now.verify().unwrap();
    // The memo now gives the stored view, to both conversions.
    assert!(Arc::ptr_eq(memo.provider(&p, &store).unwrap().gather("C2E").unwrap(), now));
    assert!(Arc::ptr_eq(memo.provider_unstored(&p, &store).unwrap().gather("C2E").unwrap(), now));

    // A table found stored is mapped, after its digest alone.
    let again = ConversionMemo::new();
    let found = again.provider_unstored(&p, &store).unwrap();
    assert_eq!(found.kept_tables(), 0);
    assert_eq!(found.gather("C2E").unwrap().table_path(), now.table_path());
    assert_eq!(again.stats().tables_hashed, 2);
}

#[test]
fn the_plain_conversion_stores_what_a_memo_kept_and_other_stores_keep_nothing() {
    let p = provider();
    let dir = tempfile::tempdir().unwrap();
    let trusting = TableStore::open(dir.path()).unwrap().checked_by_readers(true);
    let memo = ConversionMemo::new();
    assert_eq!(memo.provider_unstored(&p, &trusting).unwrap().kept_tables(), 1);
    let plain = memo.provider(&p, &trusting).unwrap();
    assert_eq!((plain.kept_tables(), npy_files(dir.path())), (0, 2));
    assert_eq!(memo.stats().tables_hashed, 2, "stored from the kept bytes");

    // A store that compares or verifies what it finds, or has a site cache, keeps nothing.
    let site = tempfile::tempdir().unwrap();
    for (what, store) in [
        ("comparing", TableStore::open(tempfile::tempdir().unwrap().keep().as_path()).unwrap()),
        (
            "verifying",
            TableStore::open(tempfile::tempdir().unwrap().keep().as_path())
                .unwrap()
                .checked_by_readers(true)
                .verifying(true),
        ),
        (
            "site",
            TableStore::open(tempfile::tempdir().unwrap().keep().as_path())
                .unwrap()
                .checked_by_readers(true)
                .with_site(Some(site.path())),
        ),
    ] {
        let ct = ConversionMemo::new().provider_unstored(&p, &store).unwrap();
        assert_eq!(ct.kept_tables(), 0, "{what}");
        assert_eq!(npy_files(store.cache_dir()), 2, "{what}");
        let _ = std::fs::remove_dir_all(store.cache_dir());
    }
}

#[test]
fn a_file_under_the_name_that_fails_its_open_is_stored_again_not_kept() {
    let p = provider();
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap().checked_by_readers(true);
    let spec = *ConversionMemo::new().provider_unstored(&p, &store).unwrap().gather("C2E").unwrap().spec();
    let path = store.path_of(&spec.digest);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"not a table").unwrap();
    let ct = ConversionMemo::new().provider_unstored(&p, &store).unwrap();
    let c2e = ct.gather("C2E").unwrap();
    assert!(c2e.is_stored());
    c2e.verify().unwrap();
    assert_eq!(c2e.spec(), &spec);
}

/// Three canonical tables, C2E, E2V and V2E, each kept by a trusting store.
fn three_kept() -> OffsetProvider {
    let mut p = OffsetProvider::new();
    for (i, name) in ["C2E", "E2V", "V2E"].iter().enumerate() {
        let t = Array2::from_shape_fn((200 + 50 * i, 3), |(r, c)| ((r * 7 + c * 3 + i) % 180) as i32);
        p.push(*name, gather(name, "A", "B", None, IndexTable::I32(t.into_shared()))).unwrap();
    }
    p
}

/// A table of the batch that cannot be stored (a full disk in its shard directory) fails alone:
/// the tables put before it are committed, mapped and become the memo's views.
#[test]
fn a_kept_table_that_cannot_be_stored_fails_alone_and_those_before_it_are_stored() {
    let p = three_kept();
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap().checked_by_readers(true);
    let memo = ConversionMemo::new();
    let ct = memo.provider_unstored(&p, &store).unwrap();
    assert_eq!(ct.kept_tables(), 3);
    let shard = |name: &str| ct.gather(name).unwrap().digest().to_hex()[..2].to_owned();
    assert_ne!(shard("C2E"), shard("E2V"), "the fault names E2V's shard alone");
    let fault = gridkey_store::Fault::parse(&format!("enospc:0:tables-v1/{}", shard("E2V"))).unwrap();
    let err = memo.store_kept(&ct, &store.clone().with_fault(Some(fault))).unwrap_err();
    assert!(matches!(&err, gridkey_offsets::OffsetsError::Store { offset, .. } if offset == "E2V"), "{err}");
    assert_eq!(npy_files(dir.path()), 1);
    let again = memo.provider_unstored(&p, &store).unwrap();
    assert!(again.gather("C2E").unwrap().is_stored());
    assert!(again.gather("C2E").unwrap().table_path().exists());
    assert_eq!(again.kept_tables(), 2);
}

/// A kept table is checked from memory: bytes changed through a raw pointer (what a kernel
/// handed the runtime table could do) fail `verify` with the digest error, so no translation
/// reads them under the old digest.
#[test]
fn a_kept_table_changed_through_a_pointer_fails_its_check() {
    let t = Array2::from_shape_fn((100, 3), |(r, c)| ((r + c) % 90) as i32).into_shared();
    let pointer = t.as_ptr() as *mut i32;
    let mut p = OffsetProvider::new();
    p.push("C2E", gather("C2E", "A", "B", None, IndexTable::I32(t))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap().checked_by_readers(true);
    let ct = ConversionMemo::new().provider_unstored(&p, &store).unwrap();
    let kept = ct.gather("C2E").unwrap();
    assert!(!kept.is_stored());
    kept.verify().unwrap();
    // SAFETY: the table is alive (the runtime provider holds it) and no reference into it is
    // held across this write; this is the stray write under test.
    unsafe { pointer.add(7).write(89) };
    let err = kept.verify().unwrap_err();
    assert!(matches!(err, gridkey_store::StoreError::Digest { .. }), "{err}");
}
