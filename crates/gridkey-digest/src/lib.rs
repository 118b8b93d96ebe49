//! Table digest, format v1 (DESIGN 4.1, ADR 0001).
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
//! # Architecture invariant
//!
//! This crate does no I/O, and the digest of a table does not depend on its memory order, its
//! strides or its byte order. A C-contiguous little-endian table is hashed in place; any other
//! layout is hashed in C order through a bounded buffer of [`BUFFER_BYTES`], never a full copy.
//! It depends on nothing else of gridkey.

use std::fmt;
use std::str::FromStr;

use ndarray::{ArrayView, ArrayViewD, Dimension, IxDyn, ShapeBuilder};
use xxhash_rust::xxh3::Xxh3;

/// Version of the digest format implemented here; part of every store directory name
/// (`tables-v1/`) and hashed into every translation key.
pub const DIGEST_FORMAT_VERSION: u32 = 1;

/// Size in bytes of the buffer through which non-contiguous or big-endian tables are hashed.
pub const BUFFER_BYTES: usize = 64 * 1024;

/// Errors of table digesting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestError {
    /// The raw byte buffer does not hold exactly `shape.product() * itemsize` bytes.
    #[error("table buffer holds {found} bytes but dtype {dtype} and shape {shape:?} need {expected}: pass the whole table")]
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

/// The 128-bit digest of a table (format v1). Displays as 32 lowercase hex digits.
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
        self.to_string()
    }
}

impl fmt::Display for TableDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
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

/// Byte order of a raw table buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOrder {
    /// Least significant byte first (x86, ARM, the digest's own order).
    Little,
    /// Most significant byte first (netCDF files, some Fortran output).
    Big,
}

/// Memory order of a raw table buffer.
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

/// Streaming form of the digest: the prefix (dtype, shape) first, then element bytes.
///
/// Used by [`digest_table`] and [`digest_raw`]; public so that a writer can hash what it
/// writes in the same pass. [`TableHasher::finish`] checks that exactly
/// `shape.product() * itemsize` element bytes were fed.
pub struct TableHasher {
    state: Xxh3,
    remaining: u64,
}

impl TableHasher {
    /// Starts a digest of a table of `dtype` and `shape` (extents in elements).
    pub fn new(dtype: Dtype, shape: &[usize]) -> Self {
        let mut state = Xxh3::new();
        state.update(b"table\0");
        state.update(dtype.typestr().as_bytes());
        state.update(b"\0");
        state.update(&(shape.len() as u64).to_le_bytes());
        for &extent in shape {
            state.update(&(extent as u64).to_le_bytes());
        }
        let elements: u64 = shape.iter().map(|&e| e as u64).product();
        Self { state, remaining: elements * dtype.itemsize() as u64 }
    }

    /// Feeds element bytes, little-endian, in C order.
    pub fn update(&mut self, le_bytes: &[u8]) {
        self.remaining = self.remaining.saturating_sub(le_bytes.len() as u64);
        self.state.update(le_bytes);
    }

    /// The digest, or `None` when the element bytes fed do not match the declared shape.
    pub fn finish(self) -> Option<TableDigest> {
        (self.remaining == 0).then(|| TableDigest(self.state.digest128().to_be_bytes()))
    }
}

/// The digest of a table given as an ndarray view of any shape, strides and memory order.
///
/// A C-contiguous view on a little-endian host is hashed in place (no copy); any other view is
/// read in C order through a buffer of [`BUFFER_BYTES`].
pub fn digest_table<T: TableElement, D: Dimension>(view: ArrayView<'_, T, D>) -> TableDigest {
    let mut hasher = TableHasher::new(T::DTYPE, view.shape());
    match view.as_slice() {
        Some(slice) if cfg!(target_endian = "little") => {
            hasher.update(bytemuck::cast_slice(slice));
        }
        _ => {
            let mut buf = vec![0u8; BUFFER_BYTES];
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
    hasher.finish().expect("a view always holds shape.product() elements")
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
        return Err(DigestError::Length {
            dtype,
            shape: shape.to_vec(),
            expected,
            found: bytes.len(),
        });
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
