#!/usr/bin/env python3
"""uxarray as the witness of the tables derived from a small mixed UGRID mesh (ADR 0015).

The mesh: a hexagon, a quad and three triangles around it (rows padded to six nodes), nine
nodes. It is written here as a netCDF-4 UGRID file with start_index 1, _FillValue -999 and
face-node stored (n_max_face_nodes, n_face), the way crates/gridkey-grid/tests/ugrid.rs writes
it as netCDF-3; uxarray reads it and derives every table. Canonical form: (n, k), int32,
0-based, -1 for no neighbour.
Usage: ugrid_mixed_witness.py OUT.json   (pip install -r data/tools/requirements-witness.txt)
"""
import json, os, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table_digest_witness import table_digest

FACES = [  # 0-based node lists
    [0, 1, 2, 3, 4, 5],
    [1, 0, 6, 7],
    [2, 1, 7],
    [3, 2, 8],
    [2, 7, 8],
]
N_NODE = 9
START, FILL, WIDTH = 1, -999, 6

def write(path):
    import netCDF4
    ds = netCDF4.Dataset(path, "w", format="NETCDF4")
    ds.createDimension("nMesh_node", N_NODE)
    ds.createDimension("nMesh_face", len(FACES))
    ds.createDimension("nMaxMesh_face_nodes", WIDTH)
    mesh = ds.createVariable("mesh", "i4")
    mesh.cf_role = "mesh_topology"
    mesh.topology_dimension = np.int32(2)
    mesh.node_coordinates = "mesh_node_x mesh_node_y"
    mesh.face_node_connectivity = "mesh_face_nodes"
    mesh.face_dimension = "nMesh_face"
    for c in "xy":
        v = ds.createVariable(f"mesh_node_{c}", "f8", ("nMesh_node",))
        v[:] = np.arange(N_NODE, dtype=float)
    fn = ds.createVariable("mesh_face_nodes", "i4", ("nMaxMesh_face_nodes", "nMesh_face"), fill_value=FILL)
    fn.start_index = np.int32(START)
    t = np.full((len(FACES), WIDTH), FILL, np.int32)
    for f, nodes in enumerate(FACES):
        t[f, :len(nodes)] = np.asarray(nodes) + START
    fn[:] = t.T
    ds.close()

def main():
    import uxarray
    from uxarray.constants import INT_FILL_VALUE
    props = {"C2E": "face_edge_connectivity", "C2V": "face_node_connectivity",
             "C2E2C": "face_face_connectivity", "E2C": "edge_face_connectivity",
             "E2V": "edge_node_connectivity", "V2E": "node_edge_connectivity",
             "V2C": "node_face_connectivity"}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mixed.nc")
        write(path)
        grid = uxarray.open_grid(path)
        tables = {}
        for off, prop in props.items():
            a = np.asarray(getattr(grid, prop).values, dtype=np.int64)
            a = np.where(a == INT_FILL_VALUE, -1, a).astype(np.int32)
            tables[off] = {"shape": list(a.shape), "digest": table_digest(a), "values": a.tolist()}
    doc = {"format": "gridkey ugrid mixed mesh v1", "uxarray": uxarray.__version__,
           "faces": FACES, "n_node": N_NODE, "tables": tables}
    with open(sys.argv[1], "w") as f:
        json.dump(doc, f, indent=1)

if __name__ == "__main__":
    main()
