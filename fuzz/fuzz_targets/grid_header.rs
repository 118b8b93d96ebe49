//! The grid reader on arbitrary file bytes: the header walk that runs before the netCDF-3 reader,
//! then the reader and the table checks. Any input is a `GridError` or a grid, never a panic.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// One file per fuzzing process, rewritten for every input (in memory when /dev/shm exists).
fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        dir.join(format!("gridkey-fuzz-grid-{}.nc", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(path(), data).unwrap();
    if let Ok(grid) = gridkey_grid::read_grid(path()) {
        // A grid that reads has canonical tables whose every index is in its codomain.
        for info in grid.tables() {
            let c = grid.provider().gather(&info.offset).expect("every table of a grid is a gather");
            assert_eq!(c.shape(), info.shape);
        }
    }
});
