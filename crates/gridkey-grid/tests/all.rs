//! Every integration test of `gridkey-grid`, one module per file of `tests/`, in one binary:
//! one link for the crate instead of one per file (`autotests = false` and a single `[[test]]`
//! in its `Cargo.toml`). `cargo test -p gridkey-grid --test all MODULE::` runs one file's tests;
//! the tidy test (`tests/tests/tidy.rs`) fails when a file of `tests/` is not a module here.

mod bad_input;
mod common;
mod netcdf4_fuzz;
mod netcdf4_python;
mod real_grids;
mod ugrid;
