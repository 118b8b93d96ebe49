//! The fault hook of the fault matrix (`cargo xtask faults`, ADR 0012): makes [`crate::write_atomic`]
//! stop or fail at a chosen point, so that a real process can be killed in the middle of a write
//! or meet a full disk without a full disk.
//!
//! A [`Fault`] is a typed value that the caller passes to every write; this crate never reads
//! the environment. Its text form, read by [`Fault::parse`] at the edge of a program (the
//! `gridkey` binary reads it from `GRIDKEY_FAULT`) and written back by its `Display`, is:
//!
//! - `pause:<point>[:<path part>]`: at `<point>`, print `gridkey-fault: paused at <point> writing
//!   <temp file>` to stderr and sleep for an hour (the driver kills the process meanwhile);
//! - `enospc:<bytes>[:<path part>]`: the writer's I/O layer fails with `ENOSPC` ("No space left
//!   on device") once `<bytes>` bytes of the file have been written.
//!
//! `<point>` is one of [`PausePoint`]'s names: `created` (empty temp file), `partial` (about half
//! of the first buffer on disk), `written` (all bytes written, not synced), `synced` (synced and
//! read-only, not yet renamed). The optional `<path part>` restricts the fault to final paths
//! containing it (`tables-v1`, `translation-v2`, `build-v2`, `.bin`, `.so`).
//!
//! ```
//! use gridkey_fs::{Fault, FaultKind, PausePoint};
//!
//! let fault = Fault::parse("pause:synced:.so")?;
//! assert_eq!(fault.kind(), FaultKind::Pause(PausePoint::Synced));
//! assert_eq!(fault.path_part(), Some(".so"));
//! assert_eq!(fault.to_string(), "pause:synced:.so");
//! assert!(Fault::parse("pause:later").is_err());
//! # Ok::<(), gridkey_fs::FsError>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use crate::FsError;

/// Where a `pause` fault stops a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PausePoint {
    /// The temp file exists and is empty.
    Created,
    /// Part of the content is on disk in the temp file.
    Partial,
    /// All content is written to the temp file, not yet synced.
    Written,
    /// The temp file is synced and read-only, not yet renamed to its final name.
    Synced,
}

impl PausePoint {
    /// Every point, in the order a write reaches them.
    pub const ALL: [PausePoint; 4] = [Self::Created, Self::Partial, Self::Written, Self::Synced];

    /// The name in the text form of a [`Fault`].
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Partial => "partial",
            Self::Written => "written",
            Self::Synced => "synced",
        }
    }
}

/// What a [`Fault`] does to a write it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Stop at the point for an hour.
    Pause(PausePoint),
    /// Fail with `ENOSPC` once this many bytes of the file were written.
    NoSpace(u64),
}

/// A fault planned for every atomic write whose final path contains [`Fault::path_part`] (every
/// write when it has none). Passed by the caller to [`crate::write_atomic`] and the
/// [`crate::write_temp`] / [`crate::PendingFile::commit`] halves; `None` there means no fault.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    kind: FaultKind,
    path_part: Option<String>,
}

impl Fault {
    /// A fault of `kind` on the writes whose final path contains `path_part` (all when `None`).
    pub fn new(kind: FaultKind, path_part: Option<String>) -> Self {
        Self { kind, path_part }
    }

    /// Reads the text form (see the module documentation): `pause:<point>[:<path part>]` or
    /// `enospc:<bytes>[:<path part>]`.
    ///
    /// Errors: [`FsError::Fault`] naming the value and what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, FsError> {
        let bad = |reason: String| FsError::Fault { value: text.to_owned(), reason };
        let mut parts = text.splitn(3, ':');
        let (kind, arg, part) = (parts.next().unwrap_or(""), parts.next(), parts.next());
        let Some(arg) = arg else {
            return Err(bad("it has no `:<argument>`".to_owned()));
        };
        let kind = match kind {
            "pause" => FaultKind::Pause(
                PausePoint::ALL
                    .into_iter()
                    .find(|p| p.as_str() == arg)
                    .ok_or_else(|| bad(format!("{arg:?} is not a pause point (created, partial, written, synced)")))?,
            ),
            "enospc" => FaultKind::NoSpace(
                arg.parse().map_err(|_| bad(format!("{arg:?} is not a byte count (a whole number of bytes)")))?,
            ),
            other => return Err(bad(format!("{other:?} is not a fault kind (pause, enospc)"))),
        };
        if part == Some("") {
            return Err(bad("its path part is empty".to_owned()));
        }
        Ok(Self { kind, path_part: part.map(str::to_owned) })
    }

    /// The fault a setting holds in text form (`None`: no fault), as the `test_hooks.fault`
    /// setting carries it to every mode.
    ///
    /// Errors: [`FsError::Fault`], as [`Fault::parse`].
    pub fn parse_setting(text: Option<&str>) -> Result<Option<Self>, FsError> {
        text.map(Self::parse).transpose()
    }

    /// What the fault does.
    pub fn kind(&self) -> FaultKind {
        self.kind
    }

    /// The text a final path must contain for the fault to apply; `None`: every path.
    pub fn path_part(&self) -> Option<&str> {
        self.path_part.as_deref()
    }

    /// Whether the fault applies to a write whose final path (or, before the name is known,
    /// directory) is `path`.
    pub fn applies_to(&self, path: &Path) -> bool {
        self.path_part.as_deref().is_none_or(|part| path.to_string_lossy().contains(part))
    }
}

impl FromStr for Fault {
    type Err = FsError;

    fn from_str(text: &str) -> Result<Self, FsError> {
        Self::parse(text)
    }
}

impl fmt::Display for Fault {
    /// The text form [`Fault::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FaultKind::Pause(point) => write!(f, "pause:{}", point.as_str())?,
            FaultKind::NoSpace(bytes) => write!(f, "enospc:{bytes}")?,
        }
        if let Some(part) = &self.path_part {
            write!(f, ":{part}")?;
        }
        Ok(())
    }
}

/// The fault planned for one write, resolved against its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// No fault.
    None,
    /// Stop at the point.
    Pause(PausePoint),
    /// Fail with `ENOSPC` after this many bytes.
    NoSpace(u64),
}

impl Plan {
    /// What `fault` plans for a write to `path`.
    pub(crate) fn of(fault: Option<&Fault>, path: &Path) -> Plan {
        match fault {
            Some(f) if f.applies_to(path) => match f.kind {
                FaultKind::Pause(p) => Plan::Pause(p),
                FaultKind::NoSpace(n) => Plan::NoSpace(n),
            },
            _ => Plan::None,
        }
    }

    /// Stops here for an hour when this is a pause at `point`.
    pub(crate) fn pause_at(self, point: PausePoint, temp: &Path) {
        if self == Plan::Pause(point) {
            eprintln!("gridkey-fault: paused at {} writing {}", point.as_str(), temp.display());
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// The writer's I/O layer: writes to the temp file, injecting the planned fault.
pub(crate) struct FaultWriter<'a> {
    pub(crate) file: &'a File,
    pub(crate) temp: &'a Path,
    pub(crate) plan: Plan,
    pub(crate) written: u64,
}

impl Write for FaultWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut file = self.file;
        let n = match self.plan {
            Plan::NoSpace(limit) if self.written + buf.len() as u64 > limit => {
                let room = limit.saturating_sub(self.written) as usize;
                if room == 0 {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
                file.write(&buf[..room])?
            }
            Plan::Pause(PausePoint::Partial) if !buf.is_empty() => {
                let n = file.write(&buf[..buf.len().div_ceil(2)])?;
                self.written += n as u64;
                self.plan.pause_at(PausePoint::Partial, self.temp);
                self.plan = Plan::None;
                return Ok(n);
            }
            _ => file.write(buf)?,
        };
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut file = self.file;
        file.flush()
    }
}
