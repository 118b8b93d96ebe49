//! `gridkey cache stats` and `gc` see GT4Py's store `gt4py-v1/` (ADR 0040): its translation
//! entries and built extensions count as entries, and gc removes them by age like any other.

use std::time::Duration;

use gridkey::cache::{gc, stats, GcConfig};
use gridkey_fingerprint::gt4py::{encode_bundle, ExtensionKeyInputs, Gt4pyKind, Gt4pyStore, GT4PY_DIR};

fn inputs(folder: &str) -> ExtensionKeyInputs {
    ExtensionKeyInputs {
        build_folder: folder.to_owned(),
        compiler_identity: "0".repeat(32),
        ext_suffix: ".cpython-312-x86_64-linux-gnu.so".to_owned(),
        platform: "linux-x86_64".to_owned(),
        nanobind_version: "3.1.0".to_owned(),
        gridtools_cpp_version: "2.3.9".to_owned(),
        gt4py_version: "1.2.3".to_owned(),
    }
}

#[test]
fn cache_stats_and_gc_see_gt4py_entries() {
    let cache = tempfile::tempdir().unwrap();
    let store = Gt4pyStore::open(cache.path()).unwrap();
    let bundle =
        encode_bundle(&[("build/bin/div.so".to_owned(), vec![7; 4096]), ("gt4py.json".to_owned(), b"{}".to_vec())]);
    let ext = store.put(Gt4pyKind::Extension, &inputs("div_pyext_a").key(), &bundle).unwrap();
    let te = store.put(Gt4pyKind::Translation, &inputs("div_pyext_b").key(), b"a pickle").unwrap();
    let expected = std::fs::metadata(&ext).unwrap().len() + std::fs::metadata(&te).unwrap().len();

    let found = stats(cache.path()).unwrap();
    let gt4py = found.iter().find(|s| s.store == GT4PY_DIR).expect("gt4py-v1 is a store of cache stats");
    assert_eq!((gt4py.entries, gt4py.bytes), (2, expected));

    let report = gc(cache.path(), &GcConfig { max_size: Some(0), temp_min_age: Duration::from_secs(60) }).unwrap();
    assert_eq!(report.entries_removed, 2);
    assert!(!ext.exists() && !te.exists());
}
