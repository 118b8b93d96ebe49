//! Offset providers: the runtime one the user passes, the compile-time view translation sees,
//! and the conversion between them (docs/design.md "The problem", "The pipeline" and
//! "Contracts"; ADR 0006).
//!
//! An offset provider is an ordered map from offset names (`C2E`, `E2C`, `Koff`, ...) to either a
//! [`Dimension`] or a gather connectivity. The runtime [`OffsetProvider`] holds [`Connectivity`]
//! values whose neighbour tables may have any memory order, int32 or int64 elements, or live
//! behind any [`TableSource`] that must be copied to the host to be read (a device buffer;
//! [`HostCopySource`] is the counted test double of one). [`compile_time_offset_provider`]
//! replaces every gather by a [`CompileTimeConnectivity`]: a read-only, C-order host table
//! memory-mapped from the [`TableStore`] and named by its [`TableDigest`].
//! [`ConversionMemo::provider_unstored`] keeps a canonical runtime table that is not stored yet in
//! place instead, hashed once, until [`ConversionMemo::store_kept`] stores it for a worker or a
//! translation (ADR 0053).
//!
//! # Example
//!
//! What a frontend does: build the runtime provider from the tables it holds (here plain
//! vectors), convert it once into a [`TableStore`] in the cache directory, and hand the
//! compile-time view to translation and keys; execution keeps the runtime provider.
//!
//! ```
//! use std::sync::Arc;
//! use gridkey_offsets::{
//!     compile_time_offset_provider, Connectivity, ConversionMemo, Dimension, DimensionKind, Dtype, Entry,
//!     IndexTable, OffsetProvider, TableStore,
//! };
//!
//! // Two cells with three edges each, in C order; an int64 table whose indices fit is stored
//! // as int32 (ADR 0006). E2C has a missing neighbour, marked by the skip value -1.
//! let c2e = IndexTable::from_vec_i64(2, 3, vec![0, 1, 2, 2, 3, 4])?;
//! let e2c = IndexTable::from_vec_i32(5, 2, vec![0, -1, 0, -1, 0, 1, 1, -1, 1, -1])?;
//! let mut provider = OffsetProvider::new();
//! let cell = || Dimension::horizontal("Cell");
//! let edge = || Dimension::horizontal("Edge");
//! provider.push("C2E", Entry::Gather(Arc::new(Connectivity::from_host(cell(), Dimension::local("C2EDim"), edge(), None, c2e)?)))?;
//! provider.push("E2C", Entry::Gather(Arc::new(Connectivity::from_host(edge(), Dimension::local("E2CDim"), cell(), Some(-1), e2c)?)))?;
//! provider.push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical)))?;
//!
//! let dir = tempfile::tempdir()?;
//! let store = TableStore::open(dir.path())?;
//! // The conversion memo is the caller's: converting through it again reuses what it holds.
//! let memo = ConversionMemo::new();
//! let view = memo.provider(&provider, &store)?;
//! assert_eq!(view.len(), 3); // every entry, in the same order
//! let c2e = view.gather("C2E").expect("a gather");
//! assert_eq!((c2e.dtype(), c2e.shape()), (Dtype::I32, [2, 3]));
//! assert!(c2e.table_path().starts_with(dir.path().join("tables-v1")));
//! println!("C2E is table {}", c2e.digest());
//!
//! // Converting the same runtime provider again copies and hashes nothing (the memo).
//! let again = memo.provider(&provider, &store)?;
//! assert!(Arc::ptr_eq(again.gather("C2E").unwrap(), c2e));
//! assert_eq!((memo.stats().tables_hashed, memo.stats().memo_hits), (2, 2));
//! // Without a memo, every call converts (a table already stored is found, not written again).
//! let fresh = compile_time_offset_provider(&provider, &store)?;
//! assert!(!Arc::ptr_eq(fresh.gather("C2E").unwrap(), c2e));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Architecture invariant
//!
//! The compile-time view keeps every entry of the runtime provider, in the same order. Runtime
//! tables (host or device) are read only during conversion, and each runtime connectivity is
//! converted once per [`ConversionMemo`] and store while it lives: the memo is a value its caller
//! holds (no process-wide state), keyed by the identity of the `Arc` and validated by a `Weak`,
//! so a reused address is never mistaken for the old connectivity. Compile-time tables are canonical: C order, little-endian, int32 whenever every
//! index fits (ADR 0006), so neither the layout nor the integer width of the runtime table
//! reaches a digest or a key.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use gridkey_digest::{digest_table, TableElement, TableHasher, BUFFER_BYTES};
use gridkey_store::{write_c_order, MappedTable, TableView};
use ndarray::{ArcArray2, Array2, ArrayView2};

pub use gridkey_digest::{Dtype, TableDigest};
pub use gridkey_store::TableView as CompileTimeTable;
/// The store a provider is converted into, what a compile-time table is opened as, and the
/// store's error, so that a frontend names them without depending on `gridkey-store` itself.
pub use gridkey_store::{StoreError, TableSpec, TableStore};
/// The `ndarray` this crate's tables are made of, so that a caller builds an [`IndexTable`]
/// without pinning the same version itself.
pub use ndarray;

/// Errors of offset providers and their conversion (ADR 0005); each names the offset.
#[derive(Debug, thiserror::Error)]
pub enum OffsetsError {
    /// The table store failed while converting or rehydrating connectivity `offset`.
    #[error("offset {offset}: {source}")]
    Store {
        /// The offset name (`C2E`).
        offset: String,
        /// What the store said.
        source: StoreError,
    },
    /// An offset name appears twice in one provider.
    #[error("offset {offset} is defined twice in one offset provider; give each entry its own name")]
    DuplicateOffset {
        /// The offset name.
        offset: String,
    },
    /// Copying connectivity `offset`'s table to the host failed ([`TableSource::copy_to_host`]);
    /// nothing was stored or memoised, so the next conversion copies again.
    #[error("offset {offset}: copying its neighbour table to the host failed: {source}; check that the table's buffer is still alive and readable, then convert again")]
    HostCopy {
        /// The offset name (`C2E`).
        offset: String,
        /// What the table source said.
        source: CopyError,
    },
    /// A host copy whose dtype or shape is not what its table source declared.
    #[error("offset {offset}: the host copy of its neighbour table is {found_dtype} {found_shape:?}, but its table source declares {dtype} {shape:?}; fix the table source's copy_to_host")]
    HostCopyShape {
        /// The offset name (`C2E`).
        offset: String,
        /// The declared dtype.
        dtype: Dtype,
        /// The declared shape `(n, k)`.
        shape: [usize; 2],
        /// The dtype of the copy.
        found_dtype: Dtype,
        /// The shape of the copy.
        found_shape: [usize; 2],
    },
    /// A neighbour table built from a vector whose length is not `n * k`.
    #[error("a neighbour table of shape ({rows}, {cols}) needs {} elements, but the vector has {len}; pass rows * cols elements in C order", rows.saturating_mul(*cols))]
    TableLength {
        /// Rows `n`.
        rows: usize,
        /// Columns `k` (neighbours per row).
        cols: usize,
        /// Elements given.
        len: usize,
    },
    /// A neighbour table holds a negative entry that is not the connectivity's skip value (a
    /// table with missing neighbours and no skip value, or another marker than the declared
    /// one): found when it is converted, before anything is stored, so no translation reads it.
    #[error("offset {offset}: its neighbour table has entry {value} at ({row}, {col}), below 0 and not its skip value ({}); declare the skip value that marks a missing neighbour (Some(-1)) or fix the table", skip_value.map_or("it has none".to_owned(), |v| v.to_string()))]
    NegativeEntry {
        /// The offset name (`E2C`).
        offset: String,
        /// Row of the first such entry (C order).
        row: usize,
        /// Column of the first such entry.
        col: usize,
        /// The entry.
        value: i64,
        /// The connectivity's skip value.
        skip_value: Option<i64>,
    },
    /// A domain or codomain dimension of the wrong kind.
    #[error("connectivity {what} dimension {name} must be a {expected:?} dimension")]
    DimensionKind {
        /// Which dimension (domain, local, codomain).
        what: &'static str,
        /// Its name.
        name: String,
        /// The kind required.
        expected: DimensionKind,
    },
}

/// What a dimension indexes; part of every key input that names a dimension (ADR 0003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DimensionKind {
    /// A horizontal mesh location: `Cell`, `Edge`, `Vertex`.
    Horizontal,
    /// The vertical: `K`.
    Vertical,
    /// The neighbour axis of a connectivity: `C2EDim`.
    Local,
}

impl DimensionKind {
    /// Lowercase name, as in keys and records: `horizontal`, `vertical`, `local`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DimensionKind::Horizontal => "horizontal",
            DimensionKind::Vertical => "vertical",
            DimensionKind::Local => "local",
        }
    }
}

/// A named dimension of a field or a connectivity: its name and [`DimensionKind`], both key
/// inputs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dimension {
    name: String,
    kind: DimensionKind,
}

impl Dimension {
    /// A dimension called `name` of `kind`.
    pub fn new(name: impl Into<String>, kind: DimensionKind) -> Self {
        Self { name: name.into(), kind }
    }

    /// A horizontal dimension (`Cell`, `Edge`, `Vertex`).
    pub fn horizontal(name: impl Into<String>) -> Self {
        Self::new(name, DimensionKind::Horizontal)
    }

    /// A local (neighbour) dimension (`C2EDim`).
    pub fn local(name: impl Into<String>) -> Self {
        Self::new(name, DimensionKind::Local)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind.
    pub fn kind(&self) -> DimensionKind {
        self.kind
    }
}

/// A runtime neighbour table `(n, max_neighbours)` on the host, int32 or int64 elements, in any
/// memory order or strides; shared immutably, so it cannot change after it was used for compilation (docs/design.md "Contracts").
#[derive(Clone, Debug)]
pub enum IndexTable {
    /// int32 elements.
    I32(ArcArray2<i32>),
    /// int64 elements.
    I64(ArcArray2<i64>),
}

impl IndexTable {
    /// An int32 table of shape `(rows, cols)` from `elements` in C (row-major) order.
    ///
    /// Errors: [`OffsetsError::TableLength`] when `elements.len() != rows * cols`.
    pub fn from_vec_i32(rows: usize, cols: usize, elements: Vec<i32>) -> Result<Self, OffsetsError> {
        let len = elements.len();
        Array2::from_shape_vec((rows, cols), elements)
            .map(|a| IndexTable::I32(a.into_shared()))
            .map_err(|_| OffsetsError::TableLength { rows, cols, len })
    }

    /// An int64 table of shape `(rows, cols)` from `elements` in C (row-major) order.
    ///
    /// Errors: [`OffsetsError::TableLength`] when `elements.len() != rows * cols`.
    pub fn from_vec_i64(rows: usize, cols: usize, elements: Vec<i64>) -> Result<Self, OffsetsError> {
        let len = elements.len();
        Array2::from_shape_vec((rows, cols), elements)
            .map(|a| IndexTable::I64(a.into_shared()))
            .map_err(|_| OffsetsError::TableLength { rows, cols, len })
    }

    /// The element type: [`Dtype::I32`] or [`Dtype::I64`].
    pub fn dtype(&self) -> Dtype {
        match self {
            IndexTable::I32(_) => Dtype::I32,
            IndexTable::I64(_) => Dtype::I64,
        }
    }

    /// The shape `(n, k)` in elements.
    pub fn shape(&self) -> [usize; 2] {
        let (n, k) = match self {
            IndexTable::I32(a) => a.dim(),
            IndexTable::I64(a) => a.dim(),
        };
        [n, k]
    }

    /// A C-order copy of the table (what a device-to-host transfer produces).
    fn to_c_order(&self) -> IndexTable {
        match self {
            IndexTable::I32(a) => IndexTable::I32(a.as_standard_layout().into_owned().into_shared()),
            IndexTable::I64(a) => IndexTable::I64(a.as_standard_layout().into_owned().into_shared()),
        }
    }
}

/// What a [`TableSource::copy_to_host`] that failed says (a device error, a freed buffer...).
pub type CopyError = Box<dyn std::error::Error + Send + Sync>;

/// Where a runtime connectivity's neighbour table lives, and how it reaches the host.
///
/// Shape `(n, k)` in elements and dtype (int32 or int64) are metadata: free to read, never a
/// copy. A table readable in place on the host returns it from [`TableSource::host`]; any other
/// (a device buffer, an array handed over from another runtime) is read through one
/// [`TableSource::copy_to_host`], which conversion calls at most once per connectivity and
/// store while the connectivity lives (ADR 0006). Implement it outside this crate for a real
/// device buffer:
///
/// ```
/// use std::sync::Arc;
/// use gridkey_offsets::{Connectivity, CopyError, Dimension, Dtype, IndexTable, TableSource};
///
/// /// A table the host can read only after a transfer (here: a vector standing in for one).
/// #[derive(Debug)]
/// struct DeviceTable { rows: usize, cols: usize, elements: Vec<i64> }
///
/// impl TableSource for DeviceTable {
///     fn dtype(&self) -> Dtype { Dtype::I64 }
///     fn shape(&self) -> [usize; 2] { [self.rows, self.cols] }
///     fn copy_to_host(&self) -> Result<IndexTable, CopyError> {
///         Ok(IndexTable::from_vec_i64(self.rows, self.cols, self.elements.clone())?)
///     }
/// }
///
/// let c2e = Connectivity::new(
///     Dimension::horizontal("Cell"),
///     Dimension::local("C2EDim"),
///     Dimension::horizontal("Edge"),
///     None,
///     Arc::new(DeviceTable { rows: 2, cols: 3, elements: vec![0, 1, 2, 2, 3, 4] }),
/// )?;
/// assert_eq!((c2e.shape(), c2e.dtype()), ([2, 3], Dtype::I64));
/// # Ok::<(), gridkey_offsets::OffsetsError>(())
/// ```
pub trait TableSource: Send + Sync + fmt::Debug {
    /// The element type (metadata, no copy).
    fn dtype(&self) -> Dtype;

    /// The shape `(n, k)` in elements (metadata, no copy).
    fn shape(&self) -> [usize; 2];

    /// The table itself when it is readable in place on the host (no copy); `None` (the
    /// default) when it must be copied with [`TableSource::copy_to_host`].
    fn host(&self) -> Option<&IndexTable> {
        None
    }

    /// One copy of the table into a host buffer, C order, of [`TableSource::dtype`] and
    /// [`TableSource::shape`] (conversion checks both).
    ///
    /// Errors: whatever the transfer says; conversion reports it as
    /// [`OffsetsError::HostCopy`] naming the offset.
    fn copy_to_host(&self) -> Result<IndexTable, CopyError>;
}

impl TableSource for IndexTable {
    fn dtype(&self) -> Dtype {
        IndexTable::dtype(self)
    }

    fn shape(&self) -> [usize; 2] {
        IndexTable::shape(self)
    }

    fn host(&self) -> Option<&IndexTable> {
        Some(self)
    }

    /// A C-order copy; conversion never calls it, since [`TableSource::host`] is `Some`.
    fn copy_to_host(&self) -> Result<IndexTable, CopyError> {
        Ok(self.to_c_order())
    }
}

/// A table that can be read only after a copy to the host: the test double of a device buffer.
///
/// Shape and dtype are metadata and free to read; the elements are reachable only through
/// [`TableSource::copy_to_host`], which counts every copy so that tests can prove a
/// conversion copies each table at most once.
#[derive(Debug)]
pub struct HostCopySource {
    table: IndexTable,
    copies: AtomicU64,
}

impl HostCopySource {
    /// Wraps `table` as if it lived in device memory.
    pub fn new(table: IndexTable) -> Self {
        Self { table, copies: AtomicU64::new(0) }
    }

    /// How many times the table was copied to the host.
    pub fn copies(&self) -> u64 {
        self.copies.load(Ordering::SeqCst)
    }
}

impl TableSource for HostCopySource {
    fn dtype(&self) -> Dtype {
        self.table.dtype()
    }

    fn shape(&self) -> [usize; 2] {
        self.table.shape()
    }

    /// Copies the table to the host, in C order. Counts one copy.
    fn copy_to_host(&self) -> Result<IndexTable, CopyError> {
        self.copies.fetch_add(1, Ordering::SeqCst);
        Ok(self.table.to_c_order())
    }
}

/// The four getters a runtime and a compile-time connectivity share (same fields, same meaning).
macro_rules! connectivity_dimensions {
    () => {
        /// The domain (source) dimension, e.g. `Cell` for `C2E`.
        pub fn domain(&self) -> &Dimension {
            &self.domain
        }

        /// The neighbour dimension, e.g. `C2EDim`.
        pub fn local(&self) -> &Dimension {
            &self.local
        }

        /// The codomain (target) dimension, e.g. `Edge` for `C2E`.
        pub fn codomain(&self) -> &Dimension {
            &self.codomain
        }

        /// The value marking a missing neighbour, if any.
        pub fn skip_value(&self) -> Option<i64> {
            self.skip_value
        }
    };
}

/// A runtime gather connectivity: a neighbour table from `domain` (with neighbour axis `local`)
/// to `codomain`, where `skip_value` marks a missing neighbour.
#[derive(Debug)]
pub struct Connectivity {
    domain: Dimension,
    local: Dimension,
    codomain: Dimension,
    skip_value: Option<i64>,
    source: Arc<dyn TableSource>,
}

impl Connectivity {
    /// A connectivity over the table behind `source` (host, device or any [`TableSource`]);
    /// `domain` and `codomain` must be horizontal or vertical, `local` local.
    ///
    /// Errors: [`OffsetsError::DimensionKind`].
    pub fn new(
        domain: Dimension,
        local: Dimension,
        codomain: Dimension,
        skip_value: Option<i64>,
        source: Arc<dyn TableSource>,
    ) -> Result<Self, OffsetsError> {
        check_dimensions(&domain, &local, &codomain)?;
        Ok(Self { domain, local, codomain, skip_value, source })
    }

    /// A connectivity over a host table, read in place (any memory order, int32 or int64).
    ///
    /// Errors: [`OffsetsError::DimensionKind`].
    pub fn from_host(
        domain: Dimension,
        local: Dimension,
        codomain: Dimension,
        skip_value: Option<i64>,
        table: IndexTable,
    ) -> Result<Self, OffsetsError> {
        Self::new(domain, local, codomain, skip_value, Arc::new(table))
    }

    connectivity_dimensions!();

    /// Where the table lives: the host table itself, or a source that copies it to the host.
    pub fn source(&self) -> &Arc<dyn TableSource> {
        &self.source
    }

    /// The shape `(n, k)` in elements (metadata, no copy).
    pub fn shape(&self) -> [usize; 2] {
        self.source.shape()
    }

    /// The runtime element type (metadata, no copy).
    pub fn dtype(&self) -> Dtype {
        self.source.dtype()
    }

    /// The table on the host: shared as it is when [`TableSource::host`] has it, otherwise
    /// one [`TableSource::copy_to_host`], checked against the declared dtype and shape.
    /// `offset` names this connectivity in the errors.
    ///
    /// Errors: [`OffsetsError::HostCopy`], [`OffsetsError::HostCopyShape`].
    pub fn host_table(&self, offset: &str) -> Result<IndexTable, OffsetsError> {
        if let Some(table) = self.source.host() {
            return Ok(table.clone());
        }
        let copy = self
            .source
            .copy_to_host()
            .map_err(|source| OffsetsError::HostCopy { offset: offset.to_owned(), source })?;
        let (dtype, shape) = (self.source.dtype(), self.source.shape());
        if copy.dtype() != dtype || copy.shape() != shape {
            return Err(OffsetsError::HostCopyShape {
                offset: offset.to_owned(),
                dtype,
                shape,
                found_dtype: copy.dtype(),
                found_shape: copy.shape(),
            });
        }
        Ok(copy)
    }
}

fn check_dimensions(domain: &Dimension, local: &Dimension, codomain: &Dimension) -> Result<(), OffsetsError> {
    let located = |what, d: &Dimension| {
        if d.kind == DimensionKind::Local {
            Err(OffsetsError::DimensionKind { what, name: d.name.clone(), expected: DimensionKind::Horizontal })
        } else {
            Ok(())
        }
    };
    located("domain", domain)?;
    located("codomain", codomain)?;
    if local.kind != DimensionKind::Local {
        return Err(OffsetsError::DimensionKind {
            what: "local",
            name: local.name.clone(),
            expected: DimensionKind::Local,
        });
    }
    Ok(())
}

/// The compile-time form of a connectivity: the same dimensions and skip value, and a
/// canonical C-order host table named by its digest: mapped read-only from the store, or, from
/// [`ConversionMemo::provider_unstored`], the runtime table itself kept unstored until a
/// translation or a worker needs its file (ADR 0053).
#[derive(Debug)]
pub struct CompileTimeConnectivity {
    domain: Dimension,
    local: Dimension,
    codomain: Dimension,
    skip_value: Option<i64>,
    table: Held,
}

/// Where the bytes of a compile-time table are (ADR 0053).
#[derive(Debug)]
enum Held {
    /// The store's file, mapped read-only.
    Mapped(MappedTable),
    /// Not stored yet: the runtime table itself, already canonical (host, int32, C order) and
    /// immutable (an [`ArcArray2`] shared with the runtime provider, so no copy); `path` is
    /// where the store will put it.
    Kept { spec: TableSpec, table: ArcArray2<i32>, path: PathBuf },
}

impl CompileTimeConnectivity {
    /// Opens the stored table `spec` and pairs it with its dimensions: how a worker rehydrates
    /// a connectivity that crossed a process boundary as a reference (docs/design.md "Formats", the wire form of a compile-time connectivity). The open
    /// checks header, dtype, shape and length; it does not recompute the digest.
    ///
    /// Errors: [`OffsetsError::DimensionKind`]; [`OffsetsError::Store`] naming `offset`.
    pub fn rehydrate(
        offset: &str,
        store: &TableStore,
        spec: &TableSpec,
        domain: Dimension,
        local: Dimension,
        codomain: Dimension,
        skip_value: Option<i64>,
    ) -> Result<Self, OffsetsError> {
        check_dimensions(&domain, &local, &codomain)?;
        let table =
            store.open_table(spec).map_err(|source| OffsetsError::Store { offset: offset.to_owned(), source })?;
        Ok(Self { domain, local, codomain, skip_value, table: Held::Mapped(table) })
    }

    connectivity_dimensions!();

    /// The stored table file this connectivity is mapped from (`<cache>/tables-v1/ab/<digest>.npy`);
    /// for a table kept unstored ([`Self::is_stored`] is `false`), the path the store will give
    /// it, where there may be no file yet.
    pub fn table_path(&self) -> &std::path::Path {
        match &self.table {
            Held::Mapped(table) => table.path(),
            Held::Kept { path, .. } => path,
        }
    }

    /// Whether the table is mapped from the store's file (`true`), or kept unstored in this
    /// process's memory until a translation or a worker needs its file (ADR 0053;
    /// [`ConversionMemo::store_kept`] stores it).
    pub fn is_stored(&self) -> bool {
        matches!(self.table, Held::Mapped(_))
    }

    /// Recomputes the digest of the mapped table and compares it with its name: catches a
    /// table file modified in place after conversion (ADR 0012). Reads the mapped file once
    /// through `pread`, never through the mapping, so a file truncated while mapped is an error
    /// here, not a `SIGBUS` (ADR 0034); a process-mode parent calls only this. A table kept
    /// unstored (ADR 0053) is the runtime table, which the runtime provider shares immutably: its
    /// digest is recomputed from memory all the same, so that bytes changed through a pointer
    /// handed to a kernel never reach a translation under the old digest.
    ///
    /// Errors: [`StoreError::Digest`] naming the file (for a kept table, the path it will have);
    /// [`StoreError::Truncated`] when the file is shorter than its table now;
    /// [`StoreError::Format`] when its header changed.
    pub fn verify(&self) -> Result<(), StoreError> {
        match &self.table {
            Held::Mapped(table) => table.verify(),
            Held::Kept { spec, table, path } => {
                let found = digest_table(table.view());
                if found == spec.digest {
                    Ok(())
                } else {
                    Err(StoreError::Digest { path: path.clone(), expected: spec.digest, found })
                }
            }
        }
    }

    /// Digest, dtype and shape of the table.
    pub fn spec(&self) -> &TableSpec {
        match &self.table {
            Held::Mapped(table) => table.spec(),
            Held::Kept { spec, .. } => spec,
        }
    }

    /// The table digest (format v1, ADR 0001) of the canonical table; names its file.
    pub fn digest(&self) -> TableDigest {
        self.spec().digest
    }

    /// The compile-time dtype (int32 unless an index does not fit).
    pub fn dtype(&self) -> Dtype {
        self.spec().dtype
    }

    /// The shape `(n, k)` in elements, the same as the runtime table's.
    pub fn shape(&self) -> [usize; 2] {
        self.spec().shape
    }

    /// The table, C order, read-only: mapped from the store, or the runtime table kept
    /// unstored (ADR 0053). Reading a mapped table touches the mapping: a process whose table
    /// file is truncated meanwhile ends with `SIGBUS`, so only translation reads it (in process
    /// mode, in a worker; ADR 0034).
    pub fn table(&self) -> TableView<'_> {
        match &self.table {
            Held::Mapped(table) => table.view(),
            Held::Kept { table, .. } => TableView::I32(table.view()),
        }
    }

    /// This connectivity's dimensions and skip value over `table`.
    fn with_table(&self, table: Held) -> Self {
        Self {
            domain: self.domain.clone(),
            local: self.local.clone(),
            codomain: self.codomain.clone(),
            skip_value: self.skip_value,
            table,
        }
    }
}

/// One entry of an offset provider: a dimension or a gather connectivity.
#[derive(Clone, Debug)]
pub enum Entry<G> {
    /// The offset maps to a dimension (e.g. `Koff` to `K`).
    Dimension(Dimension),
    /// The offset is a gather connectivity.
    Gather(G),
}

/// An ordered map from offset names to entries. Order is part of the key (ADR 0003).
#[derive(Clone, Debug)]
pub struct Provider<G> {
    entries: Vec<(String, Entry<G>)>,
}

/// The runtime offset provider the user passes, and execution receives.
pub type OffsetProvider = Provider<Arc<Connectivity>>;

/// The compile-time view of an offset provider: what translation and keys see.
pub type CompileTimeOffsetProvider = Provider<Arc<CompileTimeConnectivity>>;

impl<G> Default for Provider<G> {
    fn default() -> Self {
        Self { entries: Vec::new() }
    }
}

impl<G> Provider<G> {
    /// An empty provider; entries are added in order with [`Self::push`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an entry named `offset`.
    ///
    /// Errors: [`OffsetsError::DuplicateOffset`] when the name is already there.
    pub fn push(&mut self, offset: impl Into<String>, entry: Entry<G>) -> Result<(), OffsetsError> {
        let offset = offset.into();
        if self.get(&offset).is_some() {
            return Err(OffsetsError::DuplicateOffset { offset });
        }
        self.entries.push((offset, entry));
        Ok(())
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[(String, Entry<G>)] {
        &self.entries
    }

    /// The entry named `offset`.
    pub fn get(&self, offset: &str) -> Option<&Entry<G>> {
        self.entries.iter().find(|(name, _)| name == offset).map(|(_, e)| e)
    }

    /// The gather connectivity named `offset`, if it is one.
    pub fn gather(&self, offset: &str) -> Option<&G> {
        match self.get(offset) {
            Some(Entry::Gather(g)) => Some(g),
            _ => None,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl CompileTimeOffsetProvider {
    /// How many distinct compile-time tables of this view are kept unstored
    /// ([`CompileTimeConnectivity::is_stored`] is `false`; ADR 0053).
    pub fn kept_tables(&self) -> usize {
        let mut seen = std::collections::HashSet::new();
        self.entries
            .iter()
            .filter_map(|(_, e)| match e {
                Entry::Gather(c) if !c.is_stored() => Some(Arc::as_ptr(c)),
                _ => None,
            })
            .filter(|p| seen.insert(*p))
            .count()
    }
}

/// Counts of the conversion work one [`ConversionMemo`] has done ([`ConversionMemo::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConversionStats {
    /// Tables hashed and stored (memo misses, and the puts again of a table whose stored file
    /// failed its open): each one hashed its table once.
    pub tables_hashed: u64,
    /// Bytes of canonical table content hashed (`n * k * itemsize` per table).
    pub bytes_hashed: u64,
    /// Memo hits: conversions that copied and hashed nothing.
    pub memo_hits: u64,
}

struct MemoEntry {
    runtime: Weak<Connectivity>,
    compile_time: Arc<CompileTimeConnectivity>,
}

/// The identity of a runtime connectivity's `Arc` and the store it was converted into.
type MemoKey = (usize, PathBuf);

/// The conversion memo, owned by the caller that converts (a run, a frontend's session): each
/// runtime connectivity is converted once per memo and store while it lives, and later
/// conversions of the same `Arc` into the same store return the same compile-time view, copying
/// and hashing nothing (docs/design.md "Contracts"). Keyed by the identity of the `Arc` and
/// validated by a `Weak`, so a reused address is never mistaken for the old connectivity.
/// Counts its work ([`Self::stats`]), so two memos never see each other's counts. Holds the
/// mapped views it returned until it is dropped. Shared between threads by reference.
#[derive(Default)]
pub struct ConversionMemo {
    entries: Mutex<HashMap<MemoKey, MemoEntry>>,
    tables_hashed: AtomicU64,
    bytes_hashed: AtomicU64,
    memo_hits: AtomicU64,
}

impl fmt::Debug for ConversionMemo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConversionMemo").field("stats", &self.stats()).finish_non_exhaustive()
    }
}

impl ConversionMemo {
    /// An empty memo with zero counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// The conversion work of this memo so far.
    pub fn stats(&self) -> ConversionStats {
        ConversionStats {
            tables_hashed: self.tables_hashed.load(Ordering::SeqCst),
            bytes_hashed: self.bytes_hashed.load(Ordering::SeqCst),
            memo_hits: self.memo_hits.load(Ordering::SeqCst),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<MemoKey, MemoEntry>> {
        // A panic while the lock was held left the map whole: every change is one insert or remove.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn counted(&self, spec: TableSpec) -> TableSpec {
        self.tables_hashed.fetch_add(1, Ordering::SeqCst);
        self.bytes_hashed.fetch_add((spec.shape[0] * spec.shape[1] * spec.dtype.itemsize()) as u64, Ordering::SeqCst);
        spec
    }

    /// The compile-time view of `provider`: every entry, in order, with each gather replaced by
    /// its [`CompileTimeConnectivity`] in `store` (converted at most once per connectivity and
    /// store in this memo, see [`Self::connectivity`]). The tables not converted before are
    /// written as one batch (ADR 0050): every table to its temp file, then every file synced
    /// together and renamed, then every table mapped, so that a cache that stores a grid's
    /// tables for the first time waits for their syncs together rather than one after the other.
    ///
    /// Errors: [`OffsetsError::Store`] naming the offset whose table could not be stored or
    /// mapped; [`OffsetsError::HostCopy`] and [`OffsetsError::HostCopyShape`] naming the offset
    /// whose table could not be copied to the host; [`OffsetsError::NegativeEntry`] naming the
    /// offset whose table has a negative entry that is not its skip value. A conversion that
    /// fails fails alone: it is not memoised, and the tables put before it are stored, mapped
    /// and memoised.
    pub fn provider(
        &self,
        provider: &OffsetProvider,
        store: &TableStore,
    ) -> Result<CompileTimeOffsetProvider, OffsetsError> {
        self.converted(provider, store, false)
    }

    /// [`Self::provider`], but a runtime table that is already canonical (a host int32 table in
    /// C order, which the runtime provider shares immutably) and not stored yet is not stored
    /// now: it is hashed once and kept, in place, as its compile-time table, until
    /// [`Self::store_kept`] stores it, when a translation may read it or a worker needs its
    /// file (ADR 0053). A table found stored is mapped after its checked open; one whose file
    /// fails that open is stored again. A run whose every program hits then writes no table.
    /// Only on a store that trusts the names it finds ([`TableStore::checked_by_readers`], not
    /// [`TableStore::verifying`]) without a site cache; any other store, and any table that
    /// needs a copy to be canonical, converts as [`Self::provider`] does.
    ///
    /// Errors: as [`Self::provider`].
    pub fn provider_unstored(
        &self,
        provider: &OffsetProvider,
        store: &TableStore,
    ) -> Result<CompileTimeOffsetProvider, OffsetsError> {
        self.converted(provider, store, store.trusts_names() && store.site_dir().is_none())
    }

    /// [`Self::convert_all`], then, unless `keep`, the views this memo kept unstored for an
    /// earlier conversion stored ([`Self::store_kept`]).
    fn converted(
        &self,
        provider: &OffsetProvider,
        store: &TableStore,
        keep: bool,
    ) -> Result<CompileTimeOffsetProvider, OffsetsError> {
        let out = self.convert_all(provider, store, keep)?;
        if keep || out.kept_tables() == 0 {
            Ok(out)
        } else {
            self.store_kept(&out, store)
        }
    }

    /// `provider` with every table kept unstored ([`CompileTimeConnectivity::is_stored`] is
    /// `false`) stored and mapped, as one batch (ADR 0050), from the bytes hashed at conversion:
    /// nothing is hashed again. The memo's views of those tables become the stored ones; the
    /// other entries are the same `Arc`s.
    ///
    /// Errors: [`OffsetsError::Store`] naming the offset whose table could not be stored or
    /// mapped; the tables stored before it stay stored.
    pub fn store_kept(
        &self,
        provider: &CompileTimeOffsetProvider,
        store: &TableStore,
    ) -> Result<CompileTimeOffsetProvider, OffsetsError> {
        let batch = store.deferring();
        let mut kept = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut failed = None;
        for (name, entry) in provider.entries() {
            let Entry::Gather(c) = entry else { continue };
            let Held::Kept { spec, table, .. } = &c.table else { continue };
            if !seen.insert(Arc::as_ptr(c)) {
                continue;
            }
            let put = |s: &TableStore| s.put_with(spec, |out| write_c_order(table.view(), out)).map(|_| *spec);
            if let Err(source) = put(&batch) {
                // That table alone fails: the tables put before it are committed and mapped.
                failed = Some(OffsetsError::Store { offset: name.clone(), source });
                break;
            }
            kept.push((name, c, put));
        }
        let mut committed = batch.commit_deferred().into_iter().peekable();
        let mut stored: HashMap<*const CompileTimeConnectivity, Arc<CompileTimeConnectivity>> = HashMap::new();
        for (name, c, put) in kept {
            let store_err = |source| OffsetsError::Store { offset: name.clone(), source };
            if committed.peek().is_some_and(|(held, _)| held == c.spec()) {
                let (_, result) = committed.next().expect("peeked");
                result.map_err(store_err)?;
            }
            let table = mapped_after_put(store, *c.spec(), put).map_err(store_err)?;
            let now = Arc::new(c.with_table(Held::Mapped(table)));
            // The memo's views in this store only: a kept view stored into another directory
            // stays this store's kept view.
            for ((_, dir), entry) in self.entries().iter_mut() {
                if dir == store.dir() && Arc::ptr_eq(&entry.compile_time, c) {
                    entry.compile_time = now.clone();
                }
            }
            stored.insert(Arc::as_ptr(c), now);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let mut out = CompileTimeOffsetProvider::new();
        for (name, entry) in provider.entries() {
            let entry = match entry {
                Entry::Gather(c) => Entry::Gather(stored.get(&Arc::as_ptr(c)).unwrap_or(c).clone()),
                other => other.clone(),
            };
            out.entries.push((name.clone(), entry));
        }
        Ok(out)
    }

    /// The conversion of [`Self::provider`] and [`Self::provider_unstored`]: with `keep`, a
    /// canonical table not stored is kept unstored ([`Self::kept_or_mapped`]).
    fn convert_all(
        &self,
        provider: &OffsetProvider,
        store: &TableStore,
        keep: bool,
    ) -> Result<CompileTimeOffsetProvider, OffsetsError> {
        let batch = store.deferring();
        // Each distinct connectivity once: its memoised view, or its table put into the batch.
        let mut converted: HashMap<*const Connectivity, Arc<CompileTimeConnectivity>> = HashMap::new();
        let mut prepared = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut failed = None;
        for (name, entry) in provider.entries() {
            let Entry::Gather(c) = entry else { continue };
            if !seen.insert(Arc::as_ptr(c)) {
                continue;
            }
            let found = match self.memoised(c, store) {
                Some(ct) => Some(ct),
                None if keep => match self.kept_or_mapped(name, c, store) {
                    Ok(ct) => ct,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                },
                None => None,
            };
            match found {
                Some(ct) => {
                    converted.insert(Arc::as_ptr(c), ct);
                }
                None => match self.prepare(name, c, &batch) {
                    Ok(put) => prepared.push((name, c, put)),
                    Err(e) => {
                        // That conversion alone fails: the tables prepared before it are stored.
                        failed = Some(e);
                        break;
                    }
                },
            }
        }
        let mut committed = batch.commit_deferred().into_iter().peekable();
        for (name, c, (host, spec)) in prepared {
            // A put deferred one commit, or none when it found its table stored.
            if committed.peek().is_some_and(|(held, _)| *held == spec) {
                let (_, result) = committed.next().expect("peeked");
                result.map_err(|source| OffsetsError::Store { offset: name.clone(), source })?;
            }
            let ct = self.mapped(name, c, &host, spec, store)?;
            converted.insert(Arc::as_ptr(c), ct);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let mut out = CompileTimeOffsetProvider::new();
        for (name, entry) in provider.entries() {
            let entry = match entry {
                Entry::Dimension(d) => Entry::Dimension(d.clone()),
                Entry::Gather(c) => Entry::Gather(converted[&Arc::as_ptr(c)].clone()),
            };
            out.entries.push((name.clone(), entry));
        }
        Ok(out)
    }

    /// The compile-time view of one runtime connectivity, from this memo when this `Arc` was
    /// converted into `store` before and still lives; otherwise copied to the host if needed,
    /// canonicalised (C order, int32 when every index fits), hashed once, stored and mapped. A
    /// host table ([`TableSource::host`]) is read in place; any other source is copied once.
    ///
    /// Errors: [`OffsetsError::Store`], [`OffsetsError::HostCopy`],
    /// [`OffsetsError::HostCopyShape`] and [`OffsetsError::NegativeEntry`] (a negative entry
    /// that is not the skip value) naming `offset`; a failed conversion stores and memoises
    /// nothing.
    pub fn connectivity(
        &self,
        offset: &str,
        connectivity: &Arc<Connectivity>,
        store: &TableStore,
    ) -> Result<Arc<CompileTimeConnectivity>, OffsetsError> {
        if let Some(ct) = self.memoised(connectivity, store) {
            if ct.is_stored() {
                return Ok(ct);
            }
            // Kept unstored by `provider_unstored`: stored now, from the bytes hashed then.
            let mut one = CompileTimeOffsetProvider::new();
            one.push(offset, Entry::Gather(ct))?;
            let stored = self.store_kept(&one, store)?;
            return Ok(stored.gather(offset).expect("the one entry").clone());
        }
        let (host, spec) = self.prepare(offset, connectivity, store)?;
        self.mapped(offset, connectivity, &host, spec, store)
    }

    /// The compile-time view of a canonical runtime table (host, int32, C order) hashed once:
    /// mapped when its file is stored and passes the checked open, kept unstored when there is
    /// no file under its name, stored again over a file that fails the open (ADR 0053);
    /// memoised. `None` for a table that needs a copy to be canonical.
    ///
    /// Errors: [`OffsetsError::NegativeEntry`]; [`OffsetsError::Store`] naming `offset`.
    fn kept_or_mapped(
        &self,
        offset: &str,
        connectivity: &Arc<Connectivity>,
        store: &TableStore,
    ) -> Result<Option<Arc<CompileTimeConnectivity>>, OffsetsError> {
        let Some(IndexTable::I32(table)) = connectivity.source.host() else { return Ok(None) };
        if !table.is_standard_layout() {
            return Ok(None);
        }
        if let Some((row, col, value)) = first_bad_entry(table.view(), connectivity.skip_value) {
            let skip_value = connectivity.skip_value;
            return Err(OffsetsError::NegativeEntry { offset: offset.to_owned(), row, col, value, skip_value });
        }
        let shape = [table.nrows(), table.ncols()];
        let spec = self.counted(TableSpec { digest: digest_table(table.view()), dtype: Dtype::I32, shape });
        let store_err = |source| OffsetsError::Store { offset: offset.to_owned(), source };
        let held = match store.open_table(&spec) {
            Ok(mapped) => Held::Mapped(mapped),
            Err(StoreError::Missing { .. }) => {
                Held::Kept { spec, table: table.clone(), path: store.path_of(&spec.digest) }
            }
            // A file under the name that fails its checked open: stored again over it.
            Err(_) => {
                let put = |s: &TableStore| s.put_with(&spec, |out| write_c_order(table.view(), out)).map(|_| spec);
                put(store).map_err(store_err)?;
                Held::Mapped(mapped_after_put(store, spec, put).map_err(store_err)?)
            }
        };
        let compile_time = Arc::new(CompileTimeConnectivity {
            domain: connectivity.domain.clone(),
            local: connectivity.local.clone(),
            codomain: connectivity.codomain.clone(),
            skip_value: connectivity.skip_value,
            table: held,
        });
        Ok(Some(self.memoise(connectivity, store, compile_time)))
    }

    /// The memo's view of this `Arc` in `store`, while it lives (counted as a memo hit).
    fn memoised(&self, connectivity: &Arc<Connectivity>, store: &TableStore) -> Option<Arc<CompileTimeConnectivity>> {
        let key = (Arc::as_ptr(connectivity) as usize, store.dir().to_path_buf());
        let entries = self.entries();
        let entry = entries.get(&key)?;
        if !entry.runtime.upgrade().is_some_and(|live| Arc::ptr_eq(&live, connectivity)) {
            return None;
        }
        self.memo_hits.fetch_add(1, Ordering::SeqCst);
        Some(entry.compile_time.clone())
    }

    /// The first half of a conversion: the host table of `connectivity`, checked for negative
    /// entries, put into `store` (a deferring store holds its commit back); its spec.
    ///
    /// Errors: as [`Self::connectivity`].
    fn prepare(
        &self,
        offset: &str,
        connectivity: &Arc<Connectivity>,
        store: &TableStore,
    ) -> Result<(IndexTable, TableSpec), OffsetsError> {
        let host = connectivity.host_table(offset)?;
        let skip_value = connectivity.skip_value;
        let bad = match &host {
            IndexTable::I32(a) => first_bad_entry(a.view(), skip_value),
            IndexTable::I64(a) => first_bad_entry(a.view(), skip_value),
        };
        if let Some((row, col, value)) = bad {
            return Err(OffsetsError::NegativeEntry { offset: offset.to_owned(), row, col, value, skip_value });
        }
        let spec =
            self.put(&host, store).map_err(|source| OffsetsError::Store { offset: offset.to_owned(), source })?;
        Ok((host, spec))
    }

    /// Stores `host` canonicalised (C order, int32 when every index fits), hashed once.
    fn put(&self, host: &IndexTable, store: &TableStore) -> Result<TableSpec, StoreError> {
        let spec = match host {
            IndexTable::I32(a) => store_as_is(store, a.view()),
            IndexTable::I64(a) if fits_i32(a.view()) => store_converted(store, a.view(), |x| x as i32),
            IndexTable::I64(a) => store_as_is(store, a.view()),
        }?;
        Ok(self.counted(spec))
    }

    /// The second half of a conversion: the table `spec` (stored from `host`) mapped from
    /// `store`, stored again through a verifying store when the open fails
    /// ([`mapped_after_put`]), its compile-time view memoised.
    ///
    /// Errors: [`OffsetsError::Store`] naming `offset`.
    fn mapped(
        &self,
        offset: &str,
        connectivity: &Arc<Connectivity>,
        host: &IndexTable,
        spec: TableSpec,
        store: &TableStore,
    ) -> Result<Arc<CompileTimeConnectivity>, OffsetsError> {
        let table = mapped_after_put(store, spec, |store| self.put(host, store))
            .map_err(|source| OffsetsError::Store { offset: offset.to_owned(), source })?;
        let compile_time = Arc::new(CompileTimeConnectivity {
            domain: connectivity.domain.clone(),
            local: connectivity.local.clone(),
            codomain: connectivity.codomain.clone(),
            skip_value: connectivity.skip_value,
            table: Held::Mapped(table),
        });
        Ok(self.memoise(connectivity, store, compile_time))
    }

    /// Records `compile_time` as the view of `connectivity` in `store`, unless a live view of the
    /// same `Arc` is there already; returns the memo's view.
    fn memoise(
        &self,
        connectivity: &Arc<Connectivity>,
        store: &TableStore,
        compile_time: Arc<CompileTimeConnectivity>,
    ) -> Arc<CompileTimeConnectivity> {
        let key = (Arc::as_ptr(connectivity) as usize, store.dir().to_path_buf());
        let mut entries = self.entries();
        entries.retain(|_, e| e.runtime.strong_count() > 0);
        let entry = entries
            .entry(key)
            .or_insert_with(|| MemoEntry { runtime: Arc::downgrade(connectivity), compile_time: compile_time.clone() });
        if !entry.runtime.upgrade().is_some_and(|live| Arc::ptr_eq(&live, connectivity)) {
            *entry = MemoEntry { runtime: Arc::downgrade(connectivity), compile_time: compile_time.clone() };
        }
        entry.compile_time.clone()
    }

    /// Converts `connectivity` into `store` again, past this memo, with every open of the
    /// stored file recomputing its digest: a stored table whose content no longer matches its
    /// name (changed in place after it was stored) is rewritten from the runtime table and
    /// mapped anew, and the memo holds the new view (ADR 0024). Reads the runtime table and the
    /// stored file once more.
    ///
    /// Errors: as [`Self::connectivity`].
    pub fn reconvert(
        &self,
        offset: &str,
        connectivity: &Arc<Connectivity>,
        store: &TableStore,
    ) -> Result<Arc<CompileTimeConnectivity>, OffsetsError> {
        self.entries().remove(&(Arc::as_ptr(connectivity) as usize, store.dir().to_path_buf()));
        self.connectivity(offset, connectivity, &store.clone().verifying(true))
    }
}

/// The compile-time view of `provider` through a memo of its own, dropped on return: every
/// gather is copied, hashed and stored (a stored file found under its name is kept, ADR 0027).
/// A caller that converts the same provider again holds a [`ConversionMemo`] and calls
/// [`ConversionMemo::provider`] instead.
///
/// Errors: as [`ConversionMemo::provider`].
pub fn compile_time_offset_provider(
    provider: &OffsetProvider,
    store: &TableStore,
) -> Result<CompileTimeOffsetProvider, OffsetsError> {
    ConversionMemo::new().provider(provider, store)
}

/// The compile-time view of one runtime connectivity through a memo of its own
/// ([`ConversionMemo::connectivity`]).
///
/// Errors: as [`ConversionMemo::connectivity`].
pub fn compile_time_connectivity(
    offset: &str,
    connectivity: &Arc<Connectivity>,
    store: &TableStore,
) -> Result<Arc<CompileTimeConnectivity>, OffsetsError> {
    ConversionMemo::new().connectivity(offset, connectivity, store)
}

/// How many times [`stored_and_mapped`] stores a table whose file failed the open after the put.
const PUT_ATTEMPTS: usize = 3;

/// The table `put` stores, mapped by its name. The file under the name can change between the
/// put and the open (a writer in place, a concurrent put renaming identical content over the
/// name, a hand in the cache): an open that fails then (on a verifying store, a digest that no
/// longer matches) is followed by another put through a verifying clone of `store`, which
/// rewrites such a file from the runtime table, up to [`PUT_ATTEMPTS`] puts in all. Each put
/// after the first hashes the runtime table again: a cost of this fault only.
///
/// Errors: the put's error, or the last open's.
#[cfg(test)]
fn stored_and_mapped(
    store: &TableStore,
    mut put: impl FnMut(&TableStore) -> Result<TableSpec, StoreError>,
) -> Result<MappedTable, StoreError> {
    let spec = put(store)?;
    mapped_after_put(store, spec, put)
}

/// [`stored_and_mapped`] once the first put, which gave `spec`, is done.
///
/// Errors: the put's error, or the last open's.
fn mapped_after_put(
    store: &TableStore,
    mut spec: TableSpec,
    mut put: impl FnMut(&TableStore) -> Result<TableSpec, StoreError>,
) -> Result<MappedTable, StoreError> {
    let mut attempt = 1;
    loop {
        match store.open_table(&spec) {
            Ok(table) => return Ok(table),
            Err(e) if attempt == PUT_ATTEMPTS => return Err(e),
            Err(_) => {
                attempt += 1;
                spec = put(&store.clone().verifying(true))?;
            }
        }
    }
}

/// The first entry of `table` in C order (row, column, value) that is negative and not
/// `skip_value`; `None` when every negative entry is the skip value. One pass when there is none.
fn first_bad_entry<T: Copy + Into<i64>>(
    table: ArrayView2<'_, T>,
    skip_value: Option<i64>,
) -> Option<(usize, usize, i64)> {
    let bad = |x: i64| x < 0 && Some(x) != skip_value;
    if !table.iter().any(|&x| bad(x.into())) {
        return None;
    }
    table.indexed_iter().map(|((r, c), &x)| (r, c, x.into())).find(|&(_, _, x)| bad(x))
}

fn fits_i32(table: ArrayView2<'_, i64>) -> bool {
    table.iter().all(|&x| i32::try_from(x).is_ok())
}

/// Hashes `table` once (in place when C-contiguous), then stores it in C order. A C-contiguous
/// little-endian table is hashed on another thread while its bytes are written
/// ([`TableStore::put_slice`]), so the view costs about one write (ADR 0011).
fn store_as_is<T: TableElement + Sync>(store: &TableStore, table: ArrayView2<'_, T>) -> Result<TableSpec, StoreError> {
    let shape = [table.nrows(), table.ncols()];
    if let (Some(slice), true) = (table.as_slice(), cfg!(target_endian = "little")) {
        let (spec, _) = store.put_slice(T::DTYPE, shape, bytemuck::cast_slice(slice), || digest_table(table))?;
        return Ok(TableSpec { digest: spec.digest, dtype: T::DTYPE, shape });
    }
    let digest = digest_table(table);
    let spec = TableSpec { digest, dtype: T::DTYPE, shape };
    store.put_table(digest, table)?;
    Ok(spec)
}

/// Hashes `table` converted element-wise to `T` once, then stores the converted table.
fn store_converted<S: Copy, T: TableElement>(
    store: &TableStore,
    table: ArrayView2<'_, S>,
    convert: impl Fn(S) -> T + Copy,
) -> Result<TableSpec, StoreError> {
    let shape = [table.nrows(), table.ncols()];
    let mut hasher = TableHasher::new(T::DTYPE, &shape);
    stream_le(table, convert, |bytes| {
        hasher.update(bytes);
        Ok(())
    })
    .expect("hashing does not fail");
    let digest = hasher.finish().expect("a view holds shape.product() elements");
    let spec = TableSpec { digest, dtype: T::DTYPE, shape };
    store.put_with(&spec, |out: &mut dyn Write| stream_le(table, convert, |b| out.write_all(b)))?;
    Ok(spec)
}

/// Feeds `table` converted to `T`, in C order, little-endian, through a bounded buffer.
fn stream_le<S: Copy, T: TableElement>(
    table: ArrayView2<'_, S>,
    convert: impl Fn(S) -> T,
    mut sink: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER_BYTES];
    let mut used = 0;
    for &x in table.iter() {
        convert(x).put_le(&mut buf[used..used + T::SIZE]);
        used += T::SIZE;
        if used == buf.len() {
            sink(&buf)?;
            used = 0;
        }
    }
    sink(&buf[..used])
}

/// Builds a runtime connectivity over a host int32 table: a convenience for tests and readers.
///
/// Errors: [`OffsetsError::DimensionKind`].
pub fn host_connectivity(
    domain: Dimension,
    local: Dimension,
    codomain: Dimension,
    skip_value: Option<i64>,
    table: Array2<i32>,
) -> Result<Connectivity, OffsetsError> {
    Connectivity::from_host(domain, local, codomain, skip_value, IndexTable::I32(table.into_shared()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// With `--verify`, a stored table changed in place between the put and the verifying open
    /// is stored again and mapped, and the repair is reported; a file removed in that window is
    /// stored again too. (Before, the open's error ended the conversion and the whole run.)
    #[test]
    fn a_file_changed_or_removed_between_put_and_open_is_stored_again() {
        let table = Array2::from_shape_fn((500, 3), |(i, j)| (i * 3 + j) as i32 % 400);
        for (verify, change) in [(true, "changed"), (false, "removed"), (true, "removed")] {
            let dir = tempfile::tempdir().unwrap();
            let store = TableStore::open(dir.path()).unwrap().verifying(verify);
            let mut puts = 0;
            let mapped = stored_and_mapped(&store, |s| {
                let spec = store_as_is(s, table.view())?;
                puts += 1;
                if puts == 1 {
                    let path = s.path_of(&spec.digest);
                    if change == "removed" {
                        std::fs::remove_file(&path).unwrap();
                    } else {
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
                        let mut bytes = std::fs::read(&path).unwrap();
                        *bytes.last_mut().unwrap() ^= 1;
                        std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all(&bytes).unwrap();
                    }
                }
                Ok(spec)
            })
            .unwrap_or_else(|e| panic!("verify {verify}, {change}: {e}"));
            assert_eq!(puts, 2, "verify {verify}, {change}");
            let TableView::I32(view) = mapped.view() else { panic!("an int32 table") };
            assert_eq!(view, table.view(), "verify {verify}, {change}");
            mapped.verify().unwrap();
            let repaired = if change == "changed" { vec![mapped.path().to_path_buf()] } else { vec![] };
            assert_eq!(store.repaired(), repaired, "verify {verify}, {change}");
        }
    }

    /// A put that keeps failing its open ends after [`PUT_ATTEMPTS`] puts with the open's error.
    #[test]
    fn a_file_that_keeps_failing_its_open_is_an_error_after_the_last_attempt() {
        let table = Array2::from_shape_fn((50, 3), |(i, j)| (i + j) as i32);
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::open(dir.path()).unwrap();
        let mut puts = 0;
        let err = stored_and_mapped(&store, |s| {
            let spec = store_as_is(s, table.view())?;
            puts += 1;
            std::fs::remove_file(s.path_of(&spec.digest)).unwrap();
            Ok(spec)
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::Missing { .. }), "{err}");
        assert_eq!(puts, PUT_ATTEMPTS);
    }
}
