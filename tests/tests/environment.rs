//! No library crate reads the process environment: settings are parsed once, at the edge
//! (ADR 0013). Only the entry points below may read it; xtask is exempt. A new reader elsewhere
//! fails this test with its file and line.

use std::path::{Path, PathBuf};

/// The entry points that read the process environment, and why.
const ALLOWED: &[(&str, &str)] = &[
    ("crates/gridkey/src/settings.rs", "the binary's edge: flags, then the environment"),
    ("crates/gridkey-python/src/settings.rs", "the Python package's constructor"),
];

/// Calls that read or change the process environment.
const READERS: &[&str] =
    &["env::var(", "env::var_os(", "env::vars(", "env::vars_os(", "env::set_var(", "env::remove_var("];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn only_the_entry_points_read_the_environment() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let src = krate.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 20, "found the library sources: {}", files.len());
    let mut readers = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        if ALLOWED.iter().any(|(allowed, _)| *allowed == rel) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if READERS.iter().any(|r| code.contains(r)) {
                readers.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(readers.is_empty(), "library code reads the environment; take a setting instead:\n{}", readers.join("\n"));
}
