//! netCDF-4 files written by the netCDF C library (through netCDF4-python,
//! `data/tools/netcdf4_fixtures.py`) read by the pure-Rust reader: the ICON and MPAS grids
//! converted to compressed netCDF-4 give the digests of their netCDF-3 originals, and the mixed
//! UGRID mesh gives uxarray's tables whatever the integer type of its face-node table, unsigned
//! included.
//!
//! Needs a Python with netCDF4 and numpy: the interpreter named by `GRIDKEY_TEST_PYTHON`, else
//! `python3`. `cargo xtask test` (the README's test command, and CI's) sets up a virtual
//! environment with netCDF4 and requires it (`GRIDKEY_TEST_REQUIRE` names `netcdf4`), so there
//! these tests run or fail; under a plain `cargo test` without netCDF4 each says that it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use gridkey_digest::digest_table;
use gridkey_grid::read_grid;
use gridkey_offsets::IndexTable;
use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/");

/// The Python that has netCDF4, or `None` after saying why the test skips.
fn python(test: &str) -> Option<String> {
    let python = std::env::var("GRIDKEY_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let ok = Command::new(&python).args(["-c", "import netCDF4, numpy"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        let required = std::env::var("GRIDKEY_TEST_REQUIRE").is_ok_and(|r| r.split(',').any(|s| s == "netcdf4"));
        assert!(!required, "netCDF4 is required (GRIDKEY_TEST_REQUIRE) but {python} cannot import it");
        eprintln!(
            "{test}: skipped: {python} cannot import netCDF4 and numpy; run `cargo xtask test`, which sets up a \
             virtual environment with them (or set GRIDKEY_TEST_PYTHON to a Python that has them)"
        );
        return None;
    }
    Some(python)
}

/// Runs `data/tools/netcdf4_fixtures.py` with `args`.
fn fixtures(python: &str, args: &[&str]) {
    let out = Command::new(python)
        .arg(format!("{DATA}tools/netcdf4_fixtures.py"))
        .args(args)
        .output()
        .expect("run netcdf4_fixtures.py");
    assert!(out.status.success(), "netcdf4_fixtures.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn digests(path: &Path) -> Vec<(String, String)> {
    let grid = read_grid(path).unwrap_or_else(|e| panic!("{e}"));
    grid.tables()
        .iter()
        .map(|info| {
            let IndexTable::I32(t) = grid.provider().gather(&info.offset).unwrap().host_table(&info.offset).unwrap()
            else {
                panic!("{} is not int32", info.offset)
            };
            (info.offset.clone(), digest_table(t.view()).to_hex())
        })
        .collect()
}

#[test]
fn icon_and_mpas_as_compressed_netcdf4_give_the_netcdf3_digests() {
    let Some(python) = python("icon_and_mpas_as_compressed_netcdf4_give_the_netcdf3_digests") else { return };
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{DATA}golden/table-digests-v1.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for name in ["icon_grid_0013_R02B04_R.nc", "oQU480.231010.nc"] {
        let nc4: PathBuf = dir.path().join(name);
        fixtures(&python, &["to-netcdf4", &format!("{DATA}grids/{name}"), nc4.to_str().unwrap()]);
        assert_eq!(&std::fs::read(&nc4).unwrap()[..8], b"\x89HDF\r\n\x1a\n", "{name} is HDF5 now");
        let from_nc4 = digests(&nc4);
        assert_eq!(from_nc4, digests(Path::new(&format!("{DATA}grids/{name}"))), "{name}");
        for (offset, digest) in &from_nc4 {
            assert_eq!(
                golden["grids"][name]["tables"][offset]["digest"].as_str(),
                Some(digest.as_str()),
                "{name} {offset}"
            );
        }
    }
}

#[test]
fn the_mixed_mesh_in_every_integer_type_gives_uxarrays_tables() {
    let Some(python) = python("the_mixed_mesh_in_every_integer_type_gives_uxarrays_tables") else { return };
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{DATA}golden/ugrid-mixed-v1.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for dtype in ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"] {
        let path = dir.path().join(format!("mixed-{dtype}.nc"));
        fixtures(&python, &["mixed-ugrid", path.to_str().unwrap(), dtype]);
        for (offset, digest) in digests(&path) {
            assert_eq!(golden["tables"][&offset]["digest"].as_str(), Some(digest.as_str()), "{dtype} {offset}");
        }
    }
}
