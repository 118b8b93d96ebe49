//! Test hook for the fault matrix (`cargo xtask faults`, ADR 0012): makes [`crate::write_atomic`]
//! stop or fail at a chosen point, so that a real process can be killed in the middle of a write
//! or meet a full disk without a full disk.
//!
//! The hook is read from the environment variable [`ENV_FAULT`] on every atomic write and does
//! nothing when it is unset, so it costs one environment lookup per file written. Values:
//!
//! - `pause:<point>[:<path part>]`: at `<point>`, print `gridkey-fault: paused at <point> writing
//!   <temp file>` to stderr and sleep for an hour (the driver kills the process meanwhile);
//! - `enospc:<bytes>[:<path part>]`: the writer's I/O layer fails with `ENOSPC` ("No space left
//!   on device") once `<bytes>` bytes of the file have been written.
//!
//! `<point>` is one of [`PausePoint`]'s names: `created` (empty temp file), `partial` (about half
//! of the first buffer on disk), `written` (all bytes written, not synced), `synced` (synced and
//! read-only, not yet renamed). The optional `<path part>` restricts the fault to final paths
//! containing it (`tables-v1`, `translation-v2`, `.bin`).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

/// The environment variable of the fault hook (test use only).
pub const ENV_FAULT: &str = "GRIDKEY_FAULT";

/// Where a `pause` fault stops a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    /// The name used in [`ENV_FAULT`].
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Partial => "partial",
            Self::Written => "written",
            Self::Synced => "synced",
        }
    }
}

/// The fault planned for one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No fault.
    None,
    /// Stop at the point.
    Pause(PausePoint),
    /// Fail with `ENOSPC` after this many bytes.
    NoSpace(u64),
}

impl Fault {
    /// The fault [`ENV_FAULT`] plans for a write to `path`; [`Fault::None`] when unset, when the
    /// value does not parse or when its path part does not match.
    pub(crate) fn for_path(path: &Path) -> Fault {
        let Ok(spec) = std::env::var(ENV_FAULT) else {
            return Fault::None;
        };
        let mut parts = spec.splitn(3, ':');
        let (kind, arg, part) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
        if part.is_some_and(|p| !path.to_string_lossy().contains(p)) {
            return Fault::None;
        }
        match kind {
            "pause" => PausePoint::ALL.into_iter().find(|p| p.as_str() == arg).map_or(Fault::None, Fault::Pause),
            "enospc" => arg.parse().map_or(Fault::None, Fault::NoSpace),
            _ => Fault::None,
        }
    }

    /// Stops here for an hour when this is a pause at `point`.
    pub(crate) fn pause_at(self, point: PausePoint, temp: &Path) {
        if self == Fault::Pause(point) {
            eprintln!("gridkey-fault: paused at {} writing {}", point.as_str(), temp.display());
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// The writer's I/O layer: writes to the temp file, injecting the planned fault.
pub(crate) struct FaultWriter<'a> {
    pub(crate) file: &'a File,
    pub(crate) temp: &'a Path,
    pub(crate) fault: Fault,
    pub(crate) written: u64,
}

impl Write for FaultWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut file = self.file;
        let n = match self.fault {
            Fault::NoSpace(limit) if self.written + buf.len() as u64 > limit => {
                let room = limit.saturating_sub(self.written) as usize;
                if room == 0 {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
                file.write(&buf[..room])?
            }
            Fault::Pause(PausePoint::Partial) if !buf.is_empty() => {
                let n = file.write(&buf[..buf.len().div_ceil(2)])?;
                self.written += n as u64;
                self.fault.pause_at(PausePoint::Partial, self.temp);
                self.fault = Fault::None;
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
