//! Real grid files (ICON, MPAS) as runtime offset providers (ARCHITECTURE.md "gridkey-grid"; `data/grids/README.md`).
//!
//! [`read_grid`] opens a netCDF-3 file (classic or 64-bit offset) with `netcdf3`, the pure-Rust
//! netCDF-3 reader (no C library), recognises the model from its variables (ICON:
//! `edge_of_cell`; MPAS: `edgesOnCell`), reads only the connectivity variables it needs and
//! returns a [`Grid`]: the sizes, a runtime [`OffsetProvider`] and a [`TableInfo`] per table.
//!
//! | offset | ICON variable | MPAS variable | domain -> codomain |
//! |---|---|---|---|
//! | `C2E` | `edge_of_cell` | `edgesOnCell` | Cell -> Edge |
//! | `C2V` | `vertex_of_cell` | `verticesOnCell` | Cell -> Vertex |
//! | `C2E2C` | `neighbor_cell_index` | `cellsOnCell` | Cell -> Cell |
//! | `E2C` | `adjacent_cell_of_edge` | `cellsOnEdge` | Edge -> Cell |
//! | `E2V` | `edge_vertices` | `verticesOnEdge` | Edge -> Vertex |
//! | `V2E` | `edges_of_vertex` | `edgesOnVertex` | Vertex -> Edge |
//! | `V2C` | `cells_of_vertex` | `cellsOnVertex` | Vertex -> Cell |
//! | `V2E2V` | `vertices_of_vertex` | (none) | Vertex -> Vertex |
//!
//! Files store 1-based indices with `0` for "no neighbour". ICON stores a table neighbour axis
//! first, `(k, n)` (e.g. `edge_of_cell(nv, cell)`), and it is transposed; MPAS stores `(n, k)`,
//! and in the cell tables (`C2E`, `C2V`, `C2E2C`) the entries of cell `c` past
//! `nEdgesOnCell[c]` are padding: they become `-1` whatever their raw value.
//!
//! # Architecture invariant
//!
//! Output tables are canonical: `(n, k)`, int32, C order, 0-based, `-1` skip; every index is
//! checked against its codomain size; no table is returned that was not checked.
//!
//! A raw value `x` becomes `x - 1` when `1 <= x <= size` of the codomain (the grid dimension
//! `cell`/`edge`/`vertex` for ICON, `nCells`/`nEdges`/`nVertices` for MPAS) and `-1` when
//! `x == 0`; anything else is [`GridError::IndexOutOfRange`], naming the variable and the first
//! bad entry. Before the reader sees a file, a bounds-checked walk over its header checks every
//! count, length and offset against the file's real size, so that damaged or truncated files
//! are typed errors and never a panic, an abort or a huge allocation.
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

#![warn(missing_docs)]

mod error;
mod header;

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey_offsets::{host_connectivity, Dimension, DimensionKind, Entry, OffsetProvider};
use ndarray::Array2;
use netcdf3::{DataSet, DataType, FileReader, ReadError};

pub use error::GridError;

/// The model a grid file comes from, recognised from its variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GridKind {
    /// ICON (has `edge_of_cell`): tables stored `(k, n)`, 1-based, `0` = no neighbour.
    Icon,
    /// MPAS (has `edgesOnCell`): tables stored `(n, k)`, 1-based, `0` = no neighbour, cell
    /// tables padded past `nEdgesOnCell`.
    Mpas,
}

impl GridKind {
    /// Lowercase name: `"icon"` or `"mpas"` (as in `data/golden/table-digests-v1.json`).
    pub const fn as_str(self) -> &'static str {
        match self {
            GridKind::Icon => "icon",
            GridKind::Mpas => "mpas",
        }
    }
}

impl fmt::Display for GridKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The number of cells, edges and vertices of a grid, from the file's dimensions (ICON `cell`,
/// `edge`, `vertex`; MPAS `nCells`, `nEdges`, `nVertices`). Every index is checked against these.
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
    /// The variable it was read from, e.g. `edge_of_cell`.
    pub variable: String,
    /// The domain dimension name: `Cell`, `Edge` or `Vertex`.
    pub domain: String,
    /// The codomain dimension name: `Cell`, `Edge` or `Vertex`.
    pub codomain: String,
    /// The canonical shape `(n, k)`: domain size, neighbour slots.
    pub shape: [usize; 2],
    /// How many entries are `-1` (no neighbour).
    pub skip_count: usize,
    /// The smallest entry (`-1` when `skip_count > 0`). A table is never empty: netCDF-3 fixed
    /// dimensions have at least one element.
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
enum Location {
    Cell,
    Edge,
    Vertex,
}

impl Location {
    fn name(self) -> &'static str {
        match self {
            Location::Cell => "Cell",
            Location::Edge => "Edge",
            Location::Vertex => "Vertex",
        }
    }

    /// The file dimension that counts this location.
    fn dim(self, kind: GridKind) -> &'static str {
        match (kind, self) {
            (GridKind::Icon, Location::Cell) => "cell",
            (GridKind::Icon, Location::Edge) => "edge",
            (GridKind::Icon, Location::Vertex) => "vertex",
            (GridKind::Mpas, Location::Cell) => "nCells",
            (GridKind::Mpas, Location::Edge) => "nEdges",
            (GridKind::Mpas, Location::Vertex) => "nVertices",
        }
    }

    /// The usual name of the neighbour axis of a table from this location (messages only: the
    /// neighbour axis is not required to have this name).
    fn usual_neighbour_dim(self, kind: GridKind) -> &'static str {
        match (kind, self) {
            (GridKind::Icon, Location::Cell) => "nv",
            (GridKind::Icon, Location::Edge) => "nc",
            (GridKind::Icon, Location::Vertex) => "ne",
            (GridKind::Mpas, Location::Cell) => "maxEdges",
            (GridKind::Mpas, Location::Edge) => "TWO",
            (GridKind::Mpas, Location::Vertex) => "vertexDegree",
        }
    }

    fn size(self, sizes: GridSizes) -> usize {
        match self {
            Location::Cell => sizes.cells,
            Location::Edge => sizes.edges,
            Location::Vertex => sizes.vertices,
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

/// Reads the ICON or MPAS grid in the netCDF-3 file `path` (classic or 64-bit offset) into a
/// [`Grid`] with canonical tables: shape `(n, k)`, int32, C order, 0-based, `-1` for no
/// neighbour, every index checked against the size of its codomain (see the crate docs for
/// the variables, the provider order and the skip-value rule).
///
/// Only the connectivity variables (and MPAS `nEdgesOnCell`) are read, each once.
///
/// Errors, in the order they are checked: [`GridError::Open`] (missing, not a regular file,
/// unreadable); [`GridError::NotNetcdf3`] (empty, text, HDF5/netCDF-4, CDF-5);
/// [`GridError::Malformed`] and [`GridError::Truncated`] (header walk);
/// [`GridError::Netcdf`] / [`GridError::ReaderPanicked`] (the `netcdf3` reader);
/// [`GridError::NotAGrid`]; [`GridError::MissingDimension`]; then per table
/// [`GridError::MissingVariable`], [`GridError::WrongType`], [`GridError::WrongShape`],
/// [`GridError::CountOutOfRange`] (MPAS) and [`GridError::IndexOutOfRange`].
/// Never panics, whatever the file holds. The file must not change while it is read (it is
/// opened twice: once for the header walk, once by the reader).
pub fn read_grid(path: &Path) -> Result<Grid, GridError> {
    let ctx = Ctx { path };
    ctx.precheck()?;
    let mut reader = ctx.guarded(|| FileReader::open(path))?;

    let kind = if reader.data_set().has_var(ICON_MARKER) {
        GridKind::Icon
    } else if reader.data_set().has_var(MPAS_MARKER) {
        GridKind::Mpas
    } else {
        return Err(GridError::NotAGrid { path: path.to_path_buf() });
    };
    let dim_size = |location: Location| {
        let dimension = location.dim(kind);
        reader.data_set().dim_size(dimension).ok_or_else(|| GridError::MissingDimension {
            path: path.to_path_buf(),
            kind,
            dimension: dimension.to_owned(),
        })
    };
    let sizes = GridSizes {
        cells: dim_size(Location::Cell)?,
        edges: dim_size(Location::Edge)?,
        vertices: dim_size(Location::Vertex)?,
    };

    let counts = match kind {
        GridKind::Icon => None,
        GridKind::Mpas => Some(ctx.read_counts(&mut reader)?),
    };

    let mut provider = OffsetProvider::new();
    let mut tables = Vec::new();
    for spec in &TABLES {
        let variable = match kind {
            GridKind::Icon => spec.icon,
            GridKind::Mpas => match spec.mpas {
                Some(v) => v,
                None => continue,
            },
        };
        let [n, k] = ctx.check_table_variable(reader.data_set(), kind, spec, variable)?;
        let raw = ctx.guarded(|| reader.read_var_i32(variable))?;
        if raw.len() != n * k {
            return Err(GridError::WrongShape {
                path: path.to_path_buf(),
                variable: variable.to_owned(),
                expected: format!("{} values", n * k),
                found: format!("{} values read", raw.len()),
            });
        }
        let layout = match kind {
            GridKind::Icon => Layout::NeighbourFirst,
            GridKind::Mpas => Layout::DomainFirst,
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
                path: path.to_path_buf(),
                variable: variable.to_owned(),
                offset: spec.offset.to_owned(),
                row: bad.row,
                column: bad.column,
                value: bad.value,
                codomain: spec.codomain.name().to_owned(),
                codomain_size,
            })?;
        drop(raw);

        tables.push(TableInfo {
            offset: spec.offset.to_owned(),
            variable: variable.to_owned(),
            domain: spec.domain.name().to_owned(),
            codomain: spec.codomain.name().to_owned(),
            shape: [n, k],
            skip_count: canonical.skip_count,
            min: canonical.min,
            max: canonical.max,
        });
        let skip_value = (canonical.skip_count > 0).then_some(-1);
        let connectivity = host_connectivity(
            Dimension::horizontal(spec.domain.name()),
            Dimension::local(format!("{}Dim", spec.offset)),
            Dimension::horizontal(spec.codomain.name()),
            skip_value,
            canonical.table,
        )
        .map_err(|source| ctx.provider_error(source))?;
        provider
            .push(spec.offset, Entry::Gather(Arc::new(connectivity)))
            .map_err(|source| ctx.provider_error(source))?;
    }
    provider
        .push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical)))
        .map_err(|source| ctx.provider_error(source))?;

    Ok(Grid { kind, path: path.to_path_buf(), sizes, provider, tables })
}

/// The file being read, for errors.
struct Ctx<'a> {
    path: &'a Path,
}

impl Ctx<'_> {
    fn path(&self) -> PathBuf {
        self.path.to_path_buf()
    }

    fn provider_error(&self, source: gridkey_offsets::OffsetsError) -> GridError {
        GridError::Provider { path: self.path(), source }
    }

    /// Opens the file, classifies its first bytes and walks its header.
    fn precheck(&self) -> Result<(), GridError> {
        let open_err = |source| GridError::Open { path: self.path(), source };
        let meta = std::fs::metadata(self.path).map_err(open_err)?;
        if !meta.is_file() {
            let what = if meta.is_dir() { "it is a directory" } else { "it is not a regular file" };
            return Err(open_err(std::io::Error::other(what)));
        }
        let file = File::open(self.path).map_err(open_err)?;
        let len = meta.len();
        let mut first = Vec::with_capacity(8);
        (&file).take(8).read_to_end(&mut first).map_err(open_err)?;
        if let header::Signature::Other(found) = header::signature(&first, len) {
            return Err(GridError::NotNetcdf3 { path: self.path(), found });
        }
        // The walk reads from the start of the file through its own handle.
        let file = File::open(self.path).map_err(open_err)?;
        header::check(&file, len).map_err(|problem| match problem {
            header::HeaderProblem::Malformed(detail) => GridError::Malformed { path: self.path(), detail },
            header::HeaderProblem::Truncated { variable, end } => {
                GridError::Truncated { path: self.path(), variable, end, file_len: len }
            }
        })
    }

    /// Runs a `netcdf3` call: its error wrapped with the path, a panic turned into an error.
    fn guarded<T>(&self, f: impl FnOnce() -> Result<T, ReadError>) -> Result<T, GridError> {
        match panic::catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(source)) => Err(GridError::Netcdf { path: self.path(), reason: format!("{source:?}") }),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_owned());
                Err(GridError::ReaderPanicked { path: self.path(), message })
            }
        }
    }

    /// Checks that `variable` is a fixed-size 2-d `int` variable with the domain dimension where
    /// the grid kind stores it; returns the canonical shape `(n, k)`.
    fn check_table_variable(
        &self,
        ds: &DataSet,
        kind: GridKind,
        spec: &TableSpec,
        variable: &str,
    ) -> Result<[usize; 2], GridError> {
        let domain_dim = spec.domain.dim(kind);
        let neighbour_dim = spec.domain.usual_neighbour_dim(kind);
        let (expected, domain_axis) = match kind {
            GridKind::Icon => {
                (format!("({neighbour_dim}, {domain_dim}): the neighbour axis first, then `{domain_dim}`"), 1)
            }
            GridKind::Mpas => {
                (format!("({domain_dim}, {neighbour_dim}): `{domain_dim}` first, then the neighbour axis"), 0)
            }
        };
        let dims = self.check_int_variable(ds, kind, variable, &format!("offset {}", spec.offset))?;
        let fits = dims.len() == 2 && dims.iter().all(|d| !d.unlimited) && dims[domain_axis].name == domain_dim;
        if !fits {
            return Err(GridError::WrongShape {
                path: self.path(),
                variable: variable.to_owned(),
                expected,
                found: describe(&dims),
            });
        }
        Ok([dims[domain_axis].size, dims[1 - domain_axis].size])
    }

    /// Checks that `variable` exists and is `int`; returns its dimensions.
    fn check_int_variable(
        &self,
        ds: &DataSet,
        kind: GridKind,
        variable: &str,
        needed_for: &str,
    ) -> Result<Vec<DimInfo>, GridError> {
        let var = ds.get_var(variable).ok_or_else(|| GridError::MissingVariable {
            path: self.path(),
            kind,
            variable: variable.to_owned(),
            needed_for: needed_for.to_owned(),
        })?;
        if var.data_type() != DataType::I32 {
            return Err(GridError::WrongType {
                path: self.path(),
                variable: variable.to_owned(),
                expected: "int",
                found: cdl_type(var.data_type()).to_owned(),
            });
        }
        Ok(var
            .get_dims()
            .iter()
            .map(|d| DimInfo { name: d.name(), size: d.size(), unlimited: d.is_unlimited() })
            .collect())
    }

    /// Reads MPAS `nEdgesOnCell`, a fixed-size `int` variable over `nCells`.
    fn read_counts(&self, reader: &mut FileReader) -> Result<Vec<i32>, GridError> {
        let needed_for = "the neighbour counts of the cell tables C2E, C2V and C2E2C";
        let dims = self.check_int_variable(reader.data_set(), GridKind::Mpas, MPAS_COUNT, needed_for)?;
        let cells = Location::Cell.dim(GridKind::Mpas);
        if dims.len() != 1 || dims[0].unlimited || dims[0].name != cells {
            return Err(GridError::WrongShape {
                path: self.path(),
                variable: MPAS_COUNT.to_owned(),
                expected: format!("({cells})"),
                found: describe(&dims),
            });
        }
        let counts = self.guarded(|| reader.read_var_i32(MPAS_COUNT))?;
        if counts.len() != dims[0].size {
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

struct DimInfo {
    name: String,
    size: usize,
    unlimited: bool,
}

/// `(cell = 20480, nv = 3)`, unlimited dimensions marked.
fn describe(dims: &[DimInfo]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| {
            if d.unlimited {
                format!("{} = {} (unlimited)", d.name, d.size)
            } else {
                format!("{} = {}", d.name, d.size)
            }
        })
        .collect();
    format!("({})", parts.join(", "))
}

/// The CDL name of a netCDF-3 type.
fn cdl_type(t: DataType) -> &'static str {
    match t {
        DataType::I8 => "byte",
        DataType::U8 => "char",
        DataType::I16 => "short",
        DataType::I32 => "int",
        DataType::F32 => "float",
        DataType::F64 => "double",
    }
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
struct Canonical {
    table: Array2<i32>,
    skip_count: usize,
    min: i32,
    max: i32,
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
        assert!(matches!(signature(b"\x89HDF\r\n\x1a\n", 100), Signature::Other(s) if s.contains("HDF5")));
        assert!(matches!(signature(b"CDF\x05\0\0\0\0", 100), Signature::Other(s) if s.contains("CDF-5")));
        assert!(matches!(signature(b"hello", 5), Signature::Other(s) if s.contains("\"hell\"")));
    }
}
