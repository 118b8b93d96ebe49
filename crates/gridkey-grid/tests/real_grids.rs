//! The real grids in `data/grids/` (ICON and MPAS netCDF-3, three UGRID netCDF-4 meshes), table
//! by table, against the golden values of the independent Python witness
//! (`data/tools/table_digest_witness.py`: NumPy, xxhash and netCDF4-python; uxarray for the
//! tables derived from UGRID face-node connectivity).

use std::path::Path;
use std::time::Instant;

use gridkey_digest::digest_table;
use gridkey_grid::{read_grid, Grid, GridKind, GridSizes};
use gridkey_offsets::{DimensionKind, Entry, IndexTable};
use serde_json::Value;

const ICON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/grids/icon_grid_0013_R02B04_R.nc");
const MPAS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/grids/oQU480.231010.nc");
const UGRID_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/grids/");
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/golden/table-digests-v1.json");

fn golden(file_name: &str) -> Value {
    let text = std::fs::read_to_string(GOLDEN).expect("golden file");
    let doc: Value = serde_json::from_str(&text).expect("golden JSON");
    assert_eq!(doc["format"], "gridkey table digest v1");
    doc["grids"][file_name].clone()
}

/// Compares every table of `grid` with the witness: the same offsets in the same order, and per
/// table the shape, dtype, skip count, min, max, digest, domain and codomain.
fn check_against_golden(grid: &Grid, file_name: &str) {
    let golden = golden(file_name);
    assert_eq!(golden["kind"], grid.kind().as_str());
    let tables = golden["tables"].as_object().expect("tables object");
    // serde_json's map is sorted by key: compare the sets here, the order below.
    let golden_offsets: Vec<&str> = tables.keys().map(String::as_str).collect();
    let mut offsets: Vec<&str> = grid.tables().iter().map(|t| t.offset.as_str()).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, golden_offsets, "the same offsets as the witness");
    let order = ["C2E", "C2V", "C2E2C", "E2C", "E2V", "V2E", "V2C", "V2E2V"];
    let in_order: Vec<&str> = grid.tables().iter().map(|t| t.offset.as_str()).collect();
    let expected: Vec<&str> = order.iter().copied().filter(|o| tables.contains_key(*o)).collect();
    assert_eq!(in_order, expected, "provider order");

    for info in grid.tables() {
        let g = &tables[&info.offset];
        let ctx = format!("{file_name} {}", info.offset);
        let shape: Vec<usize> = g["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        assert_eq!(info.shape.to_vec(), shape, "{ctx}: shape");
        assert_eq!(info.skip_count as u64, g["skip_count"].as_u64().unwrap(), "{ctx}: skip_count");
        assert_eq!(i64::from(info.min), g["min"].as_i64().unwrap(), "{ctx}: min");
        assert_eq!(i64::from(info.max), g["max"].as_i64().unwrap(), "{ctx}: max");
        assert_eq!(info.domain, g["domain"].as_str().unwrap(), "{ctx}: domain");
        assert_eq!(info.codomain, g["codomain"].as_str().unwrap(), "{ctx}: codomain");
        assert_eq!(g["dtype"], "<i4", "{ctx}: golden dtype");

        let conn = grid.provider().gather(&info.offset).expect("gather in provider");
        assert_eq!(conn.shape(), info.shape, "{ctx}: connectivity shape");
        let IndexTable::I32(table) = conn.host_table(&info.offset).unwrap() else {
            panic!("{ctx}: table is not int32")
        };
        assert!(table.is_standard_layout(), "{ctx}: C order");
        assert_eq!(format!("{}", digest_table(table.view())), g["digest"].as_str().unwrap(), "{ctx}: digest");

        // The facts in TableInfo are the facts of the table in the provider.
        let skips = table.iter().filter(|&&x| x == -1).count();
        assert_eq!(skips, info.skip_count, "{ctx}: recount");
        assert_eq!(*table.iter().min().unwrap(), info.min, "{ctx}: recomputed min");
        assert_eq!(*table.iter().max().unwrap(), info.max, "{ctx}: recomputed max");
        assert!(table.iter().all(|&x| x >= -1), "{ctx}: -1 is the only negative");

        // Dimensions and the skip-value rule: Some(-1) exactly when a -1 is present.
        assert_eq!(conn.domain().name(), info.domain);
        assert_eq!(conn.domain().kind(), DimensionKind::Horizontal);
        assert_eq!(conn.local().name(), format!("{}Dim", info.offset));
        assert_eq!(conn.local().kind(), DimensionKind::Local);
        assert_eq!(conn.codomain().name(), info.codomain);
        assert_eq!(conn.codomain().kind(), DimensionKind::Horizontal);
        assert_eq!(conn.skip_value(), (info.skip_count > 0).then_some(-1), "{ctx}: skip value");
    }

    // Entries: the gathers in table order, then Koff -> K (vertical).
    let entries = grid.provider().entries();
    assert_eq!(entries.len(), grid.tables().len() + 1);
    for ((name, entry), info) in entries.iter().zip(grid.tables()) {
        assert_eq!(name, &info.offset);
        assert!(matches!(entry, Entry::Gather(_)));
    }
    let (name, last) = entries.last().unwrap();
    assert_eq!(name, "Koff");
    match last {
        Entry::Dimension(d) => {
            assert_eq!(d.name(), "K");
            assert_eq!(d.kind(), DimensionKind::Vertical);
        }
        Entry::Gather(_) => panic!("Koff must be a dimension"),
    }
}

#[test]
fn icon_r02b04_matches_the_witness() {
    let start = Instant::now();
    let grid = read_grid(Path::new(ICON)).expect("ICON grid reads");
    eprintln!("ICON R02B04 read in {:?}", start.elapsed());
    assert_eq!(grid.kind(), GridKind::Icon);
    assert_eq!(grid.sizes(), GridSizes { cells: 20480, edges: 30720, vertices: 10242 });
    assert_eq!(grid.path(), Path::new(ICON));
    assert_eq!(grid.tables().len(), 8);
    check_against_golden(&grid, "icon_grid_0013_R02B04_R.nc");

    // Only the 12 pentagon vertices miss a neighbour, in their 6th slot.
    for offset in ["V2E", "V2C", "V2E2V"] {
        let IndexTable::I32(t) = grid.provider().gather(offset).unwrap().host_table(offset).unwrap() else {
            unreachable!()
        };
        let skipped: Vec<(usize, usize)> = t.indexed_iter().filter(|(_, &x)| x == -1).map(|(ix, _)| ix).collect();
        assert_eq!(skipped.len(), 12, "{offset}");
        assert!(skipped.iter().all(|&(_, col)| col == 5), "{offset}: gaps only in slot 5");
    }
    assert_eq!(grid.table_info("C2E").unwrap().variable, "edge_of_cell");
    assert!(grid.table_info("nope").is_none());
}

#[test]
fn mpas_qu480_matches_the_witness() {
    let grid = read_grid(Path::new(MPAS)).expect("MPAS grid reads");
    assert_eq!(grid.kind(), GridKind::Mpas);
    assert_eq!(grid.sizes(), GridSizes { cells: 1791, edges: 5754, vertices: 3947 });
    assert_eq!(grid.tables().len(), 7, "MPAS has no V2E2V");
    assert!(grid.provider().get("V2E2V").is_none());
    check_against_golden(&grid, "oQU480.231010.nc");
    assert_eq!(grid.table_info("C2E2C").unwrap().variable, "cellsOnCell");
    // The land-removed mesh has boundary edges: E2C has gaps, E2V has none (so no skip value).
    assert_eq!(grid.provider().gather("E2C").unwrap().skip_value(), Some(-1));
    assert_eq!(grid.provider().gather("E2V").unwrap().skip_value(), None);
}

/// Reads a UGRID mesh of `data/grids` and checks it against the witness.
fn check_ugrid(file_name: &str, sizes: GridSizes) -> Grid {
    let path = format!("{UGRID_DIR}{file_name}");
    let start = Instant::now();
    let grid = read_grid(Path::new(&path)).expect("UGRID mesh reads");
    eprintln!("{file_name} read in {:?}", start.elapsed());
    assert_eq!(grid.kind(), GridKind::Ugrid);
    assert_eq!(grid.sizes(), sizes);
    assert_eq!(grid.tables().len(), 7, "UGRID has no V2E2V");
    check_against_golden(&grid, file_name);
    grid
}

#[test]
fn cube_sphere_ne30_matches_the_witness() {
    let grid = check_ugrid("outCSne30.ug", GridSizes { cells: 5400, edges: 10800, vertices: 5402 });
    let c2v = grid.table_info("C2V").unwrap();
    assert_eq!((c2v.variable.as_str(), c2v.derived), ("Mesh2_face_nodes", false));
    for offset in ["C2E", "C2E2C", "E2C", "E2V", "V2E", "V2C"] {
        assert!(grid.table_info(offset).unwrap().derived, "{offset}");
    }
    // A closed sphere: every edge has two faces; only the 8 cube corners have 3 edges, not 4.
    assert_eq!(grid.table_info("E2C").unwrap().skip_count, 0);
    assert_eq!(grid.table_info("V2E").unwrap().skip_count, 8);
}

#[test]
fn latitude_longitude_1deg_matches_the_witness() {
    let grid = check_ugrid("outRLL1deg.ug", GridSizes { cells: 64800, edges: 129240, vertices: 64442 });
    // 720 polar triangles among quads; each pole node has all 360 of its triangles.
    assert_eq!(grid.table_info("C2V").unwrap().skip_count, 720);
    assert_eq!(grid.table_info("V2C").unwrap().shape, [64442, 360]);
}

#[test]
fn quad_hexagon_with_int64_tables_matches_the_witness() {
    let grid = check_ugrid("quad-hexagon.grid.nc", GridSizes { cells: 4, edges: 19, vertices: 16 });
    // int64 face-node and edge-node tables, no attributes of their own: start 0, no fill.
    let e2v = grid.table_info("E2V").unwrap();
    assert_eq!((e2v.variable.as_str(), e2v.derived), ("edge_node_connectivity", false));
    let IndexTable::I32(t) = grid.provider().gather("E2V").unwrap().host_table("E2V").unwrap() else {
        panic!("E2V is not int32")
    };
    // The file's order and orientation are kept: edge 2 is stored (14, 4).
    assert_eq!(t.row(2).to_vec(), [14, 4]);
    // Boundary edges: 14 of the 19 have one face.
    assert_eq!(grid.table_info("E2C").unwrap().skip_count, 14);
}

#[test]
fn kind_names() {
    assert_eq!(GridKind::Icon.as_str(), "icon");
    assert_eq!(GridKind::Mpas.as_str(), "mpas");
    assert_eq!(GridKind::Mpas.to_string(), "mpas");
    assert_eq!(GridKind::Ugrid.as_str(), "ugrid");
}
