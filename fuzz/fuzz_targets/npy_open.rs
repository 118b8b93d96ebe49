//! The checked open of a stored `.npy` table on arbitrary file bytes. The first 4 bytes of an
//! input choose what the caller expects (dtype: byte 0 even i32, odd i64; rows: u16 LE; cols: byte 3 modulo 16); the rest is the file under the table's name. Any input is a
//! `StoreError` or a table of exactly the expected shape, never a panic.
#![no_main]

use std::sync::OnceLock;

use gridkey_digest::{Dtype, TableDigest};
use gridkey_store::{TableSpec, TableStore, TableView};
use libfuzzer_sys::fuzz_target;

fn store() -> &'static (tempfile::TempDir, TableStore) {
    static STORE: OnceLock<(tempfile::TempDir, TableStore)> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::open(dir.path()).unwrap();
        (dir, store)
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let dtype = if data[0] % 2 == 0 { Dtype::I32 } else { Dtype::I64 };
    let rows = usize::from(u16::from_le_bytes([data[1], data[2]]));
    let cols = usize::from(data[3] % 16);
    let (_, store) = store();
    let spec = TableSpec { digest: TableDigest::from_bytes([0xab; 16]), dtype, shape: [rows, cols] };
    let path = store.path_of(&spec.digest);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, &data[4..]).unwrap();
    for verify in [false, true] {
        if let Ok(table) = store.clone().verifying(verify).open_table(&spec) {
            assert_eq!(table.data_bytes().len(), rows * cols * dtype.itemsize());
            match table.view() {
                TableView::I32(v) => assert_eq!((v.nrows(), v.ncols(), dtype), (rows, cols, Dtype::I32)),
                TableView::I64(v) => assert_eq!((v.nrows(), v.ncols(), dtype), (rows, cols, Dtype::I64)),
            }
        }
    }
});
