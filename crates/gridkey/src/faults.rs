//! The fault-injection handler of `gridkey worker --handler test-faults` (ADR 0010): a test hook
//! that lets the tests and `cargo xtask memory` drive a real worker process into each failure
//! the process pool must survive, and measure a worker's memory while it holds mapped tables.
//!
//! The program name of a task chooses what the worker does; the task's translation options give
//! the parameters:
//!
//! | program name | what the worker does |
//! |---|---|
//! | `ok…` | answers with a [`FaultReport`] (its pid, the task settings that travelled with the task) |
//! | `error…` | returns an error naming the program |
//! | `panic…` | panics (the worker catches it) |
//! | `exit…` | writes `test-faults: exiting on request` to stderr and exits with status 3 |
//! | `garbage…` | writes bytes that are not a frame on its protocol stream, then answers |
//! | `chatty…` | prints a line on its standard output (descriptor 1, which the worker points at stderr), then answers |
//! | `hang…` | writes its pid to the file in option `pidfile` (if given), then sleeps option `seconds` (default 3600) and answers |
//! | `memory…` | reads every element of every table (so every page is resident), then answers with its own `/proc/self/smaps_rollup` |
//!
//! Nothing else in gridkey uses this handler; `gridkey run` always uses [`crate::StencilHandler`].

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::time::Duration;

use gridkey_jobs::{CompilationTask, TaskHandler};
use gridkey_offsets::Entry;
use gridkey_store::TableView;
use serde::{Deserialize, Serialize};

/// The name `gridkey worker --handler` takes for [`FaultHandler`].
pub const FAULT_HANDLER_NAME: &str = "test-faults";

/// The message an `exit…` task writes to stderr before exiting with status 3.
pub const EXIT_MESSAGE: &str = "test-faults: exiting on request";

/// What a task of the fault handler answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultReport {
    /// The program name of the task.
    pub program: String,
    /// Process id of the worker that ran it.
    pub pid: u32,
    /// The task settings that travelled with the task, as the handler saw them.
    pub settings: gridkey_settings::TaskSettings,
    /// For `memory…` tasks: the worker's `/proc/self/smaps_rollup` fields in bytes, read while
    /// the tables were mapped and resident.
    pub memory: BTreeMap<String, u64>,
    /// For `memory…` tasks: the number of table elements read, and their sum (so the reads
    /// cannot be optimised away).
    pub elements_read: u64,
    /// Sum of every element read, as i64 wrapping.
    pub element_sum: i64,
}

/// The fault-injection handler (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub struct FaultHandler;

impl TaskHandler for FaultHandler {
    type Output = FaultReport;

    /// Every failure of this handler is an I/O error: one on request (`error…`), or a file it
    /// could not write or read, named in its message.
    type Error = std::io::Error;

    fn handle(&self, task: &CompilationTask) -> Result<FaultReport, std::io::Error> {
        let name = task.program.as_str();
        let mut report = FaultReport {
            program: name.to_owned(),
            pid: std::process::id(),
            settings: task.settings.as_ref().clone(),
            memory: BTreeMap::new(),
            elements_read: 0,
            element_sum: 0,
        };
        if name.starts_with("error") {
            return Err(std::io::Error::other(format!("program {name} failed on request of the test-faults handler")));
        }
        if name.starts_with("panic") {
            panic!("program {name} panicked on request of the test-faults handler");
        }
        if name.starts_with("exit") {
            eprintln!("{EXIT_MESSAGE}");
            std::process::exit(3);
        }
        if name.starts_with("garbage") {
            if let Some(fd) = gridkey_jobs::worker::protocol_descriptor() {
                // SAFETY: the descriptor stays open for the worker's life; ManuallyDrop keeps
                // this File from closing it.
                let mut out = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
                let _ = out.write_all(b"this is not a frame\0");
                let _ = out.flush();
            }
        }
        if name.starts_with("chatty") {
            println!("test-faults: a stray line on stdout");
            let _ = std::io::stdout().flush();
        }
        if name.starts_with("hang") {
            if let Some(path) = task.options.get("pidfile") {
                std::fs::write(path, std::process::id().to_string())
                    .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {path}: {e}")))?;
            }
            let seconds: f64 = task.options.get("seconds").and_then(|s| s.parse().ok()).unwrap_or(3600.0);
            std::thread::sleep(Duration::from_secs_f64(seconds));
        }
        if name.starts_with("memory") {
            for (_, entry) in task.provider.entries() {
                if let Entry::Gather(c) = entry {
                    let (n, sum) = match c.table() {
                        TableView::I32(t) => (t.len() as u64, t.iter().fold(0i64, |a, &x| a.wrapping_add(x as i64))),
                        TableView::I64(t) => (t.len() as u64, t.iter().fold(0i64, |a, &x| a.wrapping_add(x))),
                    };
                    report.elements_read += n;
                    report.element_sum = report.element_sum.wrapping_add(sum);
                }
            }
            report.memory = smaps_rollup(std::process::id())
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot read smaps_rollup: {e}")))?;
        }
        Ok(report)
    }
}

/// The fields of `/proc/<pid>/smaps_rollup` (`Rss`, `Pss`, `Shared_Clean`, `Shared_Dirty`,
/// `Private_Clean`, `Private_Dirty`, `Anonymous`, ...), in bytes.
///
/// Errors: the file cannot be read (not Linux, or the process is gone).
pub fn smaps_rollup(pid: u32) -> std::io::Result<BTreeMap<String, u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some((name.to_owned(), kib * 1024))
        })
        .collect())
}
