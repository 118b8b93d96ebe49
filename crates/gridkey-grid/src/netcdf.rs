//! The one door to netCDF files: `netcdf-reader` (pure Rust; CDF-1, CDF-2, CDF-5, and netCDF-4
//! through `hdf5-reader`), wrapped so that a hostile file is a [`GridError`] (ADR 0014).
//!
//! What the wrapper adds to the reader's own hardening:
//! - the signature is classified first, and CDF-1 and CDF-2 headers are walked with bounds checks
//!   ([`crate::header`]), so that a cut-off file is named as such;
//! - the file is read through positional reads ([`FileStorage`]), never mapped, so that a file cut
//!   while it is read is an I/O error and not a `SIGBUS`;
//! - before a variable is read, its size (elements times element size, from the header) is checked
//!   against what the file can hold: its length for the classic formats, whose data lies in the
//!   file uncompressed, and [`MAX_INFLATION`] times its length for netCDF-4. The same bound is the
//!   reader's `max_read_bytes`;
//! - every reader call runs under `catch_unwind`, so that a panic the reader's checks missed is
//!   [`GridError::ReaderPanicked`] and not a crash;
//! - the reader's errors become [`GridError::Netcdf`] with the path.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use netcdf_reader::{FileStorage, NcAttrValue, NcFile, NcOpenOptions, NcType, NcVariable};

use crate::header::{self, Signature};
use crate::GridError;

/// The most bytes a netCDF-4 variable may decode to, per byte of the file: 1032, deflate's largest
/// compression ratio (RFC 1951: a stored length of 258 bytes costs at least two bits), the densest
/// filter netCDF-4 writes. A variable larger than this once read cannot be in the file, and is
/// refused before anything is allocated ([`GridError::TooLarge`]).
pub const MAX_INFLATION: u64 = 1032;

/// The integer values of one variable, in the file's element type, in the variable's C order.
#[derive(Debug)]
pub(crate) enum RawInts {
    I8(Vec<i8>),
    U8(Vec<u8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
}

impl RawInts {
    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        match self {
            RawInts::I8(v) => v.len(),
            RawInts::U8(v) => v.len(),
            RawInts::I16(v) => v.len(),
            RawInts::U16(v) => v.len(),
            RawInts::I32(v) => v.len(),
            RawInts::U32(v) => v.len(),
            RawInts::I64(v) => v.len(),
            RawInts::U64(v) => v.len(),
        }
    }

    /// Value `i` (`i < len()`), exact whatever the type.
    pub(crate) fn get(&self, i: usize) -> i128 {
        match self {
            RawInts::I8(v) => i128::from(v[i]),
            RawInts::U8(v) => i128::from(v[i]),
            RawInts::I16(v) => i128::from(v[i]),
            RawInts::U16(v) => i128::from(v[i]),
            RawInts::I32(v) => i128::from(v[i]),
            RawInts::U32(v) => i128::from(v[i]),
            RawInts::I64(v) => i128::from(v[i]),
            RawInts::U64(v) => i128::from(v[i]),
        }
    }
}

/// The size in bytes of a netCDF integer type, `None` for any other type.
pub(crate) fn int_size(t: &NcType) -> Option<u64> {
    match t {
        NcType::Byte | NcType::UByte => Some(1),
        NcType::Short | NcType::UShort => Some(2),
        NcType::Int | NcType::UInt => Some(4),
        NcType::Int64 | NcType::UInt64 => Some(8),
        _ => None,
    }
}

/// The CDL name of a netCDF type (`int`, `uint64`, ...).
pub(crate) fn cdl_type(t: &NcType) -> String {
    match t {
        NcType::Byte => "byte",
        NcType::Char => "char",
        NcType::Short => "short",
        NcType::Int => "int",
        NcType::Float => "float",
        NcType::Double => "double",
        NcType::UByte => "ubyte",
        NcType::UShort => "ushort",
        NcType::UInt => "uint",
        NcType::Int64 => "int64",
        NcType::UInt64 => "uint64",
        NcType::String => "string",
        NcType::Enum { .. } => "an enum type",
        NcType::Compound { .. } => "a compound type",
        NcType::Opaque { .. } => "an opaque type",
        NcType::Array { .. } => "an array type",
        NcType::VLen { .. } => "a variable-length type",
    }
    .to_owned()
}

/// The value of an attribute, as the few shapes grids use.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AttrValue {
    /// Text (`NC_CHAR`, or one `NC_STRING`).
    Text(String),
    /// One integer of any type.
    Int(i128),
    /// Anything else, described for messages.
    Other(String),
}

fn attr_value(value: &NcAttrValue) -> AttrValue {
    fn one<T: Copy + Into<i128>>(v: &[T]) -> AttrValue {
        match v {
            [x] => AttrValue::Int((*x).into()),
            _ => AttrValue::Other(format!("{} integers", v.len())),
        }
    }
    match value {
        NcAttrValue::Chars(s) => AttrValue::Text(s.trim_end_matches('\0').to_owned()),
        NcAttrValue::Strings(v) if v.len() == 1 => AttrValue::Text(v[0].clone()),
        NcAttrValue::Bytes(v) => one(v),
        NcAttrValue::UBytes(v) => one(v),
        NcAttrValue::Shorts(v) => one(v),
        NcAttrValue::UShorts(v) => one(v),
        NcAttrValue::Ints(v) => one(v),
        NcAttrValue::UInts(v) => one(v),
        NcAttrValue::Int64s(v) => one(v),
        NcAttrValue::UInt64s(v) => one(v),
        NcAttrValue::Floats(v) => AttrValue::Other(format!("the float value {v:?}")),
        NcAttrValue::Doubles(v) => AttrValue::Other(format!("the double value {v:?}")),
        NcAttrValue::Strings(v) => AttrValue::Other(format!("{} strings", v.len())),
        NcAttrValue::UserDefined { .. } => AttrValue::Other("a value of a user-defined type".to_owned()),
    }
}

/// The attribute `name` of `var`, if it has one.
pub(crate) fn attribute(var: &NcVariable, name: &str) -> Option<AttrValue> {
    var.attributes.iter().find(|a| a.name == name).map(|a| attr_value(&a.value))
}

/// An open netCDF file of any format, read through the checks of this module.
pub(crate) struct NcReader {
    path: PathBuf,
    file: NcFile,
    /// The most bytes one variable may take once read.
    limit: u64,
}

impl std::fmt::Debug for NcReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcReader").field("path", &self.path).field("limit", &self.limit).finish_non_exhaustive()
    }
}

impl NcReader {
    /// Opens `path`: checks it is a regular netCDF file (and walks a CDF-1/CDF-2 header), then
    /// opens it with `netcdf-reader` over positional reads.
    ///
    /// Errors: [`GridError::Open`], [`GridError::NotNetcdf`], [`GridError::Malformed`],
    /// [`GridError::Truncated`], [`GridError::Netcdf`], [`GridError::ReaderPanicked`].
    pub(crate) fn open(path: &Path) -> Result<Self, GridError> {
        let open_err = |source| GridError::Open { path: path.to_path_buf(), source };
        let meta = std::fs::metadata(path).map_err(open_err)?;
        if !meta.is_file() {
            let what = if meta.is_dir() { "it is a directory" } else { "it is not a regular file" };
            return Err(open_err(std::io::Error::other(what)));
        }
        let mut file = File::open(path).map_err(open_err)?;
        let len = file.metadata().map_err(open_err)?.len();
        let mut first = Vec::with_capacity(8);
        (&file).take(8).read_to_end(&mut first).map_err(open_err)?;
        let signature = match header::signature(&first, len) {
            Signature::Other(found) => {
                // netCDF-4 files may start with a user block that moves the HDF5 superblock.
                if has_moved_superblock(&mut file, len).map_err(open_err)? {
                    Signature::Hdf5
                } else {
                    return Err(GridError::NotNetcdf { path: path.to_path_buf(), found });
                }
            }
            s => s,
        };
        if signature == Signature::Netcdf3 {
            // The walk reads from the start of the file through its own handle.
            let walk = File::open(path).map_err(open_err)?;
            header::check(&walk, len).map_err(|problem| match problem {
                header::HeaderProblem::Malformed(detail) => GridError::Malformed { path: path.to_path_buf(), detail },
                header::HeaderProblem::Truncated { variable, end } => {
                    GridError::Truncated { path: path.to_path_buf(), variable, end, file_len: len }
                }
            })?;
        }
        let limit = match signature {
            Signature::Hdf5 => len.saturating_mul(MAX_INFLATION),
            _ => len,
        };
        let options =
            NcOpenOptions { max_read_bytes: usize::try_from(limit).unwrap_or(usize::MAX), ..Default::default() };
        let storage = FileStorage::from_file(file)
            .map_err(|e| GridError::Netcdf { path: path.to_path_buf(), reason: e.to_string() })?;
        let reader = NcReader {
            path: path.to_path_buf(),
            file: guarded(path, || NcFile::from_storage_with_options(Arc::new(storage), options))?,
            limit,
        };
        // The root group is parsed lazily for some formats: have it now, errors and all.
        guarded(path, || reader.file.variables().map(|_| ()))?;
        guarded(path, || reader.file.dimensions().map(|_| ()))?;
        Ok(reader)
    }

    /// The path as given.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The variables of the root group, in file order.
    pub(crate) fn variables(&self) -> &[NcVariable] {
        self.file.variables().map_or(&[], |v| v)
    }

    /// The root-group variable `name`.
    pub(crate) fn var(&self, name: &str) -> Option<&NcVariable> {
        self.variables().iter().find(|v| v.name == name)
    }

    /// The size of the root-group dimension `name`.
    pub(crate) fn dim_size(&self, name: &str) -> Option<u64> {
        self.file.dimensions().ok()?.iter().find(|d| d.name == name).map(|d| d.size)
    }

    /// Reads every value of the integer variable `var`, after checking that its size fits what
    /// the file can hold.
    ///
    /// Errors: [`GridError::WrongType`] (not an integer type), [`GridError::TooLarge`],
    /// [`GridError::Netcdf`], [`GridError::ReaderPanicked`].
    pub(crate) fn read_ints(&self, var: &NcVariable) -> Result<RawInts, GridError> {
        let Some(size) = int_size(&var.dtype) else {
            return Err(GridError::WrongType {
                path: self.path.clone(),
                variable: var.name.clone(),
                expected: "an integer type",
                found: cdl_type(&var.dtype),
            });
        };
        let count = var.dimensions.iter().try_fold(1u64, |acc, d| acc.checked_mul(d.size));
        let bytes = count.and_then(|c| c.checked_mul(size));
        let (count, bytes) = match (count, bytes) {
            (Some(c), Some(b)) if b <= self.limit => (c, b),
            _ => {
                return Err(GridError::TooLarge {
                    path: self.path.clone(),
                    variable: var.name.clone(),
                    bytes: bytes.unwrap_or(u64::MAX),
                    limit: self.limit,
                })
            }
        };
        debug_assert!(bytes <= self.limit);
        // `count * size <= limit <= usize::MAX` on 64-bit targets; checked for the others.
        let count = usize::try_from(count).map_err(|_| GridError::TooLarge {
            path: self.path.clone(),
            variable: var.name.clone(),
            bytes,
            limit: usize::MAX as u64,
        })?;
        macro_rules! read {
            ($variant:ident, $t:ty) => {{
                let mut out: Vec<$t> = vec![0; count];
                guarded(&self.path, || self.file.read_variable_into::<$t>(&var.name, &mut out))?;
                RawInts::$variant(out)
            }};
        }
        Ok(match var.dtype {
            NcType::Byte => read!(I8, i8),
            NcType::UByte => read!(U8, u8),
            NcType::Short => read!(I16, i16),
            NcType::UShort => read!(U16, u16),
            NcType::Int => read!(I32, i32),
            NcType::UInt => read!(U32, u32),
            NcType::Int64 => read!(I64, i64),
            _ => read!(U64, u64),
        })
    }
}

/// Whether the 8 bytes at one of the places a user block may move an HDF5 superblock to are the
/// HDF5 signature.
fn has_moved_superblock(file: &mut File, len: u64) -> std::io::Result<bool> {
    for offset in header::hdf5_superblock_offsets(len) {
        let mut magic = [0u8; 8];
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(&mut magic)?;
        if header::is_hdf5_magic(&magic) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Runs a reader call: its error wrapped with the path, a panic turned into an error.
fn guarded<T>(path: &Path, f: impl FnOnce() -> netcdf_reader::Result<T>) -> Result<T, GridError> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(GridError::Netcdf { path: path.to_path_buf(), reason: source.to_string() }),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned());
            Err(GridError::ReaderPanicked { path: path.to_path_buf(), message })
        }
    }
}
