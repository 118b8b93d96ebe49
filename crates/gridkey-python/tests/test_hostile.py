"""Hostile input from Python: the right exception, with the Rust message, never a crash."""

from __future__ import annotations

from typing import Any
from pathlib import Path

import numpy as np
import pytest

import gridkey
from conftest import dims

A = np.arange(12, dtype=np.int32).reshape(4, 3)


class RaisingArray:
    def __array__(self, dtype: Any=None, copy: Any=None) -> Any:
        raise RuntimeError("the array library failed")


NOT_TABLES = [
    (A.astype(np.float64), gridkey.TableTypeError, "float64"),
    (A.astype(np.float32), gridkey.TableTypeError, "float32"),
    (A.astype(bool), gridkey.TableTypeError, "bool"),
    (A.astype(object), gridkey.TableTypeError, "object"),
    (A.astype(np.uint32), gridkey.TableTypeError, "uint32"),
    (A.astype(np.int16), gridkey.TableTypeError, "int16"),
    (A.astype("datetime64[s]"), gridkey.TableTypeError, "datetime64"),
    (np.zeros((4, 3), dtype=[("a", "<i4")]), gridkey.TableTypeError, "int32 or int64"),
    (np.arange(5, dtype=np.int32), gridkey.TableValueError, "1 dimension(s), shape (5,)"),
    (np.zeros((2, 2, 2), np.int32), gridkey.TableValueError, "3 dimension(s), shape (2, 2, 2)"),
    (np.int32(5), gridkey.TableValueError, "0 dimension(s)"),
    (np.zeros((0,), np.int64), gridkey.TableValueError, "1 dimension(s)"),
    ([[1, 2], [3, 4]], gridkey.TableTypeError, "type list is not a table"),
    ({"a": 1}, gridkey.TableTypeError, "type dict is not a table"),
    ("C2E", gridkey.TableTypeError, "type str is not a table"),
    (None, gridkey.TableTypeError, "type NoneType is not a table"),
    (3, gridkey.TableTypeError, "type int is not a table"),
    (b"\x00\x01\x02\x03", gridkey.TableTypeError, "int32 or int64"),
    (object(), gridkey.TableTypeError, "type object is not a table"),
    (RaisingArray(), gridkey.TableTypeError, "NumPy cannot read it"),
]


@pytest.mark.parametrize("obj, error, needle", NOT_TABLES, ids=[repr(type(o).__name__) + n for o, _, n in NOT_TABLES])
def test_not_a_table(obj: Any, error: Any, needle: Any, store: gridkey.TableStore) -> None:
    for call in (gridkey.table_digest, store.put, lambda t: gridkey.Connectivity(t, *dims())):
        with pytest.raises(error) as info:
            call(obj)
        assert isinstance(info.value, gridkey.GridkeyError)
        assert needle in str(info.value)
        assert not str(info.value).endswith(".")


def test_the_cause_of_a_failing_array_is_kept() -> None:
    with pytest.raises(gridkey.TableTypeError) as info:
        gridkey.table_digest(RaisingArray())
    assert isinstance(info.value.__cause__, RuntimeError)


def test_zero_size_tables_are_tables(golden_digests: dict[str, Any], store: gridkey.TableStore) -> None:
    empty = np.zeros((0, 3), np.int32)
    golden = golden_digests["synthetic"]["empty_0x3_i4"]["digest"]
    assert gridkey.table_digest(empty) == golden
    assert store.put(empty) == golden
    opened = store.open(golden, np.int32, (0, 3))
    assert opened.shape == (0, 3) and not opened.flags.writeable
    assert gridkey.table_digest(np.zeros((5, 0), np.int64)) == gridkey.table_digest(np.zeros((5, 0), np.int64, order="F"))
    with pytest.raises(gridkey.TableFileError, match=r"shape \[0, 3\], expected \[0, 4\]"):
        store.open(golden, np.int32, (0, 4))


@pytest.mark.parametrize("shape", [(2**62, 4), (2**40, 2**40), (2**63, 1), [2**61, 8]])
def test_huge_shapes_are_refused_before_any_io(store: gridkey.TableStore, shape: Any) -> None:
    with pytest.raises(gridkey.TableValueError, match="larger than any table"):
        store.open("32fc64d30d2a0401beb78468f082a182", np.int32, shape)


def test_huge_logical_shape_of_a_broadcast_view_is_read_without_memory() -> None:
    # A zero-stride view: 8 GB logically, 4 bytes in memory; its digest is the witness's of the
    # materialised rows (checked on a small one), and reading it allocates nothing.
    small = np.broadcast_to(np.int32(7), (1000, 3))
    assert gridkey.table_digest(small) == gridkey.table_digest(np.full((1000, 3), 7, np.int32))


@pytest.mark.parametrize(
    "shape", [(-1, 3), (3,), (1, 2, 3), "x", None, (2**64, 1)], ids=["negative", "1-d", "3-d", "str", "none", "overflow"]
)
def test_bad_shape_arguments(store: gridkey.TableStore, shape: Any) -> None:
    with pytest.raises(gridkey.TableValueError, match="shape"):
        store.open("32fc64d30d2a0401beb78468f082a182", np.int32, shape)


@pytest.mark.parametrize(
    "digest", ["", "xyz", "0" * 31, "g" * 32, "0" * 33, "é" * 16], ids=["empty", "short", "31", "non-hex", "33", "unicode"]
)
def test_bad_digest_text(store: gridkey.TableStore, digest: Any) -> None:
    with pytest.raises(gridkey.TableValueError, match="is not a table digest"):
        store.open(digest, np.int32, (4, 3))
    with pytest.raises(gridkey.TableValueError):
        store.path_of(digest)


@pytest.mark.parametrize("dtype", [np.float32, "int16", ">i4", "S4", "not a dtype", object, bool])
def test_bad_dtype_arguments(store: gridkey.TableStore, dtype: Any) -> None:
    with pytest.raises(gridkey.TableTypeError):
        store.open("32fc64d30d2a0401beb78468f082a182", dtype, (4, 3))


def test_bad_dimensions() -> None:
    domain, local, codomain = dims()
    with pytest.raises(gridkey.TableValueError, match="is not a dimension kind"):
        gridkey.Dimension("Cell", "sideways")  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(gridkey.TableValueError, match="connectivity local dimension Cell must be a Local dimension"):
        gridkey.Connectivity(A, domain, domain, codomain)
    with pytest.raises(gridkey.TableValueError, match="domain dimension C2EDim"):
        gridkey.Connectivity(A, local, local, codomain)
    with pytest.raises(TypeError):
        gridkey.Connectivity(A, "Cell", local, codomain)  # type: ignore[arg-type]  # wrong on purpose


def test_bad_providers(store: gridkey.TableStore) -> None:
    domain, local, codomain = dims()
    with pytest.raises(gridkey.TableTypeError, match="mapping"):
        gridkey.compile_time_offset_provider([A], store)  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(gridkey.TableTypeError, match="offset C2E: an object of type numpy.ndarray is neither"):
        gridkey.compile_time_offset_provider({"C2E": A}, store)  # type: ignore[dict-item]  # wrong on purpose
    with pytest.raises(gridkey.TableValueError, match="table_dtype"):
        gridkey.compile_time_offset_provider({}, store, table_dtype="int16")  # type: ignore[arg-type]  # wrong on purpose
    runtime = {"C2E": gridkey.Connectivity(A, domain, local, codomain)}
    with pytest.raises(gridkey.TableTypeError, match="runtime connectivity"):
        gridkey.KeyInputs("f", "1", "p", b"", {}, runtime)  # type: ignore[arg-type]  # wrong on purpose


def test_cache_dir_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(gridkey.GridkeyOSError) as info:
        gridkey.TableStore(blocker, settings=gridkey.Settings.from_vars({}))
    assert isinstance(info.value, OSError)
    assert info.value.errno is not None and info.value.filename.endswith("tables-v1")
    assert "cannot use table store directory" in str(info.value) and "GRIDKEY_CACHE_DIR" in str(info.value)


def test_bad_settings() -> None:
    with pytest.raises(gridkey.SettingsError, match="GRIDKEY_VERIFY_TABLES=\"maybe\" is not valid"):
        gridkey.Settings.from_vars({"GRIDKEY_VERIFY_TABLES": "maybe"})
    with pytest.raises(gridkey.SettingsError, match="GRIDKEY_BUILD_JOBS_MODE"):
        gridkey.Settings.from_vars({"GRIDKEY_BUILD_JOBS_MODE": "fork"})
    with pytest.raises(gridkey.TableTypeError):
        gridkey.Settings.from_vars(["GRIDKEY_CACHE_DIR"])  # type: ignore[arg-type]  # wrong on purpose


def test_exceptions_pickle_with_their_message() -> None:
    import pickle

    err = gridkey.TableNotFoundError("table x is not in the store", 2, "/tmp/x.npy")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.errno == 2 and back.filename == "/tmp/x.npy"
    assert isinstance(back, FileNotFoundError)
