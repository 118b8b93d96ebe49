//! Which programs of the main job a grid supports: those whose every offset the grid's offset
//! provider has. The others are skipped, each with the reason, and reported with the run
//! (`RunReport::skipped`): an ICON grid has every table, an MPAS grid or a UGRID mesh has no
//! `V2E2V`, a UGRID mesh has the other seven tables from its file or derived (ADR 0015).

use gridkey_grid::Grid;
use gridkey_offsets::Entry;
use gridkey_stencil::Program;
use serde::{Deserialize, Serialize};

/// A program of the main job that the grid does not support.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedProgram {
    /// Program name.
    pub program: String,
    /// Why, e.g. `needs offset V2E2V, which the ugrid grid does not provide (it has C2E, ...)`.
    pub reason: String,
}

/// Splits `programs` into those `grid` supports (in order) and those it does not.
pub fn split(programs: &[Program], grid: &Grid) -> (Vec<Program>, Vec<SkippedProgram>) {
    let provider = grid.provider();
    let has = |offset: &str| matches!(provider.get(offset), Some(Entry::Gather(_)));
    let (mut run, mut skipped) = (Vec::new(), Vec::new());
    for p in programs {
        let missing: Vec<String> = p.offsets().into_iter().filter(|o| !has(o)).collect();
        if missing.is_empty() {
            run.push(p.clone());
        } else {
            let offsets: Vec<&str> = grid.tables().iter().map(|t| t.offset.as_str()).collect();
            let (s, them) = if missing.len() == 1 { ("", "it") } else { ("s", "them") };
            skipped.push(SkippedProgram {
                program: p.name().to_owned(),
                reason: format!(
                    "needs offset{s} {}, which the {} grid does not provide (it has {}); a grid with {them} runs it",
                    missing.join(", "),
                    grid.kind(),
                    offsets.join(", ")
                ),
            });
        }
    }
    (run, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridkey_stencil::{FieldDecl, Reduce, Stage};

    fn grid(name: &str) -> Grid {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/grids").join(name);
        gridkey_grid::read_grid(&path).unwrap()
    }

    /// A program over V2E2V, which only ICON grids provide.
    fn v2e2v_mean() -> Program {
        let fields = vec![FieldDecl::dense("psi_v", "Vertex"), FieldDecl::dense("psi_vv", "Vertex")];
        Program::new("v2e2v_mean", fields, vec![Stage::new("psi_vv", Reduce::Mean, "V2E2V", "psi_v")]).unwrap()
    }

    #[test]
    fn a_mesh_without_an_offset_skips_the_programs_that_need_it() {
        let mut programs = gridkey_stencil::icon_programs();
        programs.push(v2e2v_mean());
        for name in ["quad-hexagon.grid.nc", "oQU480.231010.nc"] {
            let (run, skipped) = split(&programs, &grid(name));
            let names: Vec<&str> = run.iter().map(|p| p.name()).collect();
            let main: Vec<String> = gridkey_stencil::icon_programs().iter().map(|p| p.name().to_owned()).collect();
            assert_eq!(names, main, "{name}: the eight programs of the main job run");
            assert_eq!(skipped.len(), 1, "{name}");
            assert_eq!(skipped[0].program, "v2e2v_mean");
            assert!(skipped[0].reason.starts_with("needs offset V2E2V, which the "), "{}", skipped[0].reason);
            assert!(
                skipped[0].reason.contains("(it has C2E, C2V, C2E2C, E2C, E2V, V2E, V2C)"),
                "{}",
                skipped[0].reason
            );
        }
        let (run, skipped) = split(&programs, &grid(crate::SHIPPED_GRID.trim_start_matches("data/grids/")));
        assert_eq!((run.len(), skipped.len()), (9, 0), "ICON has V2E2V");
    }
}
