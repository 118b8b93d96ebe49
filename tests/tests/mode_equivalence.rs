//! The headline invariant on the shipped ICON grid: the key of each of the eight programs is the
//! same whether it was compiled serially, in threads or in worker processes, and whether the
//! runtime tables are in C order, Fortran order, int64 or behind a host copy; a cache filled
//! in any mode serves each other mode with 0 translations; and the C source translated against
//! the compile-time view is the source translated against each runtime layout. The matrix is
//! `gridkey_tests::mode_matrix`, which `cargo xtask modes` prints.

use gridkey_jobs::BuildJobsMode;
use gridkey_tests::mode_matrix::mode_matrix;
use gridkey_tests::{data, gridkey_binary};

#[test]
fn keys_are_identical_across_modes_and_layouts_and_every_mode_serves_every_other() {
    let m = mode_matrix(&data("grids/icon_grid_0013_R02B04_R.nc"), &gridkey_binary(), 2).unwrap();
    assert!(m.unverified.is_empty(), "{:#?}", m.unverified);
    assert_eq!(m.programs, 8);
    assert_eq!(m.keys.len(), 8);
    for (program, by_source) in &m.keys {
        assert_eq!(by_source.len(), 3 + 4, "{program}: three modes and four layouts");
        assert!(gridkey_tests::mode_matrix::keys_agree(by_source), "{program}: {by_source:#?}");
    }
    assert_eq!(m.identical_programs(), 8);

    // A cache filled in mode A serves mode B (on a copy) with 0 translations, for all 6 pairs.
    assert_eq!(m.pairs.len(), 6);
    for p in &m.pairs {
        assert_eq!(p.fill_translations, 8, "{} mode on a fresh cache", p.a);
        assert_eq!((p.translations, p.hits), (0, 8), "{} -> {}", p.a, p.b);
    }
    let ordered: std::collections::BTreeSet<(&str, &str)> =
        m.pairs.iter().map(|p| (p.a.as_str(), p.b.as_str())).collect();
    assert_eq!(ordered.len(), 6, "six distinct ordered pairs");
    assert!(BuildJobsMode::ALL.iter().all(|a| ordered.iter().filter(|(x, _)| *x == a.as_str()).count() == 2));

    assert_eq!(m.source_checks, 8 * 4);
    assert!(m.sources_differ.is_empty(), "{:#?}", m.sources_differ);
    assert!(m.passed());
}
