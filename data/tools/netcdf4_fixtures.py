#!/usr/bin/env python3
"""netCDF-4 files for the tests, written by netCDF4-python (the netCDF C library): the reader of
gridkey-grid is checked against what the C library writes (ADR 0014).

  netcdf4_fixtures.py to-netcdf4 IN OUT
      Copies IN (any netCDF file) into OUT as NETCDF4 (HDF5): every dimension, variable and
      attribute, variables chunked and compressed (zlib level 4, shuffle).
  netcdf4_fixtures.py mixed-ugrid OUT DTYPE
      The mixed mesh of ugrid_mixed_witness.py as NETCDF4, face-node of NumPy type DTYPE (i1, u1,
      i2, u2, i4, u4, i8, u8) stored (n_max_face_nodes, n_face), start_index 1, _FillValue the
      largest value of DTYPE.

Needs netCDF4 and numpy (data/tools/requirements-witness.txt).
"""
import os, sys
import numpy as np
import netCDF4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ugrid_mixed_witness import FACES, N_NODE, WIDTH

def to_netcdf4(src, dst):
    with netCDF4.Dataset(src) as a, netCDF4.Dataset(dst, "w", format="NETCDF4") as b:
        a.set_auto_maskandscale(False)
        b.setncatts({k: a.getncattr(k) for k in a.ncattrs()})
        for name, d in a.dimensions.items():
            b.createDimension(name, None if d.isunlimited() else len(d))
        for name, v in a.variables.items():
            attrs = {k: v.getncattr(k) for k in v.ncattrs()}
            fill = attrs.pop("_FillValue", None)
            w = b.createVariable(name, v.dtype, v.dimensions, zlib=bool(v.dimensions), complevel=4,
                                 shuffle=True, fill_value=fill)
            w.set_auto_maskandscale(False)
            w.setncatts(attrs)
            w[...] = v[...]

def mixed_ugrid(dst, dtype):
    dtype = np.dtype(dtype)
    fill = np.iinfo(dtype).max
    with netCDF4.Dataset(dst, "w", format="NETCDF4") as ds:
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
            ds.createVariable(f"mesh_node_{c}", "f8", ("nMesh_node",))[:] = np.arange(N_NODE, dtype=float)
        fn = ds.createVariable("mesh_face_nodes", dtype, ("nMaxMesh_face_nodes", "nMesh_face"),
                               fill_value=fill)
        fn.set_auto_maskandscale(False)
        fn.start_index = dtype.type(1)
        t = np.full((len(FACES), WIDTH), fill, dtype)
        for f, nodes in enumerate(FACES):
            t[f, :len(nodes)] = np.asarray(nodes) + 1
        fn[:] = t.T

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "to-netcdf4":
        to_netcdf4(sys.argv[2], sys.argv[3])
    elif cmd == "mixed-ugrid":
        mixed_ugrid(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown command {cmd!r}")
