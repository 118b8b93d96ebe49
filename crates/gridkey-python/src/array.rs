//! Python objects as tables: what is accepted, how it is checked, and the read-only NumPy array
//! over a mapped table.
//!
//! A table is a 2-D int32 or int64 array: a NumPy array (a `numpy.memmap` too) of any memory
//! order, strides or byte order, or anything NumPy takes without a copy (the buffer protocol,
//! `__array__`, `__array_interface__`, a host `__dlpack__`). An object whose `__dlpack__` or
//! `__cuda_array_interface__` puts it on a device is a device table, read only through one copy
//! to the host ([`crate::device`]).

use gridkey_digest::{ByteOrder, Dtype};
use numpy::npyffi::{self, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{error, IntoPyErr, Kind};
use crate::raw::{span, RawTable};

/// DLPack device type of host memory (`kDLCPU`).
const DL_CPU: i64 = 1;

/// A host table: a NumPy array kept alive while its memory is read.
pub struct HostTable<'py> {
    array: Bound<'py, PyUntypedArray>,
    dtype: Dtype,
    order: ByteOrder,
    shape: [usize; 2],
    strides: [isize; 2],
}

impl<'py> HostTable<'py> {
    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The shape `(n, k)`.
    pub fn shape(&self) -> [usize; 2] {
        self.shape
    }

    /// The table's memory as a [`RawTable`], borrowed from the array (no copy).
    pub fn raw(&self) -> PyResult<RawTable<'_>> {
        // SAFETY: `data` and the strides are NumPy's own description of the array, which this
        // value keeps alive; the span covers exactly the bytes its elements occupy. Python code
        // writing to the array while it is read (another thread, the GIL released) changes the
        // values read, never memory safety of this integer-only read.
        let origin = unsafe { (*self.array.as_array_ptr()).fields.data } as usize;
        let size = self.dtype.itemsize();
        let (start, len) = span(origin, self.strides, self.shape, size).map_err(IntoPyErr::into_py_err)?;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: `span` returned the lowest address and the length of the bytes the array's
            // elements occupy (its checked arithmetic refuses a span that overflows), all inside
            // NumPy's allocation, which `self.array` keeps alive for the borrow of `self`.
            unsafe { std::slice::from_raw_parts(start as *const u8, len) }
        };
        RawTable::new(bytes, origin - start, self.strides, self.shape, self.dtype, self.order)
            .map_err(IntoPyErr::into_py_err)
    }
}

/// What a Python object is as a table.
pub enum Table<'py> {
    /// Host memory, readable in place.
    Host(HostTable<'py>),
    /// Device memory: dtype and shape from its metadata; the elements only through a copy.
    Device {
        /// The element type.
        dtype: Dtype,
        /// The shape `(n, k)`.
        shape: [usize; 2],
    },
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().fully_qualified_name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned())
}

/// Where a DLPack object's memory lives: `Some(device_type)` when it has `__dlpack_device__`.
fn dlpack_device(obj: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if !obj.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    let device = obj.call_method0("__dlpack_device__")?;
    let device_type: i64 = device.get_item(0)?.call_method0("__int__")?.extract()?;
    Ok(Some(device_type))
}

/// Whether `obj` lives on a device (`__cuda_array_interface__`, or `__dlpack__` on a device
/// that is not the host).
pub fn is_device(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.cast::<PyUntypedArray>().is_ok() {
        return Ok(false);
    }
    if obj.hasattr("__cuda_array_interface__")? {
        return Ok(true);
    }
    if obj.hasattr("__dlpack__")? {
        return Ok(dlpack_device(obj)?.is_some_and(|d| d != DL_CPU));
    }
    Ok(false)
}

/// `obj` as a table: checked to be 2-D with int32 or int64 elements.
///
/// Errors: `TableTypeError` for an object that is not an array or an array of another dtype,
/// `TableValueError` for an array that is not 2-D.
pub fn table<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Table<'py>> {
    if is_device(obj)? {
        let (dtype, shape) = device_metadata(obj)?;
        return Ok(Table::Device { dtype, shape });
    }
    host_table(obj).map(Table::Host)
}

/// `obj` as a host table (see [`table`]); a device array is a `TableTypeError` here.
pub fn host_table<'py>(obj: &Bound<'py, PyAny>) -> PyResult<HostTable<'py>> {
    let py = obj.py();
    let array = match obj.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => {
            let numpy = py.import("numpy")?;
            let takes = obj.hasattr("__array__")? || obj.hasattr("__array_interface__")? || has_buffer(obj)?;
            let converted = if takes {
                numpy.call_method1("asarray", (obj,))
            } else if obj.hasattr("__dlpack__")? {
                numpy.call_method1("from_dlpack", (obj,))
            } else {
                return Err(error(
                    Kind::Type,
                    format!(
                        "an object of type {} is not a table: pass a 2-D int32 or int64 array (a NumPy array, a buffer or an object with __array__)",
                        type_name(obj)
                    ),
                ));
            };
            let converted = converted.map_err(|e| {
                let err = error(
                    Kind::Type,
                    format!("an object of type {} is not a table: NumPy cannot read it ({e})", type_name(obj)),
                );
                err.set_cause(py, Some(e));
                err
            })?;
            converted.cast_into::<PyUntypedArray>().map_err(|e| {
                error(
                    Kind::Type,
                    format!("numpy.asarray returned a {}, not an array", type_name(e.into_inner().as_any())),
                )
            })?
        }
    };
    let (dtype, order) = dtype_of(&array.dtype())?;
    let shape = array.shape();
    if shape.len() != 2 {
        return Err(error(
            Kind::Value,
            format!(
                "a table is 2-D (rows, max_neighbours), this array has {} dimension(s), shape {}: reshape it to (n, k)",
                shape.len(),
                py_shape(shape)
            ),
        ));
    }
    let strides = array.strides();
    Ok(HostTable { dtype, order, shape: [shape[0], shape[1]], strides: [strides[0], strides[1]], array })
}

/// A shape as Python prints it: `(3,)`, `(2, 2, 2)`.
pub fn py_shape(shape: &[usize]) -> String {
    match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

fn has_buffer(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let builtins = obj.py().import("builtins")?;
    Ok(builtins.getattr("memoryview")?.call1((obj,)).is_ok())
}

/// The table dtype and byte order of a NumPy dtype.
///
/// Errors: `TableTypeError` naming the dtype when it is not a signed 32- or 64-bit integer.
pub fn dtype_of(descr: &Bound<'_, PyArrayDescr>) -> PyResult<(Dtype, ByteOrder)> {
    let (kind, size) = (descr.kind(), descr.itemsize());
    let dtype = match (kind, size) {
        (b'i', 4) if !descr.has_fields() && !descr.has_subarray() => Dtype::I32,
        (b'i', 8) if !descr.has_fields() && !descr.has_subarray() => Dtype::I64,
        _ => {
            let name = descr.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".to_owned());
            return Err(error(
                Kind::Type,
                format!("a table holds int32 or int64 indices, this array holds {name}: convert it with .astype(numpy.int32)"),
            ));
        }
    };
    let native = if cfg!(target_endian = "little") { ByteOrder::Little } else { ByteOrder::Big };
    let order = match descr.byteorder() {
        b'<' => ByteOrder::Little,
        b'>' => ByteOrder::Big,
        _ => native,
    };
    Ok((dtype, order))
}

/// The table dtype of a dtype-like argument (`numpy.int32`, `"int64"`, `"<i4"`); the store holds
/// little-endian tables, so a big-endian dtype is refused.
///
/// Errors: `TableTypeError`.
pub fn dtype_arg(dtype: &Bound<'_, PyAny>) -> PyResult<Dtype> {
    let py = dtype.py();
    let descr = py.import("numpy")?.call_method1("dtype", (dtype,)).map_err(|e| {
        let err = error(Kind::Type, format!("{dtype} is not a dtype: pass numpy.int32 or numpy.int64"));
        err.set_cause(py, Some(e));
        err
    })?;
    let descr = descr.cast_into::<PyArrayDescr>().map_err(|_| error(Kind::Type, "numpy.dtype returned no dtype"))?;
    match dtype_of(&descr)? {
        (d, ByteOrder::Little) => Ok(d),
        (_, ByteOrder::Big) => Err(error(
            Kind::Type,
            format!("stored tables are little-endian, {dtype} is big-endian: pass numpy.int32 or numpy.int64"),
        )),
    }
}

/// dtype and shape of a device array from its metadata (no copy).
fn device_metadata(obj: &Bound<'_, PyAny>) -> PyResult<(Dtype, [usize; 2])> {
    let py = obj.py();
    let numpy = py.import("numpy")?;
    let (dtype, shape) = if obj.hasattr("__cuda_array_interface__")? {
        let interface = obj.getattr("__cuda_array_interface__")?;
        (numpy.call_method1("dtype", (interface.get_item("typestr")?,))?, interface.get_item("shape")?)
    } else {
        // DLPack producers (CuPy, PyTorch, JAX) have `dtype` and `shape`; a dtype NumPy does not
        // know by object (torch.int32) is known by its name.
        let given = obj.getattr("dtype")?;
        let dtype = match numpy.call_method1("dtype", (&given,)) {
            Ok(d) => d,
            Err(_) => {
                let name = given.str()?.to_string();
                numpy.call_method1("dtype", (name.rsplit('.').next().unwrap_or(&name),))?
            }
        };
        (dtype, obj.getattr("shape")?)
    };
    let descr = dtype.cast_into::<PyArrayDescr>().map_err(|_| error(Kind::Type, "numpy.dtype returned no dtype"))?;
    let (dtype, _) = dtype_of(&descr)?;
    let shape: Vec<usize> =
        shape.cast_into::<PyTuple>().map_err(|_| error(Kind::Type, "device array shape is not a tuple"))?.extract()?;
    if shape.len() != 2 {
        return Err(error(
            Kind::Value,
            format!("a table is 2-D (rows, max_neighbours), this device array has shape {}", py_shape(&shape)),
        ));
    }
    Ok((dtype, [shape[0], shape[1]]))
}

/// A read-only, C-contiguous NumPy array of `dtype` and `shape` over `data` (which must hold
/// `shape[0] * shape[1]` elements in C order, little-endian, and stay valid while `owner`
/// lives); `owner` becomes the array's `base`, so the memory outlives every view of it.
///
/// The array is created without the `WRITEABLE` flag, and since its base offers no writable
/// buffer NumPy refuses to set it later.
///
/// # Safety
/// `data` must point to that many elements, owned by `owner`, unchanged while it lives.
pub unsafe fn readonly_array<'py>(
    py: Python<'py>,
    dtype: Dtype,
    shape: [usize; 2],
    data: *const u8,
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let descr = match dtype {
        Dtype::I32 => numpy::dtype::<i32>(py),
        Dtype::I64 => numpy::dtype::<i64>(py),
    };
    let mut dims = [shape[0] as npyffi::npy_intp, shape[1] as npyffi::npy_intp];
    // SAFETY: the caller promises that `data` holds `shape[0] * shape[1]` elements of `dtype`
    // owned by `owner`; NumPy gets a new reference to the descriptor and takes `owner` as the
    // base, so the memory outlives the array, and the GIL is held (`py`).
    unsafe {
        let ptr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
            descr.into_dtype_ptr(),
            2,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data as *mut std::ffi::c_void,
            npyffi::NPY_ARRAY_C_CONTIGUOUS | npyffi::NPY_ARRAY_ALIGNED,
            std::ptr::null_mut(),
        );
        let array = Bound::from_owned_ptr_or_err(py, ptr)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(py, ptr as *mut npyffi::PyArrayObject, owner.into_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}
