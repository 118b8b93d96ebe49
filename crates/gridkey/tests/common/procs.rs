//! The process tree under `/proc`, for the tests and drivers that signal `gridkey run`'s workers
//! from outside: `crates/gridkey/tests/run_signals.rs` (through `common`) and
//! `cargo xtask kill-demo` (`xtask-faults` includes this file with `#[path]`). Standard library
//! only, so that both can include it.

#![allow(dead_code)]

/// Child processes of `pid`, from every thread's `/proc/PID/task/TID/children` list; empty when
/// `pid` is gone.
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out
}

/// Every process below `pid`: its children, theirs, and so on.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut next = children(pid);
    while let Some(p) = next.pop() {
        next.extend(children(p));
        all.push(p);
    }
    all
}

/// Whether `pid` has exited: gone, or a zombie waiting to be reaped (state `Z` in
/// `/proc/PID/stat`).
pub fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}
