//! Tidy checks over the tree: what reviewers would otherwise have to remember. Each check names
//! the file and what to change.
//!
//! - Every integration-test file is part of its crate's one test binary: a crate with files in
//!   `tests/` says `autotests = false`, declares one `[[test]]` at `crates/*/tests/all.rs`
//!   (for this crate, the `all.rs` of its own `tests/`), and that root declares every `tests/NAME.rs` (and
//!   `tests/common/`) as a module. A file left out would never be compiled, so its tests would
//!   pass by not running.
//! - The docs cannot drift: every versioned name (`tables-v1`), format version (`key format
//!   v2`, `PROTOCOL_VERSION = 5`), path in the tree and `GRIDKEY_*` variable that README.md,
//!   ARCHITECTURE.md, docs/design.md, the ADRs and the Python package's README and docstrings
//!   name is checked against the code's constants and the files; an ADR may name what was true
//!   when it was written. An ADR that another amends or supersedes says so in its status, and
//!   the index has one row per ADR.
//! - Each versioned bucket of a cache directory carries its format's version (ADR 0043).
//! - A crate below the entry points names no variable of theirs in a message: it names the
//!   setting by its role, and the entry point names the variable (ADR 0013).
//! - No function of the xtask crates (`xtask*/`) runs over [`MAX_FUNCTION_LINES`] lines unless
//!   its doc comment says why, with a line that contains "over 100 lines because" (ADR 0042):
//!   a driver is a list of named steps.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The xtask crates: the directories `xtask*` in the root with a `Cargo.toml` (ADR 0042).
fn xtask_crates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("xtask"))
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    out.sort();
    out
}

/// The workspace members with a `Cargo.toml`: `crates/*`, `tests`, the xtask crates.
fn members() -> Vec<PathBuf> {
    let root = root();
    let mut out: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    out.extend([root.join("tests")].into_iter().filter(|p| p.join("Cargo.toml").is_file()));
    out.extend(xtask_crates());
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
    // A file that needs a process of its own (it reads process-wide counters) is a [[test]] of
    // its own, which its Cargo.toml gives with the reason.
    let own: Vec<String> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("path = \"tests/")?.strip_suffix(".rs\"").map(str::to_owned))
        .filter(|stem| stem != "all")
        .collect();
    let targets = manifest.matches("[[test]]").count();
    if targets != 1 + own.len() || !manifest.contains("path = \"tests/all.rs\"") {
        problems.push(format!(
            "{rel}/Cargo.toml: declare one [[test]] with path = \"tests/all.rs\" (found {targets} [[test]])"
        ));
    }
    files.retain(|f| !own.contains(f));
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

// ---------------------------------------------------------------------------------------------
// Docs that cannot drift: the names, versions, paths and variables the docs give, checked
// against the code's constants and the tree.

/// The current docs: what they say must be true now.
const CURRENT_DOCS: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "docs/design.md",
    "crates/gridkey-python/README.md",
    "crates/gridkey-python/python/gridkey",
];

/// A format and the ADR that introduced each of its versions, oldest first; the last is the
/// code's constant (checked by `the_version_history_ends_at_the_codes_constants`).
const HISTORY: &[(&str, &[(u32, u32)])] = &[
    ("digest", &[(1, 1)]),
    ("key", &[(1, 3), (2, 20)]),
    ("entry", &[(1, 3)]),
    ("object", &[(1, 19)]),
    ("protocol", &[(1, 4), (2, 4), (3, 13), (4, 18), (5, 32), (6, 54)]),
    // Build format v2 came with ADR 0022 and ADR 0023, written together.
    ("build", &[(1, 7), (2, 23)]),
];

/// The constants that docs quote as `NAME = N`, with the format whose history they follow.
const QUOTED_CONSTANTS: &[(&str, &str)] = &[
    ("DIGEST_FORMAT_VERSION", "digest"),
    ("KEY_FORMAT_VERSION", "key"),
    ("ENTRY_FORMAT_VERSION", "entry"),
    ("OBJECT_FORMAT_VERSION", "object"),
    ("PROTOCOL_VERSION", "protocol"),
    ("BUILD_FORMAT_VERSION", "build"),
];

/// The current version of each format, from the code.
fn current_version(format: &str) -> u32 {
    match format {
        "digest" => gridkey_digest::DIGEST_FORMAT_VERSION,
        "key" => gridkey_fingerprint::KEY_FORMAT_VERSION,
        "entry" => gridkey_fingerprint::ENTRY_FORMAT_VERSION,
        "object" => u32::from(gridkey_remote::object::OBJECT_FORMAT_VERSION),
        "protocol" => gridkey_jobs::protocol::PROTOCOL_VERSION,
        "build" => gridkey_stencil::BUILD_FORMAT_VERSION,
        other => panic!("no constant for format {other}"),
    }
}

/// Versioned names that code no longer uses, and the ADR that retired each: an ADR written up to
/// that one may name it (it was true then); current docs may not.
const RETIRED_NAMES: &[(&str, u32)] = &[("translation-v1", 20), ("build-v1", 23)];

/// Variables the code no longer reads, and the ADR that retired each (same rule).
const RETIRED_VARIABLES: &[(&str, u32)] = &[("GRIDKEY_WORKER_PARENT", 13)];

/// Names spelt as variables that are not environment variables: `GRIDKEY_GT4PY_TIERS` is an
/// attribute gridkey sets on GT4Py's `gt4py.next.config`, which GT4Py ships to its workers.
const NOT_VARIABLES: &[&str] = &["GRIDKEY_GT4PY_TIERS"];

/// Paths that docs name and that are made by a tool, not kept in the tree.
const GENERATED_PATHS: &[&str] = &["fuzz/artifacts"];

/// The versioned names of files and directories the code uses now, from its constants.
fn current_names() -> Vec<String> {
    let mut names: Vec<String> = vec![
        gridkey_store::TABLES_DIR.to_owned(),
        gridkey_fingerprint::TRANSLATION_DIR.to_owned(),
        gridkey_stencil::BUILD_DIR.to_owned(),
        gridkey::cache::LOCAL_STATS_FILE.to_owned(),
        gridkey::cache::REGISTRATION_FORMAT.to_owned(),
        gridkey::quarantine::QUARANTINE_FILE.to_owned(),
        format!("obj-v{}", gridkey_remote::object::OBJECT_FORMAT_VERSION),
    ];
    // Every bucket of a cache directory (ADR 0043).
    names.extend(gridkey_fs::CacheBucket::ALL.iter().map(|b| b.name().to_owned()));
    // Golden files are named by the format they pin.
    for entry in std::fs::read_dir(root().join("data/golden")).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        names.push(name.split('.').next().unwrap().to_owned());
    }
    names
}

/// Redis names without a constant of their own: they must appear in the remote client's source.
const REDIS_NAMES: &[&str] = &["lease-v1", "stats-v1"];

/// A doc file, its path relative to the root, and the ADR number when it is an ADR.
struct Doc {
    rel: String,
    text: String,
    adr: Option<u32>,
}

fn docs() -> Vec<Doc> {
    let root = root();
    let mut out = Vec::new();
    let mut add = |path: PathBuf, adr: Option<u32>| {
        let text = std::fs::read_to_string(&path).unwrap();
        out.push(Doc { rel: path.strip_prefix(&root).unwrap().display().to_string(), text, adr });
    };
    for rel in CURRENT_DOCS {
        let path = root.join(rel);
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&path).unwrap().flatten().map(|e| e.path()).collect();
            files.sort();
            for file in files.into_iter().filter(|f| f.extension().is_some_and(|e| e == "py")) {
                add(file, None);
            }
        } else {
            add(path, None);
        }
    }
    for (number, path) in adr_files() {
        add(path, Some(number));
    }
    out
}

/// The ADR files, by number.
fn adr_files() -> Vec<(u32, PathBuf)> {
    let mut out: Vec<(u32, PathBuf)> = std::fs::read_dir(root().join("adr"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let number = name.get(..4)?.parse().ok()?;
            name.ends_with(".md").then_some((number, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// The words of `text` made of the characters `keep` accepts, with their line numbers.
fn words(text: &str, keep: impl Fn(char) -> bool) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut word = String::new();
        for c in line.chars().chain(std::iter::once(' ')) {
            if keep(c) {
                word.push(c);
            } else if !word.is_empty() {
                out.push((n + 1, std::mem::take(&mut word)));
            }
        }
    }
    out
}

/// `text` without ADR file names (`0013-settings-at-the-edge-protocol-v3-and-….md`), whose
/// words are titles, not names.
fn without_adr_file_names(text: &str) -> String {
    text.split(".md")
        .map(|part| match part.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            Some(i)
                if part[i + 1..]
                    .get(..5)
                    .is_some_and(|p| p[..4].bytes().all(|b| b.is_ascii_digit()) && p.ends_with('-')) =>
            {
                &part[..i + 1]
            }
            None if part.get(..5).is_some_and(|p| p[..4].bytes().all(|b| b.is_ascii_digit()) && p.ends_with('-')) => "",
            _ => part,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The versioned names (`NAME-vN`) of a text.
fn versioned_names(text: &str) -> Vec<(usize, String)> {
    words(&without_adr_file_names(text), |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        .into_iter()
        .filter_map(|(n, w)| {
            let w = w.trim_matches('-');
            let (stem, version) = w.rsplit_once("-v")?;
            (!stem.is_empty() && !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()))
                .then(|| (n, w.to_owned()))
        })
        .collect()
}

/// Whether ADR `adr` may name version `version` of `format`: it is the current one, or it was
/// current when the ADR was written (the next version came with this ADR or a later one).
fn adr_may_name(format: &str, version: u32, adr: u32) -> bool {
    let history = HISTORY.iter().find(|(f, _)| *f == format).map(|(_, h)| *h).unwrap_or(&[]);
    version == current_version(format)
        || history.iter().any(|&(v, _)| v == version)
            && history.iter().find(|&&(v, _)| v == version + 1).is_some_and(|&(_, introduced)| introduced >= adr)
}

/// The format-version phrases of a text: `digest format v1`, `key v2`, `protocol v5`,
/// `PROTOCOL_VERSION = 5`, as (line, format, version).
fn version_phrases(text: &str) -> Vec<(usize, &'static str, u32)> {
    let mut out = Vec::new();
    let tokens = words(&without_adr_file_names(text), |c| c.is_ascii_alphanumeric() || c == '_' || c == '=');
    let joined: Vec<(usize, String)> = tokens.into_iter().map(|(n, w)| (n, w.to_lowercase())).collect();
    for (i, (n, word)) in joined.iter().enumerate() {
        let Some(version) = word.strip_prefix('v').and_then(|v| v.parse::<u32>().ok()) else { continue };
        let before: Vec<&str> = joined[i.saturating_sub(2)..i].iter().map(|(_, w)| w.as_str()).collect();
        let format = match before.as_slice() {
            [.., f, "format"] | [.., f] => *f,
            _ => continue,
        };
        if let Some((name, _)) = HISTORY.iter().find(|(f, _)| *f == format) {
            out.push((*n, *name, version));
        }
    }
    for (n, line) in text.lines().enumerate() {
        for (constant, format) in QUOTED_CONSTANTS {
            for (at, _) in line.match_indices(constant) {
                let rest = line[at + constant.len()..].trim_start();
                let Some(value) = rest.strip_prefix('=') else { continue };
                let digits: String = value.trim_start().chars().take_while(char::is_ascii_digit).collect();
                if let Ok(version) = digits.parse() {
                    out.push((n + 1, *format, version));
                }
            }
        }
    }
    out
}

/// What one doc says that the code or the tree contradicts.
fn doc_problems(doc: &Doc, names: &[String], variables: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let at = |n: usize| format!("{}:{n}", doc.rel);
    for (n, name) in versioned_names(&doc.text) {
        if names.contains(&name) {
            continue;
        }
        match RETIRED_NAMES.iter().find(|(retired, _)| *retired == name) {
            Some((_, retired_by)) if doc.adr.is_some_and(|adr| adr <= *retired_by) => {}
            Some((_, retired_by)) => problems
                .push(format!("{}: `{name}` was retired by ADR {retired_by:04}; name what the code uses now", at(n))),
            None => problems.push(format!(
                "{}: `{name}` is no versioned name of the code (a directory, file or golden file); \
                 correct it or add its constant to tests/tests/tidy.rs",
                at(n)
            )),
        }
    }
    for (n, format, version) in version_phrases(&doc.text) {
        let current = current_version(format);
        let fine = match doc.adr {
            None => version == current,
            Some(adr) => adr_may_name(format, version, adr),
        };
        if !fine {
            problems.push(format!("{}: {format} format v{version}, but the code's is v{current}", at(n)));
        }
    }
    for (n, word) in words(&doc.text, |c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
        let Some(rest) = word.strip_prefix("GRIDKEY_") else { continue };
        let word = word.trim_end_matches('_');
        if rest.is_empty() || variables.iter().any(|v| v == word) || NOT_VARIABLES.contains(&word) {
            continue;
        }
        if RETIRED_VARIABLES.iter().any(|&(retired, by)| retired == word && doc.adr.is_some_and(|adr| adr <= by)) {
            continue;
        }
        // A prefix such as `GRIDKEY_REMOTE_*` names a family.
        if rest.ends_with('_') && variables.iter().any(|v| v.starts_with(&format!("{word}_"))) {
            continue;
        }
        problems.push(format!("{}: `{word}` is not a variable the code reads", at(n)));
    }
    let base = root().join(&doc.rel);
    let dir = base.parent().unwrap();
    for (n, word) in words(&doc.text, |c| c.is_ascii_alphanumeric() || "_./-".contains(c)) {
        let word = word.trim_end_matches(['.', '/']);
        let Some(first) = word.split('/').next() else { continue };
        if !word.contains('/')
            || !(["data", "crates", "tests", "adr", "docs", "fuzz", "python"].contains(&first)
                || first.starts_with("xtask"))
        {
            continue;
        }
        if !root().join(word).exists()
            && !dir.join(word).exists()
            && !GENERATED_PATHS.iter().any(|g| word.starts_with(g))
        {
            problems.push(format!("{}: `{word}` is not in the tree", at(n)));
        }
    }
    problems
}

/// Every `GRIDKEY_*` name the code knows: the settings' variables and the test hooks, as string
/// literals in the sources.
fn code_variables() -> Vec<String> {
    let mut out: Vec<String> = gridkey_settings::VARIABLES.iter().map(|v| v.name.to_owned()).collect();
    let mut files = Vec::new();
    for dir in [root().join("crates"), root().join("tests")].into_iter().chain(xtask_crates()) {
        rust_files(&dir, &mut files);
    }
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("\"GRIDKEY_") {
            let name: String = text[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out.sort();
    out.dedup();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && entry.file_name() != "target" {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_docs_name_the_versions_directories_files_and_variables_of_the_code() {
    let names = current_names();
    let client = std::fs::read_to_string(root().join("crates/gridkey-remote/src/client.rs")).unwrap();
    let mut names = names;
    for name in REDIS_NAMES {
        assert!(client.contains(&format!(":{name}")), "crates/gridkey-remote/src/client.rs no longer names {name}");
        names.push((*name).to_owned());
    }
    let variables = code_variables();
    let docs = docs();
    assert!(docs.len() > 40, "found the docs: {}", docs.len());
    let problems: Vec<String> = docs.iter().flat_map(|d| doc_problems(d, &names, &variables)).collect();
    assert!(problems.is_empty(), "the docs drifted from the code:\n{}", problems.join("\n"));
}

#[test]
fn the_version_history_ends_at_the_codes_constants() {
    for (format, history) in HISTORY {
        assert_eq!(
            history.last().map(|&(v, _)| v),
            Some(current_version(format)),
            "{format}: add the new version to HISTORY"
        );
    }
}

/// The ADRs each ADR says it amends or supersedes, from the lines before its first section.
fn amended_by_header(text: &str) -> Vec<u32> {
    let header: String = text.lines().skip(1).take_while(|l| !l.starts_with("## ")).collect::<Vec<_>>().join(" ");
    let lower = header.to_lowercase();
    let mut out = Vec::new();
    for verb in ["amends", "supersedes"] {
        for (at, _) in lower.match_indices(verb) {
            // The ADR numbers of the clause: up to the next sentence end.
            let clause = &header[at..];
            let clause = &clause[..clause.find(". ").unwrap_or(clause.len())];
            for word in clause.split(|c: char| !c.is_ascii_digit()) {
                if word.len() == 4 {
                    if let Ok(n) = word.parse() {
                        out.push(n);
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The status of an ADR: what it says between its title and its first section (a `Status:`
/// line, or an "Amended by" sentence).
fn status(text: &str) -> String {
    text.lines().skip(1).take_while(|l| !l.starts_with("## ")).collect::<Vec<_>>().join(" ")
}

#[test]
fn an_amended_adr_says_so_in_its_status() {
    let adrs: Vec<(u32, PathBuf, String)> = adr_files()
        .into_iter()
        .map(|(n, p)| {
            let t = std::fs::read_to_string(&p).unwrap();
            (n, p, t)
        })
        .collect();
    assert!(adrs.len() > 30, "found the ADRs: {}", adrs.len());
    let mut problems = Vec::new();
    for (n, path, text) in &adrs {
        let rel = path.strip_prefix(root()).unwrap().display();
        let status = status(text);
        let lower = status.to_lowercase();
        for (later, _, later_text) in adrs.iter().filter(|(m, _, _)| m > n) {
            if !amended_by_header(later_text).contains(n) {
                continue;
            }
            let said = ["amended by", "superseded"].iter().any(|w| lower.contains(w))
                && status.contains(&format!("{later:04}"));
            if !said {
                problems.push(format!(
                    "{rel}: ADR {later:04} amends or supersedes it; say \"amended by {later:04}\" in its status"
                ));
            }
        }
    }
    let index = std::fs::read_to_string(root().join("adr/README.md")).unwrap();
    for (n, path, _) in &adrs {
        let link = format!("]({})", path.file_name().unwrap().to_string_lossy());
        let rows = index.lines().filter(|l| l.contains(&link)).count();
        if rows != 1 {
            problems.push(format!("adr/README.md: ADR {n:04} has {rows} index rows; give it one"));
        }
    }
    assert!(problems.is_empty(), "ADR statuses:\n{}", problems.join("\n"));
}

/// Each versioned bucket of a cache directory names the version of the format it holds
/// (ADR 0043), and the stores' constants are the buckets' names.
#[test]
fn every_versioned_bucket_carries_its_formats_version() {
    use gridkey_fs::CacheBucket;
    for bucket in CacheBucket::ALL {
        let expected = match bucket {
            CacheBucket::Tables => Some(gridkey_digest::DIGEST_FORMAT_VERSION),
            CacheBucket::Translation => Some(gridkey_fingerprint::KEY_FORMAT_VERSION),
            CacheBucket::Build => Some(gridkey_stencil::BUILD_FORMAT_VERSION),
            CacheBucket::Gt4py => Some(gridkey_fingerprint::gt4py::GT4PY_STORE_VERSION),
            // JSON files of one format each, never bumped so far.
            CacheBucket::TierStats | CacheBucket::Quarantine => Some(1),
            CacheBucket::Locks | CacheBucket::Runs => None,
        };
        assert_eq!(bucket.version(), expected, "{bucket}: rename the bucket with its format's version");
    }
    assert_eq!(gridkey_store::TABLES_DIR, CacheBucket::Tables.name());
    assert_eq!(gridkey_fingerprint::TRANSLATION_DIR, CacheBucket::Translation.name());
    assert_eq!(gridkey_stencil::BUILD_DIR, CacheBucket::Build.name());
    assert_eq!(gridkey_fingerprint::gt4py::GT4PY_DIR, CacheBucket::Gt4py.name());
    assert_eq!(gridkey_fs::lock::LOCKS_DIR, CacheBucket::Locks.name());
    assert_eq!(gridkey::cache::RUNS_DIR, CacheBucket::Runs.name());
    assert_eq!(gridkey::cache::LOCAL_STATS_FILE, CacheBucket::TierStats.name());
    assert_eq!(gridkey::quarantine::QUARANTINE_FILE, CacheBucket::Quarantine.name());
    let stores: Vec<&str> = gridkey::cache::STORES.iter().map(|(name, _)| *name).collect();
    assert_eq!(stores, CacheBucket::STORES.map(|(b, _)| b.name()));
    // Every name is distinct.
    let mut names: Vec<&str> = CacheBucket::ALL.iter().map(|b| b.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), CacheBucket::ALL.len());
}

/// The crates that read or parse the environment, and so may name its variables in messages:
/// the binary, the settings, and the Python package (whose `Settings.from_vars` is its edge).
const EDGE_CRATES: &[&str] = &["gridkey", "gridkey-settings", "gridkey-python"];

/// Each `#[error(...)]` attribute of `text`, with its first and last line (1-based): from
/// `#[error(` to the first `)]` after it, which may span lines.
fn error_attributes(text: &str) -> Vec<(usize, usize, &str)> {
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    text.match_indices("#[error(")
        .map(|(at, _)| {
            let end = text[at..].find(")]").map_or(text.len(), |e| at + e + 2);
            (line_of(at), line_of(end), &text[at..end])
        })
        .collect()
}

/// What names a variable of an entry point in `text`, a lower crate's source file: any
/// `#[error(...)]` that names a `GRIDKEY_` variable or an `ENV_` constant, and any other line
/// outside a comment that names a `GRIDKEY_` variable (a message built with `format!`), except
/// `env!` of a build-time variable.
fn variable_problems(file: &str, text: &str) -> Vec<String> {
    let attributes = error_attributes(text);
    let mut out: Vec<String> = attributes
        .iter()
        .filter(|(_, _, attr)| attr.contains("GRIDKEY_") || attr.contains("ENV_"))
        .map(|(line, _, _)| format!("{file}:{line}: this #[error] names a variable of an entry point"))
        .collect();
    for (i, line) in text.lines().enumerate() {
        let code = line.trim_start();
        let in_attribute = attributes.iter().any(|&(first, last, _)| (first..=last).contains(&(i + 1)));
        if in_attribute || code.starts_with("//") || !code.contains("GRIDKEY_") || code.contains("env!(\"GRIDKEY_") {
            continue;
        }
        out.push(format!("{file}:{}: this message names a variable of an entry point", i + 1));
    }
    out
}

/// The most lines a function of the xtask crates may have, from its `fn` line to its closing
/// brace, without a reason in its doc comment.
const MAX_FUNCTION_LINES: usize = 100;

/// The words of a doc line that gives the reason for a longer function.
const LONG_FUNCTION_REASON: &str = "over 100 lines because";

/// `(line, name, lines)` of each function in `text` (rustfmt's layout: the closing brace of a
/// body is the first later line with the `fn` line's indentation and `}`) that is longer than
/// [`MAX_FUNCTION_LINES`] and whose doc comment (the `///` lines above it, attributes skipped)
/// has no line with [`LONG_FUNCTION_REASON`].
fn long_functions(text: &str) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let Some(name) = fn_name(trimmed) else { continue };
        // A declaration without a body (a trait method) ends with `;` before any `{`.
        let Some(open) = lines[i..].iter().position(|l| l.contains('{') || l.trim_end().ends_with(';')) else {
            continue;
        };
        if !lines[i + open].contains('{') {
            continue;
        }
        let close = format!("{indent}}}");
        let Some(end) = lines[i..].iter().position(|l| *l == close || l.starts_with(&format!("{close} "))) else {
            continue;
        };
        // A one-line body closes on its own line.
        let length = if lines[i + open].trim_end().ends_with('}') && open == 0 { 1 } else { end + 1 };
        if length <= MAX_FUNCTION_LINES {
            continue;
        }
        let doc = lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim_start())
            .take_while(|l| l.starts_with("///") || l.starts_with("#["))
            .any(|l| l.starts_with("///") && l.contains(LONG_FUNCTION_REASON));
        if !doc {
            out.push((i + 1, name, length));
        }
    }
    out
}

/// Lower crates take arguments and read no environment (ADR 0013), so their messages name a
/// setting by its role (`the cache directory`, `gridkey_settings::SETTING_ROLES`) and the entry
/// point that set it names its variable (`gridkey_settings::name_settings`).
#[test]
fn lower_crates_name_no_variable_of_an_entry_point_in_their_messages() {
    // The checker finds what it must: a planted attribute over two lines, and a format string.
    let planted = "#[error(\"cannot use {path}; \\\n point GRIDKEY_CACHE_DIR at it\")]\nA,\n";
    assert_eq!(variable_problems("x.rs", planted).len(), 1, "{planted}");
    assert_eq!(variable_problems("x.rs", "#[error(\"{0}\", var = ENV_TIMEOUT)]").len(), 1);
    assert_eq!(variable_problems("x.rs", "let m = format!(\"raise GRIDKEY_LOCK_WAIT\");").len(), 1);
    assert!(variable_problems("x.rs", "// GRIDKEY_CACHE_DIR\nconst F: &str = env!(\"GRIDKEY_X\");").is_empty());

    let mut problems = Vec::new();
    for member in members() {
        let name = member.file_name().unwrap().to_string_lossy().into_owned();
        if !member.starts_with(root().join("crates")) || EDGE_CRATES.contains(&name.as_str()) {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&member.join("src"), &mut files);
        for file in files {
            let rel = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
            problems.extend(variable_problems(&rel, &std::fs::read_to_string(&file).unwrap()));
        }
    }
    assert!(
        problems.is_empty(),
        "name the setting by its role (gridkey_settings::SETTING_ROLES) and let the entry point name the variable:\n{}",
        problems.join("\n")
    );
    // Every role is one a lower crate uses, so the table does not outlive its messages.
    let mut lower = String::new();
    for member in members().into_iter().filter(|m| m.starts_with(root().join("crates"))) {
        let name = member.file_name().unwrap().to_string_lossy().into_owned();
        if EDGE_CRATES.contains(&name.as_str()) {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&member.join("src"), &mut files);
        for file in files {
            lower.push_str(&std::fs::read_to_string(&file).unwrap());
        }
    }
    for role in gridkey_settings::SETTING_ROLES {
        assert!(lower.contains(role.phrase), "no lower crate names {:?}; remove its role", role.phrase);
    }
}

/// The name of the function a trimmed line declares (`pub(crate) async fn NAME(`), if any.
fn fn_name(trimmed: &str) -> Option<String> {
    let mut rest = trimmed;
    for qualifier in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe ", "extern \"C\" "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then_some(name)
}

/// The long functions of `text` as `(name, lines)`: the one place that calls [`long_functions`]
/// in the tests of the counter.
fn check_long(text: &str, expected: &[(&str, usize)]) {
    let found: Vec<(String, usize)> = long_functions(text).into_iter().map(|(_, name, n)| (name, n)).collect();
    let expected: Vec<(String, usize)> = expected.iter().map(|&(name, n)| (name.to_owned(), n)).collect();
    assert_eq!(found, expected, "{text}");
}

/// A function `name` at `indent` with `body` lines of statements and `doc` above it.
fn synthetic_fn(indent: &str, doc: &str, name: &str, body: usize) -> String {
    let mut out = String::new();
    if !doc.is_empty() {
        out.push_str(&format!("{indent}/// {doc}\n"));
    }
    out.push_str(&format!("{indent}pub(crate) fn {name}(x: u32) -> u32 {{\n"));
    for n in 0..body {
        out.push_str(&format!("{indent}    let _v{n} = {{ x + {n} }};\n"));
    }
    out.push_str(&format!("{indent}    x\n{indent}}}\n"));
    out
}

#[test]
fn the_function_counter_counts_from_fn_to_closing_brace_and_reads_the_reason() {
    // 98 statements + `fn` line + tail + brace = 101 lines; 97 statements = 100 lines.
    check_long(&synthetic_fn("", "", "too_long", 98), &[("too_long", 101)]);
    check_long(&synthetic_fn("", "", "just_fits", 97), &[]);
    check_long(&synthetic_fn("", "It runs over 100 lines because the table is one match.", "reasoned", 200), &[]);
    check_long(&synthetic_fn("", "Runs the matrix.", "documented_only", 120), &[("documented_only", 123)]);
    // A method in an impl, after a trait declaration without a body.
    let method =
        format!("trait T {{\n    fn f(&self);\n}}\nimpl S {{\n{}}}\n", synthetic_fn("    ", "", "method", 150));
    check_long(&method, &[("method", 153)]);
    check_long("fn one() -> u32 { 1 }\nfn two() -> u32 {\n    2\n}\n", &[]);
}

#[test]
fn no_function_of_the_xtask_crates_is_over_100_lines_without_a_reason() {
    let mut files = Vec::new();
    for dir in xtask_crates() {
        rust_files(&dir.join("src"), &mut files);
    }
    assert!(files.len() > 10, "the xtask crates' sources: {files:?}");
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, name, length) in long_functions(&text) {
            let rel = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
            problems.push(format!(
                "{rel}:{line}: fn {name} has {length} lines (at most {MAX_FUNCTION_LINES}): split it into named steps, \
                 or say why in its doc with a line containing \"{LONG_FUNCTION_REASON}\""
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
