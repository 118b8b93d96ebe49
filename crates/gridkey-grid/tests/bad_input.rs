//! Bad input: every kind of broken file is a typed error that names the file and says what was
//! wrong, and nothing panics.

use crate::common;

use std::path::{Path, PathBuf};

use common::{icon, icon_raw, mpas, Data, Var, ICON_CELLS, ICON_EDGES, ICON_VERTICES};
use gridkey_grid::{read_grid, GridError, GridKind};
use gridkey_offsets::IndexTable;
use ndarray::Array2;
use proptest::prelude::*;

const MPAS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/grids/oQU480.231010.nc");

fn read_err(path: &Path) -> GridError {
    let err = read_grid(path).expect_err("reading must fail");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "message names the file: {msg}");
    assert!(!msg.ends_with('.'), "message ends without a period: {msg}");
    err
}

fn write_bytes(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn table(grid: &gridkey_grid::Grid, offset: &str) -> Array2<i32> {
    match grid.provider().gather(offset).unwrap().host_table(offset).unwrap() {
        IndexTable::I32(t) => t.to_owned(),
        IndexTable::I64(_) => panic!("{offset} is not int32"),
    }
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-grid.nc");
    let err = read_err(&path);
    assert!(matches!(&err, GridError::Open { source, .. } if source.kind() == std::io::ErrorKind::NotFound), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("cannot read grid file"), "{msg}");
    assert!(msg.contains("pass --grid with an ICON, MPAS or UGRID grid (netCDF-3 or netCDF-4)"), "{msg}");
}

#[test]
fn directory() {
    let dir = tempfile::tempdir().unwrap();
    let err = read_err(dir.path());
    assert!(matches!(err, GridError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("directory"), "{err}");
}

#[test]
fn text_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_bytes(dir.path(), "grid.txt", b"this is not a grid\n");
    let err = read_err(&path);
    assert!(matches!(&err, GridError::NotNetcdf { found, .. } if found.contains("\"this\"")), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("is not a netCDF file"), "{msg}");
    assert!(msg.contains("--grid"), "{msg}");
}

#[test]
fn empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_bytes(dir.path(), "empty.nc", b"");
    let err = read_err(&path);
    assert!(matches!(&err, GridError::NotNetcdf { found, .. } if found.contains("empty")), "{err:?}");
}

#[test]
fn a_damaged_netcdf4_file_is_a_reader_error_without_conversion_advice() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = b"\x89HDF\r\n\x1a\n".to_vec();
    bytes.resize(4096, 0);
    let path = write_bytes(dir.path(), "icon_grid_nc4.nc", &bytes);
    let err = read_err(&path);
    assert!(matches!(&err, GridError::Netcdf { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("the netCDF reader cannot read the file"), "{msg}");
    assert!(!msg.contains("nccopy"), "{msg}");
}

#[test]
fn an_hdf5_superblock_after_a_user_block_is_found() {
    // A netCDF-4 file behind a 512-byte user block: recognised as HDF5, then read (here it is
    // only a signature, so the reader refuses it).
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = vec![b'u'; 512];
    bytes.extend_from_slice(b"\x89HDF\r\n\x1a\n");
    bytes.resize(2048, 0);
    let path = write_bytes(dir.path(), "user_block.nc", &bytes);
    let err = read_err(&path);
    assert!(matches!(&err, GridError::Netcdf { .. }), "{err:?}");
}

#[test]
fn a_damaged_cdf5_file_is_a_reader_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = b"CDF\x05".to_vec();
    bytes.resize(64, 0xff);
    let path = write_bytes(dir.path(), "grid_cdf5.nc", &bytes);
    let err = read_err(&path);
    assert!(matches!(&err, GridError::Netcdf { .. }), "{err:?}");
    assert!(!err.to_string().contains("nccopy"), "{err}");
}

#[test]
fn truncated_copies_of_the_mpas_grid() {
    let full = std::fs::read(MPAS).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Cut inside the header: the header walk reports where.
    for cut in [8, 64, 1000] {
        let path = write_bytes(dir.path(), &format!("cut{cut}.nc"), &full[..cut]);
        let err = read_err(&path);
        assert!(
            matches!(&err, GridError::Malformed { detail, .. } if detail.contains("cut off")),
            "cut {cut}: {err:?}"
        );
    }
    // Cut inside the data: the first variable that does not fit is named.
    for cut in [full.len() / 3, full.len() / 2, full.len() - 1] {
        let path = write_bytes(dir.path(), &format!("cut{cut}.nc"), &full[..cut]);
        let err = read_err(&path);
        match &err {
            GridError::Truncated { variable, end, file_len, .. } => {
                assert!(*end > *file_len);
                assert_eq!(*file_len, cut as u64);
                let msg = err.to_string();
                assert!(msg.contains("truncated") && msg.contains(&format!("`{variable}`")), "{msg}");
            }
            other => panic!("cut {cut}: expected Truncated, got {other:?}"),
        }
    }
    // Very short cuts are not even a signature.
    let path = write_bytes(dir.path(), "cut3.nc", &full[..3]);
    assert!(matches!(read_err(&path), GridError::NotNetcdf { .. }));
}

#[test]
fn synthetic_icon_grid_is_transposed_and_rebased() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = icon();
    let path = fixture.write_in(dir.path(), "icon.nc");
    let grid = read_grid(&path).expect("synthetic ICON grid reads");
    assert_eq!(grid.kind(), GridKind::Icon);
    assert_eq!(
        (grid.sizes().cells, grid.sizes().edges, grid.sizes().vertices),
        (ICON_CELLS, ICON_EDGES, ICON_VERTICES)
    );
    let offsets: Vec<&str> = grid.provider().entries().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(offsets, ["C2E", "C2V", "C2E2C", "E2C", "E2V", "V2E", "V2C", "V2E2V", "Koff"]);
    let raw = icon_raw(3, ICON_CELLS, ICON_EDGES, 3);
    let c2e = table(&grid, "C2E");
    assert_eq!(c2e.dim(), (ICON_CELLS, 3));
    for i in 0..ICON_CELLS {
        for j in 0..3 {
            assert_eq!(c2e[[i, j]], raw[j * ICON_CELLS + i] - 1, "C2E[{i}, {j}]");
        }
    }
    // Vertex tables: slot 5 is 0 in the file, -1 here, and the skip value is set.
    let v2e = table(&grid, "V2E");
    assert!(v2e.column(5).iter().all(|&x| x == -1));
    assert_eq!(grid.table_info("V2E").unwrap().skip_count, ICON_VERTICES);
    assert_eq!(grid.provider().gather("V2E").unwrap().skip_value(), Some(-1));
    assert_eq!(grid.provider().gather("C2E").unwrap().skip_value(), None);
}

#[test]
fn out_of_range_index_names_variable_and_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = icon();
    // Canonical C2E[1, 2] is stored at edge_of_cell[2, 1]: one past the last edge.
    let Data::I32(d) = &mut fixture.var_mut("edge_of_cell").data else { unreachable!() };
    d[2 * ICON_CELLS + 1] = ICON_EDGES as i32 + 1;
    let path = fixture.write_in(dir.path(), "icon_bad_edge.nc");
    let err = read_err(&path);
    match &err {
        GridError::IndexOutOfRange { variable, offset, row, column, value, codomain, codomain_size, .. } => {
            assert_eq!(variable, "edge_of_cell");
            assert_eq!(offset, "C2E");
            assert_eq!((*row, *column), (1, 2));
            assert_eq!(*value, ICON_EDGES as i128 + 1);
            assert_eq!(codomain, "Edge");
            assert_eq!(*codomain_size, ICON_EDGES);
        }
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }
    let msg = err.to_string();
    for part in ["`edge_of_cell`", "C2E", "row 1, column 2", "has 8", "1..=7", "index into Edge", "0 for no neighbour"]
    {
        assert!(msg.contains(part), "message lacks {part:?}: {msg}");
    }
    assert!(!msg.contains("a Edge"), "no article before a dimension name: {msg}");
}

#[test]
fn negative_index_is_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = icon();
    let Data::I32(d) = &mut fixture.var_mut("cells_of_vertex").data else { unreachable!() };
    d[3 * ICON_VERTICES] = -1; // canonical V2C[0, 3]
    let path = fixture.write_in(dir.path(), "icon_negative.nc");
    let err = read_err(&path);
    assert!(
        matches!(&err, GridError::IndexOutOfRange { variable, row: 0, column: 3, value: -1, .. } if variable == "cells_of_vertex"),
        "{err:?}"
    );
}

#[test]
fn variable_of_wrong_type() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = icon();
    let v = fixture.var_mut("adjacent_cell_of_edge");
    v.data = Data::F64(vec![1.0; 2 * ICON_EDGES]);
    let path = fixture.write_in(dir.path(), "icon_float.nc");
    let err = read_err(&path);
    assert!(
        matches!(&err, GridError::WrongType { variable, expected: "int", found, .. }
            if variable == "adjacent_cell_of_edge" && found == "double"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("`adjacent_cell_of_edge` has type double, expected int"), "{msg}");
}

#[test]
fn variable_of_wrong_shape() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = icon();
    // Stored domain-first, as MPAS would: ICON wants (nv, cell).
    fixture.var_mut("vertex_of_cell").dims = vec!["cell".into(), "nv".into()];
    let path = fixture.write_in(dir.path(), "icon_transposed.nc");
    let err = read_err(&path);
    match &err {
        GridError::WrongShape { variable, expected, found, .. } => {
            assert_eq!(variable, "vertex_of_cell");
            assert!(expected.starts_with("(nv, cell)"), "{expected}");
            assert_eq!(found, &format!("(cell = {ICON_CELLS}, nv = 3)"));
        }
        other => panic!("expected WrongShape, got {other:?}"),
    }

    let mut fixture = icon();
    *fixture.var_mut("edge_vertices") = Var::i32("edge_vertices", &["edge"], vec![1; ICON_EDGES]);
    let path = fixture.write_in(dir.path(), "icon_rank1.nc");
    let err = read_err(&path);
    assert!(
        matches!(&err, GridError::WrongShape { variable, found, .. } if variable == "edge_vertices" && found == "(edge = 7)"),
        "{err:?}"
    );
}

#[test]
fn missing_variable_and_dimension() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = icon();
    fixture.remove("vertices_of_vertex");
    let path = fixture.write_in(dir.path(), "icon_no_v2e2v.nc");
    let err = read_err(&path);
    assert!(
        matches!(&err, GridError::MissingVariable { kind: GridKind::Icon, variable, needed_for, .. }
            if variable == "vertices_of_vertex" && needed_for == "offset V2E2V"),
        "{err:?}"
    );
    assert!(err.to_string().contains("the icon grid has no variable `vertices_of_vertex` (needed for offset V2E2V)"));

    let mut fixture = mpas();
    fixture.remove("nEdgesOnCell");
    let path = fixture.write_in(dir.path(), "mpas_no_counts.nc");
    let err = read_err(&path);
    assert!(
        matches!(&err, GridError::MissingVariable { kind: GridKind::Mpas, variable, .. } if variable == "nEdgesOnCell"),
        "{err:?}"
    );

    let mut fixture = icon();
    for (name, _) in fixture.dims.iter_mut() {
        if name == "vertex" {
            *name = "vert".into();
        }
    }
    for v in fixture.vars.iter_mut() {
        for d in v.dims.iter_mut() {
            if d == "vertex" {
                *d = "vert".into();
            }
        }
    }
    let path = fixture.write_in(dir.path(), "icon_no_vertex_dim.nc");
    let err = read_err(&path);
    assert!(matches!(&err, GridError::MissingDimension { dimension, .. } if dimension == "vertex"), "{err:?}");
}

#[test]
fn neither_icon_nor_mpas() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = common::Fixture {
        dims: vec![("x".into(), 3)],
        unlimited: None,
        vars: vec![Var::i32("temperature", &["x"], vec![1, 2, 3])],
    };
    let path = fixture.write_in(dir.path(), "not_a_grid.nc");
    let err = read_err(&path);
    assert!(matches!(err, GridError::NotAGrid { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("`edge_of_cell`") && msg.contains("`edgesOnCell`") && msg.contains("mesh_topology"), "{msg}");
}

#[test]
fn mpas_padding_past_the_count_is_no_neighbour() {
    let dir = tempfile::tempdir().unwrap();
    let path = mpas().write_in(dir.path(), "mpas.nc");
    let grid = read_grid(&path).expect("synthetic MPAS grid reads, garbage padding and all");
    assert_eq!(grid.kind(), GridKind::Mpas);
    let offsets: Vec<&str> = grid.provider().entries().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(offsets, ["C2E", "C2V", "C2E2C", "E2C", "E2V", "V2E", "V2C", "Koff"]);
    // Counts 4, 2, 3 of 4 slots; valid slots hold ((i * 5 + j) % codomain).
    let c2e = table(&grid, "C2E");
    assert_eq!(c2e, ndarray::arr2(&[[0, 1, 2, 3], [5, 0, -1, -1], [4, 5, 0, -1]]));
    assert_eq!(grid.table_info("C2E").unwrap().skip_count, 3);
    assert_eq!(grid.table_info("C2E").unwrap().min, -1);
    assert_eq!(grid.table_info("C2E").unwrap().max, 5);
}

#[test]
fn table_over_the_unlimited_dimension_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = mpas();
    // nEdges becomes the record dimension: cellsOnEdge (nEdges, TWO) is then a record variable.
    fixture.remove("maxLevelCell");
    fixture.dims.retain(|(name, _)| name != "nEdges");
    fixture.unlimited = Some(("nEdges".to_owned(), common::MPAS_EDGES));
    let path = fixture.write_in(dir.path(), "mpas_record_table.nc");
    let err = read_err(&path);
    assert!(
        matches!(&err, GridError::WrongShape { variable, found, .. }
            if variable == "cellsOnEdge" && found == "(nEdges = 6 (unlimited), TWO = 2)"),
        "{err:?}"
    );
}

#[test]
fn mpas_index_within_the_count_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = mpas();
    let Data::I32(d) = &mut fixture.var_mut("cellsOnCell").data else { unreachable!() };
    d[2 * 4 + 1] = 4; // cell 2, slot 1 (< count 3); there are 3 cells
    let path = fixture.write_in(dir.path(), "mpas_bad_cell.nc");
    let err = read_err(&path);
    assert!(
        matches!(&err, GridError::IndexOutOfRange { variable, row: 2, column: 1, value: 4, codomain_size: 3, .. }
            if variable == "cellsOnCell"),
        "{err:?}"
    );
}

#[test]
fn mpas_count_past_the_neighbour_axis() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = mpas();
    *fixture.var_mut("nEdgesOnCell") = Var::i32("nEdgesOnCell", &["nCells"], vec![4, 5, 3]);
    let path = fixture.write_in(dir.path(), "mpas_bad_count.nc");
    let err = read_err(&path);
    assert!(
        matches!(&err, GridError::CountOutOfRange { variable, row: 1, value: 5, max: 4, table, .. }
            if variable == "nEdgesOnCell" && table == "edgesOnCell"),
        "{err:?}"
    );
    assert!(err.to_string().contains("expected 0..=4"), "{err}");
}

/// A hand-made header: `CDF\x02`, numrecs 0, then `rest`.
fn header(rest: &[u8]) -> Vec<u8> {
    let mut b = b"CDF\x02".to_vec();
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(rest);
    b
}

fn be(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

#[test]
fn absurd_counts_in_the_header_are_rejected_before_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    // 2^31 - 1 dimensions in a 16-byte file.
    let path = write_bytes(dir.path(), "many_dims.nc", &header(&be(&[0x0A, 0x7FFF_FFFF])));
    let err = read_err(&path);
    assert!(matches!(&err, GridError::Malformed { detail, .. } if detail.contains("the dimension list")), "{err:?}");

    // One dimension of 2^31 - 1 and an int variable over it whose data starts at byte 200.
    let mut rest = be(&[0x0A, 1, 1]);
    rest.extend_from_slice(b"x\0\0\0");
    rest.extend(be(&[0x7FFF_FFFF, 0, 0, 0x0B, 1, 1]));
    rest.extend_from_slice(b"v\0\0\0");
    rest.extend(be(&[1, 0, 0, 0, 4, 0, 0, 200]));
    let path = write_bytes(dir.path(), "huge_var.nc", &header(&rest));
    let err = read_err(&path);
    assert!(matches!(&err, GridError::Truncated { variable, .. } if variable == "v"), "{err:?}");

    // A name longer than the file.
    let mut rest = be(&[0x0A, 1, 1_000_000]);
    rest.extend_from_slice(b"x\0\0\0");
    let path = write_bytes(dir.path(), "long_name.nc", &header(&rest));
    assert!(matches!(read_err(&path), GridError::Malformed { .. }));
}

proptest! {
    // PROPTEST_CASES=100000 for a longer run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    /// Damaged copies of a valid grid (bytes overwritten, the end cut off) give a typed error or,
    /// when the damage is harmless, a grid; the reader never panics behind the header walk.
    #[test]
    fn damaged_files_never_panic(
        use_mpas in any::<bool>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..8),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let fixture = if use_mpas { mpas() } else { icon() };
        let clean = fixture.write_in(dir.path(), "clean.nc");
        let mut bytes = std::fs::read(&clean).unwrap();
        let header_len = 700.min(bytes.len());
        for (at, value, in_header) in edits {
            let i = if in_header { at.index(header_len) } else { at.index(bytes.len()) };
            bytes[i] = value;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        let path = write_bytes(dir.path(), "damaged.nc", &bytes);
        match read_grid(&path) {
            Ok(grid) => {
                for info in grid.tables() {
                    prop_assert!(info.min >= -1);
                }
            }
            Err(GridError::ReaderPanicked { message, .. }) => {
                prop_assert!(false, "the netCDF reader panicked: {}", message);
            }
            Err(err) => {
                let msg = err.to_string();
                prop_assert!(msg.contains(&path.display().to_string()), "{}", msg);
                prop_assert!(!msg.ends_with('.'), "{}", msg);
            }
        }
    }
}

#[test]
fn grid_errors_cross_threads() {
    // A GridError travels into anyhow and across runner threads: it must be Send + Sync.
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<GridError>();
}
