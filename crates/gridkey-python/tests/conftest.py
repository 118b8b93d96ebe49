"""Shared fixtures: the repository's data directory, the independent witnesses, a fresh store."""

from __future__ import annotations

from typing import Any

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path

import hypothesis
import numpy as np
import pytest

import gridkey

# No example database in the working tree: every run draws afresh (failures print their seed).
hypothesis.settings.register_profile("gridkey", database=None, deadline=None)
hypothesis.settings.load_profile("gridkey")

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "data"


def load_witness(name: str) -> Any:
    """A witness script of data/tools as a module (they are independent of gridkey)."""
    spec = importlib.util.spec_from_file_location(name, DATA / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


digest_witness = load_witness("table_digest_witness")
key_witness_source = (DATA / "tools" / "translation_key_witness.py").read_text()


@pytest.fixture(scope="session")
def golden_digests() -> Any:
    return json.loads((DATA / "golden" / "table-digests-v1.json").read_text())


@pytest.fixture
def store(tmp_path: Path) -> Any:
    return gridkey.TableStore(tmp_path / "cache", settings=gridkey.Settings.from_vars({}))


@pytest.fixture
def verifying_store(tmp_path: Path) -> Any:
    settings = gridkey.Settings.from_vars({"GRIDKEY_VERIFY_TABLES": "1"})
    return gridkey.TableStore(tmp_path / "cache", settings=settings)


def gather(view: Mapping[str, object], name: str) -> gridkey.CompileTimeConnectivity:
    """The entry ``name`` of a compile-time offset provider, which must be a compile-time connectivity."""
    entry = view[name]
    assert isinstance(entry, gridkey.CompileTimeConnectivity), f"{name} is a {type(entry).__name__}"
    return entry


def dims() -> Any:
    """(domain, local, codomain) of C2E."""
    return gridkey.Dimension("Cell"), gridkey.Dimension("C2EDim", "local"), gridkey.Dimension("Edge")


def icon_like(n: int = 60, k: int = 3, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-1, 5 * n, size=(n, k), dtype=np.int32)


class DeviceTable:
    """A stand-in for a device array (CuPy, PyTorch on CUDA): DLPack on device type kDLCUDA (2),
    readable only through a copy to the host, which it counts."""

    def __init__(self, host: np.ndarray) -> None:
        self._host = np.array(host)
        self.shape = self._host.shape
        self.dtype = self._host.dtype
        self.host_copies = 0

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, *, stream: Any=None, max_version: Any=None, dl_device: Any=None, copy: Any=None) -> Any:
        if dl_device is None or tuple(dl_device)[0] != 1:
            raise BufferError("this table lives on the device: ask for a copy to the CPU")
        self.host_copies += 1
        copy_ = np.ascontiguousarray(self._host).copy()
        if max_version is None:
            return copy_.__dlpack__()
        return copy_.__dlpack__(max_version=max_version)


class CudaTable:
    """A stand-in for a Numba/CuPy array known by __cuda_array_interface__, copied with get()."""

    def __init__(self, host: np.ndarray, result: Any=None) -> None:
        self._host = np.array(host)
        self._result = result
        self.host_copies = 0

    @property
    def __cuda_array_interface__(self) -> Any:
        return {"shape": self._host.shape, "typestr": self._host.dtype.str, "data": (0, True), "version": 3}

    def get(self) -> Any:
        self.host_copies += 1
        if self._result is not None:
            return self._result
        return self._host.copy()
