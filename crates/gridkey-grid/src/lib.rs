//! Real grid files (ICON, MPAS, UGRID) as runtime offset providers (ARCHITECTURE.md
//! "gridkey-grid"; `data/grids/README.md`; ADR 0014, ADR 0015).
//!
//! [`read_grid`] opens a netCDF file of any format (CDF-1, CDF-2, CDF-5 or HDF5-based
//! netCDF-4) with `netcdf-reader`, a pure-Rust reader (no C library), recognises the model from
//! its variables (ICON: `edge_of_cell`; MPAS: `edgesOnCell`; UGRID: a variable with
//! `cf_role = "mesh_topology"`), reads only the connectivity variables it needs and returns a
//! [`Grid`]: the sizes, a runtime [`OffsetProvider`] and a [`TableInfo`] per table.
//!
//! | offset | ICON variable | MPAS variable | UGRID (ADR 0015) | domain -> codomain |
//! |---|---|---|---|---|
//! | `C2E` | `edge_of_cell` | `edgesOnCell` | `face_edge_connectivity` or derived | Cell -> Edge |
//! | `C2V` | `vertex_of_cell` | `verticesOnCell` | `face_node_connectivity` | Cell -> Vertex |
//! | `C2E2C` | `neighbor_cell_index` | `cellsOnCell` | `face_face_connectivity` or derived | Cell -> Cell |
//! | `E2C` | `adjacent_cell_of_edge` | `cellsOnEdge` | `edge_face_connectivity` or derived | Edge -> Cell |
//! | `E2V` | `edge_vertices` | `verticesOnEdge` | `edge_node_connectivity` or derived | Edge -> Vertex |
//! | `V2E` | `edges_of_vertex` | `edgesOnVertex` | derived | Vertex -> Edge |
//! | `V2C` | `cells_of_vertex` | `cellsOnVertex` | derived | Vertex -> Cell |
//! | `V2E2V` | `vertices_of_vertex` | (none) | (none) | Vertex -> Vertex |
//!
//! ICON and MPAS files store 1-based indices with `0` for "no neighbour". ICON stores a table
//! neighbour axis first, `(k, n)` (e.g. `edge_of_cell(nv, cell)`), and it is transposed; MPAS
//! stores `(n, k)`, and in the cell tables (`C2E`, `C2V`, `C2E2C`) the entries of cell `c` past
//! `nEdgesOnCell[c]` are padding: they become `-1` whatever their raw value. UGRID meshes give
//! each connectivity variable its own `start_index`, `_FillValue` (any integer type) and
//! dimension order; the tables a file lacks are derived from face-node (and edge-node)
//! connectivity with uxarray's conventions, and the tables a file has are checked against each
//! other (ADR 0015).
//!
//! ```
//! # fn main() -> Result<(), gridkey_grid::GridError> {
//! let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/grids/quad-hexagon.grid.nc");
//! let grid = gridkey_grid::read_grid(std::path::Path::new(path))?;
//! assert_eq!(grid.kind(), gridkey_grid::GridKind::Ugrid);
//! assert_eq!((grid.sizes().cells, grid.sizes().edges, grid.sizes().vertices), (4, 19, 16));
//! let c2e = grid.table_info("C2E").unwrap();
//! assert_eq!((c2e.shape, c2e.derived), ([4, 6], true));
//! # Ok(())
//! # }
//! ```
//!
//! # Architecture invariant
//!
//! Output tables are canonical: `(n, k)`, int32, C order, 0-based, `-1` skip; every index is
//! checked against its codomain size; no table is returned that was not checked.
//!
//! For ICON and MPAS a raw value `x` becomes `x - 1` when `1 <= x <= size` of the codomain (the
//! grid dimension `cell`/`edge`/`vertex` for ICON, `nCells`/`nEdges`/`nVertices` for MPAS) and
//! `-1` when `x == 0`; anything else is [`GridError::IndexOutOfRange`], naming the variable and
//! the first bad entry. Every file goes through one wrapper of the reader: a bounds-checked walk
//! over netCDF-3 headers, every variable's size checked against what the file can hold before it
//! is allocated, positional reads instead of a mapping, and the reader under `catch_unwind`, so
//! that damaged or truncated files are typed errors and never a panic, an abort or a huge
//! allocation.
//!
//! # Example
//!
//! What a frontend does with a grid file: read it into a runtime offset provider and convert
//! that once into its compile-time view (here the MPAS-Ocean grid shipped in `data/grids`).
//!
//! ```
//! use gridkey_grid::{read_grid, GridKind};
//! use gridkey_offsets::{compile_time_offset_provider, TableStore};
//!
//! let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/grids/oQU480.231010.nc");
//! let grid = read_grid(&path)?;
//! assert_eq!(grid.kind(), GridKind::Mpas);
//! let sizes = grid.sizes();
//! assert_eq!((sizes.cells, sizes.edges, sizes.vertices), (1791, 5754, 3947));
//! let c2e = grid.table_info("C2E").expect("every grid has C2E");
//! assert_eq!((c2e.domain.as_str(), c2e.codomain.as_str(), c2e.shape[0]), ("Cell", "Edge", 1791));
//!
//! let cache = tempfile::tempdir()?;
//! let view = compile_time_offset_provider(grid.provider(), &TableStore::open(cache.path())?)?;
//! assert_eq!(view.len(), grid.provider().len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// A GridError carries what its message needs (the path, variable names, the values found and
// expected: up to 160 bytes). It is returned at most once per grid read, never in a loop, and
// callers that keep it box it (gridkey's `AppError::Grid`).
#![allow(clippy::result_large_err)]

mod error;
mod header;
mod netcdf;
mod ugrid;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey_offsets::{host_connectivity, Dimension, DimensionKind, Entry, OffsetProvider};
use ndarray::Array2;
use netcdf_reader::{NcType, NcVariable};

pub use error::GridError;
pub use netcdf::MAX_INFLATION;

use netcdf::{cdl_type, NcReader, RawInts};

/// The model a grid file comes from, recognised from its variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GridKind {
    /// ICON (has `edge_of_cell`): tables stored `(k, n)`, 1-based, `0` = no neighbour.
    Icon,
    /// MPAS (has `edgesOnCell`): tables stored `(n, k)`, 1-based, `0` = no neighbour, cell
    /// tables padded past `nEdgesOnCell`.
    Mpas,
    /// A UGRID 1.0 2-D mesh (has a variable with `cf_role = "mesh_topology"`): faces are cells,
    /// nodes are vertices; `start_index`, `_FillValue` and dimension order per variable; the
    /// tables the file lacks are derived (ADR 0015).
    Ugrid,
}

impl GridKind {
    /// Lowercase name: `"icon"`, `"mpas"` or `"ugrid"` (as in
    /// `data/golden/table-digests-v1.json`).
    pub const fn as_str(self) -> &'static str {
        match self {
            GridKind::Icon => "icon",
            GridKind::Mpas => "mpas",
            GridKind::Ugrid => "ugrid",
        }
    }
}

impl fmt::Display for GridKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The number of cells, edges and vertices of a grid, from the file's dimensions (ICON `cell`,
/// `edge`, `vertex`; MPAS `nCells`, `nEdges`, `nVertices`; UGRID the face and node dimensions,
/// and the edge dimension or the number of edges derived). Every index is checked against these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GridSizes {
    /// Number of cells.
    pub cells: usize,
    /// Number of edges.
    pub edges: usize,
    /// Number of vertices.
    pub vertices: usize,
}

/// Facts about one canonical table, computed once while reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// The offset name, e.g. `C2E`.
    pub offset: String,
    /// The variable it was read from, e.g. `edge_of_cell`; for a derived table the variables it
    /// was derived from, e.g. `Mesh2_face_nodes` or `face_node_connectivity, edge_node_connectivity`.
    pub variable: String,
    /// Whether the table was derived from others (UGRID, ADR 0015) instead of read from the file.
    pub derived: bool,
    /// The domain dimension name: `Cell`, `Edge` or `Vertex`.
    pub domain: String,
    /// The codomain dimension name: `Cell`, `Edge` or `Vertex`.
    pub codomain: String,
    /// The canonical shape `(n, k)`: domain size, neighbour slots.
    pub shape: [usize; 2],
    /// How many entries are `-1` (no neighbour).
    pub skip_count: usize,
    /// The smallest entry (`-1` when `skip_count > 0`; `-1` for an empty table).
    pub min: i32,
    /// The largest entry, at most the codomain size minus one.
    pub max: i32,
}

/// A grid read from a file: its kind, sizes, runtime offset provider and table facts.
#[derive(Clone, Debug)]
pub struct Grid {
    kind: GridKind,
    path: PathBuf,
    sizes: GridSizes,
    provider: OffsetProvider,
    tables: Vec<TableInfo>,
}

impl Grid {
    /// The model the file comes from.
    pub fn kind(&self) -> GridKind {
        self.kind
    }

    /// The path the grid was read from, as given to [`read_grid`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of cells, edges and vertices.
    pub fn sizes(&self) -> GridSizes {
        self.sizes
    }

    /// The runtime offset provider. Entries, in this order: `C2E`, `C2V`, `C2E2C`, `E2C`,
    /// `E2V`, `V2E`, `V2C`, `V2E2V` (ICON only), then `Koff` -> dimension `K` (vertical).
    ///
    /// Each gather has domain `Dimension::horizontal("Cell" | "Edge" | "Vertex")`, local
    /// dimension `Dimension::local("<offset>Dim")` (e.g. `C2EDim`), a horizontal codomain and a
    /// host int32 table in canonical form (`(n, k)`, C order, 0-based). Its skip value is
    /// `Some(-1)` exactly when the table holds at least one `-1`, `None` otherwise: as icon4py
    /// sets it for GT4Py only on tables with gaps (pentagons, boundaries), so that a stencil
    /// over a gap-free table needs no skip check.
    pub fn provider(&self) -> &OffsetProvider {
        &self.provider
    }

    /// The runtime offset provider, by value.
    pub fn into_provider(self) -> OffsetProvider {
        self.provider
    }

    /// One [`TableInfo`] per gather, in provider order.
    pub fn tables(&self) -> &[TableInfo] {
        &self.tables
    }

    /// The [`TableInfo`] of `offset`, if the grid has that table.
    pub fn table_info(&self, offset: &str) -> Option<&TableInfo> {
        self.tables.iter().find(|t| t.offset == offset)
    }
}

/// A mesh location: domain or codomain of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    Cell,
    Edge,
    Vertex,
}

impl Location {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Location::Cell => "Cell",
            Location::Edge => "Edge",
            Location::Vertex => "Vertex",
        }
    }

    /// The file dimension that counts this location.
    fn dim(self, model: Model) -> &'static str {
        match (model, self) {
            (Model::Icon, Location::Cell) => "cell",
            (Model::Icon, Location::Edge) => "edge",
            (Model::Icon, Location::Vertex) => "vertex",
            (Model::Mpas, Location::Cell) => "nCells",
            (Model::Mpas, Location::Edge) => "nEdges",
            (Model::Mpas, Location::Vertex) => "nVertices",
        }
    }

    /// The usual name of the neighbour axis of a table from this location (messages only: the
    /// neighbour axis is not required to have this name).
    fn usual_neighbour_dim(self, model: Model) -> &'static str {
        match (model, self) {
            (Model::Icon, Location::Cell) => "nv",
            (Model::Icon, Location::Edge) => "nc",
            (Model::Icon, Location::Vertex) => "ne",
            (Model::Mpas, Location::Cell) => "maxEdges",
            (Model::Mpas, Location::Edge) => "TWO",
            (Model::Mpas, Location::Vertex) => "vertexDegree",
        }
    }

    pub(crate) fn size(self, sizes: GridSizes) -> usize {
        match self {
            Location::Cell => sizes.cells,
            Location::Edge => sizes.edges,
            Location::Vertex => sizes.vertices,
        }
    }
}

/// The two models whose files name their variables and dimensions themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Model {
    Icon,
    Mpas,
}

impl Model {
    fn kind(self) -> GridKind {
        match self {
            Model::Icon => GridKind::Icon,
            Model::Mpas => GridKind::Mpas,
        }
    }
}

/// One table: where it comes from in each kind of file.
struct TableSpec {
    offset: &'static str,
    domain: Location,
    codomain: Location,
    icon: &'static str,
    mpas: Option<&'static str>,
}

/// The tables, in provider order (`data/grids/README.md`).
const TABLES: [TableSpec; 8] = [
    TableSpec {
        offset: "C2E",
        domain: Location::Cell,
        codomain: Location::Edge,
        icon: "edge_of_cell",
        mpas: Some("edgesOnCell"),
    },
    TableSpec {
        offset: "C2V",
        domain: Location::Cell,
        codomain: Location::Vertex,
        icon: "vertex_of_cell",
        mpas: Some("verticesOnCell"),
    },
    TableSpec {
        offset: "C2E2C",
        domain: Location::Cell,
        codomain: Location::Cell,
        icon: "neighbor_cell_index",
        mpas: Some("cellsOnCell"),
    },
    TableSpec {
        offset: "E2C",
        domain: Location::Edge,
        codomain: Location::Cell,
        icon: "adjacent_cell_of_edge",
        mpas: Some("cellsOnEdge"),
    },
    TableSpec {
        offset: "E2V",
        domain: Location::Edge,
        codomain: Location::Vertex,
        icon: "edge_vertices",
        mpas: Some("verticesOnEdge"),
    },
    TableSpec {
        offset: "V2E",
        domain: Location::Vertex,
        codomain: Location::Edge,
        icon: "edges_of_vertex",
        mpas: Some("edgesOnVertex"),
    },
    TableSpec {
        offset: "V2C",
        domain: Location::Vertex,
        codomain: Location::Cell,
        icon: "cells_of_vertex",
        mpas: Some("cellsOnVertex"),
    },
    TableSpec {
        offset: "V2E2V",
        domain: Location::Vertex,
        codomain: Location::Vertex,
        icon: "vertices_of_vertex",
        mpas: None,
    },
];

/// The variable whose presence makes a file an ICON grid.
const ICON_MARKER: &str = "edge_of_cell";
/// The variable whose presence makes a file an MPAS grid.
const MPAS_MARKER: &str = "edgesOnCell";
/// MPAS: the number of valid entries per row of the cell tables.
const MPAS_COUNT: &str = "nEdgesOnCell";

/// Reads the ICON, MPAS or UGRID grid in the netCDF file `path` (CDF-1, CDF-2, CDF-5 or
/// netCDF-4) into a [`Grid`] with canonical tables: shape `(n, k)`, int32, C order, 0-based,
/// `-1` for no neighbour, every index checked against the size of its codomain (see the crate
/// docs for the variables, the provider order and the skip-value rule; ADR 0015 for UGRID).
///
/// Only the connectivity variables (and MPAS `nEdgesOnCell`) are read, each once.
///
/// Errors, in the order they are checked: [`GridError::Open`] (missing, not a regular file,
/// unreadable); [`GridError::NotNetcdf`] (empty, text); [`GridError::Malformed`] and
/// [`GridError::Truncated`] (netCDF-3 header walk); [`GridError::Netcdf`] /
/// [`GridError::ReaderPanicked`] (the reader); [`GridError::NotAGrid`]; for ICON and MPAS
/// [`GridError::MissingDimension`], then per table [`GridError::MissingVariable`],
/// [`GridError::WrongType`], [`GridError::WrongShape`], [`GridError::TooLarge`],
/// [`GridError::CountOutOfRange`] (MPAS) and [`GridError::IndexOutOfRange`]; for UGRID those
/// and [`GridError::SeveralMeshes`], [`GridError::BadAttribute`],
/// [`GridError::TooManyElements`], [`GridError::BadEntry`] and [`GridError::Contradiction`].
/// Never panics, whatever the file holds. The file must not change while it is read (it is
/// opened twice for a netCDF-3 file: once for the header walk, once by the reader).
pub fn read_grid(path: &Path) -> Result<Grid, GridError> {
    let nc = NcReader::open(path)?;
    if nc.var(ICON_MARKER).is_some() {
        read_model_grid(&nc, Model::Icon)
    } else if nc.var(MPAS_MARKER).is_some() {
        read_model_grid(&nc, Model::Mpas)
    } else if let Some(topology) = ugrid::find_topology(&nc)? {
        ugrid::read(&nc, topology)
    } else {
        Err(GridError::NotAGrid { path: path.to_path_buf() })
    }
}

/// An ICON or MPAS grid: the variables of [`TABLES`].
fn read_model_grid(nc: &NcReader, model: Model) -> Result<Grid, GridError> {
    let ctx = Ctx { path: nc.path() };
    let kind = model.kind();
    let dim_size = |location: Location| {
        let dimension = location.dim(model);
        let size = nc.dim_size(dimension).ok_or_else(|| GridError::MissingDimension {
            path: ctx.path(),
            kind,
            dimension: dimension.to_owned(),
        })?;
        ctx.index_size(dimension, size)
    };
    let sizes = GridSizes {
        cells: dim_size(Location::Cell)?,
        edges: dim_size(Location::Edge)?,
        vertices: dim_size(Location::Vertex)?,
    };

    let counts = match model {
        Model::Icon => None,
        Model::Mpas => Some(ctx.read_counts(nc)?),
    };

    let mut tables = Tables::default();
    for spec in &TABLES {
        let variable = match model {
            Model::Icon => spec.icon,
            Model::Mpas => match spec.mpas {
                Some(v) => v,
                None => continue,
            },
        };
        let (var, [n, k]) = ctx.check_table_variable(nc, model, spec, variable)?;
        let raw = ctx.read_i32(nc, var)?;
        if raw.len() != n * k {
            return Err(GridError::WrongShape {
                path: ctx.path(),
                variable: variable.to_owned(),
                expected: format!("{} values", n * k),
                found: format!("{} values read", raw.len()),
            });
        }
        let layout = match model {
            Model::Icon => Layout::NeighbourFirst,
            Model::Mpas => Layout::DomainFirst,
        };
        let row_counts = match (&counts, spec.domain) {
            (Some(c), Location::Cell) => {
                ctx.check_counts(c, k, variable)?;
                Some(c.as_slice())
            }
            _ => None,
        };
        let codomain_size = spec.codomain.size(sizes);
        let canonical =
            canonicalize(&raw, layout, n, k, codomain_size, row_counts).map_err(|bad| GridError::IndexOutOfRange {
                path: ctx.path(),
                variable: variable.to_owned(),
                offset: spec.offset.to_owned(),
                row: bad.row,
                column: bad.column,
                value: i128::from(bad.value),
                codomain: spec.codomain.name().to_owned(),
                codomain_size,
                expected: format!(
                    "1..={codomain_size} (an index into {}, 1-based) or 0 for no neighbour",
                    spec.codomain.name()
                ),
            })?;
        drop(raw);
        let table = TableFrom { offset: spec.offset, variable: variable.to_owned(), derived: false };
        tables.push(&ctx, table, spec.domain, spec.codomain, canonical)?;
    }
    tables.finish(&ctx, kind, sizes)
}

/// Where a table comes from, for its [`TableInfo`].
pub(crate) struct TableFrom {
    pub(crate) offset: &'static str,
    pub(crate) variable: String,
    pub(crate) derived: bool,
}

/// The provider and table facts of a grid being read, in provider order.
#[derive(Default)]
pub(crate) struct Tables {
    provider: OffsetProvider,
    infos: Vec<TableInfo>,
}

impl Tables {
    /// Adds a gather `from.offset` over `table`, with a skip value exactly when it has a `-1`.
    pub(crate) fn push(
        &mut self,
        ctx: &Ctx<'_>,
        from: TableFrom,
        domain: Location,
        codomain: Location,
        table: Canonical,
    ) -> Result<(), GridError> {
        let [n, k] = [table.table.nrows(), table.table.ncols()];
        self.infos.push(TableInfo {
            offset: from.offset.to_owned(),
            variable: from.variable,
            derived: from.derived,
            domain: domain.name().to_owned(),
            codomain: codomain.name().to_owned(),
            shape: [n, k],
            skip_count: table.skip_count,
            min: table.min,
            max: table.max,
        });
        let skip_value = (table.skip_count > 0).then_some(-1);
        let connectivity = host_connectivity(
            Dimension::horizontal(domain.name()),
            Dimension::local(format!("{}Dim", from.offset)),
            Dimension::horizontal(codomain.name()),
            skip_value,
            table.table,
        )
        .map_err(|source| ctx.provider_error(source))?;
        self.provider
            .push(from.offset, Entry::Gather(Arc::new(connectivity)))
            .map_err(|source| ctx.provider_error(source))
    }

    /// Adds `Koff` -> `K` (vertical) and returns the grid.
    pub(crate) fn finish(mut self, ctx: &Ctx<'_>, kind: GridKind, sizes: GridSizes) -> Result<Grid, GridError> {
        self.provider
            .push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical)))
            .map_err(|source| ctx.provider_error(source))?;
        Ok(Grid { kind, path: ctx.path(), sizes, provider: self.provider, tables: self.infos })
    }
}

/// The file being read, for errors.
pub(crate) struct Ctx<'a> {
    pub(crate) path: &'a Path,
}

impl Ctx<'_> {
    pub(crate) fn path(&self) -> PathBuf {
        self.path.to_path_buf()
    }

    fn provider_error(&self, source: gridkey_offsets::OffsetsError) -> GridError {
        GridError::Provider { path: self.path(), source }
    }

    /// A dimension size as the count of a location: int32 tables must be able to index it.
    pub(crate) fn index_size(&self, dimension: &str, size: u64) -> Result<usize, GridError> {
        match usize::try_from(size) {
            Ok(n) if size <= i32::MAX as u64 => Ok(n),
            _ => Err(GridError::TooManyElements { path: self.path(), dimension: dimension.to_owned(), size }),
        }
    }

    /// Reads an `int` variable (its type checked before).
    fn read_i32(&self, nc: &NcReader, var: &NcVariable) -> Result<Vec<i32>, GridError> {
        match nc.read_ints(var)? {
            RawInts::I32(v) => Ok(v),
            _ => Err(GridError::WrongType {
                path: self.path(),
                variable: var.name.clone(),
                expected: "int",
                found: cdl_type(&var.dtype),
            }),
        }
    }

    /// Checks that `variable` is a fixed-size 2-d `int` variable with the domain dimension where
    /// the grid kind stores it; returns it and the canonical shape `(n, k)`.
    fn check_table_variable<'n>(
        &self,
        nc: &'n NcReader,
        model: Model,
        spec: &TableSpec,
        variable: &str,
    ) -> Result<(&'n NcVariable, [usize; 2]), GridError> {
        let domain_dim = spec.domain.dim(model);
        let neighbour_dim = spec.domain.usual_neighbour_dim(model);
        let (expected, domain_axis) = match model {
            Model::Icon => {
                (format!("({neighbour_dim}, {domain_dim}): the neighbour axis first, then `{domain_dim}`"), 1)
            }
            Model::Mpas => {
                (format!("({domain_dim}, {neighbour_dim}): `{domain_dim}` first, then the neighbour axis"), 0)
            }
        };
        let var = self.check_int_variable(nc, model, variable, &format!("offset {}", spec.offset))?;
        let dims = &var.dimensions;
        let fits = dims.len() == 2 && dims.iter().all(|d| !d.is_unlimited) && dims[domain_axis].name == domain_dim;
        if !fits {
            return Err(GridError::WrongShape {
                path: self.path(),
                variable: variable.to_owned(),
                expected,
                found: describe(dims),
            });
        }
        let n = self.index_size(domain_dim, dims[domain_axis].size)?;
        let k = self.index_size(&dims[1 - domain_axis].name, dims[1 - domain_axis].size)?;
        Ok((var, [n, k]))
    }

    /// Checks that `variable` exists and is `int`.
    fn check_int_variable<'n>(
        &self,
        nc: &'n NcReader,
        model: Model,
        variable: &str,
        needed_for: &str,
    ) -> Result<&'n NcVariable, GridError> {
        let var = nc.var(variable).ok_or_else(|| GridError::MissingVariable {
            path: self.path(),
            kind: model.kind(),
            variable: variable.to_owned(),
            needed_for: needed_for.to_owned(),
        })?;
        if var.dtype != NcType::Int {
            return Err(GridError::WrongType {
                path: self.path(),
                variable: variable.to_owned(),
                expected: "int",
                found: cdl_type(&var.dtype),
            });
        }
        Ok(var)
    }

    /// Reads MPAS `nEdgesOnCell`, a fixed-size `int` variable over `nCells`.
    fn read_counts(&self, nc: &NcReader) -> Result<Vec<i32>, GridError> {
        let needed_for = "the neighbour counts of the cell tables C2E, C2V and C2E2C";
        let var = self.check_int_variable(nc, Model::Mpas, MPAS_COUNT, needed_for)?;
        let dims = &var.dimensions;
        let cells = Location::Cell.dim(Model::Mpas);
        if dims.len() != 1 || dims[0].is_unlimited || dims[0].name != cells {
            return Err(GridError::WrongShape {
                path: self.path(),
                variable: MPAS_COUNT.to_owned(),
                expected: format!("({cells})"),
                found: describe(dims),
            });
        }
        let counts = self.read_i32(nc, var)?;
        if counts.len() as u64 != dims[0].size {
            return Err(GridError::WrongShape {
                path: self.path(),
                variable: MPAS_COUNT.to_owned(),
                expected: format!("{} values", dims[0].size),
                found: format!("{} values read", counts.len()),
            });
        }
        Ok(counts)
    }

    /// Checks every count is in `0..=k`, the neighbour axis of `table`.
    fn check_counts(&self, counts: &[i32], k: usize, table: &str) -> Result<(), GridError> {
        match counts.iter().position(|&c| usize::try_from(c).map_or(true, |c| c > k)) {
            None => Ok(()),
            Some(row) => Err(GridError::CountOutOfRange {
                path: self.path(),
                variable: MPAS_COUNT.to_owned(),
                row,
                value: counts[row],
                max: k,
                table: table.to_owned(),
            }),
        }
    }
}

/// `(cell = 20480, nv = 3)`, unlimited dimensions marked.
pub(crate) fn describe(dims: &[netcdf_reader::NcDimension]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| {
            if d.is_unlimited {
                format!("{} = {} (unlimited)", d.name, d.size)
            } else {
                format!("{} = {}", d.name, d.size)
            }
        })
        .collect();
    format!("({})", parts.join(", "))
}

/// How a table is stored in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// `(k, n)`: ICON. Canonical entry `[i, j]` is raw `j * n + i`.
    NeighbourFirst,
    /// `(n, k)`: MPAS. Canonical entry `[i, j]` is raw `i * k + j`.
    DomainFirst,
}

/// A canonical table and its facts.
#[derive(Debug)]
pub(crate) struct Canonical {
    pub(crate) table: Array2<i32>,
    pub(crate) skip_count: usize,
    pub(crate) min: i32,
    pub(crate) max: i32,
}

impl Canonical {
    /// The facts of `table`, `(n, k)` from `values` in C order (`n * k` of them).
    pub(crate) fn of(n: usize, k: usize, values: Vec<i32>) -> Canonical {
        debug_assert_eq!(values.len(), n * k);
        let skip_count = values.iter().filter(|&&x| x == -1).count();
        let min = values.iter().copied().min().unwrap_or(-1);
        let max = values.iter().copied().max().unwrap_or(-1);
        let table = Array2::from_shape_vec((n, k), values).unwrap_or_else(|_| Array2::from_elem((n, k), -1));
        Canonical { table, skip_count, min, max }
    }
}

/// The first entry (C order of the canonical table) that is not a valid index.
#[derive(Debug, PartialEq, Eq)]
struct BadEntry {
    row: usize,
    column: usize,
    value: i32,
}

/// Builds the canonical `(n, k)` table from `raw` (`n * k` values stored as `layout`): `x - 1`
/// for `1 <= x <= codomain_size`, `-1` for `x == 0` and for slots at or past `counts[i]` (when
/// given, each in `0..=k`); anything else is the returned [`BadEntry`].
fn canonicalize(
    raw: &[i32],
    layout: Layout,
    n: usize,
    k: usize,
    codomain_size: usize,
    counts: Option<&[i32]>,
) -> Result<Canonical, BadEntry> {
    debug_assert_eq!(raw.len(), n * k);
    let size = i64::try_from(codomain_size).unwrap_or(i64::MAX);
    let mut out = Vec::with_capacity(n * k);
    let (mut skip_count, mut min, mut max) = (0usize, i32::MAX, i32::MIN);
    for i in 0..n {
        let valid = counts.and_then(|c| c.get(i)).map_or(k, |&c| usize::try_from(c).unwrap_or(0).min(k));
        for j in 0..k {
            let value = if j >= valid {
                -1
            } else {
                let x = match layout {
                    Layout::NeighbourFirst => raw[j * n + i],
                    Layout::DomainFirst => raw[i * k + j],
                };
                if x == 0 {
                    -1
                } else if x >= 1 && i64::from(x) <= size {
                    x - 1
                } else {
                    return Err(BadEntry { row: i, column: j, value: x });
                }
            };
            skip_count += usize::from(value == -1);
            min = min.min(value);
            max = max.max(value);
            out.push(value);
        }
    }
    if out.is_empty() {
        (min, max) = (-1, -1);
    }
    let table = Array2::from_shape_vec((n, k), out).map_err(|_| BadEntry { row: 0, column: 0, value: 0 })?;
    Ok(Canonical { table, skip_count, min, max })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icon_layout_is_transposed_and_rebased() {
        // (k = 2, n = 3): rows of the file are neighbour slots.
        let raw = [1, 2, 0, 3, 1, 2];
        let c = canonicalize(&raw, Layout::NeighbourFirst, 3, 2, 3, None).unwrap();
        assert_eq!(c.table, ndarray::arr2(&[[0, 2], [1, 0], [-1, 1]]));
        assert_eq!((c.skip_count, c.min, c.max), (1, -1, 2));
    }

    #[test]
    fn mpas_counts_mask_padding_whatever_its_value() {
        let raw = [1, 2, 99, 3, -7, 12345];
        let c = canonicalize(&raw, Layout::DomainFirst, 2, 3, 3, Some(&[2, 1])).unwrap();
        assert_eq!(c.table, ndarray::arr2(&[[0, 1, -1], [2, -1, -1]]));
        assert_eq!(c.skip_count, 3);
    }

    #[test]
    fn first_bad_entry_in_canonical_order() {
        // canonical [[1, 5], [9, 1]] with codomain 4: first bad is (0, 1) = 5, not (1, 0) = 9.
        let raw = [1, 9, 5, 1];
        let bad = canonicalize(&raw, Layout::NeighbourFirst, 2, 2, 4, None).unwrap_err();
        assert_eq!(bad, BadEntry { row: 0, column: 1, value: 5 });
        let bad = canonicalize(&[1, -1], Layout::DomainFirst, 1, 2, 4, None).unwrap_err();
        assert_eq!(bad, BadEntry { row: 0, column: 1, value: -1 });
    }

    #[test]
    fn bounds_are_inclusive() {
        let c = canonicalize(&[4, 1], Layout::DomainFirst, 1, 2, 4, None).unwrap();
        assert_eq!(c.table, ndarray::arr2(&[[3, 0]]));
        assert!(canonicalize(&[5], Layout::DomainFirst, 1, 1, 4, None).is_err());
        assert!(canonicalize(&[i32::MIN], Layout::DomainFirst, 1, 1, 4, None).is_err());
    }

    #[test]
    fn signatures() {
        use header::{signature, Signature};
        assert_eq!(signature(b"CDF\x02\0\0\0\0", 8), Signature::Netcdf3);
        assert_eq!(signature(b"CDF\x01", 4), Signature::Netcdf3);
        assert!(matches!(signature(b"", 0), Signature::Other(s) if s.contains("empty")));
        assert_eq!(signature(b"\x89HDF\r\n\x1a\n", 100), Signature::Hdf5);
        assert_eq!(signature(b"CDF\x05\0\0\0\0", 100), Signature::Cdf5);
        assert!(matches!(signature(b"CDF\x09", 100), Signature::Other(s) if s.contains("version byte 9")));
        assert!(matches!(signature(b"hello", 5), Signature::Other(s) if s.contains("\"hell\"")));
        let offsets: Vec<u64> = header::hdf5_superblock_offsets(4096).collect();
        assert_eq!(offsets, [512, 1024, 2048]);
    }
}
