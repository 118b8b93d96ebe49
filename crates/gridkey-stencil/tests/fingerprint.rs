//! The frontend fingerprint (ADR 0020): a digest of the translation sources, not of the binary,
//! so a changed translation changes every key and the same code keys alike anywhere.

use std::path::Path;

use gridkey_fingerprint::{KeyInputs, TranslationOptions};
use gridkey_stencil::fingerprint::{fingerprint_of, OTHER_SOURCES, TRANSLATION_SOURCES};
use gridkey_stencil::{frontend, icon_programs, FRONTEND_FINGERPRINT};

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// A copy of the listed translation sources under a fresh temp directory, same relative paths.
fn copy_of_sources() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in TRANSLATION_SOURCES {
        let to = dir.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(Path::new(CRATE).join(file), to).unwrap();
    }
    dir
}

/// The key of the first shipped program with `frontend`, no tables: only the frontend varies.
fn key_with(frontend: &gridkey_fingerprint::Frontend) -> gridkey_fingerprint::TranslationKey {
    let p = &icon_programs()[0];
    let provider = gridkey_offsets::CompileTimeOffsetProvider::new();
    KeyInputs::new(frontend, p.name(), &p.encode(), &TranslationOptions::new(), &provider).key()
}

#[test]
fn the_built_fingerprint_is_the_digest_of_the_listed_sources() {
    // The build script saw exactly these files with exactly these bytes.
    assert_eq!(FRONTEND_FINGERPRINT, fingerprint_of(Path::new(CRATE), TRANSLATION_SOURCES).unwrap());
    assert_eq!(FRONTEND_FINGERPRINT.len(), 32);
    assert!(FRONTEND_FINGERPRINT.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_eq!(frontend().fingerprint, FRONTEND_FINGERPRINT);
}

#[test]
fn the_same_sources_elsewhere_have_the_same_fingerprint() {
    // Another checkout path: the fingerprint hashes paths relative to the crate root only.
    let copy = copy_of_sources();
    assert_eq!(fingerprint_of(copy.path(), TRANSLATION_SOURCES).unwrap(), FRONTEND_FINGERPRINT);
}

#[test]
fn a_changed_translation_source_changes_the_fingerprint_and_every_key() {
    let base = key_with(&frontend());
    for file in TRANSLATION_SOURCES {
        let copy = copy_of_sources();
        let path = copy.path().join(file);
        let mut text = std::fs::read(&path).unwrap();
        // The smallest edit a developer makes: one character of emitted code or a comment.
        text.push(b'\n');
        std::fs::write(&path, text).unwrap();
        let changed = fingerprint_of(copy.path(), TRANSLATION_SOURCES).unwrap();
        assert_ne!(changed, FRONTEND_FINGERPRINT, "{file}: a change must change the fingerprint");
        let rebuilt = gridkey_fingerprint::Frontend { fingerprint: changed, ..frontend() };
        assert_eq!(rebuilt.version, frontend().version, "the crate version stays");
        assert_ne!(key_with(&rebuilt), base, "{file}: a rebuilt frontend must not hit the old entries");
    }
}

#[test]
fn moving_bytes_between_files_changes_the_fingerprint() {
    // Each file is length-prefixed and named: content cannot slide from one file to the next.
    let copy = copy_of_sources();
    let (a, b) = (copy.path().join(TRANSLATION_SOURCES[1]), copy.path().join(TRANSLATION_SOURCES[2]));
    let (mut ta, tb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    ta.extend_from_slice(&tb[..1]);
    std::fs::write(&a, ta).unwrap();
    std::fs::write(&b, &tb[1..]).unwrap();
    assert_ne!(fingerprint_of(copy.path(), TRANSLATION_SOURCES).unwrap(), FRONTEND_FINGERPRINT);
}

#[test]
fn a_missing_source_is_an_error_naming_it() {
    let copy = copy_of_sources();
    std::fs::remove_file(copy.path().join("src/emit.rs")).unwrap();
    let e = fingerprint_of(copy.path(), TRANSLATION_SOURCES).unwrap_err();
    assert!(e.to_string().contains("src/emit.rs"), "{e}");
}

#[test]
fn every_source_file_is_on_the_translation_path_or_says_why_not() {
    let mut found: Vec<String> = std::fs::read_dir(Path::new(CRATE).join("src"))
        .unwrap()
        .map(|e| format!("src/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    found.push("build.rs".into());
    found.sort();
    let mut listed: Vec<String> = TRANSLATION_SOURCES
        .iter()
        .map(|f| (*f).to_owned())
        .chain(OTHER_SOURCES.iter().map(|(f, _)| (*f).to_owned()))
        .collect();
    listed.sort();
    assert_eq!(found, listed, "place every source file in TRANSLATION_SOURCES or OTHER_SOURCES (src/fingerprint.rs)");
    assert!(OTHER_SOURCES.iter().all(|(_, why)| !why.is_empty()));
}
