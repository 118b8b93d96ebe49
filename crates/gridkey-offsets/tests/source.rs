//! Table sources defined outside this crate (ADR 0006): a device-like source is copied to the
//! host once and converts to the same table as the host original; a failed copy fails that
//! conversion only, names the offset and memoises nothing; a copy that is not what its source
//! declared is refused; plain vectors build tables, and a wrong length is an error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gridkey_digest::digest_table;
use gridkey_offsets::{
    compile_time_offset_provider, Connectivity, ConversionMemo, CopyError, Dimension, Dtype, Entry, IndexTable,
    OffsetProvider, OffsetsError, TableSource,
};
use gridkey_store::TableStore;
use ndarray::Array2;

/// A table behind a transfer that may fail: the first `failures` copies fail, later ones
/// succeed; every attempt is counted. `lie` makes the copy one row short of what it declares.
#[derive(Debug)]
struct Device {
    rows: usize,
    cols: usize,
    elements: Vec<i64>,
    failures: u64,
    lie: bool,
    attempts: AtomicU64,
}

impl Device {
    fn new(t: &Array2<i32>, failures: u64) -> Arc<Self> {
        Arc::new(Self {
            rows: t.nrows(),
            cols: t.ncols(),
            elements: t.iter().map(|&x| i64::from(x)).collect(),
            failures,
            lie: false,
            attempts: AtomicU64::new(0),
        })
    }

    fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::SeqCst)
    }
}

impl TableSource for Device {
    fn dtype(&self) -> Dtype {
        Dtype::I64
    }

    fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    fn copy_to_host(&self) -> Result<IndexTable, CopyError> {
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst);
        if attempt < self.failures {
            return Err("device 3: an illegal memory access was encountered".into());
        }
        if self.lie {
            let short = self.elements[..(self.rows - 1) * self.cols].to_vec();
            return Ok(IndexTable::from_vec_i64(self.rows - 1, self.cols, short)?);
        }
        Ok(IndexTable::from_vec_i64(self.rows, self.cols, self.elements.clone())?)
    }
}

/// A host table whose copy must never be taken: conversion reads it in place.
#[derive(Debug)]
struct InPlace(IndexTable, AtomicU64);

impl TableSource for InPlace {
    fn dtype(&self) -> Dtype {
        self.0.dtype()
    }

    fn shape(&self) -> [usize; 2] {
        self.0.shape()
    }

    fn host(&self) -> Option<&IndexTable> {
        Some(&self.0)
    }

    fn copy_to_host(&self) -> Result<IndexTable, CopyError> {
        self.1.fetch_add(1, Ordering::SeqCst);
        Err("a host table is read in place".into())
    }
}

fn conn(source: Arc<dyn TableSource>) -> Arc<Connectivity> {
    Arc::new(
        Connectivity::new(
            Dimension::horizontal("Cell"),
            Dimension::local("C2EDim"),
            Dimension::horizontal("Edge"),
            Some(-1),
            source,
        )
        .unwrap(),
    )
}

fn table(seed: i32) -> Array2<i32> {
    Array2::from_shape_fn((7, 3), |(r, c)| (r as i32 * 3 + c as i32 + seed) % 11)
}

fn provider(entries: &[(&str, &Arc<Connectivity>)]) -> OffsetProvider {
    let mut p = OffsetProvider::new();
    for (name, c) in entries {
        p.push(*name, Entry::Gather(Arc::clone(c))).unwrap();
    }
    p
}

#[test]
fn a_user_defined_device_source_is_copied_once_and_converts_to_the_host_table() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(0);
    let device = Device::new(&t, 0);
    let c = conn(device.clone());
    assert_eq!((c.dtype(), c.shape()), (Dtype::I64, [7, 3]), "metadata, no copy");
    assert_eq!(device.attempts(), 0);
    let p = provider(&[("C2E", &c)]);
    let memo = ConversionMemo::new();
    let first = memo.provider(&p, &store).unwrap();
    let second = memo.provider(&p, &store).unwrap();
    assert_eq!(device.attempts(), 1, "one copy, then the memo");
    let ct = first.gather("C2E").unwrap();
    assert!(Arc::ptr_eq(ct, second.gather("C2E").unwrap()));
    // int64 whose indices fit: the canonical int32 table of the host original (ADR 0006).
    assert_eq!((ct.dtype(), ct.digest()), (Dtype::I32, digest_table(t.view())));
}

#[test]
fn a_source_readable_in_place_is_never_copied() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(4);
    let source = Arc::new(InPlace(IndexTable::I32(t.clone().into_shared()), AtomicU64::new(0)));
    let c = conn(source.clone());
    let ct = compile_time_offset_provider(&provider(&[("C2E", &c)]), &store).unwrap();
    assert_eq!(ct.gather("C2E").unwrap().digest(), digest_table(t.view()));
    assert!(matches!(c.host_table("C2E").unwrap(), IndexTable::I32(a) if a == t));
    assert_eq!(source.1.load(Ordering::SeqCst), 0);
}

#[test]
fn a_failed_copy_fails_that_conversion_only_and_names_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let good = conn(Device::new(&table(1), 0));
    let flaky_device = Device::new(&table(2), 1);
    let flaky = conn(flaky_device.clone());

    let memo = ConversionMemo::new();
    let err = memo.provider(&provider(&[("C2E", &good), ("E2C", &flaky)]), &store).unwrap_err();
    assert!(matches!(&err, OffsetsError::HostCopy { offset, .. } if offset == "E2C"), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "offset E2C: copying its neighbour table to the host failed: device 3: an illegal memory access"
        ),
        "{msg}"
    );
    assert!(msg.contains("convert again") && !msg.ends_with('.'), "{msg}");

    // The other connectivity converted, and converting it again is a memo hit.
    let alone = memo.provider(&provider(&[("C2E", &good)]), &store).unwrap();
    assert_eq!(alone.gather("C2E").unwrap().digest(), digest_table(table(1).view()));
    assert_eq!(memo.stats().memo_hits, 1);

    // The failure was not memoised: the next conversion copies again and succeeds.
    let again = memo.provider(&provider(&[("C2E", &good), ("E2C", &flaky)]), &store).unwrap();
    assert_eq!(flaky_device.attempts(), 2);
    assert_eq!(again.gather("E2C").unwrap().digest(), digest_table(table(2).view()));
}

#[test]
fn a_copy_that_is_not_what_its_source_declares_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = table(3);
    let liar = Arc::new(Device {
        rows: 7,
        cols: 3,
        elements: t.iter().map(|&x| i64::from(x)).collect(),
        failures: 0,
        lie: true,
        attempts: AtomicU64::new(0),
    });
    let c = conn(liar);
    let err = compile_time_offset_provider(&provider(&[("V2E", &c)]), &store).unwrap_err();
    assert!(
        matches!(&err, OffsetsError::HostCopyShape { offset, shape: [7, 3], found_shape: [6, 3], .. } if offset == "V2E"),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("offset V2E:"), "{err}");
    assert!(std::fs::read_dir(store.dir()).map_or(true, |mut d| d.next().is_none()), "nothing stored");
}

#[test]
fn plain_vectors_build_tables_in_c_order_and_a_wrong_length_is_an_error() {
    let IndexTable::I32(a) = IndexTable::from_vec_i32(2, 3, vec![0, 1, 2, 3, 4, 5]).unwrap() else { unreachable!() };
    assert_eq!(a, Array2::from_shape_fn((2, 3), |(r, c)| (r * 3 + c) as i32));
    let IndexTable::I64(b) = IndexTable::from_vec_i64(3, 1, vec![7, -1, 9]).unwrap() else { unreachable!() };
    assert_eq!(b.column(0).to_vec(), [7, -1, 9]);
    let err = IndexTable::from_vec_i32(4, 3, vec![0; 11]).unwrap_err();
    assert!(matches!(err, OffsetsError::TableLength { rows: 4, cols: 3, len: 11 }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "a neighbour table of shape (4, 3) needs 12 elements, but the vector has 11; pass rows * cols elements in C order"
    );
    assert!(IndexTable::from_vec_i64(0, 3, Vec::new()).is_ok());
    // The re-exported ndarray is the one the tables are made of.
    let _: gridkey_offsets::ndarray::ArcArray2<i32> = a;
}

#[test]
fn a_provider_stores_its_new_tables_as_one_batch_and_each_connectivity_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let (a, b) = (Device::new(&table(4), 0), Device::new(&table(5), 0));
    let (ca, cb) = (conn(a.clone()), conn(b.clone()));
    let memo = ConversionMemo::new();
    // `C2E` and `C2E2` are one connectivity: copied, hashed and stored once.
    let ct = memo.provider(&provider(&[("C2E", &ca), ("E2C", &cb), ("C2E2", &ca)]), &store).unwrap();
    assert_eq!((a.attempts(), b.attempts()), (1, 1));
    assert_eq!((memo.stats().tables_hashed, memo.stats().memo_hits), (2, 0));
    assert!(Arc::ptr_eq(ct.gather("C2E").unwrap(), ct.gather("C2E2").unwrap()));
    for (name, t) in [("C2E", table(4)), ("E2C", table(5))] {
        let view = ct.gather(name).unwrap();
        assert_eq!(view.digest(), digest_table(t.view()));
        assert!(store.path_of(&view.digest()).is_file(), "{name} stored under its name");
    }
    let temps = std::fs::read_dir(store.dir())
        .unwrap()
        .flat_map(|shard| std::fs::read_dir(shard.unwrap().path()).unwrap())
        .filter(|f| f.as_ref().unwrap().file_name().to_string_lossy().starts_with(".tmp-"))
        .count();
    assert_eq!(temps, 0, "every temp file of the batch renamed");
    // Converted again: memo hits, nothing copied.
    memo.provider(&provider(&[("E2C", &cb), ("C2E", &ca)]), &store).unwrap();
    assert_eq!((a.attempts(), b.attempts(), memo.stats().memo_hits), (1, 1, 2));
}
