//! Small synthetic netCDF-3 grids written with `netcdf3::FileWriter`, for the error tests, and
//! the mixed UGRID mesh of `data/golden/ugrid-mixed-v1.json`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use netcdf3::{DataSet, DataType, FileWriter, Version};

/// The values of one variable.
#[derive(Clone, Debug)]
pub enum Data {
    I16(Vec<i16>),
    I32(Vec<i32>),
    F64(Vec<f64>),
}

/// The value of one attribute.
#[derive(Clone, Debug)]
pub enum Attr {
    Text(String),
    I16(i16),
    I32(i32),
    F64(f64),
}

/// One variable of a synthetic file.
#[derive(Clone, Debug)]
pub struct Var {
    pub name: String,
    pub dims: Vec<String>,
    pub data: Data,
    pub attrs: Vec<(String, Attr)>,
}

impl Var {
    pub fn i32(name: &str, dims: &[&str], data: Vec<i32>) -> Self {
        Self {
            name: name.to_owned(),
            dims: dims.iter().map(|d| d.to_string()).collect(),
            data: Data::I32(data),
            attrs: Vec::new(),
        }
    }

    pub fn f64(name: &str, dims: &[&str], data: Vec<f64>) -> Self {
        Self { data: Data::F64(data), ..Self::i32(name, dims, Vec::new()) }
    }

    /// Sets attribute `name` (replacing one of that name).
    pub fn attr(mut self, name: &str, value: Attr) -> Self {
        self.set_attr(name, value);
        self
    }

    pub fn set_attr(&mut self, name: &str, value: Attr) {
        self.attrs.retain(|(n, _)| n != name);
        self.attrs.push((name.to_owned(), value));
    }

    pub fn remove_attr(&mut self, name: &str) {
        self.attrs.retain(|(n, _)| n != name);
    }
}

pub fn text(s: &str) -> Attr {
    Attr::Text(s.to_owned())
}

/// A synthetic file: dimensions and variables.
#[derive(Clone, Debug)]
pub struct Fixture {
    pub dims: Vec<(String, usize)>,
    /// The unlimited (record) dimension and its number of records, if any.
    pub unlimited: Option<(String, usize)>,
    pub vars: Vec<Var>,
}

impl Fixture {
    pub fn var_mut(&mut self, name: &str) -> &mut Var {
        self.vars.iter_mut().find(|v| v.name == name).expect("fixture variable")
    }

    pub fn remove(&mut self, name: &str) {
        self.vars.retain(|v| v.name != name);
    }

    /// Writes the fixture as a 64-bit offset netCDF-3 file at `path`.
    pub fn write(&self, path: &Path) {
        let mut ds = DataSet::new();
        if let Some((name, records)) = &self.unlimited {
            ds.set_unlimited_dim(name, *records).unwrap();
        }
        for (name, size) in &self.dims {
            ds.add_fixed_dim(name, *size).unwrap();
        }
        for v in &self.vars {
            let t = match v.data {
                Data::I16(_) => DataType::I16,
                Data::I32(_) => DataType::I32,
                Data::F64(_) => DataType::F64,
            };
            ds.add_var(&v.name, &v.dims, t).unwrap();
            for (name, value) in &v.attrs {
                match value {
                    Attr::Text(s) => ds.add_var_attr_string(&v.name, name, s).unwrap(),
                    Attr::I16(x) => ds.add_var_attr_i16(&v.name, name, vec![*x]).unwrap(),
                    Attr::I32(x) => ds.add_var_attr_i32(&v.name, name, vec![*x]).unwrap(),
                    Attr::F64(x) => ds.add_var_attr_f64(&v.name, name, vec![*x]).unwrap(),
                }
            }
        }
        let mut w = FileWriter::open(path).unwrap();
        w.set_def(&ds, Version::Offset64Bit, 0).unwrap();
        for v in &self.vars {
            match (&v.data, &self.unlimited) {
                (Data::I32(d), Some((unlimited, records))) if v.dims.first() == Some(unlimited) => {
                    let chunk = d.len() / records;
                    for r in 0..*records {
                        w.write_record_i32(&v.name, r, &d[r * chunk..(r + 1) * chunk]).unwrap();
                    }
                }
                (Data::I32(d), _) => w.write_var_i32(&v.name, d).unwrap(),
                (Data::I16(d), _) => w.write_var_i16(&v.name, d).unwrap(),
                (Data::F64(d), _) => w.write_var_f64(&v.name, d).unwrap(),
            }
        }
        w.close().unwrap();
    }

    /// Writes the fixture into `dir` as `name`, returning the path.
    pub fn write_in(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        self.write(&path);
        path
    }
}

pub const ICON_CELLS: usize = 4;
pub const ICON_EDGES: usize = 7;
pub const ICON_VERTICES: usize = 5;

/// A raw ICON table `(k, n)`: slot `j` of element `i` is `((i * 7 + j * 3) % codomain) + 1`
/// for `j < filled`, else 0 (no neighbour).
pub fn icon_raw(k: usize, n: usize, codomain: usize, filled: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(k * n);
    for j in 0..k {
        for i in 0..n {
            out.push(if j < filled { ((i * 7 + j * 3) % codomain) as i32 + 1 } else { 0 });
        }
    }
    out
}

/// An ICON-like grid (not a real mesh: every index is valid, nothing more): 4 cells, 7 edges,
/// 5 vertices, vertex tables with one missing neighbour (slot 5) per vertex.
pub fn icon() -> Fixture {
    let (c, e, v) = (ICON_CELLS, ICON_EDGES, ICON_VERTICES);
    Fixture {
        dims: [("cell", c), ("edge", e), ("vertex", v), ("nv", 3), ("nc", 2), ("ne", 6)]
            .iter()
            .map(|(n, s)| (n.to_string(), *s))
            .collect(),
        unlimited: None,
        vars: vec![
            Var::i32("edge_of_cell", &["nv", "cell"], icon_raw(3, c, e, 3)),
            Var::i32("vertex_of_cell", &["nv", "cell"], icon_raw(3, c, v, 3)),
            Var::i32("neighbor_cell_index", &["nv", "cell"], icon_raw(3, c, c, 3)),
            Var::i32("adjacent_cell_of_edge", &["nc", "edge"], icon_raw(2, e, c, 2)),
            Var::i32("edge_vertices", &["nc", "edge"], icon_raw(2, e, v, 2)),
            Var::i32("edges_of_vertex", &["ne", "vertex"], icon_raw(6, v, e, 5)),
            Var::i32("cells_of_vertex", &["ne", "vertex"], icon_raw(6, v, c, 5)),
            Var::i32("vertices_of_vertex", &["ne", "vertex"], icon_raw(6, v, v, 5)),
            Var::f64("clon", &["cell"], vec![0.5; c]),
        ],
    }
}

pub const MPAS_CELLS: usize = 3;
pub const MPAS_EDGES: usize = 6;
pub const MPAS_VERTICES: usize = 4;

/// An MPAS-like grid: 3 cells with 4, 2 and 3 of 4 edge slots used; the padding past
/// `nEdgesOnCell` holds garbage (out of range, negative) that must read as no neighbour. Like
/// real MPAS files it has an unlimited `Time` dimension (2 records) and a record variable.
pub fn mpas() -> Fixture {
    let (c, e, v) = (MPAS_CELLS, MPAS_EDGES, MPAS_VERTICES);
    let counts: [usize; 3] = [4, 2, 3];
    let cell_table = |codomain: usize| -> Vec<i32> {
        let mut out = Vec::new();
        for (i, &cnt) in counts.iter().enumerate() {
            for j in 0..4 {
                out.push(if j < cnt { ((i * 5 + j) % codomain) as i32 + 1 } else { 9999 - 20000 * (j as i32 % 2) });
            }
        }
        out
    };
    let plain = |n: usize, k: usize, codomain: usize| -> Vec<i32> {
        (0..n * k).map(|x| if x % 5 == 4 { 0 } else { (x % codomain) as i32 + 1 }).collect()
    };
    Fixture {
        dims: [("nCells", c), ("nEdges", e), ("nVertices", v), ("maxEdges", 4), ("TWO", 2), ("vertexDegree", 3)]
            .iter()
            .map(|(n, s)| (n.to_string(), *s))
            .collect(),
        unlimited: Some(("Time".to_owned(), 2)),
        vars: vec![
            Var::i32("maxLevelCell", &["Time", "nCells"], vec![1, 2, 3, 4, 5, 6]),
            Var::i32("nEdgesOnCell", &["nCells"], counts.iter().map(|&c| c as i32).collect()),
            Var::i32("edgesOnCell", &["nCells", "maxEdges"], cell_table(e)),
            Var::i32("verticesOnCell", &["nCells", "maxEdges"], cell_table(v)),
            Var::i32("cellsOnCell", &["nCells", "maxEdges"], cell_table(c)),
            Var::i32("cellsOnEdge", &["nEdges", "TWO"], plain(e, 2, c)),
            Var::i32("verticesOnEdge", &["nEdges", "TWO"], plain(e, 2, v)),
            Var::i32("edgesOnVertex", &["nVertices", "vertexDegree"], plain(v, 3, e)),
            Var::i32("cellsOnVertex", &["nVertices", "vertexDegree"], plain(v, 3, c)),
        ],
    }
}

/// The mixed mesh of `data/tools/ugrid_mixed_witness.py` (0-based node lists): a hexagon, a quad
/// and three triangles, nine nodes.
pub const MIXED_FACES: [&[i32]; 5] = [&[0, 1, 2, 3, 4, 5], &[1, 0, 6, 7], &[2, 1, 7], &[3, 2, 8], &[2, 7, 8]];
pub const MIXED_NODES: usize = 9;
pub const MIXED_WIDTH: usize = 6;

/// The mixed mesh as the witness writes it: face-node stored `(nMaxMesh_face_nodes,
/// nMesh_face)` (the topology's `face_dimension` says which axis is the faces), start_index 1,
/// `_FillValue` -999; no other connectivity.
pub fn ugrid_mixed() -> Fixture {
    let (n_face, k) = (MIXED_FACES.len(), MIXED_WIDTH);
    let mut transposed = vec![-999; k * n_face];
    for (f, nodes) in MIXED_FACES.iter().enumerate() {
        for (j, &v) in nodes.iter().enumerate() {
            transposed[j * n_face + f] = v + 1;
        }
    }
    Fixture {
        dims: [("nMesh_node", MIXED_NODES), ("nMesh_face", n_face), ("nMaxMesh_face_nodes", k)]
            .iter()
            .map(|(n, s)| (n.to_string(), *s))
            .collect(),
        unlimited: None,
        vars: vec![
            Var::i32("mesh", &[], vec![0])
                .attr("cf_role", text("mesh_topology"))
                .attr("topology_dimension", Attr::I32(2))
                .attr("node_coordinates", text("mesh_node_x mesh_node_y"))
                .attr("face_node_connectivity", text("mesh_face_nodes"))
                .attr("face_dimension", text("nMesh_face")),
            Var::f64("mesh_node_x", &["nMesh_node"], (0..MIXED_NODES).map(|x| x as f64).collect()),
            Var::f64("mesh_node_y", &["nMesh_node"], (0..MIXED_NODES).map(|x| x as f64).collect()),
            Var::i32("mesh_face_nodes", &["nMaxMesh_face_nodes", "nMesh_face"], transposed)
                .attr("cf_role", text("face_node_connectivity"))
                .attr("start_index", Attr::I32(1))
                .attr("_FillValue", Attr::I32(-999)),
        ],
    }
}
