//! The one writer of everything the binary prints. The crate's `println!` and `eprintln!` are
//! the macros below (declared before every other module, so they replace std's everywhere in
//! the binary), and no write can panic, as std's do when their stream is closed:
//!
//! * standard output whose reader went away (`gridkey tables --json | head -1`, EPIPE): the
//!   process ends at once, killed by `SIGPIPE`, as command-line tools written in C are (the
//!   shell reports status 141); nothing more is printed;
//! * any other failure to write standard output (`> /dev/full`, ENOSPC): what follows is not
//!   written, and [`finish`] reports the first error once and makes the exit status 2;
//! * standard error that cannot be written: the line is dropped, since there is nowhere left to
//!   say so.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::Mutex;

/// `println!` for the binary: one line to standard output through [`stdout_line`].
macro_rules! println {
    () => {
        $crate::output::stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::stdout_line(format_args!($($arg)*))
    };
}

/// `eprintln!` for the binary: one line to standard error through [`stderr_line`].
macro_rules! eprintln {
    () => {
        $crate::output::stderr_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::stderr_line(format_args!($($arg)*))
    };
}

/// The first error of writing standard output other than a closed reader; later lines are
/// not written.
static STDOUT_FAILED: Mutex<Option<io::Error>> = Mutex::new(None);

/// Writes `args` and a newline to standard output (line-buffered, so each line is written when
/// it ends). A closed reader ends the process by `SIGPIPE` ([`reader_gone`]); any other error
/// is kept for [`finish`].
pub fn stdout_line(args: std::fmt::Arguments<'_>) {
    let mut failed = STDOUT_FAILED.lock().unwrap_or_else(|p| p.into_inner());
    if failed.is_some() {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            reader_gone();
        }
        *failed = Some(e);
    }
}

/// Writes `args` and a newline to standard error in one write; an error is ignored.
pub fn stderr_line(args: std::fmt::Arguments<'_>) {
    let line = format!("{args}\n");
    let _ = io::stderr().lock().write_all(line.as_bytes());
}

/// Flushes standard output and returns `code`, or, when a line could not be written, says so
/// once on standard error and returns 2.
pub fn finish(code: ExitCode) -> ExitCode {
    let flushed = io::stdout().lock().flush();
    let mut failed = STDOUT_FAILED.lock().unwrap_or_else(|p| p.into_inner());
    let error = failed.take().or(flushed.err());
    match error {
        None => code,
        Some(e) if e.kind() == io::ErrorKind::BrokenPipe => reader_gone(),
        Some(e) => {
            stderr_line(format_args!(
                "gridkey: error: cannot write to standard output: {e}; free space or redirect it elsewhere"
            ));
            ExitCode::from(2)
        }
    }
}

/// Ends the process as `SIGPIPE` ends a command-line tool whose reader went away: Rust ignores
/// the signal (so that writes to dead workers are errors, not deaths), so its default action is
/// restored and the signal raised; the exit status 141 is the fallback.
fn reader_gone() -> ! {
    // SAFETY: `signal` and `raise` have no memory-safety preconditions; restoring the default
    // action of SIGPIPE affects only this process, which ends here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(128 + libc::SIGPIPE)
}

/// The error text of `e` for people: its message, then each cause in the chain that the text
/// does not already hold, so a cause that a message quotes is said once.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// `n` and the noun for it: `1 job`, `2 jobs`, `0 jobs` (`plural` for every count but one).
pub fn count(n: u64, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}
