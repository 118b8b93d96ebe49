//! A 2-D integer table as NumPy holds it: a byte buffer, the byte offset of element `(0, 0)`,
//! byte strides (any sign, any multiple), the shape, the dtype and the byte order. Read in C
//! order through a bounded buffer, never copied whole.
//!
//! This module knows nothing of Python; `array.rs` builds a [`RawTable`] from a NumPy array.

use std::io;

use gridkey_digest::{
    digest_raw, transpose_blocks, ByteOrder, Dtype, MemoryOrder, TableDigest, TableElement, TableHasher, BUFFER_BYTES,
    PREFETCH_MIN_BYTES,
};
use gridkey_offsets::IndexTable;
use gridkey_store::TableBytes;
use ndarray::ArrayView2;

use crate::interrupt::{Cancel, CHECK_BYTES, INLINE_BYTES};

/// A borrowed 2-D table of `dtype` elements in `order` byte order at arbitrary byte strides.
#[derive(Clone, Copy, Debug)]
pub struct RawTable<'a> {
    /// Every byte an element of the table occupies, and possibly bytes between them.
    bytes: &'a [u8],
    /// Offset in `bytes` of element `(0, 0)`.
    first: usize,
    /// Byte strides of the two axes.
    strides: [isize; 2],
    shape: [usize; 2],
    dtype: Dtype,
    order: ByteOrder,
}

/// What is wrong with a buffer description (a bug of the caller, reported, never a panic).
#[derive(Debug)]
pub struct LayoutError(pub String);

impl<'a> RawTable<'a> {
    /// A table over `bytes` whose element `(0, 0)` starts at `first`.
    ///
    /// Errors: an element that would lie outside `bytes`.
    pub fn new(
        bytes: &'a [u8],
        first: usize,
        strides: [isize; 2],
        shape: [usize; 2],
        dtype: Dtype,
        order: ByteOrder,
    ) -> Result<Self, LayoutError> {
        let table = Self { bytes, first, strides, shape, dtype, order };
        if table.elements() > 0 {
            let (lo, hi) = extent(strides, shape, dtype.itemsize()).ok_or_else(|| {
                LayoutError(format!("shape {shape:?} with byte strides {strides:?} overflows the address space"))
            })?;
            let start = first as i128 + lo as i128;
            let end = first as i128 + hi as i128;
            if start < 0 || end > bytes.len() as i128 {
                return Err(LayoutError(format!(
                    "elements span bytes {start}..{end} of a {}-byte buffer (shape {shape:?}, strides {strides:?})",
                    bytes.len()
                )));
            }
        }
        Ok(table)
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The shape `(n, k)`.
    pub fn shape(&self) -> [usize; 2] {
        self.shape
    }

    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.shape[0] * self.shape[1]
    }

    /// Bytes of the table in C order.
    pub fn data_len(&self) -> usize {
        self.elements() * self.dtype.itemsize()
    }

    /// The element bytes when they lie in C order one after the other, in either byte order.
    fn contiguous(&self, order: MemoryOrder) -> Option<&'a [u8]> {
        let n = self.dtype.itemsize() as isize;
        let [rows, cols] = self.shape;
        let (inner, outer, inner_len, outer_len) = match order {
            MemoryOrder::C => (self.strides[1], self.strides[0], cols, rows),
            MemoryOrder::Fortran => (self.strides[0], self.strides[1], rows, cols),
        };
        // A stride along an axis of extent 0 or 1 is never used.
        let inner_ok = inner_len <= 1 || inner == n;
        let outer_ok = outer_len <= 1 || outer == n * inner_len as isize;
        (inner_ok && outer_ok).then(|| &self.bytes[self.first..self.first + self.data_len()])
    }

    /// The element bytes when the table is C-contiguous and little-endian: the bytes of the
    /// `.npy` data, usable in place.
    pub fn c_little_bytes(&self) -> Option<&'a [u8]> {
        if self.order != ByteOrder::Little {
            return None;
        }
        if self.elements() == 0 {
            return Some(&[]);
        }
        self.contiguous(MemoryOrder::C)
    }

    /// The digest (format v1) of the table as it is: C and Fortran order (either byte order)
    /// through `gridkey_digest::digest_raw`, every other layout streamed in C order through a
    /// buffer of `BUFFER_BYTES`.
    pub fn digest(&self) -> TableDigest {
        let shape = self.shape;
        if self.elements() == 0 {
            return digest_raw(&[], self.dtype, self.order, MemoryOrder::C, &shape).expect("no element, no byte");
        }
        for order in [MemoryOrder::C, MemoryOrder::Fortran] {
            if let Some(bytes) = self.contiguous(order) {
                return digest_raw(bytes, self.dtype, self.order, order, &shape).expect("length is the shape's");
            }
        }
        let mut hasher = TableHasher::new(self.dtype, &shape);
        self.write_le(Narrow::Keep, &mut |b| {
            hasher.update(b);
            Ok(())
        })
        .expect("hashing does not fail");
        hasher.finish().expect("every element was fed")
    }

    /// Whether every element fits in int32 (always, for an int32 table); false as soon as
    /// `cancel` is set (looked at every [`CHECK_BYTES`] read).
    pub fn fits_i32(&self, cancel: &Cancel) -> bool {
        match self.dtype {
            Dtype::I32 => true,
            Dtype::I64 => {
                let mut fits = true;
                let mut read = 0;
                self.for_each_row(|row| {
                    fits &= row.iter().all(|&x| i32::try_from(x).is_ok());
                    read += row.len() * 8;
                    if read >= CHECK_BYTES {
                        read = 0;
                        fits &= !cancel.is_set();
                    }
                    fits
                });
                fits
            }
        }
    }

    /// [`Self::digest`], looking at `cancel` every [`CHECK_BYTES`]; `None` once it is set.
    /// A table of fewer than [`INLINE_BYTES`] is hashed as by [`Self::digest`].
    pub fn digest_checked(&self, narrow: Narrow, cancel: &Cancel) -> Option<TableDigest> {
        let narrowed = narrow == Narrow::ToI32 && self.dtype == Dtype::I64 && self.fits_i32(cancel);
        if !narrowed && self.data_len() < INLINE_BYTES {
            return Some(self.digest());
        }
        let dtype = if narrowed { Dtype::I32 } else { self.dtype };
        let mut hasher = TableHasher::new(dtype, &self.shape);
        if let (false, Some(bytes)) = (narrowed, self.c_little_bytes()) {
            // Pieces large enough for the hasher's prefetching (memory speed), a few
            // milliseconds each.
            for piece in bytes.chunks(PREFETCH_MIN_BYTES) {
                if cancel.is_set() {
                    return None;
                }
                hasher.update(piece);
            }
            return hasher.finish();
        }
        let source = Source { raw: self, narrow: if narrowed { Narrow::ToI32 } else { Narrow::Keep }, cancel };
        source
            .feed(&mut |b| {
                hasher.update(b);
                Ok(())
            })
            .ok()?;
        hasher.finish()
    }

    /// Feeds the table to `sink` in C order, each element little-endian, as `dtype` itself
    /// ([`Narrow::Keep`]) or narrowed to int32 ([`Narrow::ToI32`], only for a table whose
    /// elements all fit, see [`Self::fits_i32`]). Bytes in place where the layout allows it,
    /// else through a buffer of `BUFFER_BYTES`.
    ///
    /// Errors: those of `sink`; `InvalidData` ([`DOES_NOT_FIT`]) when narrowing meets an
    /// element that does not fit.
    pub fn write_le(&self, narrow: Narrow, sink: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        let keep = narrow == Narrow::Keep || self.dtype == Dtype::I32;
        if keep {
            if let Some(bytes) = self.c_little_bytes() {
                return sink(bytes);
            }
            if let (Some(bytes), ByteOrder::Little) = (self.contiguous(MemoryOrder::Fortran), self.order) {
                let [rows, cols] = self.shape;
                let mut result = Ok(());
                match self.dtype {
                    Dtype::I32 => transpose_blocks(bytemuck_cast::<4>(bytes), rows, cols, |block| {
                        if result.is_ok() {
                            result = sink(bytemuck::cast_slice(block));
                        }
                    }),
                    Dtype::I64 => transpose_blocks(bytemuck_cast::<8>(bytes), rows, cols, |block| {
                        if result.is_ok() {
                            result = sink(bytemuck::cast_slice(block));
                        }
                    }),
                }
                return result;
            }
        }
        let out_size = if keep { self.dtype.itemsize() } else { 4 };
        let mut buf = vec![0u8; BUFFER_BYTES - BUFFER_BYTES % out_size];
        let mut used = 0;
        let mut result = Ok(());
        self.for_each_row(|row| {
            for &x in row {
                if keep && self.dtype == Dtype::I64 {
                    buf[used..used + 8].copy_from_slice(&x.to_le_bytes());
                } else {
                    // int32 tables, and int64 ones whose elements fit (checked by the caller,
                    // but another thread may have written since: never truncated).
                    let Ok(x) = i32::try_from(x) else {
                        result = Err(io::Error::new(io::ErrorKind::InvalidData, DOES_NOT_FIT));
                        return false;
                    };
                    buf[used..used + 4].copy_from_slice(&x.to_le_bytes());
                }
                used += out_size;
                if used == buf.len() {
                    result = sink(&buf);
                    used = 0;
                    if result.is_err() {
                        return false;
                    }
                }
            }
            true
        });
        result?;
        sink(&buf[..used])
    }

    /// Calls `row` with the elements of each row in turn (as i64, whatever the dtype and byte
    /// order), through one small buffer; stops when `row` returns false.
    fn for_each_row(&self, mut row: impl FnMut(&[i64]) -> bool) {
        let [rows, cols] = self.shape;
        let size = self.dtype.itemsize();
        let mut values = vec![0i64; cols];
        for i in 0..rows {
            let base = self.first as isize + i as isize * self.strides[0];
            for (j, value) in values.iter_mut().enumerate() {
                let at = (base + j as isize * self.strides[1]) as usize;
                let b = &self.bytes[at..at + size];
                *value = match (self.dtype, self.order) {
                    (Dtype::I32, ByteOrder::Little) => i64::from(i32::from_le_bytes(b.try_into().expect("4 bytes"))),
                    (Dtype::I32, ByteOrder::Big) => i64::from(i32::from_be_bytes(b.try_into().expect("4 bytes"))),
                    (Dtype::I64, ByteOrder::Little) => i64::from_le_bytes(b.try_into().expect("8 bytes")),
                    (Dtype::I64, ByteOrder::Big) => i64::from_be_bytes(b.try_into().expect("8 bytes")),
                };
            }
            if !row(&values) {
                return;
            }
        }
    }
}

/// The message of the error [`RawTable::write_le`] returns when an element no longer fits as
/// int32 while a table is narrowed (another thread wrote it after [`RawTable::fits_i32`]).
pub const DOES_NOT_FIT: &str = "an element does not fit as int32 (the table changed while it was read)";

/// A [`RawTable`] as the store reads it: its C-order little-endian bytes as `narrow` says, in
/// pieces of at most [`CHECK_BYTES`], stopped by `cancel` (ADR 0035).
pub struct Source<'t, 'a> {
    /// The table.
    pub raw: &'t RawTable<'a>,
    /// Its own dtype or int32 (see [`RawTable::write_le`]).
    pub narrow: Narrow,
    /// Looked at before every piece.
    pub cancel: &'t Cancel,
}

impl TableBytes for Source<'_, '_> {
    fn feed(&self, sink: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        self.raw.write_le(self.narrow, &mut |bytes| {
            for piece in bytes.chunks(CHECK_BYTES) {
                self.cancel.check()?;
                sink(piece)?;
            }
            Ok(())
        })
    }
}

/// Whether a table is written with its own integer width or narrowed to int32 (ADR 0006).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Narrow {
    /// The table's own dtype.
    Keep,
    /// int32 (every element must fit).
    ToI32,
}

/// `bytes` as elements of `N` bytes (alignment 1: any buffer will do; the length is a multiple
/// of `N` for every table).
fn bytemuck_cast<const N: usize>(bytes: &[u8]) -> &[[u8; N]] {
    bytemuck::cast_slice(bytes)
}

/// The byte range `lo..hi`, relative to element `(0, 0)`, that the elements of a non-empty
/// table occupy; `None` on overflow.
fn extent(strides: [isize; 2], shape: [usize; 2], itemsize: usize) -> Option<(isize, isize)> {
    let mut lo: isize = 0;
    let mut hi: isize = 0;
    for (stride, extent) in strides.into_iter().zip(shape) {
        let last = stride.checked_mul(isize::try_from(extent).ok()?.checked_sub(1)?)?;
        if last < 0 {
            lo = lo.checked_add(last)?;
        } else {
            hi = hi.checked_add(last)?;
        }
    }
    Some((lo, hi.checked_add(itemsize as isize)?))
}

/// `first` and the byte span for a table whose element `(0, 0)` is at address `origin`: the
/// lowest address an element occupies and the number of bytes from there to past the highest.
///
/// Errors: a layout whose extent overflows.
pub fn span(
    origin: usize,
    strides: [isize; 2],
    shape: [usize; 2],
    itemsize: usize,
) -> Result<(usize, usize), LayoutError> {
    if shape[0] == 0 || shape[1] == 0 {
        return Ok((origin, 0));
    }
    let (lo, hi) = extent(strides, shape, itemsize)
        .ok_or_else(|| LayoutError(format!("shape {shape:?} with byte strides {strides:?} overflows")))?;
    let start = (origin as isize).checked_add(lo).ok_or_else(|| LayoutError("address overflow".into()))?;
    Ok((start as usize, (hi - lo) as usize))
}

/// A [`RawTable`] over the memory of a host [`IndexTable`] (what a device copy returns), as it
/// lies: any memory order, native byte order.
///
/// Errors: a table whose elements do not lie in one contiguous block of memory (an
/// `IndexTable` made from a sliced view), which no host copy produces.
pub fn of_index_table(table: &IndexTable) -> Result<RawTable<'_>, LayoutError> {
    match table {
        IndexTable::I32(a) => of_view(a.view()),
        IndexTable::I64(a) => of_view(a.view()),
    }
}

fn of_view<T: TableElement>(view: ArrayView2<'_, T>) -> Result<RawTable<'_>, LayoutError> {
    let size = T::SIZE as isize;
    let strides = [view.strides()[0] * size, view.strides()[1] * size];
    let shape = [view.nrows(), view.ncols()];
    let origin = view.as_ptr() as usize;
    let memory = view.to_slice_memory_order().ok_or_else(|| {
        LayoutError(format!("a host table of shape {shape:?} with strides {strides:?} is not contiguous"))
    })?;
    let bytes: &[u8] = bytemuck::cast_slice(memory);
    let first = origin - bytes.as_ptr() as usize;
    let order = if cfg!(target_endian = "little") { ByteOrder::Little } else { ByteOrder::Big };
    RawTable::new(bytes, first, strides, shape, T::DTYPE, order)
}
