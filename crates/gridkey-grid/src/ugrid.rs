//! UGRID 1.0 2-D meshes (ADR 0015): the connectivity variables a `cf_role = "mesh_topology"`
//! variable names, each with its `start_index`, `_FillValue` (any integer type) and dimension
//! order; the tables the file lacks derived from face-node (and edge-node) connectivity with
//! uxarray's conventions; the tables the file has checked against each other.
//!
//! Faces are `Cell`, edges `Edge`, nodes `Vertex`. Every table is canonical (`(n, k)`, int32,
//! 0-based, `-1` for no neighbour). The conventions of the derived tables (ADR 0015):
//! - `E2V`: the file's `edge_node_connectivity` as stored; else one edge per distinct side of
//!   the faces, stored as `(lower node, higher node)` and numbered in lexicographic order of
//!   that pair;
//! - `C2E`: slot `j` of face `f` is the edge joining its nodes `j` and `j + 1` (the last node
//!   wrapping to the first), `-1` past the face's last node; width that of face-node;
//! - `E2C`: the faces of an edge in ascending order, `-1` second on a boundary;
//! - `C2E2C`: for each edge in edge order with two faces, each face gets the other appended;
//!   `-1` after; width that of face-node;
//! - `V2C`, `V2E`: the faces (edges) of a node in ascending order, `-1` after, width the
//!   largest count.

use netcdf_reader::NcVariable;

use crate::netcdf::{attribute, cdl_type, int_size, AttrValue, NcReader};
use crate::{describe, Canonical, Ctx, Grid, GridError, GridKind, GridSizes, Location, TableFrom, Tables};

/// The connectivity attributes of a UGRID 2-D mesh topology that this reader uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    FaceNode,
    EdgeNode,
    FaceEdge,
    EdgeFace,
    FaceFace,
}

impl Role {
    /// The topology attribute that names the variable.
    fn attribute(self) -> &'static str {
        match self {
            Role::FaceNode => "face_node_connectivity",
            Role::EdgeNode => "edge_node_connectivity",
            Role::FaceEdge => "face_edge_connectivity",
            Role::EdgeFace => "edge_face_connectivity",
            Role::FaceFace => "face_face_connectivity",
        }
    }

    /// The topology attribute that names the domain dimension.
    fn dimension_attribute(self) -> &'static str {
        match self.domain() {
            Location::Edge => "edge_dimension",
            _ => "face_dimension",
        }
    }

    fn offset(self) -> &'static str {
        match self {
            Role::FaceNode => "C2V",
            Role::EdgeNode => "E2V",
            Role::FaceEdge => "C2E",
            Role::EdgeFace => "E2C",
            Role::FaceFace => "C2E2C",
        }
    }

    fn domain(self) -> Location {
        match self {
            Role::FaceNode | Role::FaceEdge | Role::FaceFace => Location::Cell,
            Role::EdgeNode | Role::EdgeFace => Location::Edge,
        }
    }

    fn codomain(self) -> Location {
        match self {
            Role::FaceNode | Role::EdgeNode => Location::Vertex,
            Role::FaceEdge => Location::Edge,
            Role::EdgeFace | Role::FaceFace => Location::Cell,
        }
    }

    /// The width the neighbour axis must have, if fixed.
    fn fixed_width(self) -> Option<usize> {
        matches!(self, Role::EdgeNode | Role::EdgeFace).then_some(2)
    }
}

/// The 2-D mesh topology of the file, if it has one: the variable with `cf_role =
/// "mesh_topology"` and `topology_dimension = 2`.
///
/// Errors: [`GridError::BadAttribute`] when every topology is of another dimension,
/// [`GridError::SeveralMeshes`] when several are 2-D.
pub(crate) fn find_topology(nc: &NcReader) -> Result<Option<&NcVariable>, GridError> {
    let is_topology =
        |v: &&NcVariable| matches!(attribute(v, "cf_role"), Some(AttrValue::Text(t)) if t.trim() == "mesh_topology");
    let topologies: Vec<&NcVariable> = nc.variables().iter().filter(is_topology).collect();
    let Some(first) = topologies.first() else { return Ok(None) };
    let two_d: Vec<&NcVariable> =
        topologies.iter().copied().filter(|v| attribute(v, "topology_dimension") == Some(AttrValue::Int(2))).collect();
    match two_d.as_slice() {
        [one] => Ok(Some(one)),
        [] => Err(GridError::BadAttribute {
            path: nc.path().to_path_buf(),
            variable: first.name.clone(),
            attribute: "topology_dimension".to_owned(),
            found: show(attribute(first, "topology_dimension")),
            expected: "2 (a 2-D mesh of faces)".to_owned(),
        }),
        many => Err(GridError::SeveralMeshes {
            path: nc.path().to_path_buf(),
            names: many.iter().map(|v| v.name.clone()).collect(),
        }),
    }
}

/// An attribute value for a message.
fn show(value: Option<AttrValue>) -> String {
    match value {
        None => "missing".to_owned(),
        Some(AttrValue::Text(t)) => format!("{t:?}"),
        Some(AttrValue::Int(i)) => i.to_string(),
        Some(AttrValue::Other(o)) => o,
    }
}

/// A connectivity variable read into canonical form.
struct Conn {
    /// The file's variable.
    variable: String,
    n: usize,
    k: usize,
    /// `(n, k)` in C order, 0-based, `-1` where the file has its `_FillValue`.
    values: Vec<i32>,
}

impl Conn {
    fn row(&self, i: usize) -> &[i32] {
        &self.values[i * self.k..(i + 1) * self.k]
    }
}

struct Topology<'a> {
    nc: &'a NcReader,
    ctx: Ctx<'a>,
    var: &'a NcVariable,
}

impl<'a> Topology<'a> {
    fn name(&self) -> &str {
        &self.var.name
    }

    /// A text attribute of the topology (trimmed), `None` if absent.
    fn text(&self, name: &str) -> Result<Option<String>, GridError> {
        match attribute(self.var, name) {
            None => Ok(None),
            Some(AttrValue::Text(t)) => Ok(Some(t.trim().to_owned())),
            other => Err(GridError::BadAttribute {
                path: self.ctx.path(),
                variable: self.name().to_owned(),
                attribute: name.to_owned(),
                found: show(other),
                expected: "text".to_owned(),
            }),
        }
    }

    /// The variable the topology names for `role`, if it names one.
    fn variable(&self, role: Role) -> Result<Option<&'a NcVariable>, GridError> {
        let Some(name) = self.text(role.attribute())? else { return Ok(None) };
        self.nc.var(&name).map(Some).ok_or_else(|| GridError::MissingVariable {
            path: self.ctx.path(),
            kind: GridKind::Ugrid,
            variable: name.clone(),
            needed_for: format!("the {} of mesh topology `{}`", role.attribute(), self.name()),
        })
    }

    /// The number of nodes: the `node_dimension` attribute's dimension, else the first
    /// dimension of the first `node_coordinates` variable.
    fn node_count(&self) -> Result<usize, GridError> {
        if let Some(dimension) = self.text("node_dimension")? {
            let size = self.nc.dim_size(&dimension).ok_or_else(|| GridError::MissingDimension {
                path: self.ctx.path(),
                kind: GridKind::Ugrid,
                dimension: dimension.clone(),
            })?;
            return self.ctx.index_size(&dimension, size);
        }
        let bad = |found: String| GridError::BadAttribute {
            path: self.ctx.path(),
            variable: self.name().to_owned(),
            attribute: "node_coordinates".to_owned(),
            found,
            expected: "the names of the node coordinate variables (or a node_dimension attribute)".to_owned(),
        };
        let coordinates = self.text("node_coordinates")?.ok_or_else(|| bad("missing".to_owned()))?;
        let first = coordinates.split_whitespace().next().ok_or_else(|| bad(format!("{coordinates:?}")))?;
        let var = self.nc.var(first).ok_or_else(|| GridError::MissingVariable {
            path: self.ctx.path(),
            kind: GridKind::Ugrid,
            variable: first.to_owned(),
            needed_for: format!("the number of nodes (node_coordinates of `{}`)", self.name()),
        })?;
        let dim = var.dimensions.first().ok_or_else(|| GridError::WrongShape {
            path: self.ctx.path(),
            variable: first.to_owned(),
            expected: "(the node dimension)".to_owned(),
            found: describe(&var.dimensions),
        })?;
        self.ctx.index_size(&dim.name, dim.size)
    }

    /// Reads `var` as the `role` connectivity: 2-D, an integer type, the domain dimension named
    /// by the topology (else the first), `expected_n` rows when given, its `start_index` and
    /// `_FillValue` applied, every other value an index below `codomain_size`.
    fn read(
        &self,
        role: Role,
        var: &NcVariable,
        codomain_size: usize,
        expected_n: Option<usize>,
    ) -> Result<Conn, GridError> {
        let path = self.ctx.path();
        if int_size(&var.dtype).is_none() {
            return Err(GridError::WrongType {
                path,
                variable: var.name.clone(),
                expected: "an integer type",
                found: cdl_type(&var.dtype),
            });
        }
        let dims = &var.dimensions;
        let wrong_shape = |expected: String| GridError::WrongShape {
            path: self.ctx.path(),
            variable: var.name.clone(),
            expected,
            found: describe(dims),
        };
        let location = role.domain().name().to_lowercase();
        if dims.len() != 2 {
            return Err(wrong_shape(format!("two dimensions: the {location} dimension and a neighbour axis")));
        }
        let axis = match self.text(role.dimension_attribute())? {
            Some(name) => dims.iter().position(|d| d.name == name).ok_or_else(|| {
                wrong_shape(format!(
                    "`{name}` (the {} of `{}`) as one of its dimensions",
                    role.dimension_attribute(),
                    self.name()
                ))
            })?,
            None => 0,
        };
        let n = self.ctx.index_size(&dims[axis].name, dims[axis].size)?;
        let k = self.ctx.index_size(&dims[1 - axis].name, dims[1 - axis].size)?;
        if let Some(width) = role.fixed_width() {
            if k != width {
                return Err(wrong_shape(format!("a neighbour axis of size {width} beside `{}`", dims[axis].name)));
            }
        }
        if let Some(expected) = expected_n {
            if n != expected {
                return Err(wrong_shape(format!("{expected} {location}s along `{}`", dims[axis].name)));
            }
        }
        let start_attribute = attribute(var, "start_index");
        // Without the attribute the table is 0-based (UGRID); a 1-based table without it (as
        // FESOM writes them) is refused with a message that names the missing attribute.
        let start_given = start_attribute.is_some();
        let start = match start_attribute {
            None => 0,
            Some(AttrValue::Int(i)) => i,
            other => {
                return Err(GridError::BadAttribute {
                    path,
                    variable: var.name.clone(),
                    attribute: "start_index".to_owned(),
                    found: show(other),
                    expected: "one integer, 0 or 1".to_owned(),
                })
            }
        };
        let fill = match attribute(var, "_FillValue") {
            None => None,
            Some(AttrValue::Int(f)) => Some(f),
            other => {
                return Err(GridError::BadAttribute {
                    path,
                    variable: var.name.clone(),
                    attribute: "_FillValue".to_owned(),
                    found: show(other),
                    expected: "one integer (the variable is an index table)".to_owned(),
                })
            }
        };
        let raw = self.nc.read_ints(var)?;
        if raw.len() != n * k {
            return Err(wrong_shape(format!("{} values", n * k)));
        }
        let size = codomain_size as i128;
        let mut values = Vec::with_capacity(n * k);
        for i in 0..n {
            for j in 0..k {
                let x = raw.get(if axis == 0 { i * k + j } else { j * n + i });
                let v = if Some(x) == fill {
                    -1
                } else if (start..start + size).contains(&x) {
                    (x - start) as i32
                } else {
                    let fill = match fill {
                        Some(f) => format!(" or the _FillValue {f}"),
                        None => " (the variable has no _FillValue, so every entry must be an index)".to_owned(),
                    };
                    return Err(GridError::IndexOutOfRange {
                        path,
                        variable: var.name.clone(),
                        offset: role.offset().to_owned(),
                        row: i,
                        column: j,
                        value: x,
                        codomain: role.codomain().name().to_owned(),
                        codomain_size,
                        expected: if start_given {
                            format!(
                                "{start}..={} (an index into {}, start_index {start}){fill}",
                                start + size - 1,
                                role.codomain().name()
                            )
                        } else {
                            format!(
                                "{start}..={} (an index into {}, 0-based since the variable has no start_index \
                                 attribute; a 1-based table needs start_index = 1){fill}",
                                start + size - 1,
                                role.codomain().name()
                            )
                        },
                    });
                };
                values.push(v);
            }
        }
        Ok(Conn { variable: var.name.clone(), n, k, values })
    }
}

/// The faces: face-node connectivity and the number of nodes of each face.
struct Faces {
    conn: Conn,
    counts: Vec<usize>,
}

impl Faces {
    /// Checks every face: fill values only after its last node, at least three nodes, no node
    /// twice.
    fn check(ctx: &Ctx<'_>, conn: Conn) -> Result<Faces, GridError> {
        let bad = |f: usize, row: &[i32], expected: &str| GridError::BadEntry {
            path: ctx.path(),
            variable: conn.variable.clone(),
            at: format!("face {f}"),
            found: format!("the nodes {row:?} (0-based, -1 for the fill value)"),
            expected: expected.to_owned(),
        };
        if conn.n == 0 {
            return Err(GridError::WrongShape {
                path: ctx.path(),
                variable: conn.variable.clone(),
                expected: "at least one face".to_owned(),
                found: "no faces".to_owned(),
            });
        }
        let mut counts = Vec::with_capacity(conn.n);
        for f in 0..conn.n {
            let row = conn.row(f);
            let count = row.iter().take_while(|&&x| x != -1).count();
            if row[count..].iter().any(|&x| x != -1) {
                return Err(bad(f, row, "the fill value only after the face's last node"));
            }
            if count < 3 {
                return Err(bad(f, row, "at least three nodes"));
            }
            let nodes = &row[..count];
            if (1..count).any(|j| nodes[..j].contains(&nodes[j])) {
                return Err(bad(f, row, "each node of a face once"));
            }
            counts.push(count);
        }
        Ok(Faces { conn, counts })
    }

    fn len(&self) -> usize {
        self.conn.n
    }

    fn width(&self) -> usize {
        self.conn.k
    }

    /// The nodes of face `f`, without padding.
    fn nodes(&self, f: usize) -> &[i32] {
        &self.conn.row(f)[..self.counts[f]]
    }

    /// The sides of face `f` as `(slot, lower node, higher node)`: slot `j` joins nodes `j` and
    /// `j + 1`, the last wrapping to the first.
    fn sides(&self, f: usize) -> impl Iterator<Item = (usize, (i32, i32))> + '_ {
        let nodes = self.nodes(f);
        (0..nodes.len()).map(move |j| {
            let (a, b) = (nodes[j], nodes[(j + 1) % nodes.len()]);
            (j, (a.min(b), a.max(b)))
        })
    }
}

/// The edges: their nodes and a lookup from a node pair to the edge.
struct Edges {
    /// `(n_edge, 2)` in C order.
    nodes: Vec<i32>,
    /// `(lower node, higher node)` -> edge, sorted by the pair.
    index: Vec<((i32, i32), i32)>,
}

impl Edges {
    fn len(&self) -> usize {
        self.nodes.len() / 2
    }

    /// One edge per distinct side, `(lower, higher)`, numbered in lexicographic order.
    fn derive(faces: &Faces) -> Edges {
        let mut pairs: Vec<(i32, i32)> = (0..faces.len()).flat_map(|f| faces.sides(f).map(|(_, p)| p)).collect();
        pairs.sort_unstable();
        pairs.dedup();
        let nodes = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let index = pairs.into_iter().enumerate().map(|(e, p)| (p, e as i32)).collect();
        Edges { nodes, index }
    }

    /// The file's edges: two distinct nodes each, no pair twice.
    fn from_file(ctx: &Ctx<'_>, conn: &Conn) -> Result<Edges, GridError> {
        let bad = |e: usize, found: String, expected: &str| GridError::BadEntry {
            path: ctx.path(),
            variable: conn.variable.clone(),
            at: format!("edge {e}"),
            found,
            expected: expected.to_owned(),
        };
        let mut index = Vec::with_capacity(conn.n);
        for e in 0..conn.n {
            let row = conn.row(e);
            let (a, b) = (row[0], row[1]);
            if a == -1 || b == -1 {
                return Err(bad(e, format!("the nodes {row:?} (-1 for the fill value)"), "two nodes"));
            }
            if a == b {
                return Err(bad(e, format!("the nodes {row:?}"), "two different nodes"));
            }
            index.push(((a.min(b), a.max(b)), e as i32));
        }
        index.sort_unstable();
        if let Some(w) = index.windows(2).find(|w| w[0].0 == w[1].0) {
            let ((a, b), first) = w[0];
            return Err(bad(
                w[1].1 as usize,
                format!("the nodes {a} and {b}, as edge {first} does"),
                "each pair of nodes joined by one edge",
            ));
        }
        Ok(Edges { nodes: conn.values.clone(), index })
    }

    fn find(&self, pair: (i32, i32)) -> Option<i32> {
        self.index.binary_search_by(|(p, _)| p.cmp(&pair)).ok().map(|i| self.index[i].1)
    }
}

/// Reads the UGRID 2-D mesh of `topology` (found by [`find_topology`]).
///
/// Errors: see [`crate::read_grid`].
pub(crate) fn read(nc: &NcReader, topology: &NcVariable) -> Result<Grid, GridError> {
    let t = Topology { nc, ctx: Ctx { path: nc.path() }, var: topology };
    let ctx = &t.ctx;
    let n_node = t.node_count()?;

    let face_node = t.variable(Role::FaceNode)?.ok_or_else(|| GridError::BadAttribute {
        path: ctx.path(),
        variable: t.name().to_owned(),
        attribute: Role::FaceNode.attribute().to_owned(),
        found: "missing".to_owned(),
        expected: "the name of the face-node connectivity variable, which every UGRID 2-D mesh has".to_owned(),
    })?;
    let faces = Faces::check(ctx, t.read(Role::FaceNode, face_node, n_node, None)?)?;
    let (n_face, width) = (faces.len(), faces.width());
    let fnodes = faces.conn.variable.clone();

    // Edges: the file's, else derived.
    let edge_conn = match t.variable(Role::EdgeNode)? {
        Some(var) => Some(t.read(Role::EdgeNode, var, n_node, None)?),
        None => None,
    };
    let edges = match &edge_conn {
        Some(conn) => Edges::from_file(ctx, conn)?,
        None => Edges::derive(&faces),
    };
    let n_edge = ctx.index_size("edges", edges.len() as u64)?;
    let edge_source = edge_conn.as_ref().map_or_else(|| fnodes.clone(), |c| c.variable.clone());
    let mesh_vars = match &edge_conn {
        Some(c) => format!("`{fnodes}` and `{}`", c.variable),
        None => format!("`{fnodes}`"),
    };

    // C2E: the edge of each side, slot by slot.
    let mut c2e = vec![-1i32; n_face * width];
    for f in 0..n_face {
        for (j, pair) in faces.sides(f) {
            c2e[f * width + j] = edges.find(pair).ok_or_else(|| GridError::Contradiction {
                path: ctx.path(),
                variable: edge_source.clone(),
                other: format!("`{fnodes}`"),
                at: format!("face {f}"),
                found: format!("no edge joining its nodes {} and {}", pair.0, pair.1),
                expected: "an edge for every side of every face".to_owned(),
            })?;
        }
    }
    let mut c2e_from = TableFrom { offset: "C2E", variable: edge_source.clone(), derived: true };
    if edge_conn.is_some() {
        c2e_from.variable = format!("{fnodes}, {edge_source}");
    }
    let mut c2e_width = width;
    if let Some(var) = t.variable(Role::FaceEdge)? {
        let Some(edge_conn) = &edge_conn else {
            return Err(GridError::BadAttribute {
                path: ctx.path(),
                variable: t.name().to_owned(),
                attribute: Role::EdgeNode.attribute().to_owned(),
                found: "missing".to_owned(),
                expected: format!("the edge-node connectivity that numbers the edges of `{}`", var.name),
            });
        };
        let file = t.read(Role::FaceEdge, var, n_edge, Some(n_face))?;
        for f in 0..n_face {
            let found = sorted_valid(file.row(f));
            let expected = sorted_valid(&c2e[f * width..(f + 1) * width]);
            if found != expected {
                return Err(GridError::Contradiction {
                    path: ctx.path(),
                    variable: file.variable.clone(),
                    other: format!("`{fnodes}` and `{}`", edge_conn.variable),
                    at: format!("face {f}"),
                    found: format!("the edges {found:?}"),
                    expected: format!("the edges {expected:?}, those joining consecutive nodes of the face"),
                });
            }
        }
        c2e_from = TableFrom { offset: "C2E", variable: file.variable.clone(), derived: false };
        c2e_width = file.k;
        c2e = file.values;
    }

    // E2C: the faces of each edge in ascending order.
    let mut e2c = vec![-1i32; n_edge * 2];
    for f in 0..n_face {
        for &e in c2e[f * c2e_width..(f + 1) * c2e_width].iter().filter(|&&e| e != -1) {
            let e = e as usize;
            if e2c[2 * e] == -1 {
                e2c[2 * e] = f as i32;
            } else if e2c[2 * e + 1] == -1 {
                e2c[2 * e + 1] = f as i32;
            } else {
                return Err(GridError::BadEntry {
                    path: ctx.path(),
                    variable: fnodes.clone(),
                    at: format!("face {f}"),
                    found: format!(
                        "a side (edge {e}, nodes {} and {}) that faces {} and {} have too",
                        edges.nodes[2 * e],
                        edges.nodes[2 * e + 1],
                        e2c[2 * e],
                        e2c[2 * e + 1]
                    ),
                    expected: "at most two faces on an edge (a 2-D manifold mesh)".to_owned(),
                });
            }
        }
    }
    for e in 0..n_edge {
        if e2c[2 * e] == -1 {
            return Err(GridError::Contradiction {
                path: ctx.path(),
                variable: edge_source.clone(),
                other: format!("`{fnodes}`"),
                at: format!("edge {e}"),
                found: format!("the nodes {} and {}, a side of no face", edges.nodes[2 * e], edges.nodes[2 * e + 1]),
                expected: "every edge a side of a face".to_owned(),
            });
        }
    }
    let mut e2c_from = TableFrom { offset: "E2C", variable: c2e_from.variable.clone(), derived: true };
    if let Some(var) = t.variable(Role::EdgeFace)? {
        let file = t.read(Role::EdgeFace, var, n_face, Some(n_edge))?;
        for e in 0..n_edge {
            let found = sorted_valid(file.row(e));
            let expected = sorted_valid(&e2c[2 * e..2 * e + 2]);
            if found != expected {
                let face = found.iter().chain(&expected).find(|f| !(found.contains(f) && expected.contains(f)));
                return Err(GridError::Contradiction {
                    path: ctx.path(),
                    variable: file.variable.clone(),
                    other: mesh_vars.clone(),
                    at: format!("face {} on edge {e}", face.copied().unwrap_or(-1)),
                    found: format!("edge {e} the faces {found:?}"),
                    expected: format!("the faces {expected:?}, those that have edge {e} as a side"),
                });
            }
        }
        e2c_from = TableFrom { offset: "E2C", variable: file.variable.clone(), derived: false };
        e2c = file.values;
    }

    // C2E2C: in edge order, each face of an inner edge gets the other appended.
    let mut c2e2c = vec![-1i32; n_face * width];
    let mut filled = vec![0usize; n_face];
    for e in 0..n_edge {
        let (a, b) = (e2c[2 * e], e2c[2 * e + 1]);
        if a == -1 || b == -1 {
            continue;
        }
        for (from, to) in [(a as usize, b), (b as usize, a)] {
            // Each face has at most `width` edges, each with at most one other face (checked
            // above), so a row never overflows; the check keeps a bug from becoming a panic.
            if filled[from] < width {
                c2e2c[from * width + filled[from]] = to;
                filled[from] += 1;
            }
        }
    }
    let mut c2e2c_from = TableFrom { offset: "C2E2C", variable: e2c_from.variable.clone(), derived: true };
    let mut c2e2c_width = width;
    if let Some(var) = t.variable(Role::FaceFace)? {
        let file = t.read(Role::FaceFace, var, n_face, Some(n_face))?;
        for f in 0..n_face {
            let found = sorted_valid(file.row(f));
            let expected = sorted_valid(&c2e2c[f * width..(f + 1) * width]);
            if found != expected {
                return Err(GridError::Contradiction {
                    path: ctx.path(),
                    variable: file.variable.clone(),
                    other: format!("`{}`", e2c_from.variable.replace(", ", "` and `")),
                    at: format!("face {f}"),
                    found: format!("the neighbours {found:?}"),
                    expected: format!("the faces {expected:?}, those across its edges"),
                });
            }
        }
        c2e2c_from = TableFrom { offset: "C2E2C", variable: file.variable.clone(), derived: false };
        c2e2c_width = file.k;
        c2e2c = file.values;
    }

    // V2C and V2E: ascending, padded to the largest count.
    let v2c = incidence(n_node, (0..n_face).flat_map(|f| faces.nodes(f).iter().map(move |&v| (v, f as i32))));
    let v2e = incidence(
        n_node,
        edges.nodes.chunks_exact(2).enumerate().flat_map(|(e, p)| [(p[0], e as i32), (p[1], e as i32)]),
    );

    let sizes = GridSizes { cells: n_face, edges: n_edge, vertices: n_node };
    let mut tables = Tables::default();
    let (cell, edge, vertex) = (Location::Cell, Location::Edge, Location::Vertex);
    tables.push(ctx, c2e_from, cell, edge, Canonical::of(n_face, c2e_width, c2e))?;
    let c2v_from = TableFrom { offset: "C2V", variable: fnodes.clone(), derived: false };
    tables.push(ctx, c2v_from, cell, vertex, Canonical::of(n_face, width, faces.conn.values))?;
    tables.push(ctx, c2e2c_from, cell, cell, Canonical::of(n_face, c2e2c_width, c2e2c))?;
    tables.push(ctx, e2c_from, edge, cell, Canonical::of(n_edge, 2, e2c))?;
    let e2v_from = TableFrom { offset: "E2V", variable: edge_source.clone(), derived: edge_conn.is_none() };
    tables.push(ctx, e2v_from, edge, vertex, Canonical::of(n_edge, 2, edges.nodes))?;
    let v2e_from = TableFrom { offset: "V2E", variable: edge_source, derived: true };
    tables.push(ctx, v2e_from, vertex, edge, Canonical::of(n_node, v2e.1, v2e.0))?;
    let v2c_from = TableFrom { offset: "V2C", variable: fnodes, derived: true };
    tables.push(ctx, v2c_from, vertex, cell, Canonical::of(n_node, v2c.1, v2c.0))?;
    tables.finish(ctx, GridKind::Ugrid, sizes)
}

/// The valid entries of a row, sorted (a multiset, for comparing tables whose slot order may
/// differ).
fn sorted_valid(row: &[i32]) -> Vec<i32> {
    let mut v: Vec<i32> = row.iter().copied().filter(|&x| x != -1).collect();
    v.sort_unstable();
    v
}

/// A node-to-element table from `(node, element)` pairs given in ascending element order: row
/// `v` lists the elements of node `v` in that order, padded with `-1` to the largest count.
/// Returns the `(n_node, width)` values in C order and the width.
fn incidence(n_node: usize, pairs: impl Iterator<Item = (i32, i32)> + Clone) -> (Vec<i32>, usize) {
    let mut counts = vec![0usize; n_node];
    for (v, _) in pairs.clone() {
        counts[v as usize] += 1;
    }
    let width = counts.iter().copied().max().unwrap_or(0);
    let mut out = vec![-1i32; n_node * width];
    counts.iter_mut().for_each(|c| *c = 0);
    for (v, x) in pairs {
        let v = v as usize;
        out[v * width + counts[v]] = x;
        counts[v] += 1;
    }
    (out, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incidence_is_ascending_and_padded() {
        let (t, w) = incidence(3, [(0, 0), (2, 0), (0, 1), (1, 2), (0, 3)].into_iter());
        assert_eq!(w, 3);
        assert_eq!(t, [0, 1, 3, 2, -1, -1, 0, -1, -1]);
    }

    #[test]
    fn sorted_valid_is_a_multiset() {
        assert_eq!(sorted_valid(&[4, -1, 2, 2]), [2, 2, 4]);
    }
}
