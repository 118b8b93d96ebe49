//! The ICON-style programs of the main job.

use crate::{FieldDecl, Program, Reduce, Stage};

/// One single-stage program `name`: `output(out_dim) = reduce over offset of [weights ·] source`.
fn single(
    name: &str,
    (output, out_dim): (&str, &str),
    reduce: Reduce,
    offset: &str,
    (source, src_dim): (&str, &str),
    weights: Option<(&str, &str)>,
) -> Program {
    let mut fields = vec![FieldDecl::dense(source, src_dim)];
    let mut stage = Stage::new(output, reduce, offset, source);
    if let Some((w, local)) = weights {
        fields.push(FieldDecl::sparse(w, out_dim, local));
        stage = stage.weighted(w);
    }
    fields.push(FieldDecl::dense(output, out_dim));
    Program::new(name, fields, vec![stage]).expect("the built-in programs are valid")
}

/// The eight ICON-style programs of the main job, in this order (ICON / icon4py names):
///
/// | program | computes | offset |
/// |---|---|---|
/// | `div` | `div_vn(Cell) = Σ_k geofac_div(Cell, C2EDim) · vn(Edge)[C2E]`, cell divergence | `C2E` |
/// | `grad_n` | `grad_psi(Edge) = Σ_k grad_coeff(Edge, E2CDim) · psi_c(Cell)[E2C]`, edge normal gradient, `grad_coeff` = inv_dual_edge_length · (−1, +1) | `E2C` |
/// | `rot` | `rot_vn(Vertex) = Σ_k geofac_rot(Vertex, V2EDim) · vn(Edge)[V2E]`, vertex curl; skip entries at the 12 pentagons | `V2E` |
/// | `c2e2c_avg` | `psi_avg(Cell) = mean_k psi_c(Cell)[C2E2C]` over the existing neighbours | `C2E2C` |
/// | `cells2verts` | `psi_v(Vertex) = Σ_k c_intp(Vertex, V2CDim) · psi_c(Cell)[V2C]`; skip entries at pentagons | `V2C` |
/// | `verts2edges` | `psi_e(Edge) = Σ_k e_intp(Edge, E2VDim) · psi_v(Vertex)[E2V]` | `E2V` |
/// | `verts2cells` | `psi_cv(Cell) = Σ_k v_intp(Cell, C2VDim) · psi_v(Vertex)[C2V]` | `C2V` |
/// | `nabla2` | `grad_psi(Edge)` as `grad_n` (a temporary), then `nabla2_psi(Cell) = Σ_k geofac_div · grad_psi[C2E]` | `E2C`, `C2E` |
///
/// A provider for them needs these gather offsets with horizontal dimensions `Cell`, `Edge`,
/// `Vertex` and neighbour dimensions named `<offset>Dim` (`C2EDim`, `E2CDim`, ...), as
/// `gridkey-grid` produces.
pub fn icon_programs() -> Vec<Program> {
    vec![
        single("div", ("div_vn", "Cell"), Reduce::Sum, "C2E", ("vn", "Edge"), Some(("geofac_div", "C2EDim"))),
        single("grad_n", ("grad_psi", "Edge"), Reduce::Sum, "E2C", ("psi_c", "Cell"), Some(("grad_coeff", "E2CDim"))),
        single("rot", ("rot_vn", "Vertex"), Reduce::Sum, "V2E", ("vn", "Edge"), Some(("geofac_rot", "V2EDim"))),
        single("c2e2c_avg", ("psi_avg", "Cell"), Reduce::Mean, "C2E2C", ("psi_c", "Cell"), None),
        single("cells2verts", ("psi_v", "Vertex"), Reduce::Sum, "V2C", ("psi_c", "Cell"), Some(("c_intp", "V2CDim"))),
        single("verts2edges", ("psi_e", "Edge"), Reduce::Sum, "E2V", ("psi_v", "Vertex"), Some(("e_intp", "E2VDim"))),
        single("verts2cells", ("psi_cv", "Cell"), Reduce::Sum, "C2V", ("psi_v", "Vertex"), Some(("v_intp", "C2VDim"))),
        nabla2(),
    ]
}

fn nabla2() -> Program {
    Program::new(
        "nabla2",
        vec![
            FieldDecl::dense("psi_c", "Cell"),
            FieldDecl::sparse("grad_coeff", "Edge", "E2CDim"),
            FieldDecl::sparse("geofac_div", "Cell", "C2EDim"),
            FieldDecl::dense("grad_psi", "Edge"),
            FieldDecl::dense("nabla2_psi", "Cell"),
        ],
        vec![
            Stage::new("grad_psi", Reduce::Sum, "E2C", "psi_c").weighted("grad_coeff"),
            Stage::new("nabla2_psi", Reduce::Sum, "C2E", "grad_psi").weighted("geofac_div"),
        ],
    )
    .expect("the built-in programs are valid")
}
