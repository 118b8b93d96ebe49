"""A model that compiles a GT4Py program through ``gridkey.gt4py``: the divergence over each cell's edges (``C2E``)
on the ICON R02B04 grid shipped in ``data/grids``, checked against NumPy.

Run it from the repository, in an environment with GT4Py 1.2.x, its ``gtfn`` backend's build tools and this package
(README "gridkey for GT4Py")::

    GT4PY_BUILD_CACHE_LIFETIME=persistent GT4PY_BUILD_JOBS_MODE=process python crates/gridkey-python/examples/gt4py_model.py

The first run translates and builds the program (GT4Py's C++ build: tens of seconds); a later run, in any build-jobs
mode, is a warm start: the hit is resolved in this process and no worker pool starts (``parent_hits`` 1,
``handed_to_runner`` 0 in the line it prints). Exit status 0 when the result equals NumPy's.
"""

from __future__ import annotations

import pathlib
import time

import numpy as np
from scipy.io import netcdf_file

import gt4py.next as gtx
from gt4py.next import neighbor_sum
from gt4py.next.otf import compiled_program
from gt4py.next.program_processors.runners.gtfn import run_gtfn

GRID = pathlib.Path(__file__).resolve().parents[3] / "data" / "grids" / "icon_grid_0013_R02B04_R.nc"

Cell = gtx.Dimension("Cell")
Edge = gtx.Dimension("Edge")
K = gtx.Dimension("K", kind=gtx.DimensionKind.VERTICAL)
C2EDim = gtx.Dimension("C2E", kind=gtx.DimensionKind.LOCAL)
C2E = gtx.FieldOffset("C2E", source=Edge, target=(Cell, C2EDim))


@gtx.field_operator
def _div(
    vn: gtx.Field[gtx.Dims[Edge, K], gtx.float64], geofac_div: gtx.Field[gtx.Dims[Cell, C2EDim], gtx.float64]
) -> gtx.Field[gtx.Dims[Cell, K], gtx.float64]:
    return neighbor_sum(geofac_div * vn(C2E), axis=C2EDim)


@gtx.program(backend=run_gtfn)
def div(
    vn: gtx.Field[gtx.Dims[Edge, K], gtx.float64],
    geofac_div: gtx.Field[gtx.Dims[Cell, C2EDim], gtx.float64],
    div_vn: gtx.Field[gtx.Dims[Cell, K], gtx.float64],
):
    _div(vn, geofac_div, out=div_vn)


def main() -> int:
    import gridkey.gt4py

    gridkey.gt4py.install()  # before the first program is compiled
    with netcdf_file(GRID, "r", mmap=False) as nc:
        # ICON keeps the table neighbour axis first, 1-based (data/grids/README.md): (cells, 3), 0-based here.
        c2e = np.ascontiguousarray(np.asarray(nc.variables["edge_of_cell"].data, dtype=np.int32).T - 1)
    n_cells, n_edges, levels = c2e.shape[0], int(c2e.max()) + 1, 4
    provider = {"C2E": gtx.as_connectivity([Cell, C2EDim], Edge, c2e)}

    started = time.perf_counter()
    div.compile(offset_provider=provider)
    compiled_program.wait_for_compilation()
    compile_seconds = time.perf_counter() - started

    rng = np.random.default_rng(0)
    vn, geofac_div = rng.uniform(-1, 1, (n_edges, levels)), rng.uniform(-1, 1, c2e.shape)
    out = gtx.as_field([Cell, K], np.zeros((n_cells, levels)))
    div(gtx.as_field([Edge, K], vn), gtx.as_field([Cell, C2EDim], geofac_div), out, offset_provider=provider)
    reference = np.einsum("ck,ckz->cz", geofac_div, vn[c2e])
    error = float(np.max(np.abs(out.asnumpy() - reference)) / np.max(np.abs(reference)))
    print(f"div on {GRID.name}: compile {compile_seconds:.2f} s, largest relative error {error:.1e}, {gridkey.gt4py.stats()}")
    return 0 if error <= 1e-12 else 1


if __name__ == "__main__":
    raise SystemExit(main())
