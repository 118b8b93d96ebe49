//! The worker protocol, version [`PROTOCOL_VERSION`] (ADR 0013, which supersedes ADR 0004).
//!
//! Frames are postcard-encoded messages, COBS-framed and ended by a `0` byte, over the
//! worker's stdin (parent to worker) and stdout (worker to parent); logs go to stderr. The
//! worker speaks first with [`FromWorker::Hello`]; the parent checks the version. Then the
//! parent sends [`ToWorker::Task`] frames one at a time and the worker answers each with
//! [`FromWorker::Done`]. A compile-time connectivity crosses as [`WireOffset::Gather`]: its
//! digest, dtype, shape and dimensions, never table bytes, so a task's payload does not grow
//! with table size. Shapes travel as fixed-width u64 (not postcard varints), so a task frame
//! has the same byte count for a grid of any size (since version 2; `cargo xtask bench`,
//! `payload`). Since version 5 every task carries the parent's [`TaskSettings`] (ADR 0032): the
//! absolute cache directory, the verification switches, the fault hook and the compiler as
//! resolved and identified in the parent, with its environment; nothing else of the settings
//! (never the shared tier's URL, which may hold a password), and a worker reads no setting from
//! its own environment.
//! A worker's stderr is a log, kept by the pool for the messages of a failed task; a line of it
//! that starts with [`PROGRESS_MARK`] is a progress line (a per-key lock wait that lasts, ADR
//! 0033), which the pool hands at once to the parent's [`crate::set_worker_progress`] hook
//! ([`progress_line`] writes one). The frames do not change with it.
//! These types are a compatibility surface: changing them bumps the version.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use gridkey_digest::{Dtype, TableDigest};
use gridkey_offsets::{
    CompileTimeConnectivity, CompileTimeOffsetProvider, Dimension, DimensionKind, Entry, OffsetsError,
};
use gridkey_store::{StoreError, TableSpec, TableStore};
use serde::{Deserialize, Serialize};

use crate::{CompilationTask, TaskSettings};

/// What starts a progress line on a worker's stderr: ASCII record and unit separators around
/// `progress`, which no message of a compiler or of gridkey holds.
pub const PROGRESS_MARK: &str = "\u{1e}progress\u{1f}";

/// The line a worker writes to its stderr (newline included) so that the pool shows `text`
/// in the parent while the task still runs.
pub fn progress_line(text: &str) -> String {
    // One line: a newline inside would end it early.
    format!("{PROGRESS_MARK}{}\n", text.replace('\n', " "))
}

/// Version of the worker protocol; checked in the handshake. Version 2: shapes as fixed-width
/// little-endian u64; version 3: the task carries the typed settings (ADR 0013); version 4: the
/// settings carry the shared tier's (`Settings::remote`, ADR 0018); version 5: the task carries
/// only the task settings, [`TaskSettings`], and the compiler in them is always identified
/// (ADR 0032); version 6: a handler's error that says a table was found damaged travels as
/// [`WireFailure::Damaged`] (ADR 0054).
pub const PROTOCOL_VERSION: u32 = 6;

/// Largest frame accepted, in bytes; anything longer is a protocol error, not an allocation.
pub const MAX_FRAME_BYTES: u64 = 64 << 20;

/// Why a task cannot cross the process boundary: the parent cannot put it on the wire
/// ([`WireTask::from_task`]) or the worker cannot rehydrate it ([`WireTask::rehydrate`]). The
/// frames carry its message ([`WireFailure::Rehydrate`]), not the value: a worker's failure
/// reaches the parent as text (ADR 0010).
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The cache directory, where a worker finds the tables, is not valid UTF-8 and cannot
    /// travel in a task frame.
    #[error("cache directory {} is not valid UTF-8, so a build worker cannot be told where it is; choose a cache directory whose path is UTF-8", path.display())]
    CacheDirNotUtf8 {
        /// The cache directory.
        path: PathBuf,
    },
    /// A compile-time table is kept unstored in the parent's memory (ADR 0053), so a build
    /// worker would find no file under its digest.
    #[error("offset {offset}: its compile-time table is kept in this process's memory, not stored, so a build worker cannot open it; store it first (ConversionMemo::store_kept)")]
    TableNotStored {
        /// The offset name.
        offset: String,
    },
    /// A dimension's kind byte is none of those [`WireDimension`] knows.
    #[error("dimension {name} has unknown kind {kind} in the task frame; run the parent and its workers from the same gridkey")]
    DimensionKind {
        /// The dimension's name.
        name: String,
        /// The kind byte found.
        kind: u8,
    },
    /// A gather's dtype typestr is none of those [`Dtype`] knows.
    #[error("offset {offset}: unknown dtype {dtype:?} in the task frame; run the parent and its workers from the same gridkey")]
    Dtype {
        /// The offset name.
        offset: String,
        /// The typestr found.
        dtype: String,
    },
    /// The worker cannot open the table store of the task's cache directory.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A table cannot be opened from the store, or the provider cannot be rebuilt (an offset
    /// twice); names the offset and the table file.
    #[error(transparent)]
    Offsets(#[from] OffsetsError),
}

/// A dimension on the wire: its name and kind as one byte.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireDimension {
    /// Its name.
    pub name: String,
    /// 0 horizontal, 1 vertical, 2 local.
    pub kind: u8,
}

impl WireDimension {
    fn from(d: &Dimension) -> Self {
        let kind = match d.kind() {
            DimensionKind::Horizontal => 0,
            DimensionKind::Vertical => 1,
            DimensionKind::Local => 2,
        };
        Self { name: d.name().to_owned(), kind }
    }

    fn to_dimension(&self) -> Result<Dimension, WireError> {
        let kind = match self.kind {
            0 => DimensionKind::Horizontal,
            1 => DimensionKind::Vertical,
            2 => DimensionKind::Local,
            kind => return Err(WireError::DimensionKind { name: self.name.clone(), kind }),
        };
        Ok(Dimension::new(self.name.clone(), kind))
    }
}

/// An offset-provider entry on the wire: a compile-time connectivity by reference to its table file, never its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireOffset {
    /// The offset names a dimension.
    Dimension {
        /// Offset name.
        offset: String,
        /// The dimension.
        dimension: WireDimension,
    },
    /// A compile-time connectivity, by reference to its stored table.
    Gather {
        /// Offset name.
        offset: String,
        /// Table digest bytes.
        digest: [u8; 16],
        /// Compile-time dtype typestr.
        dtype: String,
        /// Shape `(n, k)`, each extent as a fixed-width little-endian u64 on the wire.
        #[serde(with = "fixed_shape")]
        shape: [u64; 2],
        /// Domain dimension.
        domain: WireDimension,
        /// Neighbour dimension.
        local: WireDimension,
        /// Codomain dimension.
        codomain: WireDimension,
        /// Skip value.
        skip_value: Option<i64>,
    },
}

/// Serde form of a shape as two fixed-width little-endian u64 (postcard's `fixint`), so that
/// its encoded length does not depend on the extents.
mod fixed_shape {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Fixed(#[serde(with = "postcard::fixint::le")] u64, #[serde(with = "postcard::fixint::le")] u64);

    pub fn serialize<S: Serializer>(shape: &[u64; 2], s: S) -> Result<S::Ok, S::Error> {
        Fixed(shape[0], shape[1]).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u64; 2], D::Error> {
        let Fixed(n, k) = Fixed::deserialize(d)?;
        Ok([n, k])
    }
}

/// A compilation task on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireTask {
    /// Program name.
    pub program: String,
    /// The program's stable encoding (the frontend's format).
    pub encoding: Vec<u8>,
    /// Translation options, by name.
    pub options: BTreeMap<String, String>,
    /// The compile-time provider's entries, in order; gathers by reference to their table.
    pub offsets: Vec<WireOffset>,
    /// The task settings the parent built once for the run (the cache directory, where the
    /// worker finds the tables, is absolute and valid UTF-8).
    pub settings: TaskSettings,
}

/// Why a task failed inside a live worker, on the wire (a dead worker sends nothing: the pool
/// reports it as [`crate::TaskFailure::WorkerDied`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireFailure {
    /// The handler's error text.
    Handler(String),
    /// The handler panicked.
    Panic(String),
    /// Rehydration failed.
    Rehydrate(String),
    /// The handler's error text, for an error that says a table the task read was found damaged
    /// ([`crate::TaskFailure::DamagedInput`]; since version 6).
    Damaged(String),
}

/// Parent to worker: one frame per task, one task at a time per worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToWorker {
    /// Run this task and answer with [`FromWorker::Done`] carrying the same id.
    Task {
        /// The task's id within the batch.
        id: u64,
        /// The task (boxed: it carries the task settings, far larger than a shutdown).
        task: Box<WireTask>,
    },
    /// Exit cleanly.
    Shutdown,
}

/// Worker to parent: [`FromWorker::Hello`] first, then one [`FromWorker::Done`] per task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromWorker {
    /// The first frame a worker sends.
    Hello {
        /// [`PROTOCOL_VERSION`] of the worker.
        protocol: u32,
        /// The worker's process id.
        pid: u32,
    },
    /// The answer to a task: the postcard-encoded output, or the failure.
    Done {
        /// The id of the task.
        id: u64,
        /// Output bytes or failure.
        result: Result<Vec<u8>, WireFailure>,
    },
}

impl WireTask {
    /// The wire form of `task`: tables by digest, no table bytes.
    ///
    /// Errors: [`WireError::CacheDirNotUtf8`] naming the cache directory;
    /// [`WireError::TableNotStored`] naming an offset whose table is kept unstored (ADR 0053).
    pub fn from_task(task: &CompilationTask) -> Result<Self, WireError> {
        let settings = &task.settings;
        if settings.cache_dir().to_str().is_none() {
            return Err(WireError::CacheDirNotUtf8 { path: settings.cache_dir().to_path_buf() });
        }
        if let Some((offset, _)) =
            task.provider.entries().iter().find(|(_, e)| matches!(e, Entry::Gather(c) if !c.is_stored()))
        {
            return Err(WireError::TableNotStored { offset: offset.clone() });
        }
        let offsets = task
            .provider
            .entries()
            .iter()
            .map(|(offset, entry)| match entry {
                Entry::Dimension(d) => {
                    WireOffset::Dimension { offset: offset.clone(), dimension: WireDimension::from(d) }
                }
                Entry::Gather(c) => WireOffset::Gather {
                    offset: offset.clone(),
                    digest: *c.digest().as_bytes(),
                    dtype: c.dtype().typestr().to_owned(),
                    shape: [c.shape()[0] as u64, c.shape()[1] as u64],
                    domain: WireDimension::from(c.domain()),
                    local: WireDimension::from(c.local()),
                    codomain: WireDimension::from(c.codomain()),
                    skip_value: c.skip_value(),
                },
            })
            .collect();
        Ok(Self {
            program: task.program.clone(),
            encoding: task.encoding.clone(),
            options: task.options.clone(),
            offsets,
            settings: settings.as_ref().clone(),
        })
    }

    /// Rehydrates the task: opens every table from the store in its cache directory (checked
    /// open: header, dtype, shape, length), or from its site cache's, verified (ADR 0036). The digest check of `verify_tables` is the
    /// handler's, the same in every mode.
    ///
    /// Errors: [`WireError::Offsets`] naming the offset and the table file that could not be
    /// opened, [`WireError::Store`] for a store that cannot be opened, [`WireError::Dtype`] and
    /// [`WireError::DimensionKind`] for a frame of another protocol.
    pub fn rehydrate(self) -> Result<CompilationTask, WireError> {
        let store = TableStore::open(self.settings.cache_dir())?.with_site(self.settings.site_cache());
        let mut provider = CompileTimeOffsetProvider::new();
        for wire in &self.offsets {
            let (offset, entry) = match wire {
                WireOffset::Dimension { offset, dimension } => (offset, Entry::Dimension(dimension.to_dimension()?)),
                WireOffset::Gather { offset, digest, dtype, shape, domain, local, codomain, skip_value } => {
                    let dtype = Dtype::from_typestr(dtype)
                        .ok_or_else(|| WireError::Dtype { offset: offset.clone(), dtype: dtype.clone() })?;
                    let spec = TableSpec {
                        digest: TableDigest::from_bytes(*digest),
                        dtype,
                        shape: [shape[0] as usize, shape[1] as usize],
                    };
                    let c = CompileTimeConnectivity::rehydrate(
                        offset,
                        &store,
                        &spec,
                        domain.to_dimension()?,
                        local.to_dimension()?,
                        codomain.to_dimension()?,
                        *skip_value,
                    )?;
                    (offset, Entry::Gather(Arc::new(c)))
                }
            };
            provider.push(offset.clone(), entry)?;
        }
        Ok(CompilationTask {
            program: self.program,
            encoding: self.encoding,
            options: self.options,
            provider: Arc::new(provider),
            settings: Arc::new(self.settings),
        })
    }
}

/// Writes one frame (postcard, COBS-framed, `0`-terminated) and flushes.
///
/// Errors: the I/O error of writing or flushing (the other end is gone), or an encoding error
/// as [`io::ErrorKind::Other`].
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T) -> io::Result<()> {
    let bytes = postcard::to_stdvec_cobs(message).map_err(io::Error::other)?;
    out.write_all(&bytes)?;
    out.flush()
}

/// Reads one frame: `Ok(None)` at a clean end of stream, an `InvalidData` error for a frame
/// that is too long, cut short or does not decode.
pub fn read_frame<T: for<'de> Deserialize<'de>, R: BufRead>(input: &mut R) -> io::Result<Option<T>> {
    let mut buf = Vec::new();
    let mut limited = Read::take(&mut *input, MAX_FRAME_BYTES);
    let n = limited.read_until(0, &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&0) {
        let why =
            if n as u64 >= MAX_FRAME_BYTES { "frame longer than the limit" } else { "stream ended inside a frame" };
        return Err(io::Error::new(io::ErrorKind::InvalidData, why));
    }
    decode_frame(&mut buf).map(Some)
}

/// Decodes one COBS frame (with its `0` terminator) in place.
///
/// Errors: [`io::ErrorKind::InvalidData`] naming what postcard could not decode.
pub fn decode_frame<T: for<'de> Deserialize<'de>>(frame: &mut [u8]) -> io::Result<T> {
    postcard::from_bytes_cobs(frame).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {e}")))
}
