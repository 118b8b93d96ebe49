//! Every integration test of `gridkey`, one module per file of `tests/`, in one binary:
//! one link for the crate instead of one per file (`autotests = false` and a single `[[test]]`
//! in its `Cargo.toml`). `cargo test -p gridkey --test all MODULE::` runs one file's tests;
//! the tidy test (`tests/tests/tidy.rs`) fails when a file of `tests/` is not a module here.

mod artifacts;
mod bounded_waits;
mod cli;
mod common;
mod compiler_identity;
mod concurrent_runs;
mod explain;
mod faults;
mod gt4py_store;
mod kept_tables;
mod messages;
mod no_poisoned_entry;
mod output;
mod process_runner;
mod readme;
mod remote;
mod run_signals;
mod settings_travel;
mod site_cache;
mod task_settings;
mod truncated_map;
mod ugrid;
mod verified_travel;
mod worker_faults;
