//! [`GridError`], the only error type of this crate.

use std::io;
use std::path::PathBuf;

use gridkey_offsets::OffsetsError;

use crate::GridKind;

/// What the usual fix is, appended to errors about the file as a whole.
const PASS_GRID: &str = "pass --grid with a netCDF-3 ICON or MPAS grid";

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

    /// The file is not netCDF-3 (classic or 64-bit offset): e.g. an HDF5-based netCDF-4 file, a
    /// CDF-5 file, an empty or a text file. Decided from the first bytes of the file.
    #[error(
        "{} is not a netCDF-3 file: {found}; {PASS_GRID}, or convert a netCDF-4 or CDF-5 file with \
         `nccopy -k '64-bit offset' IN OUT`",
        path.display()
    )]
    NotNetcdf3 {
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

    /// The `netcdf3` reader (the pure-Rust netCDF-3 crate) refused the file or failed to read a
    /// variable.
    #[error("{}: the netCDF-3 reader failed: {reason}", path.display())]
    Netcdf {
        /// The path as given.
        path: PathBuf,
        /// The reader's error, as text: `netcdf3::ReadError` holds `Rc`s, and a `GridError` must
        /// be `Send + Sync` to cross threads and into `anyhow`.
        reason: String,
    },

    /// The `netcdf3` reader panicked on this file. The header walk is meant to make this
    /// impossible; the reader runs under `catch_unwind` so that a case it missed is still an
    /// error and not a crash.
    #[error("{}: the netCDF-3 reader crashed on this file ({message}); the file is probably damaged", path.display())]
    ReaderPanicked {
        /// The path as given.
        path: PathBuf,
        /// The panic message.
        message: String,
    },

    /// The file is netCDF-3 but has neither `edge_of_cell` (ICON) nor `edgesOnCell` (MPAS).
    #[error(
        "{} is neither an ICON grid (no variable `edge_of_cell`) nor an MPAS grid (no variable `edgesOnCell`); {PASS_GRID}",
        path.display()
    )]
    NotAGrid {
        /// The path as given.
        path: PathBuf,
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

    /// A variable has a type other than `int` (netCDF `NC_INT`, 32-bit).
    #[error("{}: variable `{variable}` has type {found}, expected {expected}", path.display())]
    WrongType {
        /// The path as given.
        path: PathBuf,
        /// The variable.
        variable: String,
        /// The type required (CDL name, `int`).
        expected: &'static str,
        /// The type found (CDL name: `byte`, `char`, `short`, `int`, `float`, `double`).
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

    /// A neighbour index is neither `0` (no neighbour) nor in `1..=codomain_size`. `row` and
    /// `column` are the entry's position in the canonical `(n, k)` table (for ICON the file
    /// stores it at `[column, row]`); it is the first bad entry in C order.
    #[error(
        "{}: variable `{variable}` ({offset}) has {value} at row {row}, column {column} (canonical (n, k) position), \
         expected 1..={codomain_size} (a 1-based index into {codomain}) or 0 for no neighbour",
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
        /// The raw value in the file.
        value: i32,
        /// The codomain name, e.g. `Edge`.
        codomain: String,
        /// The number of codomain elements (from the grid's dimension).
        codomain_size: usize,
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
