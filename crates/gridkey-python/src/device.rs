//! Device tables: a Python object whose memory is not on the host (`__dlpack__` on a device,
//! `__cuda_array_interface__`), read through one copy to the host per conversion.
//!
//! [`PyDeviceTable`] is the [`TableSource`] of such an object: its dtype and shape are metadata
//! (free), its elements come from `copy_to_host`, which calls the object's own host copy
//! (`gridkey._device.host_copy`: DLPack to the CPU, else CuPy's `get()` or Numba's
//! `copy_to_host()`) with the GIL held and checks what comes back.

use std::sync::Arc;

use gridkey_digest::Dtype;
use gridkey_offsets::{CopyError, IndexTable, TableSource};
use ndarray::Array2;
use pyo3::prelude::*;

use crate::array::host_table;
use crate::errors::{error, Kind};
use crate::raw::{Narrow, RawTable};

/// The error of a host copy: the message, and the Python exception behind it if any.
#[derive(Debug)]
pub struct HostCopyError {
    /// What went wrong, naming the array.
    pub message: String,
    /// The exception the array library raised.
    pub cause: Option<PyErr>,
}

impl std::fmt::Display for HostCopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HostCopyError {}

/// The exception the array library raised in a failed host copy, when `source` is a
/// [`HostCopyError`] that has one (the `__cause__` of the `DeviceCopyError`).
pub fn cause_of(source: &CopyError) -> Option<PyErr> {
    let cause = source.downcast_ref::<HostCopyError>().and_then(|h| h.cause.as_ref())?;
    Some(Python::attach(|py| cause.clone_ref(py)))
}

/// The Python exception of a failed host copy outside a conversion: a `DeviceCopyError` with
/// the library's exception as its cause.
pub fn copy_error(e: CopyError) -> PyErr {
    let err = error(Kind::DeviceCopy, e.to_string());
    if let Some(cause) = cause_of(&e) {
        Python::attach(|py| err.set_cause(py, Some(cause)));
    }
    err
}

/// A table held by a Python object on a device.
#[derive(Debug)]
pub struct PyDeviceTable {
    object: Py<PyAny>,
    type_name: String,
    dtype: Dtype,
    shape: [usize; 2],
}

impl PyDeviceTable {
    /// The device table of `object`, whose dtype and shape its metadata gave.
    pub fn new(object: &Bound<'_, PyAny>, dtype: Dtype, shape: [usize; 2]) -> Arc<Self> {
        let type_name = object.get_type().fully_qualified_name().map(|n| n.to_string()).unwrap_or_default();
        Arc::new(Self { object: object.clone().unbind(), type_name, dtype, shape })
    }
}

impl TableSource for PyDeviceTable {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> [usize; 2] {
        self.shape
    }

    /// One copy of the table to the host, in C order: the object's own host copy (with the GIL
    /// taken), checked to hold the dtype and shape its metadata announced, then read into an
    /// [`IndexTable`].
    ///
    /// Errors: a [`HostCopyError`]: the copy failed (the library's exception is its cause) or
    /// returned something that is not a table of that dtype and shape.
    fn copy_to_host(&self) -> Result<IndexTable, CopyError> {
        self.copy().map_err(|e| Box::new(e) as CopyError)
    }
}

impl PyDeviceTable {
    fn copy(&self) -> Result<IndexTable, HostCopyError> {
        Python::attach(|py| {
            let fail = |message: String, cause: Option<PyErr>| HostCopyError { message, cause };
            let copied = py
                .import("gridkey._device")
                .and_then(|m| m.call_method1("host_copy", (self.object.bind(py),)))
                .map_err(|e| fail(format!("the {} table's host copy raised {e}", self.type_name), Some(e)))?;
            let host = host_table(&copied).map_err(|e| {
                fail(format!("the host copy of the {} table is not a table: {e}", self.type_name), Some(e))
            })?;
            if host.dtype() != self.dtype || host.shape() != self.shape {
                return Err(fail(
                    format!(
                        "the host copy of the {} table is {} {:?}, its metadata said {} {:?}",
                        self.type_name,
                        host.dtype(),
                        host.shape(),
                        self.dtype,
                        self.shape
                    ),
                    None,
                ));
            }
            let raw = host.raw().map_err(|e| fail("the host copy's memory cannot be read".into(), Some(e)))?;
            let [n, k] = self.shape;
            let table = match self.dtype {
                Dtype::I32 => IndexTable::I32(read_into::<i32>(&raw, n, k).into_shared()),
                Dtype::I64 => IndexTable::I64(read_into::<i64>(&raw, n, k).into_shared()),
            };
            Ok(table)
        })
    }
}

/// The elements of `raw` (of `T`'s dtype) in C order, read once into a new array.
fn read_into<T: LittleEndian>(raw: &RawTable<'_>, n: usize, k: usize) -> Array2<T> {
    let mut values = vec![T::default(); n * k];
    let out: &mut [u8] = bytemuck::cast_slice_mut(&mut values);
    let mut at = 0;
    raw.write_le(Narrow::Keep, &mut |b| {
        out[at..at + b.len()].copy_from_slice(b);
        at += b.len();
        Ok(())
    })
    .expect("writing to memory does not fail");
    // The bytes are little-endian; on a big-endian host they are swapped into place.
    Array2::from_shape_vec((n, k), values).expect("length is the shape's").mapv_into(T::le_to_native)
}

/// An integer read from little-endian bytes.
trait LittleEndian: bytemuck::Pod + Default {
    /// The value of an element whose bytes were little-endian.
    fn le_to_native(self) -> Self;
}

impl LittleEndian for i32 {
    fn le_to_native(self) -> Self {
        i32::from_le(self)
    }
}

impl LittleEndian for i64 {
    fn le_to_native(self) -> Self {
        i64::from_le(self)
    }
}
