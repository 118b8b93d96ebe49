//! Tidy checks over the tree: what reviewers would otherwise have to remember. Each check names
//! the file and what to change.
//!
//! - Every integration-test file is part of its crate's one test binary: a crate with files in
//!   `tests/` says `autotests = false`, declares one `[[test]]` at `tests/all.rs`, and that root
//!   declares every `tests/NAME.rs` (and `tests/common/`) as a module. A file left out would
//!   never be compiled, so its tests would pass by not running.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace members with a `Cargo.toml`: `crates/*`, `tests`, `xtask`.
fn members() -> Vec<PathBuf> {
    let root = root();
    let mut out: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    out.extend([root.join("tests"), root.join("xtask")].into_iter().filter(|p| p.join("Cargo.toml").is_file()));
    out.sort();
    out
}

/// The `mod NAME;` declarations of a Rust file.
fn declared_modules(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)).collect()
}

/// The problems of one member's integration tests (empty when it has none or they are tidy).
fn test_binary_problems(member: &Path) -> Vec<String> {
    let rel = member.strip_prefix(root()).unwrap_or(member).display().to_string();
    let tests = member.join("tests");
    let mut files: Vec<String> = std::fs::read_dir(&tests)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".rs")?.to_owned();
            (stem != "all").then_some(stem)
        })
        .collect();
    if tests.join("common").join("mod.rs").is_file() {
        files.push("common".to_owned());
    }
    files.sort();
    if files.is_empty() {
        return Vec::new();
    }
    let mut problems = Vec::new();
    let manifest = std::fs::read_to_string(member.join("Cargo.toml")).unwrap();
    if !manifest.lines().any(|l| l.trim().replace(' ', "") == "autotests=false") {
        problems.push(format!("{rel}/Cargo.toml: add `autotests = false` to [package] (one test binary per crate)"));
    }
    let targets = manifest.matches("[[test]]").count();
    if targets != 1 || !manifest.contains("path = \"tests/all.rs\"") {
        problems.push(format!(
            "{rel}/Cargo.toml: declare exactly one [[test]] with path = \"tests/all.rs\" (found {targets} [[test]])"
        ));
    }
    let all = std::fs::read_to_string(tests.join("all.rs")).unwrap_or_default();
    let mut declared = declared_modules(&all);
    declared.sort();
    for file in &files {
        if !declared.contains(file) {
            problems.push(format!("{rel}/tests/all.rs: add `mod {file};`, or tests/{file} is never compiled"));
        }
    }
    for module in &declared {
        if !files.contains(module) {
            problems.push(format!("{rel}/tests/all.rs: `mod {module};` has no file tests/{module}.rs"));
        }
    }
    problems
}

#[test]
fn every_test_file_is_part_of_its_crates_one_test_binary() {
    let members = members();
    assert!(members.len() >= 12, "found the workspace members: {members:?}");
    let problems: Vec<String> = members.iter().flat_map(|m| test_binary_problems(m)).collect();
    assert!(problems.is_empty(), "test files outside a test binary:\n{}", problems.join("\n"));
}

#[test]
fn a_test_file_left_out_of_the_binary_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| std::fs::write(dir.path().join(rel), text).unwrap();
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    write("Cargo.toml", "[package]\nautotests = false\n\n[[test]]\nname = \"all\"\npath = \"tests/all.rs\"\n");
    write("tests/all.rs", "mod kept;\nmod gone;\n");
    write("tests/kept.rs", "");
    write("tests/forgotten.rs", "");
    let problems = test_binary_problems(dir.path());
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].ends_with("tests/all.rs: add `mod forgotten;`, or tests/forgotten is never compiled"),
        "{problems:?}"
    );
    assert!(problems[1].ends_with("tests/all.rs: `mod gone;` has no file tests/gone.rs"), "{problems:?}");
    // Without `autotests = false` every file would also be a binary of its own.
    write("Cargo.toml", "[package]\n\n[[test]]\nname = \"all\"\npath = \"tests/all.rs\"\n");
    write("tests/all.rs", "mod forgotten;\nmod kept;\n");
    assert_eq!(test_binary_problems(dir.path()).len(), 1);
}
