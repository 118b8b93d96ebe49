//! The frontend fingerprint: a digest of the source files that shape what this frontend
//! translates to (ADR 0020).
//!
//! The crate version alone is the same on every commit, so a frontend rebuilt with another
//! translation would be served the translations of the old one. The build script
//! (`build.rs`) therefore hashes [`TRANSLATION_SOURCES`] with [`fingerprint_of`] and the
//! crate exposes the result as [`crate::FRONTEND_FINGERPRINT`], which enters every
//! translation key through [`crate::frontend`]. Only source text is hashed, by path relative to
//! the crate root: the same code gives the same fingerprint in any checkout, profile and
//! toolchain, and any change of a listed file (comments included) gives another.
//!
//! This file is compiled twice: into the crate, and into `build.rs` by `#[path]`; it uses
//! nothing but `std` and `xxhash-rust`.

use std::io;
use std::path::Path;

use xxhash_rust::xxh3::Xxh3;

/// The files of the translation path, relative to the crate root: the IR and its encoding,
/// domain inference, C emission, the compile step that stores what translation returns, the
/// crate root (the frontend's name and identity), this file and the build script.
pub const TRANSLATION_SOURCES: &[&str] =
    &["build.rs", "src/compile.rs", "src/emit.rs", "src/fingerprint.rs", "src/infer.rs", "src/ir.rs", "src/lib.rs"];

/// The other source files of the crate and why they cannot change a translation. A test
/// checks that every file under `src/` is in exactly one of the two lists, so a new file has
/// to be placed.
pub const OTHER_SOURCES: &[(&str, &str)] = &[
    ("src/compiler.rs", "the C compiler's identity, a build-key input, after translation"),
    ("src/error.rs", "error values and messages; a failed translation stores nothing"),
    ("src/exec.rs", "loads and runs built kernels, after translation"),
    ("src/icon.rs", "the shipped programs, keyed by their own encoding"),
    ("src/library.rs", "the checksum trailer of built libraries, after translation"),
];

/// Domain tag hashed first, so that the fingerprint cannot equal another xxh3 digest of gridkey.
const TAG: &[u8] = b"gridkey-stencil translation sources v1";

/// The fingerprint of `files` (paths relative to `root`, in the given order): xxh3_128 over
/// the tag, the number of files as u64 LE, then per file its relative path and its bytes, each
/// as a u64 LE length and the bytes; 32 lowercase hex digits.
///
/// Errors: the I/O error of the first file that cannot be read.
pub fn fingerprint_of(root: &Path, files: &[&str]) -> io::Result<String> {
    let mut h = Xxh3::new();
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(TAG);
    field(&(files.len() as u64).to_le_bytes());
    for file in files {
        let text = std::fs::read(root.join(file))
            .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", root.join(file).display())))?;
        field(file.as_bytes());
        field(&text);
    }
    Ok(format!("{:032x}", h.digest128()))
}
