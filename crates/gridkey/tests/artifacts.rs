//! Checked artifacts (ADR 0023): a library whose kernel fails verification against the Rust
//! reference is removed from the build cache, with its translation, and never served again.

use crate::common;

use common::{data, gridkey_command};

fn run(cache: &std::path::Path, cc: &str) -> (gridkey::RunReport, String) {
    let grid = data("grids/oQU480.231010.nc");
    let args = ["run", "--mode", "serial", "--json", "--grid", grid.to_str().unwrap(), "--cache-dir"];
    let out = gridkey_command(&args, &[("CC", cc)]).arg(cache).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (report, stderr)
}

fn libraries(cache: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(cache.join(gridkey_stencil::BUILD_DIR))
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "so")).collect())
        .unwrap_or_default()
}

#[test]
fn a_library_whose_kernel_fails_verification_is_removed_and_never_served_again() {
    let cache = tempfile::tempdir().unwrap();
    // A broken compiler: it builds libraries that load and run, but compute in single precision
    // through double pointers, so every kernel's results are wrong.
    let broken = "cc -Ddouble=float";
    let (first, _) = run(cache.path(), broken);
    assert_eq!(first.builds(), first.programs.len());
    for p in &first.programs {
        assert!(!p.verified, "{}: a wrong kernel does not verify", p.program);
        let error = p.error.as_deref().unwrap_or_default();
        assert!(error.contains("removed from the cache"), "{}: {error}", p.program);
    }
    assert_eq!(libraries(cache.path()), Vec::<std::path::PathBuf>::new(), "every wrong library is removed");
    let (second, _) = run(cache.path(), broken);
    assert_eq!(second.builds(), second.programs.len(), "no wrong library is served again");
    assert_eq!(second.translations(), second.programs.len(), "nor its translation");
    // The same cache then serves a good compiler's builds as usual.
    let (good, stderr) = run(cache.path(), "cc");
    assert!(good.all_verified(), "{stderr}");
    let (again, _) = run(cache.path(), "cc");
    assert!(again.all_verified() && again.builds() == 0 && again.translations() == 0);
}
