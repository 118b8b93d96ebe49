"""Copying device tables to the host: called by the extension, once per conversion.

A device table is an object whose ``__dlpack_device__`` is not the host, or that has
``__cuda_array_interface__``. Its host copy is asked for in the ways array libraries offer, in
this order: DLPack to the CPU (``numpy.from_dlpack(x, device="cpu", copy=True)``, NumPy 2.1
and later, any library implementing DLPack 1.0), CuPy's ``x.get()``, Numba's
``x.copy_to_host()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray


def host_copy(table: Any) -> NDArray[Any]:
    """A NumPy array on the host holding a copy of the device array ``table``."""
    if hasattr(table, "__dlpack__"):
        try:
            return np.from_dlpack(table, device="cpu", copy=True)
        except (TypeError, BufferError, ValueError, NotImplementedError):
            # An older NumPy or producer without cross-device DLPack: try the library's own copy.
            if not (hasattr(table, "get") or hasattr(table, "copy_to_host")):
                raise
    if hasattr(table, "get"):
        return np.asarray(table.get())
    if hasattr(table, "copy_to_host"):
        return np.asarray(table.copy_to_host())
    raise TypeError(f"a {type(table).__qualname__} offers no way to copy it to the host (DLPack, get(), copy_to_host())")
