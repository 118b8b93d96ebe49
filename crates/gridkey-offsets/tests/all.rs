//! Every integration test of `gridkey-offsets`, one module per file of `tests/`, in one binary:
//! one link for the crate instead of one per file (`autotests = false` and a single `[[test]]`
//! in its `Cargo.toml`). `cargo test -p gridkey-offsets --test all MODULE::` runs one file's tests;
//! the tidy test (`tests/tests/tidy.rs`) fails when a file of `tests/` is not a module here.

mod convert;
mod kept;
mod memo;
mod source;
