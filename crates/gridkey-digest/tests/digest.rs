//! Digest format v1 against the golden vectors computed by the Python witness
//! (`data/tools/table_digest_witness.py`), and its layout invariants as properties.

use gridkey_digest::{digest_raw, digest_table, ByteOrder, Dtype, MemoryOrder, TableDigest};
use ndarray::{s, Array2, ShapeBuilder};
use proptest::prelude::*;

fn golden() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/golden/table-digests-v1.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The single place that calls the API under test for golden cases.
fn check(values: &[i64], shape: (usize, usize), dtype: &str, expected: &str) {
    let got = match dtype {
        "<i4" => {
            let v: Vec<i32> = values.iter().map(|&x| x as i32).collect();
            digest_table(Array2::from_shape_vec(shape, v).unwrap().view())
        }
        "<i8" => digest_table(Array2::from_shape_vec(shape, values.to_vec()).unwrap().view()),
        other => panic!("golden dtype {other} not handled"),
    };
    assert_eq!(got.to_string(), expected, "shape {shape:?} dtype {dtype}");
}

#[test]
fn synthetic_golden_digests() {
    let doc = golden();
    let mut checked = 0;
    for (name, case) in doc["synthetic"].as_object().unwrap() {
        let Some(values) = case["values_if_small"].as_array() else {
            // random_1000x4_i4 comes from NumPy's generator; the grid tables cover large tables.
            continue;
        };
        let shape: Vec<usize> =
            case["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        let flat: Vec<i64> =
            values.iter().flat_map(|row| row.as_array().unwrap().iter().map(|x| x.as_i64().unwrap())).collect();
        check(&flat, (shape[0], shape[1]), case["dtype"].as_str().unwrap(), case["digest"].as_str().unwrap());
        checked += 1;
        let _ = name;
    }
    assert_eq!(checked, 5, "every small synthetic golden case is checked");
}

#[test]
fn digest_text_round_trips_and_rejects_garbage() {
    let d: TableDigest = "9bcee51d14f05d37316945fc51e952ed".parse().unwrap();
    assert_eq!(d.to_string(), "9bcee51d14f05d37316945fc51e952ed");
    assert!("9bcee51d".parse::<TableDigest>().is_err());
    assert!("zzcee51d14f05d37316945fc51e952ed".parse::<TableDigest>().is_err());
}

#[test]
fn raw_length_mismatch_is_an_error() {
    let err = digest_raw(&[0u8; 10], Dtype::I32, ByteOrder::Little, MemoryOrder::C, &[2, 2]).unwrap_err();
    assert!(err.to_string().contains("needs 16") || err.to_string().contains("need 16"), "{err}");
}

fn table() -> impl Strategy<Value = Array2<i32>> {
    // Widths up to 13: every width the block transpose has a fixed-width path for (2-6, 8, 9, 12) and others.
    (0usize..40, 1usize..14).prop_flat_map(|(n, k)| {
        proptest::collection::vec(-1i32..100_000, n * k).prop_map(move |v| Array2::from_shape_vec((n, k), v).unwrap())
    })
}

proptest! {
    #[test]
    fn fortran_copy_has_the_same_digest(t in table()) {
        let mut f = Array2::<i32>::zeros(t.raw_dim().f());
        f.assign(&t);
        prop_assert!(f.as_slice().is_none() || t.nrows() <= 1 || t.ncols() <= 1);
        prop_assert_eq!(digest_table(t.view()), digest_table(f.view()));
    }

    #[test]
    fn strided_view_has_the_digest_of_its_content(t in table(), step in 1usize..4) {
        // Interleave the table into a bigger one and view it back with a stride.
        let (n, k) = t.dim();
        let mut big = Array2::<i32>::from_elem((n * step, k * 2), 7);
        big.slice_mut(s![..;step, ..;2]).assign(&t);
        let view = big.slice(s![..;step, ..;2]);
        prop_assert_eq!(digest_table(view), digest_table(t.view()));
    }

    #[test]
    fn byte_swapped_and_fortran_raw_copies_have_the_same_digest(t in table()) {
        let expect = digest_table(t.view());
        let c_be: Vec<u8> = t.iter().flat_map(|x| x.to_be_bytes()).collect();
        let f_le: Vec<u8> = t.t().iter().flat_map(|x| x.to_le_bytes()).collect();
        let f_be: Vec<u8> = t.t().iter().flat_map(|x| x.to_be_bytes()).collect();
        let shape = [t.nrows(), t.ncols()];
        prop_assert_eq!(digest_raw(&c_be, Dtype::I32, ByteOrder::Big, MemoryOrder::C, &shape).unwrap(), expect);
        prop_assert_eq!(digest_raw(&f_le, Dtype::I32, ByteOrder::Little, MemoryOrder::Fortran, &shape).unwrap(), expect);
        prop_assert_eq!(digest_raw(&f_be, Dtype::I32, ByteOrder::Big, MemoryOrder::Fortran, &shape).unwrap(), expect);
    }

    #[test]
    fn one_changed_element_changes_the_digest(t in table(), at in any::<proptest::sample::Index>(), delta in 1i32..1000) {
        prop_assume!(!t.is_empty());
        let mut u = t.clone();
        let i = at.index(u.len());
        let slot = u.iter_mut().nth(i).unwrap();
        *slot = slot.wrapping_add(delta);
        prop_assert_ne!(digest_table(t.view()), digest_table(u.view()));
    }

    #[test]
    fn shape_and_dtype_enter_the_digest(t in table()) {
        let (n, k) = t.dim();
        prop_assume!(n > 1 && k > 1);
        let flat: Vec<i32> = t.iter().copied().collect();
        let transposed_shape = Array2::from_shape_vec((k, n), flat.clone()).unwrap();
        let one_row = Array2::from_shape_vec((1, n * k), flat).unwrap();
        let wide = t.mapv(i64::from);
        let d = digest_table(t.view());
        if n != k {
            prop_assert_ne!(d, digest_table(transposed_shape.view()));
        }
        prop_assert_ne!(d, digest_table(one_row.view()));
        prop_assert_ne!(d, digest_table(wide.view()));
        prop_assert_eq!(digest_table(wide.view()), digest_table(wide.t().as_standard_layout().t()));
    }
}

/// The digest computed by a second xxh3 implementation (xxhash-rust, one shot) over the
/// format-v1 bytes built element by element: the witness for the block paths below.
fn witness_digest<T: Copy + Into<i64>>(t: &Array2<T>, typestr: &str, itemsize: usize) -> String {
    let mut bytes = b"table\0".to_vec();
    bytes.extend_from_slice(typestr.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&2u64.to_le_bytes());
    bytes.extend_from_slice(&(t.nrows() as u64).to_le_bytes());
    bytes.extend_from_slice(&(t.ncols() as u64).to_le_bytes());
    for &x in t.iter() {
        let x: i64 = x.into();
        bytes.extend_from_slice(&x.to_le_bytes()[..itemsize]);
    }
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&bytes))
}

/// Tables larger than the 64 KiB buffer, so that the block transpose crosses block boundaries, of
/// widths 1-13 (its fixed-width paths and the general one).
fn big_table() -> impl Strategy<Value = Array2<i32>> {
    (1usize..40_000, 1usize..14, any::<u32>()).prop_map(|(n, k, seed)| {
        let mut x = seed | 1;
        Array2::from_shape_fn((n, k), |_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as i32
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fortran_block_path_matches_a_second_xxh3_implementation(t in big_table()) {
        let expect = witness_digest(&t, "<i4", 4);
        let mut f = Array2::<i32>::zeros(t.raw_dim().f());
        f.assign(&t);
        prop_assert_eq!(digest_table(t.view()).to_string(), expect.clone());
        prop_assert_eq!(digest_table(f.view()).to_string(), expect.clone());
        let shape = [t.nrows(), t.ncols()];
        let f_le: Vec<u8> = t.t().iter().flat_map(|x| x.to_le_bytes()).collect();
        let f_be: Vec<u8> = t.t().iter().flat_map(|x| x.to_be_bytes()).collect();
        prop_assert_eq!(digest_raw(&f_le, Dtype::I32, ByteOrder::Little, MemoryOrder::Fortran, &shape).unwrap().to_string(), expect.clone());
        prop_assert_eq!(digest_raw(&f_be, Dtype::I32, ByteOrder::Big, MemoryOrder::Fortran, &shape).unwrap().to_string(), expect);
        let wide = t.mapv(i64::from);
        let wide_f = wide.t().as_standard_layout().into_owned().reversed_axes();
        prop_assert_eq!(digest_table(wide_f.view()).to_string(), witness_digest(&wide, "<i8", 8));
    }
}

/// Tables over [`gridkey_digest::PREFETCH_MIN_BYTES`], fed in prefetching steps, and any split of
/// their bytes into `update` calls: the second implementation over the same format bytes agrees.
#[test]
fn large_tables_fed_in_prefetching_steps_match_a_second_xxh3_implementation() {
    let min = gridkey_digest::PREFETCH_MIN_BYTES;
    for (rows, k) in [(min / 4, 1), (min / 8 + 1, 2), (min / 12 + 4099, 3)] {
        let mut x = 0x9e37_79b9u32 ^ rows as u32;
        let t = Array2::from_shape_fn((rows, k), |_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as i32
        });
        let expect = witness_digest(&t, "<i4", 4);
        assert_eq!(digest_table(t.view()).to_string(), expect, "{rows} x {k}");
        let bytes: Vec<u8> = t.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut split = gridkey_digest::TableHasher::new(Dtype::I32, &[rows, k]);
        let (a, b) = bytes.split_at(bytes.len() / 3 + 5);
        split.update(a);
        split.update(b);
        assert_eq!(split.finish().unwrap().to_string(), expect, "{rows} x {k}, split");
    }
}
