//! Progress of `gridkey run` on stderr (ADR 0010): an indicatif bar (programs done / total, the
//! programs being compiled, elapsed time) when stderr is a terminal, plain lines otherwise or
//! when `NO_COLOR` or `GRIDKEY_NO_PROGRESS` is set to a non-empty value.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gridkey_jobs::{Ended, Progress};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How progress is shown.
pub enum Reporter {
    /// A bar redrawn in place.
    Bar {
        /// The bar.
        bar: ProgressBar,
        /// Programs being compiled, by batch index.
        running: Mutex<BTreeMap<usize, String>>,
    },
    /// One line per finished program.
    Lines {
        /// Number of programs.
        total: usize,
        /// Programs finished so far.
        done: AtomicUsize,
        /// When the batch started.
        start: Instant,
    },
}

impl Reporter {
    /// The reporter for a batch of `total` programs: a bar when stderr is a terminal and `plain`
    /// is false (`NO_COLOR`, `GRIDKEY_NO_PROGRESS`), else plain lines.
    pub fn for_stderr(total: usize, plain: bool) -> Self {
        if std::io::stderr().is_terminal() && !plain {
            let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} programs  {wide_msg}")
                .expect("the template is valid")
                .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(100));
            Reporter::Bar { bar, running: Mutex::new(BTreeMap::new()) }
        } else {
            Reporter::Lines { total, done: AtomicUsize::new(0), start: Instant::now() }
        }
    }

    /// Clears the bar (plain lines need nothing).
    pub fn finish(&self) {
        if let Reporter::Bar { bar, .. } = self {
            bar.finish_and_clear();
        }
    }
}

impl Progress for Reporter {
    fn started(&self, index: usize, program: &str) {
        if let Reporter::Bar { bar, running } = self {
            let mut running = running.lock().unwrap_or_else(|p| p.into_inner());
            running.insert(index, program.to_owned());
            bar.set_message(running.values().cloned().collect::<Vec<_>>().join(", "));
        }
    }

    fn finished(&self, index: usize, program: &str, ended: Ended) {
        match self {
            Reporter::Bar { bar, running } => {
                let mut running = running.lock().unwrap_or_else(|p| p.into_inner());
                running.remove(&index);
                if ended == Ended::Failed {
                    bar.println(format!("gridkey: {program} failed to compile"));
                }
                bar.set_message(running.values().cloned().collect::<Vec<_>>().join(", "));
                bar.inc(1);
            }
            Reporter::Lines { total, done, start } => {
                let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                let what = match ended {
                    Ended::Done(word) => word,
                    Ended::Failed => "FAILED",
                };
                let line = format!(
                    "gridkey: [{n}/{total}] {program} {what} ({:.1} s elapsed)\n",
                    start.elapsed().as_secs_f64()
                );
                // One write per line, so lines from several threads do not interleave.
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
        }
    }
}

/// The text of the progress line of a per-key lock wait that lasts (ADR 0033): which lock
/// file, how long so far.
fn lock_wait_text(path: &std::path::Path, waited: Duration) -> String {
    format!(
        "gridkey: waiting for the lock {} ({:.0} s so far): another process holds it; at most GRIDKEY_LOCK_WAIT \
         seconds, then the work is done without it",
        path.display(),
        waited.as_secs_f64()
    )
}

/// The progress line of a per-key lock wait that lasts (ADR 0033), told every
/// [`gridkey_fs::lock::LOCK_NOTICE_EVERY`] while it lasts: which lock file, how long so far.
pub fn lock_wait_line(path: &std::path::Path, waited: Duration) {
    eprintln!("{}", lock_wait_text(path, waited));
}

/// [`lock_wait_line`] in a build worker, whose stderr the pool captures: marked as a progress
/// line ([`gridkey_jobs::protocol::progress_line`]), which the parent shows at once
/// ([`worker_progress_line`]).
pub fn worker_lock_wait_line(path: &std::path::Path, waited: Duration) {
    let line = gridkey_jobs::protocol::progress_line(&lock_wait_text(path, waited));
    // One write per line, so lines from several threads do not interleave.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Shows a build worker's progress line in this (the parent) process
/// ([`gridkey_jobs::set_worker_progress`]).
pub fn worker_progress_line(text: &str) {
    let _ = std::io::stderr().lock().write_all(format!("{text}\n").as_bytes());
}
