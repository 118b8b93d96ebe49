//! `gridkey explain`: the differing key inputs, checked against the witness's golden table
//! facts, and the stable JSON form against a golden file.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use common::{data, gridkey_command};

use gridkey_fingerprint::{Frontend, KeyInputs, OffsetInput, TranslationCache, TranslationOptions};
use serde_json::{json, Value};

fn gridkey(args: &[&str]) -> Output {
    gridkey_command(args, &[]).output().unwrap()
}

fn ok_json(args: &[&str]) -> Value {
    let out = gridkey(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs the main job on `grid` into `cache` with `options`; the key of each program.
fn keys(cache: &Path, grid: &str, options: &[&str]) -> BTreeMap<String, String> {
    let grid = data(&format!("grids/{grid}"));
    let mut args = vec![
        "run",
        "--mode",
        "serial",
        "--json",
        "--grid",
        grid.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    for o in options {
        args.extend(["--option", o]);
    }
    let report = ok_json(&args);
    report["programs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["program"].as_str().unwrap().to_owned(), p["key"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn icon_against_mpas_names_exactly_the_differing_offset_entries() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    let icon = keys(cache.path(), "icon_grid_0013_R02B04_R.nc", &[]);
    let mpas = keys(cache.path(), "oQU480.231010.nc", &[]);
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(data("golden/table-digests-v1.json")).unwrap()).unwrap();
    let (gi, gm) =
        (&golden["grids"]["icon_grid_0013_R02B04_R.nc"]["tables"], &golden["grids"]["oQU480.231010.nc"]["tables"]);

    // What the witness's table facts say must differ, entry by entry.
    let skip = |t: &Value| if t["skip_count"].as_u64().unwrap() > 0 { "-1".to_owned() } else { "none".to_owned() };
    let shape = |t: &Value| format!("({}, {})", t["shape"][0], t["shape"][1]);
    let mut expect = Vec::new();
    for offset in ["C2E", "C2V", "C2E2C", "E2C", "E2V", "V2E", "V2C", "V2E2V"] {
        let (a, b) = (&gi[offset], &gm[offset]);
        if b.is_null() {
            expect.push(json!({"input": format!("offset {offset}: entry"), "before": "gather", "after": "absent"}));
            continue;
        }
        for (field, x, y) in [
            ("skip value", skip(a), skip(b)),
            ("shape", shape(a), shape(b)),
            ("table digest", a["digest"].as_str().unwrap().to_owned(), b["digest"].as_str().unwrap().to_owned()),
        ] {
            if x != y {
                expect.push(json!({"input": format!("offset {offset}: {field}"), "before": x, "after": y}));
            }
        }
    }
    for program in ["div", "rot", "nabla2"] {
        let e = ok_json(&["explain", &icon[program][..10], &mpas[program][..10], "--cache-dir", c, "--json"]);
        assert_eq!(e["a"], icon[program].as_str());
        assert_eq!(e["b"], mpas[program].as_str());
        assert_eq!(e["identical"], false);
        assert_eq!(e["differences"], Value::Array(expect.clone()), "{program}");
    }
    let same = ok_json(&["explain", &icon["div"], &icon["div"], "--cache-dir", c, "--json"]);
    assert_eq!(same["identical"], true);
    assert_eq!(same["differences"], json!([]));
}

#[test]
fn keys_that_differ_by_an_option_name_only_that_option() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    let plain = keys(cache.path(), "oQU480.231010.nc", &[]);
    let fast = keys(cache.path(), "oQU480.231010.nc", &["opt_level=3"]);
    for (program, key) in &plain {
        let e = ok_json(&["explain", key, &fast[program], "--cache-dir", c, "--json"]);
        assert_eq!(e["differences"], json!([{"input": "option opt_level", "before": "2", "after": "3"}]), "{program}");
    }
    // A miss explained against the nearest entry: opt_level=1 is cached for no program.
    let grid = data("grids/oQU480.231010.nc");
    let miss_at_o1 = || {
        ok_json(&[
            "explain",
            "--miss",
            "div",
            "--grid",
            grid.to_str().unwrap(),
            "--option",
            "opt_level=1",
            "--cache-dir",
            c,
            "--json",
        ])
    };
    let m = miss_at_o1();
    assert_eq!(m["cached"], false);
    assert_eq!(m["candidates"], 2);
    assert_eq!(m["unreadable_records"], 0);
    // Both cached entries differ by one input; the tie goes to the smaller key.
    let nearest = m["nearest"].as_str().unwrap();
    let before = if nearest == plain["div"] { "2" } else { "3" };
    assert!(nearest == plain["div"] || nearest == fast["div"], "{m}");
    assert!(nearest == plain["div"].as_str().min(fast["div"].as_str()), "{m}");
    assert_eq!(m["differences"], json!([{"input": "option opt_level", "before": before, "after": "1"}]));
    // Damaged records cannot be compared, and the explanation says how many there were.
    let damaged = cache
        .path()
        .join(gridkey_fingerprint::TRANSLATION_DIR)
        .join(&plain["div"][..2])
        .join(format!("{}.json", plain["div"]));
    let kept = std::fs::read(&damaged).unwrap();
    std::fs::remove_file(&damaged).unwrap();
    std::fs::write(&damaged, b"{ not json").unwrap();
    let d = miss_at_o1();
    assert_eq!((d["candidates"].clone(), d["unreadable_records"].clone()), (json!(1), json!(1)), "{d}");
    std::fs::remove_file(&damaged).unwrap();
    std::fs::write(&damaged, kept).unwrap();
    let hit = ok_json(&["explain", "--miss", "div", "--grid", grid.to_str().unwrap(), "--cache-dir", c, "--json"]);
    assert_eq!((hit["cached"].clone(), hit["key"].clone()), (json!(true), json!(plain["div"])));
}

#[test]
fn bad_keys_are_clear_errors() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    keys(cache.path(), "oQU480.231010.nc", &[]);
    for (args, needle) in [
        (vec!["explain", "ffffffffffffffffffff", "0", "--cache-dir", c], "no translation-cache entry"),
        (vec!["explain", "", "", "--cache-dir", c], "is not the start of a key"),
        (vec!["explain", "--miss", "laplace", "--cache-dir", c], "there is no program \"laplace\""),
    ] {
        let out = gridkey(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn the_json_form_matches_the_golden_file() {
    // Fixed key inputs planted in a cache: their keys are pinned by the key format, so the whole
    // output is stable; a change of the JSON form shows up as a diff of the golden file.
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = TranslationCache::open(cache_dir.path()).unwrap();
    let gather = |digest: &str, rows, skip| OffsetInput::Gather {
        offset: "C2E".into(),
        domain: "Cell".into(),
        local: "C2EDim".into(),
        codomain: "Edge".into(),
        skip_value: skip,
        dtype: "<i4".into(),
        shape: [rows, 3],
        digest: digest.into(),
    };
    let inputs = |options: TranslationOptions, c2e| KeyInputs {
        key_format_version: 2,
        digest_format_version: 1,
        frontend: Frontend {
            name: "gridkey-stencil".into(),
            version: "0.1.0".into(),
            fingerprint: "0123456789abcdef".repeat(2),
        },
        program: "div".into(),
        program_encoding: "0102".into(),
        options,
        offsets: vec![
            c2e,
            OffsetInput::Dimension { offset: "Koff".into(), name: "K".into(), dimension_kind: "vertical".into() },
        ],
    };
    let a = inputs(TranslationOptions::new(), gather("9bcee51d14f05d37316945fc51e952ed", 20480, None));
    let b = inputs(
        [("opt_level".to_owned(), "3".to_owned())].into(),
        gather("eca80d29e9c8c9e85522c42c2dcf1a50", 1791, Some(-1)),
    );
    let (ka, kb) = (cache.put(&a, b"a").unwrap(), cache.put(&b, b"b").unwrap());
    let out = gridkey(&[
        "explain",
        &ka.to_hex()[..8],
        &kb.to_hex()[..8],
        "--cache-dir",
        cache_dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let golden = std::fs::read_to_string(data("golden/explain-v1.json")).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), golden.trim());
}

#[test]
fn a_default_spelled_out_is_one_key_in_run_explain_and_the_record() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    let plain = keys(cache.path(), "oQU480.231010.nc", &[]);
    // `run --option opt_level=2` after a run without: the same eight keys, eight hits.
    let grid = data("grids/oQU480.231010.nc");
    let g = grid.to_str().unwrap();
    let spelled =
        ok_json(&["run", "--mode", "serial", "--json", "--grid", g, "--cache-dir", c, "--option", "opt_level=2"]);
    for p in spelled["programs"].as_array().unwrap() {
        let name = p["program"].as_str().unwrap();
        assert_eq!(p["key"], plain[name].as_str(), "{name}");
        assert_eq!((p["cache_hit"].clone(), p["translated"].clone()), (json!(true), json!(false)), "{name}");
    }
    // explain keys the way run does, and its record says what was keyed.
    let m = ok_json(&["explain", "--miss", "div", "--grid", g, "--option", "opt_level=2", "--cache-dir", c, "--json"]);
    assert_eq!((m["cached"].clone(), m["key"].clone()), (json!(true), json!(plain["div"])), "{m}");
    let record = TranslationCache::open(cache.path()).unwrap().record(&plain["div"].parse().unwrap()).unwrap();
    assert_eq!(record.options, [("opt_level".to_owned(), "2".to_owned())].into());
    // One candidate, said in the singular.
    let out = gridkey(&["explain", "--miss", "div", "--grid", g, "--option", "opt_level=3", "--cache-dir", c]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("(1 candidate) differs in:"), "{stdout}");
    assert!(stdout.contains("option opt_level 2 -> 3"), "{stdout}");
}

#[test]
fn explain_miss_rejects_the_options_run_rejects() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    let grid = data("grids/oQU480.231010.nc");
    let g = grid.to_str().unwrap();
    for (option, needle) in [
        ("fast=1", "unknown translation option \"fast\""),
        ("opt_level=9", "translation option \"opt_level\" has value \"9\""),
    ] {
        for command in ["run", "explain"] {
            let mut args = vec![command];
            if command == "explain" {
                args.extend(["--miss", "div"]);
            }
            args.extend(["--grid", g, "--cache-dir", c, "--option", option]);
            let out = gridkey(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains(needle), "{args:?}: {stderr}");
        }
    }
}

#[test]
fn explain_finds_an_entry_whose_record_was_deleted_once_a_run_hits_it() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    let plain = keys(cache.path(), "oQU480.231010.nc", &[]);
    let tc = TranslationCache::open(cache.path()).unwrap();
    let div = plain["div"].parse().unwrap();
    std::fs::remove_file(tc.record_path(&div)).unwrap();
    let out = gridkey(&["explain", &plain["div"], &plain["rot"], "--cache-dir", c]);
    assert_eq!(out.status.code(), Some(2), "without its record the entry cannot be explained");
    assert_eq!(keys(cache.path(), "oQU480.231010.nc", &[]), plain);
    let e = ok_json(&["explain", &plain["div"], &plain["rot"], "--cache-dir", c, "--json"]);
    assert_eq!(e["a"], plain["div"].as_str());
    assert!(e["differences"].as_array().unwrap().iter().any(|d| d["input"] == "program name"), "{e}");
}
