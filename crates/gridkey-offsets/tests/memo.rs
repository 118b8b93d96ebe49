//! The per-connectivity memo (docs/design.md "Contracts"): converting the same runtime provider again through the
//! same memo copies and hashes nothing. The memo and its counters are the test's own value, so the other tests of
//! this binary, converting at the same time, move none of them.

use std::sync::Arc;

use gridkey_offsets::{
    compile_time_offset_provider, Connectivity, ConversionMemo, ConversionStats, Dimension, Entry, HostCopySource,
    IndexTable, OffsetProvider,
};
use gridkey_store::TableStore;
use ndarray::Array2;

#[test]
fn converting_the_same_provider_twice_copies_and_hashes_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let mut p = OffsetProvider::new();
    let mut devices: Vec<Arc<HostCopySource>> = Vec::new();
    for (i, name) in ["C2E", "E2C", "V2E"].iter().enumerate() {
        let t = Array2::from_shape_fn((100 + i, 3), |(r, c)| (r * 3 + c + i) as i32);
        let device = Arc::new(HostCopySource::new(IndexTable::I32(t.into_shared())));
        let c = Arc::new(
            Connectivity::new(
                Dimension::horizontal("Cell"),
                Dimension::local(format!("{name}Dim")),
                Dimension::horizontal("Edge"),
                None,
                device.clone(),
            )
            .unwrap(),
        );
        devices.push(device);
        p.push(*name, Entry::Gather(c)).unwrap();
    }
    let copies = |devices: &[Arc<HostCopySource>]| -> Vec<u64> { devices.iter().map(|d| d.copies()).collect() };

    let memo = ConversionMemo::new();
    let first = memo.provider(&p, &store).unwrap();
    let table_bytes = ((100 + 101 + 102) * 3 * 4) as u64;
    assert_eq!(copies(&devices), [1, 1, 1], "each table copied to the host once");
    assert_eq!(memo.stats(), ConversionStats { tables_hashed: 3, bytes_hashed: table_bytes, memo_hits: 0 });

    let second = memo.provider(&p, &store).unwrap();
    assert_eq!(copies(&devices), [1, 1, 1], "the second conversion copies nothing");
    assert_eq!(memo.stats(), ConversionStats { tables_hashed: 3, bytes_hashed: table_bytes, memo_hits: 3 });
    for name in ["C2E", "E2C", "V2E"] {
        assert!(
            Arc::ptr_eq(first.gather(name).unwrap(), second.gather(name).unwrap()),
            "{name}: the same view is reused"
        );
    }

    // Another memo has its own entries and counts: it converts the tables again, and this
    // memo's counts do not move.
    let other_memo = ConversionMemo::new();
    let third = other_memo.provider(&p, &store).unwrap();
    assert_eq!(copies(&devices), [2, 2, 2]);
    assert_eq!(other_memo.stats(), ConversionStats { tables_hashed: 3, bytes_hashed: table_bytes, memo_hits: 0 });
    assert_eq!(memo.stats().tables_hashed, 3);
    assert!(!Arc::ptr_eq(first.gather("C2E").unwrap(), third.gather("C2E").unwrap()));

    // Another store is another memo entry: the table is converted into it too.
    let other_dir = tempfile::tempdir().unwrap();
    let other = TableStore::open(other_dir.path()).unwrap();
    memo.provider(&p, &other).unwrap();
    assert_eq!(copies(&devices), [3, 3, 3]);
    assert_eq!(memo.stats().tables_hashed, 6);

    // The free function holds no memo: each call copies again.
    compile_time_offset_provider(&p, &store).unwrap();
    assert_eq!(copies(&devices), [4, 4, 4]);
}
