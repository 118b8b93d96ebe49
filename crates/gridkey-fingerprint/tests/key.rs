//! Translation key format v2 (ADR 0003, ADR 0020): every included input changes the key, every excluded
//! input does not, and the translation cache turns any bad entry into a miss.

use std::sync::Arc;

use gridkey_fingerprint::{
    decode_entry, encode_entry, EntryProblem, FingerprintError, Frontend, KeyInputs, Miss, OffsetInput,
    TranslationCache, TranslationKey, TranslationOptions, ENTRY_FORMAT_VERSION, KEY_FORMAT_VERSION, TRANSLATION_DIR,
};
use gridkey_offsets::{
    compile_time_offset_provider, CompileTimeOffsetProvider, Connectivity, Dimension, DimensionKind, Entry, IndexTable,
    OffsetProvider, TableSource,
};
use gridkey_store::TableStore;
use ndarray::{Array2, ShapeBuilder};
use proptest::prelude::*;

fn frontend() -> Frontend {
    Frontend { name: "test-frontend".into(), version: "1.0.0".into(), fingerprint: "5e1f".repeat(8) }
}

fn runtime(c2e: Arc<dyn TableSource>, e2c: Arc<dyn TableSource>) -> OffsetProvider {
    let mut p = OffsetProvider::new();
    let gather = |l: &str, d: &str, c: &str, skip, src| {
        Entry::Gather(Arc::new(
            Connectivity::new(Dimension::horizontal(d), Dimension::local(l), Dimension::horizontal(c), skip, src)
                .unwrap(),
        ))
    };
    p.push("C2E", gather("C2EDim", "Cell", "Edge", None, c2e)).unwrap();
    p.push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical))).unwrap();
    p.push("E2C", gather("E2CDim", "Edge", "Cell", Some(-1), e2c)).unwrap();
    p
}

fn c2e() -> Array2<i32> {
    Array2::from_shape_fn((6, 3), |(i, j)| ((i + j) % 9) as i32)
}

fn e2c() -> Array2<i32> {
    Array2::from_shape_fn((9, 2), |(i, j)| if i == 0 && j == 1 { -1 } else { ((i * 2 + j) % 6) as i32 })
}

fn host(t: Array2<i32>) -> Arc<dyn TableSource> {
    Arc::new(IndexTable::I32(t.into_shared()))
}

fn compile_time(store_dir: &std::path::Path, p: &OffsetProvider) -> CompileTimeOffsetProvider {
    compile_time_offset_provider(p, &TableStore::open(store_dir).unwrap()).unwrap()
}

fn base() -> KeyInputs {
    let dir = tempfile::tempdir().unwrap();
    let ct = compile_time(dir.path(), &runtime(host(c2e()), host(e2c())));
    let mut options = TranslationOptions::new();
    options.insert("opt_level".into(), "2".into());
    KeyInputs::new(&frontend(), "div", b"program-encoding", &options, &ct)
}

/// The single place that checks one included input: changing it changes the key.
fn check_differs(what: &str, change: impl FnOnce(&mut KeyInputs)) {
    let a = base();
    let mut b = a.clone();
    change(&mut b);
    assert_ne!(a, b, "{what}: the change must change the inputs");
    assert_ne!(a.key(), b.key(), "{what} must enter the key");
}

fn gather_mut(k: &mut KeyInputs, index: usize) -> &mut OffsetInput {
    &mut k.offsets[index]
}

#[test]
fn every_included_input_changes_the_key() {
    check_differs("key format version", |k| k.key_format_version += 1);
    check_differs("digest format version", |k| k.digest_format_version += 1);
    check_differs("frontend name", |k| k.frontend.name.push('x'));
    check_differs("frontend version", |k| k.frontend.version = "1.0.1".into());
    // The same version rebuilt with other translation code (ADR 0020).
    check_differs("frontend fingerprint", |k| k.frontend.fingerprint = "0".repeat(32));
    check_differs("program name", |k| k.program = "grad_n".into());
    check_differs("program encoding", |k| k.program_encoding.push_str("00"));
    check_differs("option value", |k| {
        k.options.insert("opt_level".into(), "3".into());
    });
    check_differs("option added", |k| {
        k.options.insert("fast_math".into(), "0".into());
    });
    check_differs("offset order", |k| k.offsets.swap(0, 2));
    check_differs("offset removed", |k| {
        k.offsets.pop();
    });
    check_differs("offset name", |k| match gather_mut(k, 0) {
        OffsetInput::Gather { offset, .. } => *offset = "C2E2".into(),
        _ => unreachable!(),
    });
    check_differs("dimension name", |k| match gather_mut(k, 1) {
        OffsetInput::Dimension { name, .. } => *name = "KHalf".into(),
        _ => unreachable!(),
    });
    check_differs("dimension kind", |k| match gather_mut(k, 1) {
        OffsetInput::Dimension { dimension_kind, .. } => *dimension_kind = "horizontal".into(),
        _ => unreachable!(),
    });
    type Edit = fn(&mut OffsetInput);
    let gather_edits: [(&str, Edit); 9] = [
        ("domain", |g| {
            if let OffsetInput::Gather { domain, .. } = g {
                *domain = "Vertex".into()
            }
        }),
        ("local dimension", |g| {
            if let OffsetInput::Gather { local, .. } = g {
                *local = "C2E2CDim".into()
            }
        }),
        ("codomain", |g| {
            if let OffsetInput::Gather { codomain, .. } = g {
                *codomain = "Cell".into()
            }
        }),
        ("skip value present", |g| {
            if let OffsetInput::Gather { skip_value, .. } = g {
                *skip_value = Some(-1)
            }
        }),
        ("dtype", |g| {
            if let OffsetInput::Gather { dtype, .. } = g {
                *dtype = "<i8".into()
            }
        }),
        ("rows", |g| {
            if let OffsetInput::Gather { shape, .. } = g {
                shape[0] += 1
            }
        }),
        ("max neighbours", |g| {
            if let OffsetInput::Gather { shape, .. } = g {
                shape[1] += 1
            }
        }),
        ("table digest", |g| {
            if let OffsetInput::Gather { digest, .. } = g {
                *digest = "0".repeat(32)
            }
        }),
        ("shape transposed", |g| {
            if let OffsetInput::Gather { shape, .. } = g {
                shape.swap(0, 1)
            }
        }),
    ];
    for (what, edit) in gather_edits {
        check_differs(what, |k| edit(gather_mut(k, 0)));
    }
    check_differs("skip value", |k| match gather_mut(k, 2) {
        OffsetInput::Gather { skip_value, .. } => *skip_value = Some(-2),
        _ => unreachable!(),
    });
}

#[test]
fn one_changed_table_element_changes_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = c2e();
    let a = KeyInputs::new(
        &frontend(),
        "div",
        b"p",
        &TranslationOptions::new(),
        &compile_time(dir.path(), &runtime(host(t.clone()), host(e2c()))),
    );
    t[[5, 2]] += 1;
    let b = KeyInputs::new(
        &frontend(),
        "div",
        b"p",
        &TranslationOptions::new(),
        &compile_time(dir.path(), &runtime(host(t), host(e2c()))),
    );
    assert_ne!(a.key(), b.key());
}

#[test]
fn excluded_inputs_do_not_change_the_key() {
    // Paths: two cache directories. Layout and width: C, Fortran, int64, host copy.
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let options = TranslationOptions::new();
    let key = |dir: &std::path::Path, p: &OffsetProvider| {
        KeyInputs::new(&frontend(), "div", b"p", &options, &compile_time(dir, p)).key()
    };
    let reference = key(d1.path(), &runtime(host(c2e()), host(e2c())));
    assert_eq!(key(d2.path(), &runtime(host(c2e()), host(e2c()))), reference, "cache directory");
    let mut f = Array2::<i32>::zeros(c2e().raw_dim().f());
    f.assign(&c2e());
    assert_eq!(key(d1.path(), &runtime(host(f), host(e2c()))), reference, "Fortran order");
    let wide: Arc<dyn TableSource> = Arc::new(IndexTable::I64(c2e().mapv(i64::from).into_shared()));
    assert_eq!(key(d2.path(), &runtime(wide, host(e2c()))), reference, "int64");
    let device: Arc<dyn TableSource> =
        Arc::new(gridkey_offsets::HostCopySource::new(IndexTable::I32(c2e().into_shared())));
    assert_eq!(key(d1.path(), &runtime(device, host(e2c()))), reference, "host-copy source");
}

#[test]
fn the_key_of_a_fixed_input_is_pinned() {
    // Golden value from the independent witness data/tools/translation_key_witness.py; a format
    // change shows up as a diff of it (bump KEY_FORMAT_VERSION with it).
    let inputs = KeyInputs {
        key_format_version: 2,
        digest_format_version: 1,
        frontend: frontend(),
        program: "div".into(),
        program_encoding: "00ff".into(),
        options: TranslationOptions::new(),
        offsets: vec![
            OffsetInput::Dimension { offset: "Koff".into(), name: "K".into(), dimension_kind: "vertical".into() },
            OffsetInput::Gather {
                offset: "C2E".into(),
                domain: "Cell".into(),
                local: "C2EDim".into(),
                codomain: "Edge".into(),
                skip_value: None,
                dtype: "<i4".into(),
                shape: [20480, 3],
                digest: "9bcee51d14f05d37316945fc51e952ed".into(),
            },
        ],
    };
    assert_eq!(inputs.key().to_hex(), include_str!("../../../data/golden/translation-key-v2.txt").trim());
    assert_eq!(inputs.key_format_version, KEY_FORMAT_VERSION, "a new key format needs a new golden key");
    assert_eq!(TRANSLATION_DIR, format!("translation-v{KEY_FORMAT_VERSION}"), "the directory names the format");
}

fn cache() -> (tempfile::TempDir, TranslationCache, KeyInputs) {
    let dir = tempfile::tempdir().unwrap();
    let cache = TranslationCache::open(dir.path()).unwrap();
    (dir, cache, base())
}

#[test]
fn entries_round_trip_with_their_record() {
    let (_dir, cache, inputs) = cache();
    let key = inputs.key();
    assert_eq!(cache.get(&key), Err(Miss::Absent));
    assert_eq!(cache.put(&inputs, b"int gk_run(void);").unwrap(), key);
    assert_eq!(cache.get(&key).unwrap(), b"int gk_run(void);");
    assert_eq!(cache.record(&key).unwrap(), inputs);
}

#[test]
fn a_batch_of_entries_round_trips_and_an_entry_that_cannot_be_written_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tables = tempfile::tempdir().unwrap();
    let ct = compile_time(tables.path(), &runtime(host(c2e()), host(e2c())));
    let inputs: Vec<KeyInputs> = ["div", "grad", "rot"]
        .iter()
        .map(|name| KeyInputs::new(&frontend(), name, name.as_bytes(), &TranslationOptions::new(), &ct))
        .collect();
    let payloads: Vec<Vec<u8>> =
        inputs.iter().map(|i| format!("/* {} */ int gk_run(void);", i.key()).into_bytes()).collect();
    let items: Vec<(&KeyInputs, &[u8])> = inputs.iter().zip(&payloads).map(|(i, p)| (i, p.as_slice())).collect();
    let cache = TranslationCache::open(dir.path()).unwrap();
    let stored = cache.put_all(&items);
    for ((i, p), s) in inputs.iter().zip(&payloads).zip(stored) {
        assert_eq!(s.unwrap(), i.key());
        assert_eq!(&cache.get(&i.key()).unwrap(), p);
        assert_eq!(&cache.record(&i.key()).unwrap(), i);
    }
    // A full disk for entries (`.bin`): every entry fails, and no record is left without it.
    let other = tempfile::tempdir().unwrap();
    let full = TranslationCache::open(other.path())
        .unwrap()
        .with_fault(Some(gridkey_fs::Fault::parse("enospc:0:.bin").unwrap()));
    for s in full.put_all(&items) {
        let err = s.unwrap_err().to_string();
        assert!(err.contains(".bin"), "{err}");
    }
    assert!(inputs.iter().all(|i| full.record(&i.key()).is_none() && full.get(&i.key()) == Err(Miss::Absent)));
}

/// The single place that plants bad entry bytes and checks they are a miss, then healed.
fn check_miss(what: &str, bytes: impl FnOnce(&[u8]) -> Vec<u8>, reason: &str) {
    let (_dir, cache, inputs) = cache();
    let key = cache.put(&inputs, b"payload").unwrap();
    let path = cache.entry_path(&key);
    let bad = bytes(&std::fs::read(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, bad).unwrap();
    match cache.get(&key) {
        Err(Miss::Invalid(why)) => assert!(why.contains(reason), "{what}: {why}"),
        other => panic!("{what}: expected an invalid-entry miss, got {other:?}"),
    }
    cache.put(&inputs, b"payload").unwrap();
    assert_eq!(cache.get(&key).unwrap(), b"payload", "{what}: rebuilt");
}

#[test]
fn bad_entries_are_misses_and_are_rebuilt() {
    check_miss("truncated", |b| b[..b.len() - 3].to_vec(), "announces");
    check_miss("header only", |b| b[..10].to_vec(), "shorter than its header");
    check_miss("empty", |_| Vec::new(), "shorter than its header");
    check_miss(
        "flipped byte",
        |b| {
            let mut b = b.to_vec();
            b[34] ^= 0x20;
            b
        },
        "checksum",
    );
    check_miss("not an entry", |b| vec![b'x'; b.len()], "magic");
    check_miss(
        "future version",
        |b| {
            let key: [u8; 16] = b[8..24].try_into().unwrap();
            let mut future = encode_entry(&key_from(key), b"payload");
            future[4..8].copy_from_slice(&(ENTRY_FORMAT_VERSION + 1).to_le_bytes());
            let body = future.len() - 8;
            let check = xxhash_rust::xxh3::xxh3_64(&future[..body]).to_le_bytes();
            future[body..].copy_from_slice(&check);
            future
        },
        "format version 2",
    );
    check_miss("another key's entry", |_| encode_entry(&key_from([7; 16]), b"payload"), "another key");
}

#[test]
fn decode_entry_says_which_problem_it_found() {
    let key = key_from([9; 16]);
    let good = encode_entry(&key, b"payload");
    let check = |what: &str, bytes: &[u8], want: EntryProblem| match decode_entry(&key, bytes) {
        Err(FingerprintError::BadEntry { key: k, problem }) => {
            assert_eq!((k, problem), (key, want), "{what}");
        }
        other => panic!("{what}: expected a bad entry, got {other:?}"),
    };
    check("empty", &[], EntryProblem::TooShort { len: 0 });
    check("not an entry", &vec![b'x'; good.len()], EntryProblem::Magic);
    let mut version = good.clone();
    version[4..8].copy_from_slice(&7u32.to_le_bytes());
    check("another version", &version, EntryProblem::Version { found: 7 });
    check("another key", &encode_entry(&key_from([1; 16]), b"payload"), EntryProblem::OtherKey);
    check("cut", &good[..good.len() - 3], EntryProblem::Length { announced: 7, holds: 4 });
    let mut flipped = good.clone();
    flipped[34] ^= 0x20;
    check("flipped", &flipped, EntryProblem::Checksum);
}

fn key_from(bytes: [u8; 16]) -> TranslationKey {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<String>().parse().unwrap()
}

#[test]
fn a_cache_path_that_is_a_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cache");
    std::fs::write(&file, b"").unwrap();
    let err = TranslationCache::open(&file).unwrap_err();
    assert!(
        err.to_string().contains(&file.display().to_string())
            && err.to_string().contains("point the cache directory at a writable directory"),
        "{err}"
    );
}

#[test]
fn a_failed_entry_write_leaves_neither_record_nor_temp() {
    let (dir, cache, inputs) = cache();
    let key = inputs.key();
    // Something in the way of the entry's final name: the rename fails after the record is written.
    std::fs::create_dir_all(cache.entry_path(&key).join("in-the-way")).unwrap();
    let err = cache.put(&inputs, b"payload").unwrap_err();
    assert!(err.to_string().contains(&cache.entry_path(&key).display().to_string()), "{err}");
    assert!(!cache.record_path(&key).exists(), "no record without its entry");
    let mut left = Vec::new();
    for e in std::fs::read_dir(cache.entry_path(&key).parent().unwrap()).unwrap() {
        left.push(e.unwrap().file_name().to_string_lossy().into_owned());
    }
    assert_eq!(left, vec![format!("{}.bin", key.to_hex())], "only the obstacle is left");
    assert!(matches!(cache.get(&key), Err(Miss::Invalid(_))), "a directory under the name is a miss");
    drop(dir);
}

proptest! {
    /// Fuzz target for the translation entry decoder: a valid entry with any bytes overwritten
    /// anywhere decodes to its payload or is refused, never a panic, never another payload.
    #[test]
    fn a_damaged_entry_is_refused_or_decodes_to_its_own_payload(payload in proptest::collection::vec(any::<u8>(), 0..200), at in any::<usize>(), patch in proptest::collection::vec(any::<u8>(), 1..12)) {
        let key = key_from([5; 16]);
        let mut entry = encode_entry(&key, &payload);
        let at = at % entry.len();
        let end = (at + patch.len()).min(entry.len());
        entry[at..end].copy_from_slice(&patch[..end - at]);
        if let Ok(decoded) = decode_entry(&key, &entry) {
            prop_assert_eq!(decoded, &payload[..]);
        }
    }

    #[test]
    fn entry_decoding_never_panics_and_accepts_only_its_own_bytes(payload in proptest::collection::vec(any::<u8>(), 0..200), noise in proptest::collection::vec(any::<u8>(), 0..80)) {
        let key = key_from([3; 16]);
        let entry = encode_entry(&key, &payload);
        prop_assert_eq!(decode_entry(&key, &entry).unwrap(), &payload[..]);
        prop_assert!(decode_entry(&key, &noise).is_err() || noise == entry);
        let mut cut = entry.clone();
        cut.truncate(entry.len().saturating_sub(1 + noise.len() % 8));
        prop_assert!(decode_entry(&key, &cut).is_err());
    }
}

#[test]
fn diff_names_exactly_the_changed_inputs() {
    use gridkey_fingerprint::diff_inputs;
    let a = base();
    assert!(diff_inputs(&a, &a).is_empty(), "identical inputs");
    let mut b = a.clone();
    b.options.insert("opt_level".into(), "3".into());
    let d = diff_inputs(&a, &b);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].to_string(), "option opt_level 2 -> 3");
    let mut c = a.clone();
    if let OffsetInput::Gather { digest, shape, .. } = &mut c.offsets[0] {
        *digest = "3b03".repeat(8);
        *shape = [162, 6];
    }
    c.offsets.swap(0, 2);
    let d: Vec<String> = diff_inputs(&a, &c).iter().map(ToString::to_string).collect();
    assert_eq!(d.len(), 3, "{d:?}");
    assert!(d[0].starts_with("offset C2E: shape (6, 3) -> (162, 6)"), "{d:?}");
    assert!(d[1].starts_with("offset C2E: table digest ") && d[1].ends_with(&"3b03".repeat(8)), "{d:?}");
    assert_eq!(d[2], "offset order C2E, Koff, E2C -> E2C, Koff, C2E");
}
