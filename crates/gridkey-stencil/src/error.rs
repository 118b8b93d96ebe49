//! The one error type of the crate.

use std::fmt;
use std::io;
use std::path::PathBuf;

use gridkey_fingerprint::{FingerprintError, TranslationKey};
use gridkey_offsets::OffsetsError;

/// How many values a field must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Exactly this many: fields on the domain of one of the program's tables, and sparse fields.
    Exactly(usize),
    /// At least this many: fields on a dimension the program only reads through a table
    /// (its codomain), which must cover the largest index, `max + 1`.
    AtLeast(usize),
}

impl Need {
    /// Whether a field of `len` values satisfies this need.
    pub fn accepts(self, len: usize) -> bool {
        match self {
            Need::Exactly(n) => len == n,
            Need::AtLeast(n) => len >= n,
        }
    }

    /// The smallest length that satisfies this need.
    pub fn min_len(self) -> usize {
        match self {
            Need::Exactly(n) | Need::AtLeast(n) => n,
        }
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Exactly(n) => write!(f, "exactly {n}"),
            Need::AtLeast(n) => write!(f, "at least {n}"),
        }
    }
}

/// The dimension(s) of a connectivity a stage's field must sit on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The output of a stage lives on the connectivity's domain.
    Domain,
    /// The source of a stage lives on the connectivity's codomain.
    Codomain,
    /// The weights of a stage live on the connectivity's (domain, local dimension).
    DomainAndLocal,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Domain => "domain",
            Side::Codomain => "codomain",
            Side::DomainAndLocal => "domain and local dimension",
        })
    }
}

/// Errors of the reference frontend. Every variant names the program (and the offset, field or
/// file) and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StencilError {
    /// A program violates the IR's rules (unknown field, field written twice, wrong field kind...).
    #[error("program {program} is invalid: {reason}; fix the program's definition")]
    InvalidProgram {
        /// The program's name.
        program: String,
        /// What is wrong.
        reason: String,
    },
    /// Bytes that are not a program's stable encoding.
    #[error(
        "cannot decode a program: {reason}; the encoding comes from another gridkey-stencil version or was damaged"
    )]
    Decode {
        /// What is wrong.
        reason: String,
    },
    /// The offset provider has no entry for an offset the program uses.
    #[error(
        "program {program} uses offset {offset}, which the offset provider does not have; add {offset} to the provider"
    )]
    MissingOffset {
        /// The program's name.
        program: String,
        /// The offset name.
        offset: String,
    },
    /// The offset names a dimension, but the program gathers through it.
    #[error("program {program} gathers through offset {offset}, but the provider maps it to dimension {dimension}; give {offset} a neighbour table")]
    NotAGather {
        /// The program's name.
        program: String,
        /// The offset name.
        offset: String,
        /// The dimension the provider maps it to.
        dimension: String,
    },
    /// A field is not declared on the dimension(s) of the connectivity it is used with (the
    /// program's own declaration, [`crate::Program::field`], says what it is declared on).
    #[error("program {program} uses field {field} on the {role} of offset {offset}, which is {actual} in the offset provider, but declares it on other dimensions; declare {field} on {actual} or use another offset")]
    DimensionMismatch {
        /// The program's name.
        program: String,
        /// The offset name.
        offset: String,
        /// The field name.
        field: String,
        /// Which side of the connectivity the field must sit on.
        role: Side,
        /// The dimension(s) the connectivity has there: `Vertex`, or `(Cell, C2EDim)` for weights.
        actual: String,
    },
    /// A runtime table could not be read on the host (its copy failed or was not what its
    /// table source declared).
    #[error("program {program}: {source}")]
    Offsets {
        /// The program's name.
        program: String,
        /// What the offset provider said, naming the offset.
        source: OffsetsError,
    },
    /// A table entry is negative and not the connectivity's skip value.
    #[error("program {program}: table of offset {offset} has entry {value} at ({row}, {col}), below 0 and not its skip value {skip_value:?}; fix the table or declare the skip value")]
    TableEntry {
        /// The program's name.
        program: String,
        /// The offset name.
        offset: String,
        /// Row of the entry.
        row: usize,
        /// Column of the entry.
        col: usize,
        /// The entry.
        value: i64,
        /// The connectivity's skip value.
        skip_value: Option<i64>,
    },
    /// The tables disagree about the extent of a dimension.
    #[error("program {program}: extent of dimension {dimension} is inconsistent: {reason}; the offset provider's tables do not describe one mesh")]
    Extent {
        /// The program's name.
        program: String,
        /// The dimension.
        dimension: String,
        /// Which tables disagree and how.
        reason: String,
    },
    /// A translation option this frontend does not know.
    #[error("unknown translation option {option:?}; the options this frontend knows are: {known}")]
    UnknownOption {
        /// The option's name.
        option: String,
        /// The options this frontend knows, comma separated.
        known: String,
    },
    /// A translation option with a value it does not accept.
    #[error("translation option {option:?} has value {value:?}; accepted values: {accepted}")]
    OptionValue {
        /// The option's name.
        option: String,
        /// The value given.
        value: String,
        /// The values it accepts.
        accepted: String,
    },
    /// The translation cache failed.
    #[error("translation cache: {0}")]
    Cache(#[from] FingerprintError),
    /// A compile-time table no longer has the content its digest names (`verify_tables`).
    #[error("program {program}: offset {offset}: {source}")]
    TableChanged {
        /// The program's name.
        program: String,
        /// The offset whose table changed.
        offset: String,
        /// The store's finding.
        source: gridkey_store::StoreError,
    },
    /// The fault matrix's test hook in the settings (`test_hooks.fault`) does not parse.
    #[error("settings test_hooks.fault: {0}")]
    FaultHook(#[from] gridkey_fs::FsError),
    /// An I/O error of the build cache or the build directory.
    #[error(
        "program {program}: cannot {action} {path}: {source}; check that the cache directory is writable and has space"
    )]
    Io {
        /// The program's name.
        program: String,
        /// What was being done (`create`, `write`, `rename into`).
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The C compiler is missing or failed; nothing was left in the build cache.
    #[error("C compiler `{cc}` failed to build program {program} ({}): {}; check the compiler's message (a full disk, a bad flag), install a C compiler or set CC to one", status.map_or_else(|| "could not be run".to_owned(), |s| format!("exit status {s}")), if stderr_tail.is_empty() { "it printed nothing" } else { stderr_tail.as_str() })]
    Compiler {
        /// The compiler command.
        cc: String,
        /// The program's name.
        program: String,
        /// The exit status, or `None` when the compiler could not be started.
        status: Option<i32>,
        /// The end of what the compiler wrote to stderr (or why it could not be started).
        stderr_tail: String,
    },
    /// The C compiler was ended by a signal that something outside gridkey sent it (an
    /// out-of-memory killer, a job scheduler, a person); nothing was left in the build cache.
    /// Kept apart from [`StencilError::Compiler`] so that the message names the signal instead of
    /// blaming the compiler or the installation.
    #[error("C compiler `{cc}` was killed by signal {signal} while building program {program}: {}; something outside gridkey ended it (an out-of-memory killer, a time limit); run again", if stderr_tail.is_empty() { "it printed nothing" } else { stderr_tail.as_str() })]
    CompilerKilled {
        /// The compiler command.
        cc: String,
        /// The program's name.
        program: String,
        /// The signal number (9 for `SIGKILL`).
        signal: i32,
        /// The end of what the compiler wrote to stderr before it was killed.
        stderr_tail: String,
    },
    /// The debug switch `verify_hits` translated a cache hit again and got other bytes.
    #[error("program {program}: translation cache entry {key} differs from a fresh translation at byte {first_difference}; translation is not deterministic or the entry was tampered with, delete it and report a bug")]
    VerifyMismatch {
        /// The program's name.
        program: String,
        /// The translation key.
        key: TranslationKey,
        /// Offset of the first byte that differs.
        first_difference: usize,
    },
    /// A library of the build cache fails the check made before every load (ADR 0023): its
    /// checksum trailer does not match its bytes or its name, or it is not a complete ELF file.
    #[error("kernel library {artifact} fails its check: {reason}; remove it (the next run builds it again)")]
    BadLibrary {
        /// The library file.
        artifact: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The shared library could not be loaded or is not a kernel of this program.
    #[error("cannot load the kernel of program {program} from {artifact}: {reason}; the next run builds it again")]
    Load {
        /// The program's name.
        program: String,
        /// The shared library.
        artifact: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An input field of the program was not given.
    #[error("program {program} needs input field {field}, which was not given; pass it (see make_inputs)")]
    MissingField {
        /// The program's name.
        program: String,
        /// The field name.
        field: String,
    },
    /// A field has the wrong number of values.
    #[error("program {program}: field {field} has {found} values, it needs {need}; size it from the offset provider's tables")]
    FieldLength {
        /// The program's name.
        program: String,
        /// The field name.
        field: String,
        /// What it needs (for a kernel: what it was compiled for).
        need: Need,
        /// What it has.
        found: usize,
    },
    /// A runtime table does not have the rows or columns the kernel was compiled for.
    #[error("program {program} was compiled for offset {offset} with {compiled} {axis}, the runtime table has {runtime}; compile against these tables again")]
    TableExtent {
        /// The program's name.
        program: String,
        /// The offset name.
        offset: String,
        /// `rows` or `cols`.
        axis: &'static str,
        /// The extent the kernel was compiled for.
        compiled: u64,
        /// The extent of the runtime table.
        runtime: u64,
    },
    /// A runtime table entry lies outside the index range the kernel was compiled for (the
    /// table changed after compilation, against docs/design.md "Contracts"), or outside the source field.
    #[error("program {program}: entry ({row}, {col}) = {index} of the runtime table of offset {offset} is outside {min}..={max}, the range it was compiled for; tables must not change after compilation, compile against these tables again")]
    IndexOutOfRange {
        /// The program's name.
        program: String,
        /// The offset name.
        offset: String,
        /// Row of the entry.
        row: u64,
        /// Column of the entry.
        col: u64,
        /// The entry.
        index: i64,
        /// Smallest index allowed.
        min: i64,
        /// Largest index allowed.
        max: i64,
    },
    /// The kernel returned a status this crate does not know (a library of another ABI).
    #[error(
        "kernel of program {program} returned status {code} (slot {slot}); delete the artifact so it is built again"
    )]
    KernelStatus {
        /// The program's name.
        program: String,
        /// The status code.
        code: i32,
        /// The table or field slot it names.
        slot: i32,
    },
}
