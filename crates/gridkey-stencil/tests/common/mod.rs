//! Small synthetic meshes and runtime table layouts shared by the integration tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use gridkey_offsets::{
    compile_time_offset_provider, CompileTimeOffsetProvider, Connectivity, Dimension, DimensionKind, Entry,
    HostCopySource, IndexTable, OffsetProvider, TableSource,
};
use gridkey_store::TableStore;
use ndarray::{s, ArcArray2, Array2};

/// The neighbour tables of a triangulated planar patch: `nx × ny` squares, each cut into two
/// triangles along its diagonal. Boundary edges have one cell and boundary vertices fewer than
/// six neighbours, so `E2C`, `C2E2C`, `V2E` and `V2C` have `-1` skip entries; `C2E`, `C2V` and
/// `E2V` have none.
pub struct Patch {
    /// `(offset, domain, codomain, table)` in provider order.
    pub tables: Vec<(&'static str, &'static str, &'static str, Array2<i32>)>,
}

fn padded(rows: &[Vec<usize>], width: usize) -> Array2<i32> {
    let mut a = Array2::from_elem((rows.len(), width), -1);
    for (i, row) in rows.iter().enumerate() {
        assert!(row.len() <= width);
        for (k, &x) in row.iter().enumerate() {
            a[[i, k]] = x as i32;
        }
    }
    a
}

impl Patch {
    /// The patch of `nx × ny` squares.
    pub fn new(nx: usize, ny: usize) -> Self {
        let v = |i: usize, j: usize| j * (nx + 1) + i;
        let n_vertices = (nx + 1) * (ny + 1);
        let mut cells: Vec<[usize; 3]> = Vec::new();
        for j in 0..ny {
            for i in 0..nx {
                cells.push([v(i, j), v(i + 1, j), v(i + 1, j + 1)]);
                cells.push([v(i, j), v(i + 1, j + 1), v(i, j + 1)]);
            }
        }
        let mut edge_ids: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        let mut edges: Vec<[usize; 2]> = Vec::new();
        let mut c2e: Vec<Vec<usize>> = Vec::new();
        for cell in &cells {
            let mut row = Vec::new();
            for (a, b) in [(cell[0], cell[1]), (cell[1], cell[2]), (cell[2], cell[0])] {
                let key = (a.min(b), a.max(b));
                let id = *edge_ids.entry(key).or_insert_with(|| {
                    edges.push([key.0, key.1]);
                    edges.len() - 1
                });
                row.push(id);
            }
            c2e.push(row);
        }
        let mut e2c: Vec<Vec<usize>> = vec![Vec::new(); edges.len()];
        for (c, row) in c2e.iter().enumerate() {
            for &e in row {
                e2c[e].push(c);
            }
        }
        let c2e2c: Vec<Vec<Option<usize>>> = c2e
            .iter()
            .enumerate()
            .map(|(c, row)| row.iter().map(|&e| e2c[e].iter().copied().find(|&d| d != c)).collect())
            .collect();
        let mut v2e: Vec<Vec<usize>> = vec![Vec::new(); n_vertices];
        for (e, ends) in edges.iter().enumerate() {
            for &x in ends {
                v2e[x].push(e);
            }
        }
        let mut v2c: Vec<Vec<usize>> = vec![Vec::new(); n_vertices];
        for (c, corners) in cells.iter().enumerate() {
            for &x in corners {
                v2c[x].push(c);
            }
        }
        let mut c2e2c_table = Array2::from_elem((cells.len(), 3), -1);
        for (c, row) in c2e2c.iter().enumerate() {
            for (k, n) in row.iter().enumerate() {
                if let Some(n) = n {
                    c2e2c_table[[c, k]] = *n as i32;
                }
            }
        }
        let cell_rows: Vec<Vec<usize>> = cells.iter().map(|c| c.to_vec()).collect();
        let edge_rows: Vec<Vec<usize>> = edges.iter().map(|e| e.to_vec()).collect();
        Self {
            tables: vec![
                ("C2E", "Cell", "Edge", padded(&c2e, 3)),
                ("C2V", "Cell", "Vertex", padded(&cell_rows, 3)),
                ("C2E2C", "Cell", "Cell", c2e2c_table),
                ("E2C", "Edge", "Cell", padded(&e2c, 2)),
                ("E2V", "Edge", "Vertex", padded(&edge_rows, 2)),
                ("V2E", "Vertex", "Edge", padded(&v2e, 6)),
                ("V2C", "Vertex", "Cell", padded(&v2c, 6)),
            ],
        }
    }

    /// The table of `offset`.
    pub fn table(&self, offset: &str) -> &Array2<i32> {
        &self.tables.iter().find(|t| t.0 == offset).expect("an offset of the patch").3
    }

    /// The runtime provider: every table in `layout`, skip value `-1`, plus a vertical `Koff`.
    pub fn provider(&self, layout: Layout) -> OffsetProvider {
        self.provider_with(layout, |_, t| t.clone())
    }

    /// As [`Self::provider`], with each table passed through `edit(offset, table)` first.
    pub fn provider_with(&self, layout: Layout, edit: impl Fn(&str, &Array2<i32>) -> Array2<i32>) -> OffsetProvider {
        let mut p = OffsetProvider::new();
        for (offset, domain, codomain, table) in &self.tables {
            let c = Connectivity::new(
                Dimension::horizontal(*domain),
                Dimension::local(format!("{offset}Dim")),
                Dimension::horizontal(*codomain),
                Some(-1),
                layout.source(&edit(offset, table)),
            )
            .unwrap();
            p.push(*offset, Entry::Gather(Arc::new(c))).unwrap();
        }
        p.push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical))).unwrap();
        p
    }
}

/// How a runtime table is handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// int32, C order.
    COrder,
    /// int32, Fortran order (`.reversed_axes()` of a C-order transposed copy).
    Fortran,
    /// int64, C order.
    Int64,
    /// int32 with a column stride of 2 (every other column of a wider array).
    Strided,
    /// int64, rows stored backwards (negative row stride).
    NegativeStride,
    /// Behind a host-copy source (the device stand-in), Fortran order inside.
    HostCopy,
}

impl Layout {
    /// Every layout.
    pub const ALL: [Layout; 6] =
        [Layout::COrder, Layout::Fortran, Layout::Int64, Layout::Strided, Layout::NegativeStride, Layout::HostCopy];

    fn fortran(a: &Array2<i32>) -> ArcArray2<i32> {
        let t = a.t().as_standard_layout().into_owned();
        let f = t.reversed_axes();
        assert!(f.t().is_standard_layout());
        f.into_shared()
    }

    /// The table source for `a` in this layout.
    pub fn source(self, a: &Array2<i32>) -> Arc<dyn TableSource> {
        match self {
            Layout::COrder => Arc::new(IndexTable::I32(a.clone().into_shared())),
            Layout::Fortran => Arc::new(IndexTable::I32(Self::fortran(a))),
            Layout::Int64 => Arc::new(IndexTable::I64(a.mapv(i64::from).into_shared())),
            Layout::Strided => {
                let mut wide = Array2::<i32>::from_elem((a.nrows(), 2 * a.ncols()), 777);
                wide.slice_mut(s![.., ..;2]).assign(a);
                let v = wide.into_shared().slice_move(s![.., ..;2]);
                assert_eq!(v.strides()[1], 2);
                Arc::new(IndexTable::I32(v))
            }
            Layout::NegativeStride => {
                let backwards = a.slice(s![..;-1, ..]).mapv(i64::from).as_standard_layout().into_owned();
                let v = backwards.into_shared().slice_move(s![..;-1, ..]);
                assert!(v.strides()[0] < 0 || v.nrows() <= 1);
                Arc::new(IndexTable::I64(v))
            }
            Layout::HostCopy => Arc::new(HostCopySource::new(IndexTable::I32(Self::fortran(a)))),
        }
    }
}

/// The compile-time view of `provider` in a store under `cache_dir`.
pub fn compile_time(provider: &OffsetProvider, cache_dir: &std::path::Path) -> CompileTimeOffsetProvider {
    let store = TableStore::open(cache_dir).unwrap();
    compile_time_offset_provider(provider, &store).unwrap()
}
