//! The eight programs on the real grids shipped in `data/grids` (read by gridkey-grid): they
//! compile against the compile-time view, run on the runtime tables and match the reference.

use std::path::{Path, PathBuf};

use gridkey_fingerprint::TranslationOptions;
use gridkey_grid::read_grid;
use gridkey_offsets::compile_time_offset_provider;
use gridkey_settings::{Settings, TaskSettings};
use gridkey_stencil::{
    compile, emit_c, evaluate_reference, icon_programs, infer_domains_runtime, make_inputs, max_relative_error,
    translate, CompileConfig, Kernel,
};
use gridkey_store::TableStore;

fn grid_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/grids").join(name)
}

/// The one place that runs the programs on a grid; returns the offsets whose tables had skip
/// entries, as domain inference saw them.
fn check(file: &str) -> Vec<String> {
    let grid = read_grid(&grid_file(file)).unwrap();
    let provider = grid.provider();
    let cache = tempfile::tempdir().unwrap();
    let store = TableStore::open(cache.path()).unwrap();
    let ct = compile_time_offset_provider(provider, &store).unwrap();
    let options = TranslationOptions::new();
    let settings =
        Settings::from_vars(|name| std::env::var(name).ok().filter(|_| name == "CC" || name == "PATH")).unwrap();
    let compiler = gridkey_stencil::identify_compiler(&settings.compiler, &std::env::current_dir().unwrap()).unwrap();
    let settings = TaskSettings::new(&settings, cache.path().canonicalize().unwrap(), compiler).unwrap();
    let config = CompileConfig::from_settings(&settings).unwrap();
    let mut skips = Vec::new();
    for program in icon_programs() {
        let facts = infer_domains_runtime(&program, provider).unwrap();
        let source = translate(&program, &ct, &options).unwrap();
        assert_eq!(emit_c(&program, &facts, &options), source, "{file} {}", program.name());
        skips.extend(facts.tables().iter().filter(|(_, t)| t.has_skip).map(|(o, _)| o.clone()));
        let outcome = compile(&program, &ct, &options, &config).unwrap();
        let kernel = Kernel::load(&outcome.artifact, &program).unwrap();
        let inputs = make_inputs(&program, provider, 42).unwrap();
        let got = kernel.run(provider, &inputs).unwrap();
        let want = evaluate_reference(&program, provider, &inputs).unwrap();
        let err = max_relative_error(&got, &want);
        assert!(err <= 1e-12, "{file} {}: {err:e}", program.name());
    }
    skips.sort();
    skips.dedup();
    skips
}

#[test]
fn icon_r02b04_grid() {
    // Only the 12 pentagon vertices miss a neighbour.
    assert_eq!(check("icon_grid_0013_R02B04_R.nc"), ["V2C", "V2E"]);
}

#[test]
fn mpas_ocean_grid_with_boundaries() {
    let skips = check("oQU480.231010.nc");
    assert!(skips.contains(&"E2C".to_owned()) && skips.contains(&"C2E".to_owned()), "{skips:?}");
}
