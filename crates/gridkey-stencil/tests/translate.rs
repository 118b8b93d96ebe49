//! Domain inference and C generation: facts, errors, options, and that the source depends only
//! on the program, the options and the facts, whatever the runtime layout of the tables.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{compile_time, Layout, Patch};
use gridkey_fingerprint::TranslationOptions;
use gridkey_offsets::{host_connectivity, Dimension, DimensionKind, Entry, OffsetProvider};
use gridkey_stencil::{
    emit_c, icon_programs, infer_domains, infer_domains_runtime, key_inputs, translate, DomainFacts, Program, Side,
    StencilError, TableFacts,
};
use ndarray::{s, Array2};

fn program(name: &str) -> Program {
    icon_programs().into_iter().find(|p| p.name() == name).expect("an icon program")
}

fn opts(pairs: &[(&str, &str)]) -> TranslationOptions {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The one place that runs inference: on the compile-time view and on the runtime tables,
/// asserting that both agree, and returns the result.
fn infer(program: &Program, provider: &OffsetProvider) -> Result<DomainFacts, StencilError> {
    let dir = tempfile::tempdir().unwrap();
    let ct = compile_time(provider, dir.path());
    let compiled = infer_domains(program, &ct);
    let runtime = infer_domains_runtime(program, provider);
    match (&compiled, &runtime) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("compile-time and runtime inference disagree: {compiled:?} vs {runtime:?}"),
    }
    compiled
}

#[test]
fn facts_are_read_from_the_tables() {
    let patch = Patch::new(2, 1);
    let provider = patch.provider(Layout::COrder);
    let facts = infer(&program("div"), &provider).unwrap();
    let c2e = TableFacts { rows: 4, cols: 3, min: 0, max: 8, has_skip: false, skip_value: Some(-1) };
    assert_eq!(facts.tables(), &BTreeMap::from([("C2E".to_owned(), c2e)]));
    assert_eq!(facts.domain_rows(), &BTreeMap::from([("Cell".to_owned(), 4)]));
    assert_eq!(facts.required_extents(), &BTreeMap::from([("Edge".to_owned(), 9)]));

    let facts = infer(&program("nabla2"), &provider).unwrap();
    let e2c = &facts.tables()["E2C"];
    assert_eq!((e2c.rows, e2c.cols, e2c.min, e2c.max, e2c.has_skip), (9, 2, 0, 3, true));
    assert_eq!(facts.domain_rows(), &BTreeMap::from([("Cell".to_owned(), 4), ("Edge".to_owned(), 9)]));
    assert_eq!(facts.required_extents(), &BTreeMap::from([("Cell".to_owned(), 4), ("Edge".to_owned(), 9)]));

    let rot = infer(&program("rot"), &provider).unwrap();
    assert!(rot.tables()["V2E"].has_skip);
}

#[test]
fn source_is_byte_identical_from_the_compile_time_view_and_every_runtime_layout() {
    let patch = Patch::new(3, 2);
    let base = patch.provider(Layout::COrder);
    let dir = tempfile::tempdir().unwrap();
    let base_ct = compile_time(&base, dir.path());
    let options = TranslationOptions::new();
    for program in icon_programs() {
        let want = translate(&program, &base_ct, &options).unwrap();
        let key = key_inputs(&program, &options, &base_ct).unwrap().key();
        assert_eq!(translate(&program, &base_ct, &options).unwrap(), want, "translation is deterministic");
        assert!(!want.contains(dir.path().to_str().unwrap()), "no path in the source");
        for layout in Layout::ALL {
            let provider = patch.provider(layout);
            let direct = emit_c(&program, &infer_domains_runtime(&program, &provider).unwrap(), &options);
            assert_eq!(direct, want, "{} from runtime {layout:?} tables", program.name());
            let layout_dir = tempfile::tempdir().unwrap();
            let ct = compile_time(&provider, layout_dir.path());
            assert_eq!(translate(&program, &ct, &options).unwrap(), want, "{} via {layout:?}", program.name());
            let layout_key = key_inputs(&program, &options, &ct).unwrap().key();
            assert_eq!(layout_key, key, "{} key via {layout:?}", program.name());
        }
    }
}

#[test]
fn skip_check_is_emitted_only_where_the_table_has_skip_entries() {
    let patch = Patch::new(2, 2);
    let dir = tempfile::tempdir().unwrap();
    let with_skips = compile_time(&patch.provider(Layout::COrder), dir.path());
    let options = TranslationOptions::new();
    let skip_line = "if (j == GK_T0_SKIP) continue;";
    // C2E has skip value -1 but no -1 entry: no check.
    let div = translate(&program("div"), &with_skips, &options).unwrap();
    assert!(!div.contains("GK_T0_SKIP"), "{div}");
    assert!(div.contains("no skip entries (skip value -1)"));
    // C2E2C of a patch has -1 at the boundary.
    let avg = translate(&program("c2e2c_avg"), &with_skips, &options).unwrap();
    assert!(avg.contains(skip_line), "{avg}");
    assert!(avg.contains("#define GK_T0_SKIP INT64_C(-1)"));
    // The same program on a C2E2C without -1 entries (boundary neighbours replaced): no check.
    let filled = patch.provider_with(
        Layout::COrder,
        |offset, t| {
            if offset == "C2E2C" {
                t.mapv(|x| x.max(0))
            } else {
                t.clone()
            }
        },
    );
    let dir2 = tempfile::tempdir().unwrap();
    let avg_filled = translate(&program("c2e2c_avg"), &compile_time(&filled, dir2.path()), &options).unwrap();
    assert!(!avg_filled.contains("GK_T0_SKIP"), "{avg_filled}");
    // nabla2: E2C (table 0) has skips, C2E (table 1) has none.
    let nabla2 = translate(&program("nabla2"), &with_skips, &options).unwrap();
    assert!(nabla2.contains("GK_T0_SKIP") && !nabla2.contains("GK_T1_SKIP"));
}

/// The one place that translates with options: returns the result for `options`.
fn translate_with(options: &[(&str, &str)]) -> Result<String, StencilError> {
    let patch = Patch::new(1, 1);
    let dir = tempfile::tempdir().unwrap();
    translate(&program("div"), &compile_time(&patch.provider(Layout::COrder), dir.path()), &opts(options))
}

#[test]
fn options_are_checked_and_keyed_into_the_source() {
    match translate_with(&[("fast_math", "1")]) {
        Err(StencilError::UnknownOption { option, known }) => {
            assert_eq!(option, "fast_math");
            assert_eq!(known, "opt_level");
        }
        other => panic!("expected UnknownOption, got {other:?}"),
    }
    for bad in ["4", "", "-1", "O2", "2 "] {
        match translate_with(&[("opt_level", bad)]) {
            Err(StencilError::OptionValue { option, value, .. }) => {
                assert_eq!((option.as_str(), value.as_str()), ("opt_level", bad))
            }
            other => panic!("expected OptionValue for {bad:?}, got {other:?}"),
        }
    }
    let default = translate_with(&[]).unwrap();
    assert!(default.contains("/* options: opt_level=2 */"));
    assert_eq!(translate_with(&[("opt_level", "2")]).unwrap(), default);
    let o3 = translate_with(&[("opt_level", "3")]).unwrap();
    assert!(o3.contains("/* options: opt_level=3 */"));
    assert_ne!(o3, default);
}

fn provider_of(entries: Vec<(&str, Entry<Arc<gridkey_offsets::Connectivity>>)>) -> OffsetProvider {
    let mut p = OffsetProvider::new();
    for (name, entry) in entries {
        p.push(name, entry).unwrap();
    }
    p
}

fn gather(domain: &str, local: &str, codomain: &str, table: Array2<i32>) -> Entry<Arc<gridkey_offsets::Connectivity>> {
    Entry::Gather(Arc::new(
        host_connectivity(
            Dimension::horizontal(domain),
            Dimension::local(local),
            Dimension::horizontal(codomain),
            Some(-1),
            table,
        )
        .unwrap(),
    ))
}

#[test]
fn a_missing_offset_or_a_dimension_offset_is_a_typed_error_naming_program_and_offset() {
    let patch = Patch::new(2, 1);
    let provider = patch.provider(Layout::COrder);
    let no_v2e = provider_of(
        provider.entries().iter().filter(|(n, _)| n != "V2E").map(|(n, e)| (n.as_str(), e.clone())).collect(),
    );
    match infer(&program("rot"), &no_v2e) {
        Err(StencilError::MissingOffset { program, offset }) => {
            assert_eq!((program.as_str(), offset.as_str()), ("rot", "V2E"))
        }
        other => panic!("expected MissingOffset, got {other:?}"),
    }
    let dim = provider_of(vec![("C2E", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical)))]);
    match infer(&program("div"), &dim) {
        Err(StencilError::NotAGather { program, offset, dimension }) => {
            assert_eq!((program.as_str(), offset.as_str(), dimension.as_str()), ("div", "C2E", "K"))
        }
        other => panic!("expected NotAGather, got {other:?}"),
    }
}

#[test]
fn fields_must_sit_on_the_connectivity_dimensions() {
    let c2e = Patch::new(1, 1).table("C2E").clone();
    let cases = [
        (gather("Vertex", "C2EDim", "Edge", c2e.clone()), "div_vn", Side::Domain),
        (gather("Cell", "C2EDim", "Vertex", c2e.clone()), "vn", Side::Codomain),
        (gather("Cell", "E2CDim", "Edge", c2e.clone()), "geofac_div", Side::DomainAndLocal),
    ];
    for (entry, want_field, want_role) in cases {
        match infer(&program("div"), &provider_of(vec![("C2E", entry)])) {
            Err(StencilError::DimensionMismatch { program, offset, field, role, .. }) => {
                assert_eq!((program.as_str(), offset.as_str()), ("div", "C2E"));
                assert_eq!((field.as_str(), role), (want_field, want_role));
            }
            other => panic!("expected DimensionMismatch on {want_field}, got {other:?}"),
        }
    }
}

#[test]
fn a_negative_entry_that_is_not_the_skip_value_is_reported_where_it_is_in_every_layout() {
    let patch = Patch::new(2, 1);
    for layout in Layout::ALL {
        let provider = patch.provider_with(layout, |offset, t| {
            let mut t = t.clone();
            if offset == "C2E" {
                t[[2, 1]] = -2;
                t[[3, 0]] = -3;
            }
            t
        });
        // The translator reports it on the runtime tables...
        match infer_domains_runtime(&program("div"), &provider) {
            Err(StencilError::TableEntry { program, offset, row, col, value, skip_value }) => {
                assert_eq!(
                    (program.as_str(), offset.as_str(), row, col, value, skip_value),
                    ("div", "C2E", 2, 1, -2, Some(-1))
                );
            }
            other => panic!("expected TableEntry with {layout:?}, got {other:?}"),
        }
        // ...and the conversion refuses the table before any compile-time view of it exists.
        let dir = tempfile::tempdir().unwrap();
        let store = gridkey_store::TableStore::open(dir.path()).unwrap();
        match gridkey_offsets::compile_time_offset_provider(&provider, &store) {
            Err(gridkey_offsets::OffsetsError::NegativeEntry { offset, row, col, value, skip_value }) => {
                assert_eq!((offset.as_str(), row, col, value, skip_value), ("C2E", 2, 1, -2, Some(-1)), "{layout:?}");
            }
            other => panic!("expected NegativeEntry with {layout:?}, got {other:?}"),
        }
    }
}

#[test]
fn tables_that_disagree_about_a_dimension_are_an_extent_error() {
    let patch = Patch::new(2, 1);
    // E2C with fewer rows than C2E's largest edge index + 1.
    let short =
        patch.provider_with(
            Layout::COrder,
            |offset, t| {
                if offset == "E2C" {
                    t.slice(s![..5, ..]).to_owned()
                } else {
                    t.clone()
                }
            },
        );
    match infer(&program("nabla2"), &short) {
        Err(StencilError::Extent { program, dimension, reason }) => {
            assert_eq!((program.as_str(), dimension.as_str()), ("nabla2", "Edge"));
            assert!(reason.contains("table C2E indexes up to 8, but table E2C has only 5 rows"), "{reason}");
        }
        other => panic!("expected Extent, got {other:?}"),
    }
}
