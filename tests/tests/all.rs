//! Every integration test of `gridkey-tests`, one module per file of `tests/`, in one binary:
//! one link for the crate instead of one per file (`autotests = false` and a single `[[test]]`
//! in its `Cargo.toml`). `cargo test -p gridkey-tests --test all MODULE::` runs one file's tests;
//! the tidy test (`tests/tests/tidy.rs`) fails when a file of `tests/` is not a module here.

mod environment;
mod golden_keys;
mod mode_equivalence;
mod tidy;
