//! Every integration test of `gridkey-stencil`, one module per file of `tests/`, in one binary:
//! one link for the crate instead of one per file (`autotests = false` and a single `[[test]]`
//! in its `Cargo.toml`). `cargo test -p gridkey-stencil --test all MODULE::` runs one file's tests;
//! the tidy test (`tests/tests/tidy.rs`) fails when a file of `tests/` is not a module here.

mod common;
mod compiler_identity;
mod fingerprint;
mod grids;
mod ir;
mod run;
mod translate;
