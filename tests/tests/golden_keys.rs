//! The translation keys of the eight programs on the shipped ICON grid equal the golden keys that
//! the independent Python key witness computed from their key-input records
//! (`data/tools/translation_key_witness.py records --fingerprint golden-keys`,
//! `data/golden/icon-program-keys-v2.json`). The frontend fingerprint is the one input replaced by
//! a fixed value: it changes with every edit of the translation code (ADR 0020), while the golden
//! pins the encoding of the programs, the options and the tables.

use gridkey_fingerprint::TranslationOptions;
use gridkey_offsets::compile_time_offset_provider;
use gridkey_store::TableStore;
use gridkey_tests::data;

/// The fingerprint the golden keys were computed with.
const GOLDEN_FINGERPRINT: &str = "golden-keys";

#[test]
fn the_keys_of_the_eight_programs_are_the_witness_keys() {
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("golden/icon-program-keys-v2.json")).unwrap()).unwrap();
    let golden = golden.as_object().expect("an object of program to key");
    let grid = gridkey_grid::read_grid(&data("grids/icon_grid_0013_R02B04_R.nc")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let ct = compile_time_offset_provider(grid.provider(), &TableStore::open(cache.path()).unwrap()).unwrap();
    let programs = gridkey_stencil::icon_programs();
    assert_eq!(golden.len(), programs.len());
    for program in &programs {
        let mut inputs = gridkey_stencil::key_inputs(program, &TranslationOptions::new(), &ct).unwrap();
        assert_eq!(inputs.frontend.fingerprint, gridkey_stencil::FRONTEND_FINGERPRINT);
        inputs.frontend.fingerprint = GOLDEN_FINGERPRINT.to_owned();
        let key = inputs.key().to_hex();
        assert_eq!(Some(key.as_str()), golden[program.name()].as_str(), "{}", program.name());
    }
}
