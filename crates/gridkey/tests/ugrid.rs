//! The `gridkey` binary on UGRID meshes and netCDF-4 grids: `tables --json` gives the witness's
//! digests, `run` verifies every program the mesh supports, a mesh whose tables contradict each
//! other is refused naming the variable and a face, and the ICON grid written as netCDF-4 by the
//! netCDF C library gives the digests and keys of its netCDF-3 original.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::{data, gridkey_command};
use netcdf3::{DataSet, DataType, FileWriter, Version};
use serde_json::Value;

const MESHES: [&str; 3] = ["outCSne30.ug", "outRLL1deg.ug", "quad-hexagon.grid.nc"];

fn gridkey(args: &[&str]) -> Output {
    gridkey_command(args, &[]).output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(data("golden/table-digests-v1.json")).unwrap()).unwrap()
}

/// `gridkey tables --grid path --json` against the golden tables of `golden_name`.
fn check_tables(path: &Path, golden_name: &str) {
    let out = gridkey(&["tables", "--grid", path.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let rows: Vec<serde_json::Map<String, Value>> = serde_json::from_slice(&out.stdout).unwrap();
    let golden = golden();
    let expect = golden["grids"][golden_name]["tables"].as_object().unwrap();
    assert_eq!(rows.len(), expect.len(), "{golden_name}");
    for row in rows {
        let g = &expect[row["offset"].as_str().unwrap()];
        for field in ["domain", "codomain", "shape", "dtype", "skip_count", "digest"] {
            assert_eq!(row[field], g[field], "{golden_name} {} {field}", row["offset"]);
        }
    }
}

#[test]
fn tables_json_gives_the_witness_digests_of_the_ugrid_meshes() {
    for mesh in MESHES {
        check_tables(&data(&format!("grids/{mesh}")), mesh);
    }
}

#[test]
fn the_main_job_verifies_every_program_on_ugrid_meshes() {
    for mesh in ["quad-hexagon.grid.nc", "outCSne30.ug"] {
        let cache = tempfile::tempdir().unwrap();
        let grid = data(&format!("grids/{mesh}"));
        let args = ["run", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.path().to_str().unwrap()];
        let first = gridkey_command(&args, &[("GRIDKEY_BUILD_JOBS_MODE", "thread"), ("GRIDKEY_BUILD_JOBS", "2")])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&first);
        assert!(first.status.success(), "{mesh}\n{stdout}\n{stderr}");
        assert_eq!(stdout.lines().filter(|l| l.ends_with("  verified")).count(), 8, "{stdout}");
        assert!(stdout.contains("8/8 programs verified"), "{stdout}");
        assert!(!stdout.contains("skipped"), "every program of the main job runs on a UGRID mesh: {stdout}");

        let second = gridkey_command(&[&args[..], &["--json"]].concat(), &[("GRIDKEY_BUILD_JOBS_MODE", "process")])
            .output()
            .unwrap();
        assert!(second.status.success(), "{:?}", text(&second));
        let report: Value = serde_json::from_slice(&second.stdout).unwrap();
        assert_eq!(report["skipped"], Value::Array(vec![]), "{mesh}");
        let programs = report["programs"].as_array().unwrap();
        assert_eq!(programs.len(), 8);
        assert!(programs.iter().all(|p| p["verified"] == true && p["cache_hit"] == true), "{mesh}: {report}");
    }
}

/// Two triangles sharing the edge 1-2, with a face-face table that says face 0 is its own
/// neighbour: the tables contradict each other.
fn write_contradicting_mesh(path: &Path) {
    let mut ds = DataSet::new();
    ds.add_fixed_dim("n_node", 4).unwrap();
    ds.add_fixed_dim("n_face", 2).unwrap();
    ds.add_fixed_dim("n_max", 3).unwrap();
    ds.add_var("mesh", &[] as &[&str], DataType::I32).unwrap();
    for (name, value) in [
        ("cf_role", "mesh_topology"),
        ("node_dimension", "n_node"),
        ("face_node_connectivity", "faces"),
        ("face_face_connectivity", "neighbours"),
    ] {
        ds.add_var_attr_string("mesh", name, value).unwrap();
    }
    ds.add_var_attr_i32("mesh", "topology_dimension", vec![2]).unwrap();
    for var in ["faces", "neighbours"] {
        ds.add_var(var, &["n_face", "n_max"], DataType::I32).unwrap();
        ds.add_var_attr_i32(var, "_FillValue", vec![-1]).unwrap();
    }
    let mut w = FileWriter::open(path).unwrap();
    w.set_def(&ds, Version::Offset64Bit, 0).unwrap();
    w.write_var_i32("mesh", &[0]).unwrap();
    w.write_var_i32("faces", &[0, 1, 2, 1, 3, 2]).unwrap();
    w.write_var_i32("neighbours", &[0, -1, -1, 0, -1, -1]).unwrap();
    w.close().unwrap();
}

#[test]
fn a_mesh_whose_tables_contradict_each_other_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contradicting.nc");
    write_contradicting_mesh(&path);
    for command in ["tables", "run"] {
        let cache = dir.path().join("cache");
        let mut args = vec![command, "--grid", path.to_str().unwrap()];
        if command == "run" {
            args.extend(["--cache-dir", cache.to_str().unwrap()]);
        }
        let out = gridkey(&args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        for part in [
            path.to_str().unwrap(),
            "variable `neighbours` contradicts `faces` at face 0",
            "the neighbours [0]",
            "expected the faces [1]",
        ] {
            assert!(stderr.contains(part), "{part:?} not in {stderr}");
        }
    }
}

/// The Python that has netCDF4, or `None` after saying why the test skips (see
/// `crates/gridkey-grid/tests/netcdf4_python.rs`).
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

#[test]
fn the_icon_grid_as_netcdf4_gives_the_digests_and_keys_of_the_netcdf3_original() {
    let Some(python) = python("the_icon_grid_as_netcdf4_gives_the_digests_and_keys_of_the_netcdf3_original") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nc3 = data("grids/icon_grid_0013_R02B04_R.nc");
    let nc4 = dir.path().join("icon_grid_0013_R02B04_R.nc4");
    let out = Command::new(&python)
        .arg(data("tools/netcdf4_fixtures.py"))
        .args(["to-netcdf4", nc3.to_str().unwrap(), nc4.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(&std::fs::read(&nc4).unwrap()[..4], b"\x89HDF");
    check_tables(&nc4, "icon_grid_0013_R02B04_R.nc");

    let keys = |grid: &Path| -> Value {
        let cache = tempfile::tempdir().unwrap();
        let out = gridkey(&["keys", "--grid", grid.to_str().unwrap(), "--cache-dir", cache.path().to_str().unwrap()]);
        assert!(out.status.success(), "{:?}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (from_nc3, from_nc4) = (keys(&nc3), keys(&nc4));
    assert_eq!(from_nc3["keys"].as_object().unwrap().len(), 8);
    assert_eq!(from_nc3, from_nc4, "the same table digests and translation keys");
}
