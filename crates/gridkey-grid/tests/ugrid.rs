//! Small UGRID meshes written as netCDF-3 (`netcdf3`): the tables derived from a mixed mesh
//! against uxarray (`data/golden/ugrid-mixed-v1.json`, from `data/tools/ugrid_mixed_witness.py`),
//! tables given in the file in other slot orders and dimension orders, and files whose tables
//! contradict each other (ADR 0015).

use crate::common;

use std::path::{Path, PathBuf};

use common::{text, ugrid_mixed, Attr, Data, Fixture, Var, MIXED_FACES, MIXED_NODES};
use gridkey_digest::digest_table;
use gridkey_grid::{read_grid, Grid, GridError, GridKind, GridSizes};
use gridkey_offsets::IndexTable;
use ndarray::Array2;
use serde_json::Value;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/golden/ugrid-mixed-v1.json");
const OFFSETS: [&str; 7] = ["C2E", "C2V", "C2E2C", "E2C", "E2V", "V2E", "V2C"];

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(GOLDEN).unwrap()).unwrap()
}

/// The witness's table `offset` of the mixed mesh.
fn golden_table(offset: &str) -> Array2<i32> {
    let g = golden();
    let rows: Vec<Vec<i32>> = serde_json::from_value(g["tables"][offset]["values"].clone()).unwrap();
    let k = rows.first().map_or(0, Vec::len);
    Array2::from_shape_vec((rows.len(), k), rows.concat()).unwrap()
}

fn table(grid: &Grid, offset: &str) -> Array2<i32> {
    match grid.provider().gather(offset).unwrap().host_table(offset).unwrap() {
        IndexTable::I32(t) => t.to_owned(),
        IndexTable::I64(_) => panic!("{offset} is not int32"),
    }
}

fn write(fixture: &Fixture, dir: &Path, name: &str) -> PathBuf {
    fixture.write_in(dir, name)
}

/// The single place that reads a fixture expected to fail, and checks the message names the file.
fn read_err(fixture: &Fixture, name: &str) -> GridError {
    let dir = tempfile::tempdir().unwrap();
    let path = write(fixture, dir.path(), name);
    let err = read_grid(&path).expect_err("reading must fail");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "message names the file: {msg}");
    assert!(!msg.ends_with('.'), "message ends without a period: {msg}");
    err
}

fn read_ok(fixture: &Fixture) -> Grid {
    let dir = tempfile::tempdir().unwrap();
    let path = write(fixture, dir.path(), "mesh.nc");
    read_grid(&path).expect("the mesh reads")
}

/// Checks every table of `grid` against the witness, values and digest.
fn check_all_against_witness(grid: &Grid) {
    let g = golden();
    for offset in OFFSETS {
        let t = table(grid, offset);
        assert_eq!(t, golden_table(offset), "{offset}");
        assert_eq!(digest_table(t.view()).to_hex(), g["tables"][offset]["digest"].as_str().unwrap(), "{offset}");
    }
}

/// The witness's tables, 0-based with -1, as a variable of the fixture in `(n, k)` order.
fn table_var(name: &str, dims: &[&str], t: &Array2<i32>) -> Var {
    Var::i32(name, dims, t.iter().copied().collect()).attr("_FillValue", Attr::I32(-1))
}

/// The mixed mesh with every UGRID connectivity in the file, consistent with face-node but in
/// other slot orders: each face's edges rotated by one, each edge's faces swapped when it has
/// two, each face's neighbours reversed, edge 0 stored (1, 0).
fn with_every_table() -> Fixture {
    let mut f = ugrid_mixed();
    let mut e2v = golden_table("E2V");
    e2v.row_mut(0).assign(&ndarray::arr1(&[1, 0]));
    let mut c2e = golden_table("C2E");
    for mut row in c2e.rows_mut() {
        let n = row.iter().filter(|&&x| x != -1).count();
        let valid: Vec<i32> = row.iter().take(n).copied().collect();
        for j in 0..n {
            row[j] = valid[(j + 1) % n];
        }
    }
    let mut e2c = golden_table("E2C");
    for mut row in e2c.rows_mut() {
        if row[1] != -1 {
            row.swap(0, 1);
        }
    }
    let mut c2e2c = golden_table("C2E2C");
    for mut row in c2e2c.rows_mut() {
        let n = row.iter().filter(|&&x| x != -1).count();
        let valid: Vec<i32> = row.iter().take(n).rev().copied().collect();
        for j in 0..n {
            row[j] = valid[j];
        }
    }
    f.dims.push(("nMesh_edge".into(), e2v.nrows()));
    f.dims.push(("Two".into(), 2));
    let topo = f.var_mut("mesh");
    for (attr, var) in [
        ("edge_node_connectivity", "mesh_edge_nodes"),
        ("face_edge_connectivity", "mesh_face_edges"),
        ("edge_face_connectivity", "mesh_edge_faces"),
        ("face_face_connectivity", "mesh_face_links"),
    ] {
        topo.set_attr(attr, text(var));
    }
    topo.set_attr("edge_dimension", text("nMesh_edge"));
    f.vars.push(table_var("mesh_edge_nodes", &["nMesh_edge", "Two"], &e2v));
    f.vars.push(table_var("mesh_face_edges", &["nMesh_face", "nMaxMesh_face_nodes"], &c2e));
    f.vars.push(table_var("mesh_edge_faces", &["nMesh_edge", "Two"], &e2c));
    // Stored neighbour axis first: face_dimension says which axis is the faces.
    f.vars.push(table_var("mesh_face_links", &["nMaxMesh_face_nodes", "nMesh_face"], &c2e2c.t().to_owned()));
    f
}

/// Sets canonical entry `[row, column]` of the int variable `name`, whichever axis it stores
/// first (the neighbour axis `nMaxMesh_face_nodes` first, or the domain first).
fn set(f: &mut Fixture, name: &str, row: usize, column: usize, value: i32) {
    let size = |dim: &str| f.dims.iter().find(|(n, _)| n == dim).unwrap().1;
    let v = f.vars.iter().find(|v| v.name == name).unwrap();
    let second = size(&v.dims[1]);
    let i = if v.dims[0] == "nMaxMesh_face_nodes" { column * second + row } else { row * second + column };
    let Data::I32(d) = &mut f.var_mut(name).data else { panic!("{name} is not int") };
    d[i] = value;
}

#[test]
fn derived_tables_of_a_mixed_mesh_are_uxarrays() {
    let grid = read_ok(&ugrid_mixed());
    assert_eq!(grid.kind(), GridKind::Ugrid);
    assert_eq!(grid.sizes(), GridSizes { cells: 5, edges: 13, vertices: MIXED_NODES });
    let offsets: Vec<&str> = grid.provider().entries().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(offsets, ["C2E", "C2V", "C2E2C", "E2C", "E2V", "V2E", "V2C", "Koff"]);
    check_all_against_witness(&grid);
    // Padded rows and boundaries: skip values exactly where a -1 is.
    for offset in OFFSETS {
        let info = grid.table_info(offset).unwrap();
        assert_eq!(grid.provider().gather(offset).unwrap().skip_value(), (info.skip_count > 0).then_some(-1));
        assert_eq!(info.derived, offset != "C2V", "{offset}");
    }
    assert_eq!(grid.provider().gather("E2V").unwrap().skip_value(), None);
}

#[test]
fn either_dimension_order_and_any_start_index() {
    // Face-node stored (n_face, k), 0-based, fill -1, no face_dimension attribute.
    let mut f = ugrid_mixed();
    let mut rows = vec![-1; MIXED_FACES.len() * 6];
    for (i, nodes) in MIXED_FACES.iter().enumerate() {
        rows[i * 6..i * 6 + nodes.len()].copy_from_slice(nodes);
    }
    f.var_mut("mesh").remove_attr("face_dimension");
    *f.var_mut("mesh_face_nodes") = Var::i32("mesh_face_nodes", &["nMesh_face", "nMaxMesh_face_nodes"], rows.clone())
        .attr("start_index", Attr::I32(0))
        .attr("_FillValue", Attr::I32(-1));
    check_all_against_witness(&read_ok(&f));

    // A short (16-bit) table with a short _FillValue and start_index 1.
    let shorts: Vec<i16> = rows.iter().map(|&x| if x == -1 { i16::MIN } else { x as i16 + 1 }).collect();
    let v = f.var_mut("mesh_face_nodes");
    v.data = Data::I16(shorts);
    v.set_attr("start_index", Attr::I32(1));
    v.set_attr("_FillValue", Attr::I16(i16::MIN));
    check_all_against_witness(&read_ok(&f));
}

#[test]
fn tables_in_the_file_are_used_as_given_when_they_agree() {
    let f = with_every_table();
    let grid = read_ok(&f);
    for offset in OFFSETS {
        assert!(!grid.table_info(offset).unwrap().derived || ["V2E", "V2C"].contains(&offset), "{offset}");
    }
    // The file's slot orders are kept, not replaced by the derived ones.
    assert_eq!(table(&grid, "E2V").row(0).to_vec(), [1, 0]);
    assert_eq!(table(&grid, "C2E").row(0).to_vec(), [3, 5, 8, 10, 1, 0]);
    assert_eq!(table(&grid, "E2C").row(0).to_vec(), [1, 0]);
    assert_eq!(table(&grid, "C2E2C").row(0).to_vec(), [3, 2, 1, -1, -1, -1]);
    assert_eq!(grid.table_info("C2E2C").unwrap().variable, "mesh_face_links");
    // Derived from the file's edges: the same numbering as the witness's.
    assert_eq!(table(&grid, "V2E"), golden_table("V2E"));
    assert_eq!(table(&grid, "V2C"), golden_table("V2C"));
}

/// Checks a [`GridError::Contradiction`]: the variable, the element and parts of the message.
fn check_contradiction(f: &Fixture, variable: &str, at: &str, parts: &[&str]) {
    let err = read_err(f, "contradicting.nc");
    match &err {
        GridError::Contradiction { variable: v, at: a, .. } => {
            assert_eq!((v.as_str(), a.as_str()), (variable, at), "{err}");
        }
        other => panic!("expected Contradiction, got {other:?}"),
    }
    let msg = err.to_string();
    for part in parts {
        assert!(msg.contains(part), "message lacks {part:?}: {msg}");
    }
}

#[test]
fn a_face_edge_that_is_not_a_side_of_the_face_is_refused() {
    let mut f = with_every_table();
    set(&mut f, "mesh_face_edges", 2, 0, 12); // edge 12 joins nodes 7 and 8, not a side of face 2
    check_contradiction(
        &f,
        "mesh_face_edges",
        "face 2",
        &[
            "`mesh_face_edges` contradicts `mesh_face_nodes` and `mesh_edge_nodes` at face 2",
            "expected the edges [3, 4, 6]",
        ],
    );
}

#[test]
fn an_edge_face_that_disagrees_with_face_edge_is_refused() {
    let mut f = with_every_table();
    // Edge 3 has faces 0 and 2 (stored swapped: 2, 0); say 4 instead of 2.
    set(&mut f, "mesh_edge_faces", 3, 0, 4);
    check_contradiction(
        &f,
        "mesh_edge_faces",
        "face 4 on edge 3",
        &["edge 3 the faces [0, 4]", "expected the faces [0, 2]"],
    );
}

#[test]
fn a_face_face_that_disagrees_with_edge_face_is_refused() {
    let mut f = with_every_table();
    // Face 3's neighbours are 0 and 4 (stored reversed: 4, 0); say 2 instead of 4.
    set(&mut f, "mesh_face_links", 3, 0, 2);
    check_contradiction(&f, "mesh_face_links", "face 3", &["the neighbours [0, 2]", "expected the faces [0, 4]"]);
}

#[test]
fn an_edge_node_table_missing_a_side_is_refused() {
    let mut f = with_every_table();
    f.var_mut("mesh").remove_attr("face_edge_connectivity");
    set(&mut f, "mesh_edge_nodes", 12, 0, 0); // edge 12 (7, 8) becomes (0, 8): face 4 loses its side 7-8
    check_contradiction(&f, "mesh_edge_nodes", "face 4", &["no edge joining its nodes 7 and 8"]);
}

#[test]
fn an_edge_that_is_a_side_of_no_face_is_refused() {
    let mut f = ugrid_mixed();
    let mut e2v = golden_table("E2V").into_raw_vec_and_offset().0;
    e2v.extend_from_slice(&[4, 8]); // a 14th edge, side of no face
    f.dims.push(("nMesh_edge".into(), 14));
    f.dims.push(("Two".into(), 2));
    f.var_mut("mesh").set_attr("edge_node_connectivity", text("mesh_edge_nodes"));
    f.vars.push(Var::i32("mesh_edge_nodes", &["nMesh_edge", "Two"], e2v));
    check_contradiction(&f, "mesh_edge_nodes", "edge 13", &["a side of no face"]);
}

/// Checks a [`GridError::BadEntry`] on `variable` at `at`.
fn check_bad_entry(f: &Fixture, variable: &str, at: &str, expected: &str) {
    let err = read_err(f, "bad_entry.nc");
    match &err {
        GridError::BadEntry { variable: v, at: a, expected: e, .. } => {
            assert_eq!((v.as_str(), a.as_str()), (variable, at), "{err}");
            assert!(e.contains(expected), "{err}");
        }
        other => panic!("expected BadEntry, got {other:?}"),
    }
}

#[test]
fn faces_that_are_not_polygons_are_refused() {
    let mut f = ugrid_mixed();
    set(&mut f, "mesh_face_nodes", 1, 2, -999); // [1, 0, fill, 7]
    check_bad_entry(&f, "mesh_face_nodes", "face 1", "only after the face's last node");

    let mut f = ugrid_mixed();
    set(&mut f, "mesh_face_nodes", 2, 2, -999); // a triangle loses a node
    check_bad_entry(&f, "mesh_face_nodes", "face 2", "at least three nodes");

    let mut f = ugrid_mixed();
    set(&mut f, "mesh_face_nodes", 1, 3, 1); // [1, 0, 6, 1] (1-based file values: node 0 twice)
    check_bad_entry(&f, "mesh_face_nodes", "face 1", "each node of a face once");
}

#[test]
fn an_edge_on_three_faces_is_refused() {
    let mut f = ugrid_mixed();
    // A sixth face [0, 1, 8] shares the side 0-1 with faces 0 and 1.
    f.dims.iter_mut().find(|(n, _)| n == "nMesh_face").unwrap().1 = 6;
    let mut rows = vec![-999; 6 * 6];
    for (i, nodes) in MIXED_FACES.iter().chain([&[0, 1, 8][..]].iter()).enumerate() {
        for (j, &v) in nodes.iter().enumerate() {
            rows[j * 6 + i] = v + 1;
        }
    }
    f.var_mut("mesh_face_nodes").data = Data::I32(rows);
    check_bad_entry(&f, "mesh_face_nodes", "face 5", "at most two faces on an edge");
}

#[test]
fn duplicated_and_broken_edges_are_refused() {
    let mut f = with_every_table();
    set(&mut f, "mesh_edge_nodes", 12, 0, 2);
    set(&mut f, "mesh_edge_nodes", 12, 1, 8); // edge 12 = (2, 8), as edge 7
    check_bad_entry(&f, "mesh_edge_nodes", "edge 12", "each pair of nodes joined by one edge");

    let mut f = with_every_table();
    set(&mut f, "mesh_edge_nodes", 5, 1, -1);
    check_bad_entry(&f, "mesh_edge_nodes", "edge 5", "two nodes");
}

#[test]
fn an_index_past_the_nodes_names_the_range_the_start_index_gives() {
    let mut f = ugrid_mixed();
    set(&mut f, "mesh_face_nodes", 3, 1, 10); // 1-based: nodes are 1..=9
    let err = read_err(&f, "out_of_range.nc");
    assert!(
        matches!(&err, GridError::IndexOutOfRange { variable, offset, row: 3, column: 1, value: 10, codomain_size: 9, .. }
            if variable == "mesh_face_nodes" && offset == "C2V"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("expected 1..=9 (an index into Vertex, start_index 1) or the _FillValue -999"), "{msg}");

    // Without a _FillValue every entry must be an index.
    let mut f = ugrid_mixed();
    f.var_mut("mesh_face_nodes").remove_attr("_FillValue");
    let err = read_err(&f, "no_fill.nc");
    assert!(matches!(&err, GridError::IndexOutOfRange { value: -999, .. }), "{err:?}");
    assert!(err.to_string().contains("no _FillValue"), "{err}");
}

#[test]
fn a_one_based_table_without_start_index_is_refused_naming_the_attribute() {
    // FESOM writes 1-based tables without `start_index`: read as 0-based, the last node is past
    // the range, and the message says which attribute is missing.
    let mut f = ugrid_mixed();
    f.var_mut("mesh_face_nodes").remove_attr("start_index");
    let err = read_err(&f, "no_start_index.nc");
    assert!(matches!(&err, GridError::IndexOutOfRange { value: 9, codomain_size: 9, .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("0..=8 (an index into Vertex, 0-based since the variable has no start_index attribute"),
        "{msg}"
    );
    assert!(msg.contains("a 1-based table needs start_index = 1"), "{msg}");
}

/// Checks a [`GridError::BadAttribute`] on `variable`'s `attribute`.
fn check_bad_attribute(f: &Fixture, variable: &str, attribute: &str) {
    let err = read_err(f, "bad_attribute.nc");
    assert!(
        matches!(&err, GridError::BadAttribute { variable: v, attribute: a, .. } if v == variable && a == attribute),
        "{err:?}"
    );
}

#[test]
fn topology_attributes_are_checked() {
    let mut f = ugrid_mixed();
    f.var_mut("mesh").remove_attr("face_node_connectivity");
    check_bad_attribute(&f, "mesh", "face_node_connectivity");

    let mut f = ugrid_mixed();
    f.var_mut("mesh").set_attr("topology_dimension", Attr::I32(1));
    check_bad_attribute(&f, "mesh", "topology_dimension");

    let mut f = ugrid_mixed();
    f.var_mut("mesh").remove_attr("node_coordinates");
    check_bad_attribute(&f, "mesh", "node_coordinates");
    // node_dimension replaces node_coordinates.
    f.var_mut("mesh").set_attr("node_dimension", text("nMesh_node"));
    check_all_against_witness(&read_ok(&f));

    let mut f = ugrid_mixed();
    f.var_mut("mesh_face_nodes").set_attr("_FillValue", Attr::F64(-999.0));
    check_bad_attribute(&f, "mesh_face_nodes", "_FillValue");

    let mut f = ugrid_mixed();
    f.var_mut("mesh_face_nodes").set_attr("start_index", text("one"));
    check_bad_attribute(&f, "mesh_face_nodes", "start_index");

    // Face-edge without edge-node: its edge numbers mean nothing.
    let mut f = with_every_table();
    f.var_mut("mesh").remove_attr("edge_node_connectivity");
    check_bad_attribute(&f, "mesh", "edge_node_connectivity");

    let mut f = ugrid_mixed();
    f.var_mut("mesh").set_attr("face_node_connectivity", text("no_such_variable"));
    let err = read_err(&f, "missing.nc");
    assert!(matches!(&err, GridError::MissingVariable { variable, .. } if variable == "no_such_variable"), "{err:?}");

    let mut f = ugrid_mixed();
    f.var_mut("mesh").set_attr("face_dimension", text("nMesh_node"));
    let err = read_err(&f, "wrong_face_dimension.nc");
    assert!(matches!(&err, GridError::WrongShape { variable, .. } if variable == "mesh_face_nodes"), "{err:?}");
}

#[test]
fn a_float_face_node_table_is_the_wrong_type() {
    let mut f = ugrid_mixed();
    let v = f.var_mut("mesh_face_nodes");
    v.data = Data::F64(vec![1.0; 30]);
    v.remove_attr("_FillValue");
    let err = read_err(&f, "float.nc");
    assert!(
        matches!(&err, GridError::WrongType { variable, expected: "an integer type", found, .. }
            if variable == "mesh_face_nodes" && found == "double"),
        "{err:?}"
    );
}

#[test]
fn two_meshes_in_one_file_are_refused() {
    let mut f = ugrid_mixed();
    let second = f.var_mut("mesh").clone();
    f.vars.push(Var { name: "mesh2".into(), ..second });
    let err = read_err(&f, "two_meshes.nc");
    assert!(matches!(&err, GridError::SeveralMeshes { names, .. } if names == &["mesh", "mesh2"]), "{err:?}");
}
