//! The IR: validation, roles, the built-in programs and the stable encoding.

use gridkey_stencil::{
    icon_programs, FieldDecl, FieldRole, Program, Reduce, Stage, StencilError, FRONTEND_NAME, IR_FORMAT_VERSION,
};
use proptest::prelude::*;

/// The one place that builds an invalid program: asserts `InvalidProgram` with `reason` in it.
fn check_invalid(name: &str, fields: Vec<FieldDecl>, stages: Vec<Stage>, reason: &str) {
    match Program::new(name, fields, stages) {
        Err(StencilError::InvalidProgram { program, reason: got }) => {
            assert_eq!(program, name);
            assert!(got.contains(reason), "reason {got:?} does not contain {reason:?}");
        }
        other => panic!("expected InvalidProgram({reason}), got {other:?}"),
    }
}

fn div_fields() -> Vec<FieldDecl> {
    vec![
        FieldDecl::dense("vn", "Edge"),
        FieldDecl::sparse("geofac_div", "Cell", "C2EDim"),
        FieldDecl::dense("out", "Cell"),
    ]
}

fn div_stage() -> Stage {
    Stage::new("out", Reduce::Sum, "C2E", "vn").weighted("geofac_div")
}

#[test]
fn invalid_programs_are_rejected_with_the_rule_they_break() {
    check_invalid("", div_fields(), vec![div_stage()], "program name");
    check_invalid("a b", div_fields(), vec![div_stage()], "program name");
    check_invalid("p*/", div_fields(), vec![div_stage()], "program name");
    check_invalid("p", div_fields(), vec![], "no stage");
    check_invalid(
        "p",
        [div_fields(), vec![FieldDecl::dense("vn", "Cell")]].concat(),
        vec![div_stage()],
        "declared twice",
    );
    check_invalid("p", div_fields(), vec![Stage::new("out", Reduce::Sum, "C2E", "nope")], "not declared");
    check_invalid("p", div_fields(), vec![Stage::new("geofac_div", Reduce::Sum, "C2E", "vn")], "not a dense field");
    check_invalid("p", div_fields(), vec![Stage::new("out", Reduce::Sum, "C2E", "geofac_div")], "not a dense field");
    check_invalid("p", div_fields(), vec![Stage::new("out", Reduce::Sum, "C2E", "vn").weighted("vn")], "not a sparse");
    check_invalid(
        "p",
        vec![FieldDecl::dense("x", "Cell")],
        vec![Stage::new("x", Reduce::Sum, "C2E2C", "x")],
        "its own output",
    );
    check_invalid(
        "p",
        vec![FieldDecl::dense("vn", "Edge"), FieldDecl::sparse("w", "Edge", "E2CDim"), FieldDecl::dense("out", "Cell")],
        vec![Stage::new("out", Reduce::Sum, "C2E", "vn").weighted("w")],
        "but its output out is on Cell",
    );
    check_invalid("p", div_fields(), vec![div_stage(), div_stage()], "more than one stage");
    check_invalid(
        "p",
        vec![FieldDecl::dense("a", "Cell"), FieldDecl::dense("b", "Cell"), FieldDecl::dense("c", "Cell")],
        vec![Stage::new("b", Reduce::Sum, "C2E2C", "c"), Stage::new("c", Reduce::Sum, "C2E2C", "a")],
        "read before stage 1 writes it",
    );
    check_invalid(
        "p",
        [div_fields(), vec![FieldDecl::dense("unused", "Cell")]].concat(),
        vec![div_stage()],
        "no stage uses",
    );
    check_invalid("p", div_fields(), vec![Stage::new("out", Reduce::Sum, "C2E */", "vn")], "offset name");
    check_invalid(
        "p",
        vec![FieldDecl::dense("vn", "Ed ge"), FieldDecl::dense("out", "Cell")],
        vec![Stage::new("out", Reduce::Sum, "C2E", "vn")],
        "dimension name",
    );
}

#[test]
fn icon_programs_are_the_eight_in_order() {
    let programs = icon_programs();
    let names: Vec<&str> = programs.iter().map(Program::name).collect();
    assert_eq!(names, ["div", "grad_n", "rot", "c2e2c_avg", "cells2verts", "verts2edges", "verts2cells", "nabla2"]);
    let offsets: Vec<Vec<String>> = programs.iter().map(Program::offsets).collect();
    assert_eq!(
        offsets,
        [["C2E"].as_slice(), &["E2C"], &["V2E"], &["C2E2C"], &["V2C"], &["E2V"], &["C2V"], &["E2C", "C2E"]]
    );
    let div = &programs[0];
    let names = |fields: Vec<&FieldDecl>| fields.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(div.inputs()), ["vn", "geofac_div"]);
    assert_eq!(names(div.outputs()), ["div_vn"]);
    assert_eq!(programs[3].stages()[0].reduce, Reduce::Mean);
    assert_eq!(programs[3].stages()[0].weights, None);
    let nabla2 = &programs[7];
    assert_eq!(names(nabla2.inputs()), ["psi_c", "grad_coeff", "geofac_div"]);
    assert_eq!(names(nabla2.temporaries()), ["grad_psi"]);
    assert_eq!(names(nabla2.outputs()), ["nabla2_psi"]);
    assert_eq!(nabla2.role("grad_psi"), Some(FieldRole::Temporary));
    assert_eq!(nabla2.role("nope"), None);
    assert_eq!(FRONTEND_NAME, "gridkey-stencil");
    assert_eq!(gridkey_stencil::frontend().name, FRONTEND_NAME);
    assert_eq!(gridkey_stencil::frontend().version, env!("CARGO_PKG_VERSION"));
}

#[test]
fn encoding_starts_with_the_format_version_and_decodes_back() {
    for p in icon_programs() {
        let bytes = p.encode();
        assert_eq!(bytes[0] as u32, IR_FORMAT_VERSION);
        assert_eq!(Program::decode(&bytes).unwrap(), p);
    }
}

/// The one place that decodes bad bytes: asserts `Decode` with `reason` in it.
fn check_decode_error(bytes: &[u8], reason: &str) {
    match Program::decode(bytes) {
        Err(StencilError::Decode { reason: got }) => {
            assert!(got.contains(reason), "{got:?} lacks {reason:?}")
        }
        other => panic!("expected Decode({reason}), got {other:?}"),
    }
}

#[test]
fn bad_encodings_are_decode_errors() {
    let good = icon_programs()[0].encode();
    check_decode_error(&[], "no format version");
    check_decode_error(&[2], "format version 2");
    check_decode_error(&good[..good.len() - 1], "");
    check_decode_error(&[good.as_slice(), &[0]].concat(), "1 trailing bytes");
    // A well-formed encoding of a program that breaks a rule is an invalid program, not a decode error.
    let empty = postcard::to_allocvec(&(IR_FORMAT_VERSION, "p", Vec::<FieldDecl>::new(), Vec::<Stage>::new())).unwrap();
    assert!(matches!(Program::decode(&empty), Err(StencilError::InvalidProgram { program, .. }) if program == "p"));
}

const MENU: [(&str, &str, &str, &str); 5] = [
    ("C2E", "Cell", "C2EDim", "Edge"),
    ("E2C", "Edge", "E2CDim", "Cell"),
    ("V2E", "Vertex", "V2EDim", "Edge"),
    ("C2E2C", "Cell", "C2E2CDim", "Cell"),
    ("V2C", "Vertex", "V2CDim", "Cell"),
];

/// A valid program from a name and `(menu index, mean, weighted)` per stage: each stage reads
/// the latest field written on its codomain (a temporary) or a fresh input.
fn build(name: &str, stages: &[(usize, bool, bool)]) -> Program {
    let mut fields = Vec::new();
    let mut out = Vec::new();
    let mut latest: Vec<(String, String)> = Vec::new();
    for (s, &(m, mean, weighted)) in stages.iter().enumerate() {
        let (offset, domain, local, codomain) = MENU[m];
        let source = match latest.iter().rev().find(|(dim, _)| dim == codomain) {
            Some((_, field)) => field.clone(),
            None => {
                fields.push(FieldDecl::dense(format!("in{s}"), codomain));
                format!("in{s}")
            }
        };
        let reduce = if mean { Reduce::Mean } else { Reduce::Sum };
        let mut stage = Stage::new(format!("out{s}"), reduce, offset, source);
        if weighted {
            fields.push(FieldDecl::sparse(format!("w{s}"), domain, local));
            stage = stage.weighted(format!("w{s}"));
        }
        fields.push(FieldDecl::dense(format!("out{s}"), domain));
        latest.push((domain.to_owned(), format!("out{s}")));
        out.push(stage);
    }
    Program::new(name, fields, out).unwrap()
}

proptest! {
    #[test]
    fn encoding_round_trips_and_is_canonical(
        name in "[a-z][a-z0-9_]{0,10}",
        stages in prop::collection::vec((0..MENU.len(), any::<bool>(), any::<bool>()), 1..5),
    ) {
        let p = build(&name, &stages);
        let bytes = p.encode();
        let back = Program::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn changing_a_program_changes_its_encoding(
        name in "[a-z][a-z0-9_]{0,10}",
        stages in prop::collection::vec((0..MENU.len(), any::<bool>(), any::<bool>()), 1..5),
        which in 0usize..4,
    ) {
        let p = build(&name, &stages);
        let mut changed = stages.clone();
        let renamed;
        let q = match which {
            0 => { renamed = format!("{name}x"); build(&renamed, &stages) }
            1 => { changed[0].1 = !changed[0].1; build(&name, &changed) }
            2 => { changed[0].2 = !changed[0].2; build(&name, &changed) }
            _ => { changed[0].0 = (changed[0].0 + 1) % MENU.len(); build(&name, &changed) }
        };
        prop_assert_ne!(&p, &q);
        prop_assert_ne!(p.encode(), q.encode());
    }
}
