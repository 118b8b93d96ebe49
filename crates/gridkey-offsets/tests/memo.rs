//! The per-connectivity memo (docs/design.md "Contracts"): converting the same runtime provider again copies and
//! hashes nothing. Alone in its test binary, so the process-wide counters see only this test.

use std::sync::Arc;

use gridkey_offsets::{
    compile_time_offset_provider, conversion_stats, Connectivity, Dimension, Entry, HostCopySource, IndexTable,
    OffsetProvider,
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

    let before = conversion_stats();
    let first = compile_time_offset_provider(&p, &store).unwrap();
    let mid = conversion_stats();
    assert_eq!(copies(&devices), [1, 1, 1], "each table copied to the host once");
    assert_eq!(mid.tables_hashed - before.tables_hashed, 3);
    assert_eq!(mid.bytes_hashed - before.bytes_hashed, ((100 + 101 + 102) * 3 * 4) as u64);

    let second = compile_time_offset_provider(&p, &store).unwrap();
    let after = conversion_stats();
    assert_eq!(copies(&devices), [1, 1, 1], "the second conversion copies nothing");
    assert_eq!(after.tables_hashed, mid.tables_hashed, "and hashes nothing");
    assert_eq!(after.memo_hits - mid.memo_hits, 3);
    for name in ["C2E", "E2C", "V2E"] {
        assert!(
            Arc::ptr_eq(first.gather(name).unwrap(), second.gather(name).unwrap()),
            "{name}: the same view is reused"
        );
    }

    // Another store is another memo entry: the table is converted into it too.
    let other_dir = tempfile::tempdir().unwrap();
    let other = TableStore::open(other_dir.path()).unwrap();
    compile_time_offset_provider(&p, &other).unwrap();
    assert_eq!(copies(&devices), [2, 2, 2]);
}
