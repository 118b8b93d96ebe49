//! [`GridError`], the only error type of this crate.

use std::io;
use std::path::PathBuf;

use gridkey_offsets::OffsetsError;

use crate::GridKind;

/// What the usual fix is, appended to errors about the file as a whole.
const PASS_GRID: &str = "pass --grid with an ICON, MPAS or UGRID grid (netCDF-3 or netCDF-4)";

/// Everything that can go wrong while reading a grid. Every variant names the file; messages
/// say what was expected and what was found, and end without a period.
#[derive(Debug, thiserror::Error)]
pub enum GridError {
    /// The file does not exist, is not a regular file or cannot be read (from `std::fs`).
    #[error("cannot read grid file {}: {source}; {PASS_GRID}", path.display())]
    Open {
        /// The path as given.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },

    /// The file is not netCDF (CDF-1, CDF-2, CDF-5 or HDF5-based netCDF-4): e.g. an empty or a
    /// text file. Decided from the first bytes of the file (and, for HDF5, the places a user block
    /// may move the superblock to).
    #[error("{} is not a netCDF file: {found}; {PASS_GRID}", path.display())]
    NotNetcdf {
        /// The path as given.
        path: PathBuf,
        /// What the first bytes say the file is.
        found: String,
    },

    /// The netCDF-3 header is cut off or holds a count, size or offset the file cannot hold
    /// (found by the bounds-checked header walk that runs before the reader).
    #[error("{} is not a valid netCDF-3 file: {detail}", path.display())]
    Malformed {
        /// The path as given.
        path: PathBuf,
        /// Where and how the header is wrong.
        detail: String,
    },

    /// The header is complete but the data of `variable` runs past the end of the file: the
    /// file was cut off (an interrupted copy or download).
    #[error(
        "{} is truncated: the data of variable `{variable}` ends at byte {end} but the file has {file_len} bytes; \
         copy the grid file again",
        path.display()
    )]
    Truncated {
        /// The path as given.
        path: PathBuf,
        /// The first variable (in header order) whose data is not all in the file.
        variable: String,
        /// The byte offset where its data ends.
        end: u64,
        /// The length of the file in bytes.
        file_len: u64,
    },

    /// The netCDF reader (`netcdf-reader`, pure Rust, with `hdf5-reader` for netCDF-4) refused
    /// the file or failed to read a variable: a damaged file, or a netCDF-4 feature it lacks.
    #[error(
        "{}: the netCDF reader cannot read the file: {reason}; the file is damaged or not netCDF, copy it again",
        path.display()
    )]
    Netcdf {
        /// The path as given.
        path: PathBuf,
        /// The reader's error, as text (so that a `GridError` stays `Send + Sync` and owns no
        /// reader types).
        reason: String,
    },

    /// The netCDF reader panicked on this file. It runs under `catch_unwind` so that a case its
    /// own checks and ours missed is still an error and not a crash.
    #[error("{}: the netCDF reader crashed on this file ({message}); the file is probably damaged", path.display())]
    ReaderPanicked {
        /// The path as given.
        path: PathBuf,
        /// The panic message.
        message: String,
    },

    /// A variable is larger, once read, than the file could hold: the data of a netCDF-3 file
    /// lies in the file, and a netCDF-4 variable decodes to at most
    /// [`crate::MAX_INFLATION`] times the file's length (deflate's limit). Checked from the
    /// header, before anything is allocated.
    #[error(
        "{}: variable `{variable}` would take {bytes} bytes once read, more than the {limit} bytes a file of this size \
         can hold; the file is damaged",
        path.display()
    )]
    TooLarge {
        /// The path as given.
        path: PathBuf,
        /// The variable.
        variable: String,
        /// Its size once read (elements times element size), saturated at `u64::MAX`.
        bytes: u64,
        /// The most it may take.
        limit: u64,
    },

    /// The file is netCDF but has neither `edge_of_cell` (ICON), `edgesOnCell` (MPAS) nor a
    /// variable with `cf_role = "mesh_topology"` (UGRID).
    #[error(
        "{} is neither an ICON grid (no variable `edge_of_cell`), an MPAS grid (no variable `edgesOnCell`) nor a \
         UGRID mesh (no variable with cf_role = \"mesh_topology\"); {PASS_GRID}",
        path.display()
    )]
    NotAGrid {
        /// The path as given.
        path: PathBuf,
    },

    /// The file holds several UGRID 2-D mesh topologies and it is not said which one to read.
    #[error("{} holds {} UGRID 2-D mesh topologies ({}); pass a file with one mesh", path.display(), names.len(), names.join(", "))]
    SeveralMeshes {
        /// The path as given.
        path: PathBuf,
        /// The topology variables found.
        names: Vec<String>,
    },

    /// An attribute a grid needs is missing or has an unusable value, e.g. a UGRID topology
    /// without `face_node_connectivity`, `topology_dimension = 1` or a non-integer `start_index`.
    #[error("{}: attribute `{attribute}` of variable `{variable}` is {found}, expected {expected}", path.display())]
    BadAttribute {
        /// The path as given.
        path: PathBuf,
        /// The variable that holds (or should hold) the attribute.
        variable: String,
        /// The attribute.
        attribute: String,
        /// What was found (`missing`, or the value).
        found: String,
        /// What is accepted.
        expected: String,
    },

    /// A dimension has more elements than an int32 neighbour table can index (2^31 - 1).
    #[error(
        "{}: dimension `{dimension}` has {size} elements, more than the 2147483647 that int32 neighbour tables can index",
        path.display()
    )]
    TooManyElements {
        /// The path as given.
        path: PathBuf,
        /// The dimension.
        dimension: String,
        /// Its size.
        size: u64,
    },

    /// A dimension the grid kind needs (ICON `cell`, `edge`, `vertex`; MPAS `nCells`, `nEdges`,
    /// `nVertices`) is missing.
    #[error("{}: the {kind} grid has no dimension `{dimension}`", path.display())]
    MissingDimension {
        /// The path as given.
        path: PathBuf,
        /// The kind the file was recognised as.
        kind: GridKind,
        /// The missing dimension.
        dimension: String,
    },

    /// A variable the grid kind needs is missing.
    #[error("{}: the {kind} grid has no variable `{variable}` (needed for {needed_for})", path.display())]
    MissingVariable {
        /// The path as given.
        path: PathBuf,
        /// The kind the file was recognised as.
        kind: GridKind,
        /// The missing variable.
        variable: String,
        /// What it is needed for, e.g. `offset V2E2V`.
        needed_for: String,
    },

    /// A variable has a type other than the one required: `int` (netCDF `NC_INT`, 32-bit) for
    /// ICON and MPAS tables, an integer type for UGRID connectivity.
    #[error("{}: variable `{variable}` has type {found}, expected {expected}", path.display())]
    WrongType {
        /// The path as given.
        path: PathBuf,
        /// The variable.
        variable: String,
        /// The type required: `int`, or `an integer type`.
        expected: &'static str,
        /// The type found (CDL name: `byte`, `ubyte`, `char`, `short`, `ushort`, `int`, `uint`,
        /// `int64`, `uint64`, `float`, `double`, `string`, or a user-defined type).
        found: String,
    },

    /// A variable has the wrong dimensions: wrong rank, the location dimension in the wrong
    /// place, or an unlimited (record) dimension.
    #[error("{}: variable `{variable}` has dimensions {found}, expected {expected}", path.display())]
    WrongShape {
        /// The path as given.
        path: PathBuf,
        /// The variable.
        variable: String,
        /// The dimensions required, e.g. `(nv, cell) with cell = 20480: the neighbour axis first`.
        expected: String,
        /// The dimensions found, with their sizes, e.g. `(cell = 20480, nv = 3)`.
        found: String,
    },

    /// A neighbour index is neither "no neighbour" nor an index of the codomain: for ICON and
    /// MPAS `0` or `1..=codomain_size`; for UGRID the `_FillValue` or
    /// `start_index..start_index + codomain_size`. `row` and `column` are the entry's position in
    /// the canonical `(n, k)` table (for ICON the file stores it at `[column, row]`); it is the
    /// first bad entry in C order.
    #[error(
        "{}: variable `{variable}` ({offset}) has {value} at row {row}, column {column} (canonical (n, k) position), \
         expected {expected}",
        path.display()
    )]
    IndexOutOfRange {
        /// The path as given.
        path: PathBuf,
        /// The variable.
        variable: String,
        /// The offset it becomes, e.g. `C2E`.
        offset: String,
        /// Canonical row (the domain index, 0-based).
        row: usize,
        /// Canonical column (the neighbour slot, 0-based).
        column: usize,
        /// The raw value in the file (any integer type fits an `i128`).
        value: i128,
        /// The codomain name, e.g. `Edge`.
        codomain: String,
        /// The number of codomain elements (from the grid's dimension).
        codomain_size: usize,
        /// The values accepted, e.g. `1..=30720 (an index into Edge, 1-based) or 0 for no neighbour`.
        expected: String,
    },

    /// An MPAS neighbour count (`nEdgesOnCell`) is negative or larger than the table's
    /// neighbour axis.
    #[error(
        "{}: variable `{variable}` has {value} at row {row}, expected 0..={max} (the neighbour axis of `{table}`)",
        path.display()
    )]
    CountOutOfRange {
        /// The path as given.
        path: PathBuf,
        /// The count variable, `nEdgesOnCell`.
        variable: String,
        /// The cell (0-based).
        row: usize,
        /// The raw count.
        value: i32,
        /// The largest valid count.
        max: usize,
        /// The table variable the count applies to.
        table: String,
    },

    /// One UGRID connectivity variable is unusable on its own: a face whose nodes have a fill
    /// value before the last node, fewer than three nodes or a node twice; an edge without two
    /// nodes or with the same nodes as another edge; an edge shared by more than two faces.
    #[error("{}: variable `{variable}` gives {at} {found}, expected {expected}", path.display())]
    BadEntry {
        /// The path as given.
        path: PathBuf,
        /// The variable.
        variable: String,
        /// The element, e.g. `face 7` or `edge 3` (0-based, as in the canonical tables).
        at: String,
        /// What the variable gives it, e.g. `the nodes [4, -1, 9]`.
        found: String,
        /// What a 2-D mesh needs.
        expected: String,
    },

    /// Two UGRID connectivity variables contradict each other (ADR 0015, cross-table
    /// validation): e.g. `face_edge_connectivity` gives a face an edge whose nodes are not the
    /// face's, or `face_face_connectivity` disagrees with `edge_face_connectivity`.
    #[error(
        "{}: variable `{variable}` contradicts {other} at {at}: it gives {found}, expected {expected}; the tables \
         do not describe one mesh, fix or regenerate the file",
        path.display()
    )]
    Contradiction {
        /// The path as given.
        path: PathBuf,
        /// The variable found wrong.
        variable: String,
        /// The variables it was checked against, e.g. `` `Mesh2_face_nodes` and `Mesh2_edge_nodes` ``.
        other: String,
        /// One offending element, e.g. `face 3` (0-based).
        at: String,
        /// What the variable gives there.
        found: String,
        /// What the other variables imply.
        expected: String,
    },

    /// Building the offset provider failed. Cannot happen with the dimensions and names this
    /// crate uses; kept as an error so that nothing here panics.
    #[error("{}: building the offset provider failed: {source}", path.display())]
    Provider {
        /// The path as given.
        path: PathBuf,
        /// What `gridkey-offsets` said.
        source: OffsetsError,
    },
}
