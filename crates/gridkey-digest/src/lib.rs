//! Table digest, format v1 (ADR 0001; docs/design.md "Formats").
//!
//! A [`TableDigest`] names the *logical content* of an integer neighbour table: its dtype (as a
//! little-endian NumPy typestr), its shape and its elements in C (row-major) order, each
//! little-endian. It is xxh3_128 (seed 0) over
//!
//! 1. the 6 bytes `b"table\0"`,
//! 2. the typestr (`"<i4"`, `"<i8"`) then one `\0` byte,
//! 3. `ndim` as u64 LE, then each extent as u64 LE,
//! 4. the elements in C order, each little-endian,
//!
//! printed as 32 lowercase hex digits, the same text as Python
//! `xxhash.xxh3_128(...).hexdigest()` (see `data/tools/table_digest_witness.py`).
//!
//! # Example
//!
//! What a frontend does with a neighbour table it holds (here a `C2E` table of two cells with
//! three edges each): digest it in whatever layout it has. The same logical table in Fortran
//! order, or as raw big-endian bytes, has the same digest.
//!
//! ```
//! use gridkey_digest::ndarray::{Array2, ShapeBuilder};
//! use gridkey_digest::{digest_raw, digest_table, ByteOrder, Dtype, MemoryOrder, TableDigest};
//!
//! let elements: Vec<i32> = vec![0, 1, 2, 2, 3, 4];
//! let c_order = Array2::from_shape_vec((2, 3), elements.clone())?;
//! let digest: TableDigest = digest_table(c_order.view());
//! assert_eq!(digest.to_hex().len(), 32);
//!
//! // The same table, column-major: memory order never reaches the digest.
//! let mut fortran = Array2::<i32>::zeros((2, 3).f());
//! fortran.assign(&c_order);
//! assert_eq!(digest_table(fortran.view()), digest);
//!
//! // The same table as raw big-endian bytes (a netCDF variable, say).
//! let be: Vec<u8> = elements.iter().flat_map(|x| x.to_be_bytes()).collect();
//! assert_eq!(digest_raw(&be, Dtype::I32, ByteOrder::Big, MemoryOrder::C, &[2, 3])?, digest);
//!
//! // The digest text parses back; another shape of the same bytes is another digest.
//! assert_eq!(digest.to_hex().parse::<TableDigest>()?, digest);
//! let reshaped = Array2::from_shape_vec((3, 2), elements)?;
//! assert_ne!(digest_table(reshaped.view()), digest);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Architecture invariant
//!
//! This crate does no I/O, and the digest of a table does not depend on its memory order, its
//! strides or its byte order. A C-contiguous little-endian table is hashed in place; any other
//! layout is hashed in C order through a bounded buffer of [`BUFFER_BYTES`], never a full copy.
//! It depends on nothing else of gridkey.
//!
//! # Speed
//!
//! xxh3_128 comes from `twox-hash`, which picks its SIMD path (AVX2, SSE2, NEON) when it runs,
//! so one build reads at the speed of the CPU it runs on (ADR 0008). A table of at least
//! [`PREFETCH_MIN_BYTES`] is fed in steps that ask the CPU to prefetch the bytes ahead, as the
//! reference C xxh3 does ([`TableHasher::update`]). A Fortran-order 2-D table
//! is transposed into the buffer a block of rows at a time (each column read sequentially),
//! not element by element; `cargo xtask bench` measures both paths against their limits.

use std::fmt;
use std::str::FromStr;

use ndarray::{ArrayView, ArrayViewD, Dimension, IxDyn, ShapeBuilder};
use twox_hash::XxHash3_128;

/// The `ndarray` that [`digest_table`] takes views of, so that a caller builds its tables
/// without pinning the same version itself.
pub use ndarray;

/// Version of the digest format implemented here; part of every store directory name
/// (`tables-v1/`) and hashed into every translation key.
pub const DIGEST_FORMAT_VERSION: u32 = 1;

/// Size in bytes of the buffer through which non-contiguous or big-endian tables are hashed.
pub const BUFFER_BYTES: usize = 64 * 1024;

/// Errors of table digesting (ADR 0005). Digesting an ndarray view never fails; only raw
/// buffers of the wrong length and digest texts that do not parse do.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestError {
    /// The raw byte buffer does not hold exactly `shape.product() * itemsize` bytes.
    #[error(
        "table buffer holds {found} bytes but dtype {dtype} and shape {shape:?} need {expected}: pass the whole table"
    )]
    Length {
        /// The dtype the caller declared.
        dtype: Dtype,
        /// The shape the caller declared.
        shape: Vec<usize>,
        /// Bytes the dtype and shape need.
        expected: usize,
        /// Bytes found.
        found: usize,
    },
    /// A digest text is not 32 hexadecimal digits.
    #[error("{text:?} is not a table digest: expected 32 lowercase hex digits")]
    Parse {
        /// The text that failed to parse.
        text: String,
    },
}

/// The 128-bit digest of a table (format v1, ADR 0001). Displays as 32 lowercase hex digits,
/// the text of Python `xxhash.xxh3_128(...).hexdigest()`; parses from 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableDigest([u8; 16]);

impl TableDigest {
    /// The digest from its 16 bytes, most significant first (the order of the hex text).
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The 16 bytes, most significant first (the order of the hex text).
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The 32 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

/// Lowercase hex digits of `bytes`, two per byte, most significant digit first: the one encoder
/// of every digest, key and checksum gridkey prints or names a file by. Table by table, without
/// going through `fmt` per byte: every translation key prints the digest of each table.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

impl fmt::Display for TableDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for TableDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableDigest({self})")
    }
}

impl FromStr for TableDigest {
    type Err = DigestError;

    /// Parses 32 hex digits (upper or lower case).
    ///
    /// Errors: [`DigestError::Parse`] naming the text.
    fn from_str(text: &str) -> Result<Self, DigestError> {
        let err = || DigestError::Parse { text: text.to_owned() };
        if text.len() != 32 || !text.is_ascii() {
            return Err(err());
        }
        let mut out = [0u8; 16];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| err())?;
        }
        Ok(Self(out))
    }
}

/// Element type of a neighbour table. Only signed integers are tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// 32-bit signed integer, NumPy `"<i4"`.
    I32,
    /// 64-bit signed integer, NumPy `"<i8"`.
    I64,
}

impl Dtype {
    /// The NumPy typestr of the little-endian dtype: `"<i4"` or `"<i8"`.
    pub const fn typestr(self) -> &'static str {
        match self {
            Dtype::I32 => "<i4",
            Dtype::I64 => "<i8",
        }
    }

    /// Size of one element in bytes (4 or 8).
    pub const fn itemsize(self) -> usize {
        match self {
            Dtype::I32 => 4,
            Dtype::I64 => 8,
        }
    }

    /// The dtype of a little-endian NumPy typestr (`"<i4"`, `"<i8"`), or `None`.
    pub fn from_typestr(typestr: &str) -> Option<Self> {
        match typestr {
            "<i4" => Some(Dtype::I32),
            "<i8" => Some(Dtype::I64),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.typestr())
    }
}

/// Byte order of a raw table buffer given to [`digest_raw`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOrder {
    /// Least significant byte first (x86, ARM, the digest's own order).
    Little,
    /// Most significant byte first (netCDF files, some Fortran output).
    Big,
}

/// Memory order of a raw table buffer given to [`digest_raw`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryOrder {
    /// Row-major: the last index varies fastest.
    C,
    /// Column-major: the first index varies fastest.
    Fortran,
}

/// An element type a table can hold: `i32` or `i64`, native byte order.
pub trait TableElement: Copy + bytemuck::Pod + 'static {
    /// The dtype of this element type.
    const DTYPE: Dtype;
    /// Size in bytes.
    const SIZE: usize;
    /// Writes the element little-endian into `out[..SIZE]`.
    fn put_le(self, out: &mut [u8]);
}

impl TableElement for i32 {
    const DTYPE: Dtype = Dtype::I32;
    const SIZE: usize = 4;
    fn put_le(self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.to_le_bytes());
    }
}

impl TableElement for i64 {
    const DTYPE: Dtype = Dtype::I64;
    const SIZE: usize = 8;
    fn put_le(self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.to_le_bytes());
    }
}

/// Bytes fed to xxh3 per step by [`TableHasher::update`]: 1 KiB, one xxh3 block.
pub const HASH_STEP_BYTES: usize = 1 << 10;

/// Inputs of fewer bytes than this (32 MiB) are fed to xxh3 in one piece by
/// [`TableHasher::update`]: a table read from the caches gains nothing from the hint and loses
/// the steps' overhead (measured: 1 KiB steps at 0.5-0.75 times one piece up to 12 MiB in cache,
/// 1.03 at 16 MiB, 1.1-1.3 from 64 MiB).
pub const PREFETCH_MIN_BYTES: usize = 32 << 20;

/// How far ahead of the step being hashed [`TableHasher::update`] asks for the bytes to be
/// prefetched: 4 KiB, the best of the distances tried on a 240 MB table (1 to 16 KiB).
pub const PREFETCH_AHEAD_BYTES: usize = 4 << 10;

/// Asks the CPU to bring every cache line of `bytes` into its caches; a hint that changes no
/// result and never faults.
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch is a hint that neither reads into the program nor faults, and the
        // address is inside a live slice; SSE (and so `prefetcht0`) is part of every x86-64.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Streaming form of the digest: the prefix (dtype, shape) first, then element bytes.
///
/// Used by [`digest_table`] and [`digest_raw`]; public so that a writer can hash what it
/// writes in the same pass. [`TableHasher::finish`] checks that exactly
/// `shape.product() * itemsize` element bytes were fed.
pub struct TableHasher {
    state: XxHash3_128,
    remaining: u64,
}

impl TableHasher {
    /// Starts a digest of a table of `dtype` and `shape` (extents in elements).
    pub fn new(dtype: Dtype, shape: &[usize]) -> Self {
        let mut state = XxHash3_128::new();
        state.write(b"table\0");
        state.write(dtype.typestr().as_bytes());
        state.write(b"\0");
        state.write(&(shape.len() as u64).to_le_bytes());
        for &extent in shape {
            state.write(&(extent as u64).to_le_bytes());
        }
        let elements: u64 = shape.iter().map(|&e| e as u64).product();
        Self { state, remaining: elements * dtype.itemsize() as u64 }
    }

    /// Feeds element bytes, little-endian, in C order.
    ///
    /// Inputs of at least [`PREFETCH_MIN_BYTES`] are fed in steps of [`HASH_STEP_BYTES`], each step asking the CPU to prefetch the
    /// bytes [`PREFETCH_AHEAD_BYTES`] further on (x86-64 only; elsewhere the bytes are fed as
    /// they are). A table larger than the caches is read from memory at a rate set by how many
    /// reads are in flight, and the hardware prefetcher alone keeps too few: the hint is what
    /// the reference C implementation of xxh3 does in its loop (`XXH_PREFETCH`), and `cargo
    /// xtask py-bench` (case `digest_c_py`) compares the result with that implementation.
    pub fn update(&mut self, le_bytes: &[u8]) {
        self.remaining = self.remaining.saturating_sub(le_bytes.len() as u64);
        if le_bytes.len() < PREFETCH_MIN_BYTES {
            self.state.write(le_bytes);
            return;
        }
        for (i, step) in le_bytes.chunks(HASH_STEP_BYTES).enumerate() {
            let ahead = i * HASH_STEP_BYTES + PREFETCH_AHEAD_BYTES;
            if let Some(next) = le_bytes.get(ahead..) {
                prefetch(&next[..next.len().min(HASH_STEP_BYTES)]);
            }
            self.state.write(step);
        }
    }

    /// The digest, or `None` when the element bytes fed do not match the declared shape.
    pub fn finish(self) -> Option<TableDigest> {
        (self.remaining == 0).then(|| TableDigest(self.state.finish_128().to_be_bytes()))
    }
}

/// The digest of a table given as an ndarray view of any shape, strides and memory order.
///
/// A C-contiguous view on a little-endian host is hashed in place (no copy); any other view is
/// read in C order through a buffer of [`BUFFER_BYTES`].
pub fn digest_table<T: TableElement, D: Dimension>(view: ArrayView<'_, T, D>) -> TableDigest {
    let mut hasher = TableHasher::new(T::DTYPE, view.shape());
    let little = cfg!(target_endian = "little");
    match view.as_slice() {
        Some(slice) if little => hasher.update(bytemuck::cast_slice(slice)),
        _ => {
            // A Fortran-order 2-D table: its memory is the columns one after the other.
            let fortran = (view.ndim() == 2).then(|| view.view().reversed_axes()).and_then(|t| t.to_slice());
            match fortran {
                Some(columns) if little => {
                    let (rows, cols) = (view.shape()[0], view.shape()[1]);
                    transpose_blocks(columns, rows, cols, |block: &[T]| hasher.update(bytemuck::cast_slice(block)));
                }
                _ => {
                    let mut buf = vec![0u8; BUFFER_BYTES - BUFFER_BYTES % T::SIZE];
                    let mut used = 0;
                    for &x in view.iter() {
                        x.put_le(&mut buf[used..used + T::SIZE]);
                        used += T::SIZE;
                        if used == buf.len() {
                            hasher.update(&buf);
                            used = 0;
                        }
                    }
                    hasher.update(&buf[..used]);
                }
            }
        }
    }
    hasher.finish().expect("a view always holds shape.product() elements")
}

/// Feeds a column-major `rows x cols` table (`columns[i + j * rows]` is element `(i, j)`) to
/// `sink` in C order, a block of whole rows at a time, through one buffer of at most
/// [`BUFFER_BYTES`] (at least one row). Each column is read sequentially within a block, which
/// keeps the reads streaming instead of jumping `rows` elements per element.
pub fn transpose_blocks<E: bytemuck::Pod>(columns: &[E], rows: usize, cols: usize, mut sink: impl FnMut(&[E])) {
    debug_assert_eq!(columns.len(), rows * cols);
    if rows == 0 || cols == 0 {
        return;
    }
    let block_rows = (BUFFER_BYTES / std::mem::size_of::<E>().max(1) / cols).clamp(1, rows);
    let mut buf = vec![E::zeroed(); block_rows * cols];
    let mut start = 0;
    while start < rows {
        let n = block_rows.min(rows - start);
        let out = &mut buf[..n * cols];
        // Neighbour tables are narrow: a fixed width lets the compiler interleave the columns
        // with vector shuffles; other widths take strided stores into the (cached) buffer.
        match cols {
            2 => interleave::<E, 2>(columns, rows, start, out),
            3 => interleave::<E, 3>(columns, rows, start, out),
            4 => interleave::<E, 4>(columns, rows, start, out),
            5 => interleave::<E, 5>(columns, rows, start, out),
            6 => interleave::<E, 6>(columns, rows, start, out),
            8 => interleave::<E, 8>(columns, rows, start, out),
            9 => interleave::<E, 9>(columns, rows, start, out),
            12 => interleave::<E, 12>(columns, rows, start, out),
            _ => {
                for (j, column) in columns.chunks_exact(rows).enumerate() {
                    let src = &column[start..start + n];
                    for (dst, &x) in out[j..].iter_mut().step_by(cols).zip(src) {
                        *dst = x;
                    }
                }
            }
        }
        sink(out);
        start += n;
    }
}

/// Rows `start..start + out.len() / K` of a column-major table with `K` columns, in C order.
fn interleave<E: Copy, const K: usize>(columns: &[E], rows: usize, start: usize, out: &mut [E]) {
    let n = out.len() / K;
    let cols: [&[E]; K] = std::array::from_fn(|j| &columns[j * rows + start..j * rows + start + n]);
    for (i, row) in out.chunks_exact_mut(K).enumerate() {
        for j in 0..K {
            row[j] = cols[j][i];
        }
    }
}

/// The digest of a table given as raw bytes of `dtype`, in `byte_order` and `memory_order`.
///
/// `bytes` must hold exactly `shape.product() * dtype.itemsize()` bytes, or
/// [`DigestError::Length`] is returned. Gives the same digest as [`digest_table`] of the same
/// logical table.
pub fn digest_raw(
    bytes: &[u8],
    dtype: Dtype,
    byte_order: ByteOrder,
    memory_order: MemoryOrder,
    shape: &[usize],
) -> Result<TableDigest, DigestError> {
    let expected = shape.iter().product::<usize>() * dtype.itemsize();
    if bytes.len() != expected {
        return Err(DigestError::Length { dtype, shape: shape.to_vec(), expected, found: bytes.len() });
    }
    Ok(match dtype {
        Dtype::I32 => digest_raw_n::<4>(bytes, dtype, byte_order, memory_order, shape),
        Dtype::I64 => digest_raw_n::<8>(bytes, dtype, byte_order, memory_order, shape),
    })
}

fn digest_raw_n<const N: usize>(
    bytes: &[u8],
    dtype: Dtype,
    byte_order: ByteOrder,
    memory_order: MemoryOrder,
    shape: &[usize],
) -> TableDigest {
    let mut hasher = TableHasher::new(dtype, shape);
    if memory_order == MemoryOrder::C && byte_order == ByteOrder::Little {
        hasher.update(bytes);
        return hasher.finish().expect("length checked by digest_raw");
    }
    let elements: &[[u8; N]] = bytemuck::cast_slice(bytes);
    if memory_order == MemoryOrder::Fortran && shape.len() == 2 {
        let swap = byte_order == ByteOrder::Big;
        transpose_blocks(elements, shape[0], shape[1], |block: &[[u8; N]]| {
            if swap {
                let mut swapped = block.to_vec();
                swapped.iter_mut().for_each(|e| e.reverse());
                hasher.update(bytemuck::cast_slice(&swapped));
            } else {
                hasher.update(bytemuck::cast_slice(block));
            }
        });
        return hasher.finish().expect("length checked by digest_raw");
    }
    let shape = IxDyn(shape);
    let view: ArrayViewD<'_, [u8; N]> = match memory_order {
        MemoryOrder::C => ArrayViewD::from_shape(shape, elements),
        MemoryOrder::Fortran => ArrayViewD::from_shape(shape.f(), elements),
    }
    .expect("length checked by digest_raw");
    let mut buf = vec![0u8; BUFFER_BYTES - BUFFER_BYTES % N];
    let mut used = 0;
    for element in view.iter() {
        let out = &mut buf[used..used + N];
        out.copy_from_slice(element);
        if byte_order == ByteOrder::Big {
            out.reverse();
        }
        used += N;
        if used == buf.len() {
            hasher.update(&buf);
            used = 0;
        }
    }
    hasher.update(&buf[..used]);
    hasher.finish().expect("length checked by digest_raw")
}
