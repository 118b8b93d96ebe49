//! Conversion to the compile-time view: canonical tables for every runtime layout and width
//! (ADR 0006), entries and order kept, the memo validated by identity.

use std::sync::Arc;

use gridkey_digest::{digest_table, Dtype};
use gridkey_offsets::{
    compile_time_offset_provider, CompileTimeTable, Connectivity, ConversionMemo, Dimension, DimensionKind, Entry,
    HostCopySource, IndexTable, OffsetProvider, OffsetsError, TableSource,
};
use gridkey_store::{TableSpec, TableStore};
use ndarray::{s, Array2, ShapeBuilder};
use proptest::prelude::*;

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

fn layouts(t: &Array2<i32>) -> Vec<(&'static str, Arc<dyn TableSource>)> {
    let mut f = Array2::<i32>::zeros(t.raw_dim().f());
    f.assign(t);
    // A strided view: every second row of a table twice as tall.
    let mut tall = Array2::<i32>::from_elem((t.nrows() * 2, t.ncols()), 99);
    tall.slice_mut(s![..;2, ..]).assign(t);
    let strided = tall.into_shared().slice_move(s![..;2, ..]);
    vec![
        ("C order", Arc::new(IndexTable::I32(t.clone().into_shared()))),
        ("Fortran order", Arc::new(IndexTable::I32(f.into_shared()))),
        ("strided", Arc::new(IndexTable::I32(strided))),
        ("int64", Arc::new(IndexTable::I64(t.mapv(i64::from).into_shared()))),
        ("host copy", Arc::new(HostCopySource::new(IndexTable::I32(t.clone().into_shared())))),
    ]
}

/// The single place that converts one connectivity and reads back what the view holds.
fn convert(store: &TableStore, source: Arc<dyn TableSource>) -> (TableSpec, Array2<i64>) {
    let mut p = OffsetProvider::new();
    p.push("C2E", Entry::Gather(conn(source))).unwrap();
    let ct = compile_time_offset_provider(&p, store).unwrap();
    let c = ct.gather("C2E").unwrap();
    let values = match c.table() {
        CompileTimeTable::I32(v) => v.mapv(i64::from),
        CompileTimeTable::I64(v) => v.to_owned(),
    };
    (*c.spec(), values)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn every_layout_and_width_gives_the_canonical_int32_table(
        (n, k, values) in (0usize..30, 1usize..7).prop_flat_map(|(n, k)| (Just(n), Just(k), proptest::collection::vec(-1i32..5000, n * k)))
    ) {
        let t = Array2::from_shape_vec((n, k), values).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::open(dir.path()).unwrap();
        let expect = TableSpec { digest: digest_table(t.view()), dtype: Dtype::I32, shape: [n, k] };
        for (name, source) in layouts(&t) {
            let (spec, values) = convert(&store, source);
            prop_assert_eq!(spec, expect, "{}", name);
            prop_assert_eq!(values, t.mapv(i64::from), "{}", name);
        }
    }
}

#[test]
fn an_int64_table_with_an_index_beyond_int32_stays_int64() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = Array2::from_shape_vec((2, 2), vec![0i64, 1, -1, 1 << 40]).unwrap();
    let (spec, values) = convert(&store, Arc::new(IndexTable::I64(t.clone().into_shared())));
    assert_eq!(spec.dtype, Dtype::I64);
    assert_eq!(spec.digest, digest_table(t.view()));
    assert_eq!(values, t);
}

#[test]
fn the_view_keeps_every_entry_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = Array2::from_shape_fn((5, 3), |(i, j)| (i + j) as i32);
    let mut p = OffsetProvider::new();
    p.push("V2E", Entry::Gather(conn(Arc::new(IndexTable::I32(t.clone().into_shared()))))).unwrap();
    p.push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical))).unwrap();
    p.push("C2E", Entry::Gather(conn(Arc::new(IndexTable::I32(t.into_shared()))))).unwrap();
    let ct = compile_time_offset_provider(&p, &store).unwrap();
    let names: Vec<&str> = ct.entries().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["V2E", "Koff", "C2E"]);
    assert!(
        matches!(ct.get("Koff"), Some(Entry::Dimension(d)) if d.name() == "K" && d.kind() == DimensionKind::Vertical)
    );
    let c = ct.gather("C2E").unwrap();
    assert_eq!(
        (c.domain().name(), c.local().name(), c.codomain().name(), c.skip_value()),
        ("Cell", "C2EDim", "Edge", Some(-1))
    );
}

#[test]
fn a_reused_address_is_not_mistaken_for_the_old_connectivity() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    // One memo for every round: a dropped connectivity's address, reused, must not hit.
    let memo = ConversionMemo::new();
    for round in 0..20 {
        let t = Array2::from_elem((4, 2), round);
        let mut p = OffsetProvider::new();
        p.push("E2C", Entry::Gather(conn(Arc::new(IndexTable::I32(t.clone().into_shared()))))).unwrap();
        let ct = memo.provider(&p, &store).unwrap();
        assert_eq!(ct.gather("E2C").unwrap().digest(), digest_table(t.view()), "round {round}");
    }
}

#[test]
fn duplicate_offsets_and_bad_dimension_kinds_are_errors() {
    let mut p = OffsetProvider::new();
    p.push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical))).unwrap();
    let err = p.push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical))).unwrap_err();
    assert!(matches!(err, OffsetsError::DuplicateOffset { ref offset } if offset == "Koff"), "{err:?}");
    let table = Arc::new(IndexTable::I32(Array2::zeros((1, 1)).into_shared()));
    let err = Connectivity::new(
        Dimension::horizontal("Cell"),
        Dimension::horizontal("C2EDim"),
        Dimension::horizontal("Edge"),
        None,
        table,
    )
    .unwrap_err();
    assert!(matches!(err, OffsetsError::DimensionKind { what: "local", .. }), "{err:?}");
}

#[test]
fn rehydrating_a_missing_table_names_the_offset_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = TableStore::open(dir.path()).unwrap();
    let t = Array2::from_elem((3, 3), 1i32);
    let spec = TableSpec { digest: digest_table(t.view()), dtype: Dtype::I32, shape: [3, 3] };
    let err = gridkey_offsets::CompileTimeConnectivity::rehydrate(
        "C2E",
        &store,
        &spec,
        Dimension::horizontal("Cell"),
        Dimension::local("C2EDim"),
        Dimension::horizontal("Edge"),
        None,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("offset C2E:") && msg.contains(&spec.digest.to_hex()), "{msg}");
}

/// The path of the crate docs' example (`Connectivity::from_host`, then the conversion): a table
/// with missing neighbours (-1) and no skip value is an error naming the connectivity and the
/// first such entry, and nothing is stored; with the skip value declared it converts.
#[test]
fn a_negative_entry_without_its_skip_value_is_an_error_naming_the_connectivity() {
    let check = |skip_value: Option<i64>, entries: Vec<i32>, want: Option<(usize, usize, i64)>| {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::open(dir.path()).unwrap();
        let e2c = IndexTable::from_vec_i32(5, 2, entries).unwrap();
        let e2c = Connectivity::from_host(
            Dimension::horizontal("Edge"),
            Dimension::local("E2CDim"),
            Dimension::horizontal("Cell"),
            skip_value,
            e2c,
        )
        .unwrap();
        let mut provider = OffsetProvider::new();
        provider.push("E2C", Entry::Gather(Arc::new(e2c))).unwrap();
        let result = ConversionMemo::new().provider(&provider, &store);
        match (result, want) {
            (Ok(_), None) => {}
            (Err(OffsetsError::NegativeEntry { offset, row, col, value, skip_value: s }), Some(want)) => {
                assert_eq!((offset.as_str(), (row, col, value), s), ("E2C", want, skip_value));
                let stored = std::fs::read_dir(store.dir()).unwrap().count();
                assert_eq!(stored, 0, "nothing stored for a refused table");
            }
            (other, want) => panic!("skip {skip_value:?}: expected {want:?}, got {other:?}"),
        }
    };
    let example = vec![0, -1, 0, -1, 0, 1, 1, -1, 1, -1];
    check(None, example.clone(), Some((0, 1, -1)));
    check(Some(-1), example, None);
    // Another marker than the declared one.
    check(Some(-1), vec![0, 1, 0, -2, 0, 1, 1, -1, 1, 0], Some((1, 1, -2)));
    check(None, vec![0, 1, 0, 1, 0, 1, 1, 0, 1, 0], None);

    let dir = tempfile::tempdir().unwrap();
    let e2c = IndexTable::from_vec_i64(1, 2, vec![0, -1]).unwrap();
    let e2c = Connectivity::from_host(
        Dimension::horizontal("Edge"),
        Dimension::local("E2CDim"),
        Dimension::horizontal("Cell"),
        None,
        e2c,
    )
    .unwrap();
    let mut provider = OffsetProvider::new();
    provider.push("E2C", Entry::Gather(Arc::new(e2c))).unwrap();
    let err = compile_time_offset_provider(&provider, &TableStore::open(dir.path()).unwrap()).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("offset E2C: its neighbour table has entry -1 at (0, 1)"), "{text}");
    assert!(text.contains("(it has none)") && text.ends_with("or fix the table"), "{text}");
}
