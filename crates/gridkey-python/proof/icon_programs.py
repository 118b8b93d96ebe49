"""Eight icon4py-style GT4Py programs on an ICON grid, their offset provider and a NumPy reference.

The programs are those of gridkey's reference frontend (``gridkey-stencil``'s ``icon_programs``), written in
GT4Py's embedded DSL over ``(horizontal, K)`` fields as icon4py writes them:

| program | computes | offset |
|---|---|---|
| ``div`` | ``div_vn(Cell, K) = sum_k geofac_div(Cell, C2EDim) * vn(Edge, K)[C2E]`` | ``C2E`` |
| ``grad_n`` | ``grad_psi(Edge, K) = sum_k grad_coeff(Edge, E2CDim) * psi_c(Cell, K)[E2C]`` | ``E2C`` |
| ``rot`` | ``rot_vn(Vertex, K) = sum_k geofac_rot(Vertex, V2EDim) * vn[V2E]``, skip entries at pentagons | ``V2E`` |
| ``c2e2c_avg`` | ``psi_avg(Cell, K) = mean_k psi_c[C2E2C]`` over the existing neighbours | ``C2E2C`` |
| ``cells2verts`` | ``psi_v(Vertex, K) = sum_k c_intp(Vertex, V2CDim) * psi_c[V2C]``, skips at pentagons | ``V2C`` |
| ``verts2edges`` | ``psi_e(Edge, K) = sum_k e_intp(Edge, E2VDim) * psi_v[E2V]`` | ``E2V`` |
| ``verts2cells`` | ``psi_cv(Cell, K) = sum_k v_intp(Cell, C2VDim) * psi_v[C2V]`` | ``C2V`` |
| ``nabla2`` | ``grad_psi`` as ``grad_n`` (a temporary), then ``sum_k geofac_div * grad_psi[C2E]`` | ``E2C``, ``C2E`` |

The offset provider holds every table of the grid file (eight connectivities, ``V2E2V`` included, which no program
reads), as an icon4py model run hands GT4Py its full provider (GT4Py 1.2 takes only neighbour tables in it).
"""

from __future__ import annotations

import pathlib
from typing import Callable

import numpy as np
from scipy.io import netcdf_file

import gt4py.next as gtx
from gt4py.next import neighbor_sum
from gt4py.next.program_processors.runners.gtfn import run_gtfn

Cell = gtx.Dimension("Cell")
Edge = gtx.Dimension("Edge")
Vertex = gtx.Dimension("Vertex")
K = gtx.Dimension("K", kind=gtx.DimensionKind.VERTICAL)
C2EDim = gtx.Dimension("C2E", kind=gtx.DimensionKind.LOCAL)
C2VDim = gtx.Dimension("C2V", kind=gtx.DimensionKind.LOCAL)
C2E2CDim = gtx.Dimension("C2E2C", kind=gtx.DimensionKind.LOCAL)
E2CDim = gtx.Dimension("E2C", kind=gtx.DimensionKind.LOCAL)
E2VDim = gtx.Dimension("E2V", kind=gtx.DimensionKind.LOCAL)
V2EDim = gtx.Dimension("V2E", kind=gtx.DimensionKind.LOCAL)
V2CDim = gtx.Dimension("V2C", kind=gtx.DimensionKind.LOCAL)
V2E2VDim = gtx.Dimension("V2E2V", kind=gtx.DimensionKind.LOCAL)

C2E = gtx.FieldOffset("C2E", source=Edge, target=(Cell, C2EDim))
C2V = gtx.FieldOffset("C2V", source=Vertex, target=(Cell, C2VDim))
C2E2C = gtx.FieldOffset("C2E2C", source=Cell, target=(Cell, C2E2CDim))
E2C = gtx.FieldOffset("E2C", source=Cell, target=(Edge, E2CDim))
E2V = gtx.FieldOffset("E2V", source=Vertex, target=(Edge, E2VDim))
V2E = gtx.FieldOffset("V2E", source=Edge, target=(Vertex, V2EDim))
V2C = gtx.FieldOffset("V2C", source=Cell, target=(Vertex, V2CDim))

#: Number of vertical levels of every field.
NLEV = 4

#: (offset, ICON variable (k, n), domain, local dimension, codomain) of every table in the provider.
TABLES = (
    ("C2E", "edge_of_cell", Cell, C2EDim, Edge),
    ("C2V", "vertex_of_cell", Cell, C2VDim, Vertex),
    ("C2E2C", "neighbor_cell_index", Cell, C2E2CDim, Cell),
    ("E2C", "adjacent_cell_of_edge", Edge, E2CDim, Cell),
    ("E2V", "edge_vertices", Edge, E2VDim, Vertex),
    ("V2E", "edges_of_vertex", Vertex, V2EDim, Edge),
    ("V2C", "cells_of_vertex", Vertex, V2CDim, Cell),
    ("V2E2V", "vertices_of_vertex", Vertex, V2E2VDim, Vertex),
)

Fc = gtx.Field[gtx.Dims[Cell, K], gtx.float64]
Fe = gtx.Field[gtx.Dims[Edge, K], gtx.float64]
Fv = gtx.Field[gtx.Dims[Vertex, K], gtx.float64]


@gtx.field_operator
def _div(vn: Fe, geofac_div: gtx.Field[gtx.Dims[Cell, C2EDim], gtx.float64]) -> Fc:
    return neighbor_sum(geofac_div * vn(C2E), axis=C2EDim)


@gtx.field_operator
def _grad_n(psi_c: Fc, grad_coeff: gtx.Field[gtx.Dims[Edge, E2CDim], gtx.float64]) -> Fe:
    return neighbor_sum(grad_coeff * psi_c(E2C), axis=E2CDim)


@gtx.field_operator
def _rot(vn: Fe, geofac_rot: gtx.Field[gtx.Dims[Vertex, V2EDim], gtx.float64]) -> Fv:
    return neighbor_sum(geofac_rot * vn(V2E), axis=V2EDim)


@gtx.field_operator
def _c2e2c_avg(psi_c: Fc, ones_c: Fc) -> Fc:
    return neighbor_sum(psi_c(C2E2C), axis=C2E2CDim) / neighbor_sum(ones_c(C2E2C), axis=C2E2CDim)


@gtx.field_operator
def _cells2verts(psi_c: Fc, c_intp: gtx.Field[gtx.Dims[Vertex, V2CDim], gtx.float64]) -> Fv:
    return neighbor_sum(c_intp * psi_c(V2C), axis=V2CDim)


@gtx.field_operator
def _verts2edges(psi_v: Fv, e_intp: gtx.Field[gtx.Dims[Edge, E2VDim], gtx.float64]) -> Fe:
    return neighbor_sum(e_intp * psi_v(E2V), axis=E2VDim)


@gtx.field_operator
def _verts2cells(psi_v: Fv, v_intp: gtx.Field[gtx.Dims[Cell, C2VDim], gtx.float64]) -> Fc:
    return neighbor_sum(v_intp * psi_v(C2V), axis=C2VDim)


@gtx.field_operator
def _nabla2(
    psi_c: Fc,
    grad_coeff: gtx.Field[gtx.Dims[Edge, E2CDim], gtx.float64],
    geofac_div: gtx.Field[gtx.Dims[Cell, C2EDim], gtx.float64],
) -> Fc:
    grad_psi = _grad_n(psi_c, grad_coeff)
    return _div(grad_psi, geofac_div)


@gtx.program(backend=run_gtfn)
def div(vn: Fe, geofac_div: gtx.Field[gtx.Dims[Cell, C2EDim], gtx.float64], div_vn: Fc):
    _div(vn, geofac_div, out=div_vn)


@gtx.program(backend=run_gtfn)
def grad_n(psi_c: Fc, grad_coeff: gtx.Field[gtx.Dims[Edge, E2CDim], gtx.float64], grad_psi: Fe):
    _grad_n(psi_c, grad_coeff, out=grad_psi)


@gtx.program(backend=run_gtfn)
def rot(vn: Fe, geofac_rot: gtx.Field[gtx.Dims[Vertex, V2EDim], gtx.float64], rot_vn: Fv):
    _rot(vn, geofac_rot, out=rot_vn)


@gtx.program(backend=run_gtfn)
def c2e2c_avg(psi_c: Fc, ones_c: Fc, psi_avg: Fc):
    _c2e2c_avg(psi_c, ones_c, out=psi_avg)


@gtx.program(backend=run_gtfn)
def cells2verts(psi_c: Fc, c_intp: gtx.Field[gtx.Dims[Vertex, V2CDim], gtx.float64], psi_v: Fv):
    _cells2verts(psi_c, c_intp, out=psi_v)


@gtx.program(backend=run_gtfn)
def verts2edges(psi_v: Fv, e_intp: gtx.Field[gtx.Dims[Edge, E2VDim], gtx.float64], psi_e: Fe):
    _verts2edges(psi_v, e_intp, out=psi_e)


@gtx.program(backend=run_gtfn)
def verts2cells(psi_v: Fv, v_intp: gtx.Field[gtx.Dims[Cell, C2VDim], gtx.float64], psi_cv: Fc):
    _verts2cells(psi_v, v_intp, out=psi_cv)


@gtx.program(backend=run_gtfn)
def nabla2(
    psi_c: Fc,
    grad_coeff: gtx.Field[gtx.Dims[Edge, E2CDim], gtx.float64],
    geofac_div: gtx.Field[gtx.Dims[Cell, C2EDim], gtx.float64],
    nabla2_psi: Fc,
):
    _nabla2(psi_c, grad_coeff, geofac_div, out=nabla2_psi)


#: The eight programs in the order of the reference frontend.
PROGRAMS = {
    "div": div,
    "grad_n": grad_n,
    "rot": rot,
    "c2e2c_avg": c2e2c_avg,
    "cells2verts": cells2verts,
    "verts2edges": verts2edges,
    "verts2cells": verts2cells,
    "nabla2": nabla2,
}


def read_icon_tables(path: pathlib.Path) -> dict[str, np.ndarray]:
    """The canonical tables of an ICON grid file: ``(n, k)`` int32, C order, 0-based, ``-1`` = no neighbour.

    ICON stores each table neighbour axis first, 1-based, with 0 for a missing neighbour (``data/grids/README.md``).
    """
    out = {}
    with netcdf_file(path, "r", mmap=False) as nc:
        for offset, variable, *_ in TABLES:
            raw = np.asarray(nc.variables[variable].data, dtype=np.int64).T
            out[offset] = np.ascontiguousarray(np.where(raw >= 1, raw - 1, -1).astype(np.int32))
    return out


def tile_tables(tables: dict[str, np.ndarray], times: int) -> dict[str, np.ndarray]:
    """Every table repeated ``times`` times along its domain axis (indices unchanged, so still in range)."""
    return {name: np.ascontiguousarray(np.tile(table, (times, 1))) for name, table in tables.items()}


def layout(table: np.ndarray, order: str, dtype: np.dtype) -> np.ndarray:
    """``table`` as ``dtype`` in memory order ``order`` (``"C"`` or ``"F"``)."""
    return np.array(table, dtype=dtype, order=order)


def offset_provider(
    tables: dict[str, np.ndarray], *, order: str = "C", dtype=np.int32, allocator=None
) -> dict[str, object]:
    """The full runtime offset provider: one connectivity per table of the grid, in the order of ``TABLES``.

    ``allocator=np`` keeps the given layout (``gtx.as_connectivity(..., allocator=np)``); ``None`` lets GT4Py copy
    the table into its default CPU allocation.
    """
    provider: dict[str, object] = {}
    for offset, _, domain, local, codomain in TABLES:
        data = layout(tables[offset], order, dtype)
        skip = -1 if (data == -1).any() else None
        kwargs = {} if allocator is None else {"allocator": allocator}
        provider[offset] = gtx.as_connectivity([domain, local], codomain, data, skip_value=skip, **kwargs)
    return provider


def sizes(tables: dict[str, np.ndarray]) -> dict[gtx.Dimension, int]:
    return {Cell: tables["C2E"].shape[0], Edge: tables["E2C"].shape[0], Vertex: tables["V2E"].shape[0]}


def _gather_sum(weights: np.ndarray | None, source: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``sum_k w[:, k] * source[table[:, k]]`` over entries that are not ``-1``; shapes ``(n, NLEV)``."""
    valid = table >= 0
    gathered = source[np.where(valid, table, 0)]  # (n, k, NLEV)
    w = np.ones(table.shape) if weights is None else weights
    return np.where(valid[..., None], w[..., None] * gathered, 0.0).sum(axis=1)


def cases(tables: dict[str, np.ndarray], seed: int = 1) -> dict[str, tuple[Callable, dict, str, np.ndarray]]:
    """For each program: (program, NumPy inputs by argument name, output argument, NumPy reference result)."""
    rng = np.random.default_rng(seed)
    n = sizes(tables)
    fc = lambda: rng.uniform(-1, 1, (n[Cell], NLEV))  # noqa: E731
    fe = lambda: rng.uniform(-1, 1, (n[Edge], NLEV))  # noqa: E731
    fv = lambda: rng.uniform(-1, 1, (n[Vertex], NLEV))  # noqa: E731
    sparse = lambda offset: rng.uniform(-1, 1, tables[offset].shape)  # noqa: E731
    vn, psi_c, psi_v = fe(), fc(), fv()
    geofac_div, grad_coeff, geofac_rot = sparse("C2E"), sparse("E2C"), sparse("V2E")
    c_intp, e_intp, v_intp = sparse("V2C"), sparse("E2V"), sparse("C2V")
    ones_c = np.ones((n[Cell], NLEV))
    t = tables
    grad_psi = _gather_sum(grad_coeff, psi_c, t["E2C"])
    return {
        "div": ({"vn": vn, "geofac_div": geofac_div}, "div_vn", _gather_sum(geofac_div, vn, t["C2E"])),
        "grad_n": ({"psi_c": psi_c, "grad_coeff": grad_coeff}, "grad_psi", grad_psi),
        "rot": ({"vn": vn, "geofac_rot": geofac_rot}, "rot_vn", _gather_sum(geofac_rot, vn, t["V2E"])),
        "c2e2c_avg": (
            {"psi_c": psi_c, "ones_c": ones_c},
            "psi_avg",
            _gather_sum(None, psi_c, t["C2E2C"]) / (t["C2E2C"] >= 0).sum(axis=1)[:, None],
        ),
        "cells2verts": ({"psi_c": psi_c, "c_intp": c_intp}, "psi_v", _gather_sum(c_intp, psi_c, t["V2C"])),
        "verts2edges": ({"psi_v": psi_v, "e_intp": e_intp}, "psi_e", _gather_sum(e_intp, psi_v, t["E2V"])),
        "verts2cells": ({"psi_v": psi_v, "v_intp": v_intp}, "psi_cv", _gather_sum(v_intp, psi_v, t["C2V"])),
        "nabla2": (
            {"psi_c": psi_c, "grad_coeff": grad_coeff, "geofac_div": geofac_div},
            "nabla2_psi",
            _gather_sum(geofac_div, grad_psi, t["C2E"]),
        ),
    }


_DIMS_OF = {
    "vn": (Edge, K),
    "psi_c": (Cell, K),
    "psi_v": (Vertex, K),
    "ones_c": (Cell, K),
    "geofac_div": (Cell, C2EDim),
    "grad_coeff": (Edge, E2CDim),
    "geofac_rot": (Vertex, V2EDim),
    "c_intp": (Vertex, V2CDim),
    "e_intp": (Edge, E2VDim),
    "v_intp": (Cell, C2VDim),
    "div_vn": (Cell, K),
    "grad_psi": (Edge, K),
    "rot_vn": (Vertex, K),
    "psi_avg": (Cell, K),
    "psi_e": (Edge, K),
    "psi_cv": (Cell, K),
    "nabla2_psi": (Cell, K),
}


def as_fields(arrays: dict[str, np.ndarray]) -> dict[str, object]:
    """GT4Py fields over the NumPy arrays, with the dimensions of each argument name."""
    return {name: gtx.as_field(list(_DIMS_OF[name]), a) for name, a in arrays.items()}
