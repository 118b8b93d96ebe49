//! Computes the frontend fingerprint (ADR 0020): the digest of the translation path's source
//! files, exposed to the crate as the environment variable `GRIDKEY_STENCIL_FINGERPRINT`.

#[allow(dead_code)]
#[path = "src/fingerprint.rs"]
mod fingerprint;

fn main() {
    let root = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    for file in fingerprint::TRANSLATION_SOURCES {
        println!("cargo::rerun-if-changed={file}");
    }
    let digest = fingerprint::fingerprint_of(&root, fingerprint::TRANSLATION_SOURCES)
        .unwrap_or_else(|e| panic!("cannot compute the frontend fingerprint: {e}"));
    println!("cargo::rustc-env=GRIDKEY_STENCIL_FINGERPRINT={digest}");
}
