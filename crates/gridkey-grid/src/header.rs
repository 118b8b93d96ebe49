//! The signature of a grid file, and a bounds-checked walk over a netCDF-3 header, run before the
//! netCDF reader (`netcdf-reader`) sees a CDF-1 or CDF-2 file.
//!
//! Why the walk exists: a reader that trusts the counts and sizes in a header can be made to
//! reserve memory for 2^31 dimensions, subtract a variable's begin offset from the file size or
//! allocate a variable of many gigabytes before the first read fails. This walk checks every
//! count, length and offset against the bytes the file really has, and that every variable's
//! data lies inside the file, so that the reader only ever sees headers whose numbers are
//! plausible and a cut-off file is named as such ([`HeaderProblem::Truncated`]). It enforces only
//! what protects the reader; the rest of the format (names, unlimited dimension rules) is left to
//! the reader, whose errors are typed.
//!
//! Format: the netCDF classic format specification (CDF-1 and CDF-2, "64-bit offset"):
//! `magic numrecs dim_list gatt_list var_list`, big-endian, every string and value list padded
//! to 4 bytes.

use std::fs::File;
use std::io::{BufReader, Read};

/// First bytes of a netCDF-3 file, version 1 (classic, 32-bit offsets).
const MAGIC_CLASSIC: &[u8; 4] = b"CDF\x01";
/// First bytes of a netCDF-3 file, version 2 (64-bit offset).
const MAGIC_OFFSET64: &[u8; 4] = b"CDF\x02";
/// First bytes of a CDF-5 file (64-bit data), the third netCDF classic format.
const MAGIC_CDF5: &[u8; 4] = b"CDF\x05";
/// First bytes of an HDF5 file, which is what a netCDF-4 file is.
const MAGIC_HDF5: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

const NC_DIMENSION: u32 = 0x0A;
const NC_VARIABLE: u32 = 0x0B;
const NC_ATTRIBUTE: u32 = 0x0C;
const STREAMING: u32 = u32::MAX;

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Signature {
    /// netCDF-3, classic (1) or 64-bit offset (2): the header walk runs, then the reader.
    Netcdf3,
    /// CDF-5 (64-bit data): the reader's own bounds checks apply.
    Cdf5,
    /// HDF5, which is what a netCDF-4 file is.
    Hdf5,
    /// Anything else, described for an error message.
    Other(String),
}

/// Where an HDF5 superblock may start: 0, or after a user block of 512 bytes or any doubling
/// of that (the HDF5 file format specification, "Superblock").
pub(crate) fn hdf5_superblock_offsets(file_len: u64) -> impl Iterator<Item = u64> {
    std::iter::successors(Some(512u64), |o| o.checked_mul(2)).take_while(move |o| o.saturating_add(8) <= file_len)
}

/// Whether `bytes` (8 of them) are the HDF5 signature.
pub(crate) fn is_hdf5_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC_HDF5)
}

/// Classifies a file from its first (up to 8) bytes and its length.
pub(crate) fn signature(first: &[u8], file_len: u64) -> Signature {
    if file_len == 0 {
        return Signature::Other("the file is empty".to_owned());
    }
    if first.starts_with(MAGIC_CLASSIC) || first.starts_with(MAGIC_OFFSET64) {
        return Signature::Netcdf3;
    }
    if first.starts_with(MAGIC_CDF5) {
        return Signature::Cdf5;
    }
    if first.starts_with(MAGIC_HDF5) {
        return Signature::Hdf5;
    }
    if first.starts_with(b"CDF") && first.len() >= 4 {
        return Signature::Other(format!("it starts with `CDF` but has the unknown version byte {}", first[3]));
    }
    let shown: String = first
        .iter()
        .take(4)
        .map(|&b| if b.is_ascii_graphic() || b == b' ' { char::from(b).to_string() } else { format!("\\x{b:02x}") })
        .collect();
    Signature::Other(format!(
        "it starts with \"{shown}\" instead of a netCDF signature (\"CDF\\x01\", \"CDF\\x02\", \"CDF\\x05\" or the \
         HDF5 signature of netCDF-4)"
    ))
}

/// Where the header walk stopped: a description for [`crate::GridError::Malformed`] or the
/// variable whose data runs past the end of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    /// The header itself is cut off or inconsistent.
    Malformed(String),
    /// Variable `variable`'s data ends at byte `end`, past the end of the file.
    Truncated { variable: String, end: u64 },
}

struct Walker<R> {
    input: R,
    pos: u64,
    len: u64,
}

type Step<T> = Result<T, HeaderProblem>;

fn malformed<T>(detail: String) -> Step<T> {
    Err(HeaderProblem::Malformed(detail))
}

impl<R: Read> Walker<R> {
    fn remaining(&self) -> u64 {
        self.len - self.pos
    }

    /// Checks that `n` more bytes exist, naming `what` otherwise.
    fn need(&self, n: u64, what: &str) -> Step<()> {
        if n > self.remaining() {
            return malformed(format!(
                "the header is cut off or damaged: {what} at byte {} needs {n} bytes but only {} remain of the file's {} bytes",
                self.pos,
                self.remaining(),
                self.len
            ));
        }
        Ok(())
    }

    fn bytes(&mut self, n: u64, what: &str) -> Step<Vec<u8>> {
        self.need(n, what)?;
        let mut buf = vec![0u8; n as usize];
        self.input
            .read_exact(&mut buf)
            .map_err(|e| HeaderProblem::Malformed(format!("reading {what} at byte {}: {e}", self.pos)))?;
        self.pos += n;
        Ok(buf)
    }

    fn skip(&mut self, n: u64, what: &str) -> Step<()> {
        self.need(n, what)?;
        let copied = std::io::copy(&mut (&mut self.input).take(n), &mut std::io::sink())
            .map_err(|e| HeaderProblem::Malformed(format!("reading {what} at byte {}: {e}", self.pos)))?;
        if copied != n {
            return malformed(format!("the file ended while reading {what} at byte {}", self.pos));
        }
        self.pos += n;
        Ok(())
    }

    fn u32(&mut self, what: &str) -> Step<u32> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A non-negative 32-bit count or size.
    fn count(&mut self, what: &str) -> Step<u64> {
        let at = self.pos;
        let v = self.u32(what)?;
        if v > i32::MAX as u32 {
            return malformed(format!("{what} at byte {at} is negative ({})", v as i32));
        }
        Ok(u64::from(v))
    }

    /// A count of `what`, each taking at least `min_bytes`: rejects counts the file cannot hold.
    fn list_count(&mut self, what: &str, min_bytes: u64) -> Step<u64> {
        let at = self.pos;
        let n = self.count(what)?;
        if n.saturating_mul(min_bytes) > self.remaining() {
            return malformed(format!(
                "the header is cut off or damaged: {what} at byte {at} counts {n} entries, more than the {} bytes left in the file can hold",
                self.remaining()
            ));
        }
        Ok(n)
    }

    fn name(&mut self, what: &str) -> Step<String> {
        let n = self.count(what)?;
        let b = self.bytes(padded(n), what)?;
        Ok(String::from_utf8_lossy(&b[..n as usize]).into_owned())
    }

    /// The tag of a list: returns its element count, 0 for `ABSENT`.
    fn list_tag(&mut self, tag: u32, what: &str, min_bytes: u64) -> Step<u64> {
        let at = self.pos;
        let t = self.u32(what)?;
        if t == 0 {
            let n = self.u32(what)?;
            if n != 0 {
                return malformed(format!("{what} at byte {at} is absent but has {n} elements"));
            }
            return Ok(0);
        }
        if t != tag {
            return malformed(format!("expected {what} at byte {at} (tag {tag:#x}), found tag {t:#x}"));
        }
        self.list_count(what, min_bytes)
    }

    fn nc_type_size(&mut self, what: &str) -> Step<u64> {
        let at = self.pos;
        match self.u32(what)? {
            1 | 2 => Ok(1),
            3 => Ok(2),
            4 | 5 => Ok(4),
            6 => Ok(8),
            t => malformed(format!("{what} at byte {at} is {t}, not a netCDF-3 type (1 to 6)")),
        }
    }

    fn attributes(&mut self, owner: &str) -> Step<()> {
        let n = self.list_tag(NC_ATTRIBUTE, &format!("the attribute list of {owner}"), 12)?;
        for _ in 0..n {
            let name = self.name(&format!("an attribute name of {owner}"))?;
            let what = format!("attribute `{name}` of {owner}");
            let size = self.nc_type_size(&what)?;
            let nelems = self.count(&what)?;
            self.skip(padded(nelems.saturating_mul(size)), &what)?;
        }
        Ok(())
    }
}

fn padded(n: u64) -> u64 {
    n.saturating_add(3) & !3
}

struct VarHeader {
    name: String,
    dim_ids: Vec<u64>,
    type_size: u64,
    begin: u64,
}

/// Walks the header of the netCDF-3 file `file` (`file_len` bytes, signature already checked)
/// and checks that every variable's data lies inside the file.
pub(crate) fn check(file: &File, file_len: u64) -> Result<(), HeaderProblem> {
    let mut w = Walker { input: BufReader::new(file), pos: 0, len: file_len };
    let magic = w.bytes(4, "the signature")?;
    let offset64 = magic[3] == 2;
    let at = w.pos;
    let numrecs = w.u32("the record count")?;
    if numrecs > i32::MAX as u32 && numrecs != STREAMING {
        return malformed(format!("the record count at byte {at} is negative ({})", numrecs as i32));
    }

    let ndims = w.list_tag(NC_DIMENSION, "the dimension list", 8)?;
    let mut dims: Vec<u64> = Vec::with_capacity(ndims as usize);
    for _ in 0..ndims {
        let name = w.name("a dimension name")?;
        dims.push(w.count(&format!("the size of dimension `{name}`"))?);
    }
    w.attributes("the file")?;

    // name length, dimension count, attribute list, type, vsize, begin: at least 28 bytes
    let nvars = w.list_tag(NC_VARIABLE, "the variable list", 28)?;
    let mut vars = Vec::new();
    for _ in 0..nvars {
        let name = w.name("a variable name")?;
        let what = format!("variable `{name}`");
        let rank = w.list_count(&format!("the dimension count of {what}"), 4)?;
        let mut dim_ids = Vec::new();
        for _ in 0..rank {
            let at = w.pos;
            let id = w.count(&format!("a dimension id of {what}"))?;
            if id >= ndims {
                return malformed(format!(
                    "{what} refers to dimension id {id} at byte {at}, but the file defines {ndims} dimensions"
                ));
            }
            dim_ids.push(id);
        }
        w.attributes(&what)?;
        let type_size = w.nc_type_size(&format!("the type of {what}"))?;
        w.u32(&format!("the size of {what}"))?;
        let at = w.pos;
        let begin = if offset64 {
            let b = w.bytes(8, &format!("the data offset of {what}"))?;
            i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        } else {
            i64::from(w.u32(&format!("the data offset of {what}"))? as i32)
        };
        let begin = u64::try_from(begin)
            .or_else(|_| malformed(format!("the data offset of {what} at byte {at} is negative ({begin})")))?;
        vars.push(VarHeader { name, dim_ids, type_size, begin });
    }

    for var in &vars {
        // A record variable has the unlimited dimension (size 0 in the header) first; its
        // records are interleaved with the other record variables', so only its first record
        // is checked here. Tables are never read from record variables.
        let is_record = var.dim_ids.first().is_some_and(|&d| dims[d as usize] == 0);
        let mut extents = var.dim_ids.iter().skip(usize::from(is_record)).map(|&d| dims[d as usize]);
        let bytes = extents.try_fold(var.type_size, |acc, n| acc.checked_mul(n));
        let end = bytes.and_then(|b| var.begin.checked_add(b));
        match end {
            Some(end) if end <= file_len => {}
            Some(end) => return Err(HeaderProblem::Truncated { variable: var.name.clone(), end }),
            None => {
                return malformed(format!(
                    "variable `{}` is larger than any file can be (its dimensions multiply past 2^64 bytes)",
                    var.name
                ))
            }
        }
    }
    Ok(())
}
