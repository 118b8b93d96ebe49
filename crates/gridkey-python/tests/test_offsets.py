"""Compile-time views of offset providers: order, canonical tables, the memo, device tables,
pickling to worker processes."""

from __future__ import annotations

from typing import Any
from pathlib import Path

import gc
import multiprocessing
import os
import pickle

import numpy as np
import pytest

import gridkey
from conftest import CudaTable, DeviceTable, digest_witness, dims, icon_like, gather


def provider_of(*tables: Any, skip: Any=-1) -> Any:
    domain, local, codomain = dims()
    out: dict[str, gridkey.Connectivity | gridkey.Dimension] = {}
    for i, t in enumerate(tables):
        out[f"O{i}"] = gridkey.Connectivity(t, domain, local, codomain, skip)
    out["Koff"] = gridkey.Dimension("K", "vertical")
    return out


def test_view_keeps_every_entry_in_order(store: gridkey.TableStore) -> None:
    provider = provider_of(icon_like(seed=1), icon_like(seed=2))
    view = gridkey.compile_time_offset_provider(provider, store)
    assert list(view) == ["O0", "O1", "Koff"]
    assert view["Koff"] is provider["Koff"]
    ct = gather(view, "O0")
    assert isinstance(ct, gridkey.CompileTimeConnectivity)
    assert (ct.domain, ct.local, ct.codomain, ct.skip_value) == (*dims(), -1)
    assert ct.digest == digest_witness.table_digest(icon_like(seed=1))
    assert ct.table.flags.c_contiguous and not ct.table.flags.writeable and not ct.table.flags.owndata
    np.testing.assert_array_equal(ct.table, icon_like(seed=1))
    assert ct.path == store.path_of(ct.digest) and ct.cache_dir == store.cache_dir
    # A view converts to itself.
    again = gridkey.compile_time_offset_provider(view, store)
    assert again["O0"] is ct


@pytest.mark.parametrize("table_dtype", ["canonical", "runtime"])
def test_every_layout_gives_one_compile_time_table(store: gridkey.TableStore, table_dtype: Any) -> None:
    table = icon_like(400, 4)
    variants = {
        "C": table,
        "Fortran": np.asfortranarray(table),
        "int64": table.astype(np.int64),
        "int64 Fortran": np.asfortranarray(table.astype(np.int64)),
        "big-endian": table.astype(">i4"),
        "strided": np.repeat(table, 2, axis=1)[:, ::2],
    }
    views = {n: gather(gridkey.compile_time_offset_provider(provider_of(t), store, table_dtype=table_dtype), "O0")
             for n, t in variants.items()}
    for name, ct in views.items():
        runtime = variants[name]
        expected_dtype = np.int32 if table_dtype == "canonical" else runtime.dtype.newbyteorder("=")
        assert ct.dtype == expected_dtype, name
        assert ct.digest == digest_witness.table_digest(table.astype(expected_dtype)), name
        np.testing.assert_array_equal(ct.table, table)


def test_canonical_keeps_int64_when_an_index_does_not_fit(store: gridkey.TableStore) -> None:
    wide = icon_like().astype(np.int64)
    wide[3, 1] = 2**40
    ct = gather(gridkey.compile_time_offset_provider(provider_of(wide), store), "O0")
    assert ct.dtype == np.int64 and ct.digest == digest_witness.table_digest(wide)


def test_each_connectivity_is_converted_once(store: gridkey.TableStore, tmp_path: Path) -> None:
    provider = provider_of(icon_like(seed=3), icon_like(seed=4))
    before = gridkey.conversion_stats()
    first = gridkey.compile_time_offset_provider(provider, store)
    second = gridkey.compile_time_offset_provider(dict(provider), store)
    after = gridkey.conversion_stats()
    assert after["converted"] - before["converted"] == 2
    assert after["memo_hits"] - before["memo_hits"] == 2
    assert all(first[k] is second[k] for k in ("O0", "O1"))
    # Another store or another table dtype is another conversion.
    other = gridkey.TableStore(tmp_path / "other", settings=gridkey.Settings.from_vars({}))
    assert gather(gridkey.compile_time_offset_provider(provider, other), "O0") is not first["O0"]
    runtime = gather(gridkey.compile_time_offset_provider(provider, store, table_dtype="runtime"), "O0")
    assert runtime is not first["O0"] and runtime.digest == gather(first, "O0").digest
    assert gridkey.conversion_stats()["converted"] - after["converted"] == 4


def test_a_new_connectivity_at_a_reused_address_is_not_a_memo_hit(store: gridkey.TableStore) -> None:
    table = icon_like(seed=5)
    domain, local, codomain = dims()
    conn = gridkey.Connectivity(table, domain, local, codomain)
    first = gridkey.compile_time_connectivity(conn, store)
    # Everything the loop needs is allocated before the connectivity goes, so that nothing else takes its address.
    other_table = icon_like(seed=6)
    keep: list[Any] = [None] * 2000
    old_id = id(conn)
    del conn
    gc.collect()
    reused = False
    for i in range(len(keep)):
        conn = gridkey.Connectivity(other_table, domain, local, codomain)
        if id(conn) == old_id:
            reused = True
            break
        keep[i] = conn
    ct = gridkey.compile_time_connectivity(conn, store)
    assert ct is not first and ct.digest == digest_witness.table_digest(other_table)
    if not reused:
        pytest.skip("the allocator never reused the address; the weak-reference check was not exercised")


def test_a_runtime_table_changed_in_place_after_conversion(store: gridkey.TableStore, verifying_store: gridkey.TableStore) -> None:
    table = icon_like(seed=7)
    provider = provider_of(table)
    ct = gather(gridkey.compile_time_offset_provider(provider, store), "O0")
    old = ct.digest
    table[0, 0] += 1  # the contract says this does not happen; it does
    # The memo trusts the connectivity (the Rust crates' contract): the view and its file keep
    # the content that was converted, consistent with its digest.
    assert gather(gridkey.compile_time_offset_provider(provider, store), "O0") is ct
    assert gridkey.table_digest(ct.table) == old
    # A verifying store trusts no memo: the changed table is converted again under its digest.
    verified = gather(gridkey.compile_time_offset_provider(provider, verifying_store), "O0")
    assert verified.digest == digest_witness.table_digest(table) != old
    table[0, 0] += 1
    again = gather(gridkey.compile_time_offset_provider(provider, verifying_store), "O0")
    assert again.digest == digest_witness.table_digest(table) not in (old, verified.digest)


def test_identity_memo_with_unhashable_and_unweakrefable_objects() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]  # unhashable on purpose

        def __eq__(self, other: object) -> bool:
            return True

    memo = gridkey.IdentityMemo()
    a, b = Unhashable(), Unhashable()
    memo.insert(a, "A")
    assert memo.get(a) == "A" and memo.get(b) is None and a in memo and b not in memo
    assert memo.get_or_insert(b, lambda: "B") == "B" and memo.get_or_insert(b, lambda: 1 / 0) == "B"
    assert len(memo) == 2
    del a
    gc.collect()
    assert len(memo) == 1
    plain = [1, 2]  # a list takes no weak reference: the entry holds it
    memo.insert(plain, "list")
    assert memo.get(plain) == "list" and memo.get([1, 2]) is None
    assert memo.pop(plain) == "list" and memo.get(plain) is None


def test_device_tables_are_copied_to_the_host_once_per_connectivity(store: gridkey.TableStore, tmp_path: Path) -> None:
    host = icon_like(800, 4).astype(np.int64)
    device = DeviceTable(host)
    domain, local, codomain = dims()
    conn = gridkey.Connectivity(device, domain, local, codomain, -1)
    assert conn.on_device and conn.shape == (800, 4) and conn.dtype == np.int64
    assert device.host_copies == 0  # metadata only
    before = gridkey.conversion_stats()["host_copies"]
    for _ in range(3):
        view = gridkey.compile_time_offset_provider({"C2E": conn}, store)
    assert device.host_copies == 1
    assert gridkey.conversion_stats()["host_copies"] - before == 1
    ct = gather(view, "C2E")
    assert ct.dtype == np.int32 and ct.digest == digest_witness.table_digest(host.astype(np.int32))
    # The same table on the host keys the same.
    assert gather(gridkey.compile_time_offset_provider(provider_of(host), store), "O0").digest == ct.digest
    # Direct digests and puts copy once each.
    assert gridkey.table_digest(device) == digest_witness.table_digest(host) and device.host_copies == 2
    assert store.put(device) == digest_witness.table_digest(host) and device.host_copies == 3


def test_cuda_array_interface_tables_use_get(store: gridkey.TableStore) -> None:
    host = icon_like(50, 3)
    cuda = CudaTable(host)
    conn = gridkey.Connectivity(cuda, *dims())
    ct = gridkey.compile_time_connectivity(conn, store, table_dtype="runtime")
    gridkey.compile_time_connectivity(conn, store, table_dtype="runtime")
    assert cuda.host_copies == 1 and ct.digest == digest_witness.table_digest(host)


def test_a_failing_or_lying_host_copy_is_a_device_copy_error(store: gridkey.TableStore) -> None:
    class Broken(DeviceTable):
        def __dlpack__(self, **kwargs: Any) -> Any:
            raise RuntimeError("device lost")

    with pytest.raises(gridkey.DeviceCopyError, match="offset C2E: copying its neighbour table to the host failed: .*Broken table.s host copy raised RuntimeError: device lost") as info:
        gridkey.compile_time_offset_provider({"C2E": gridkey.Connectivity(Broken(icon_like()), *dims())}, store)
    assert info.value.__cause__ is not None
    liar = CudaTable(icon_like(50, 3), result=np.zeros((49, 3), np.int32))
    with pytest.raises(gridkey.DeviceCopyError, match=r"is <i4 \[49, 3\], its metadata said <i4 \[50, 3\]"):
        gridkey.table_digest(liar)
    floats = CudaTable(icon_like(50, 3), result=np.zeros((50, 3), np.float32))
    with pytest.raises(gridkey.DeviceCopyError, match="is not a table") as info:
        store.put(floats)
    assert isinstance(info.value.__cause__, gridkey.TableTypeError)


def test_compile_time_connectivities_pickle_as_references(store: gridkey.TableStore) -> None:
    ct = gather(gridkey.compile_time_offset_provider(provider_of(icon_like(seed=9)), store), "O0")
    blob = pickle.dumps(ct)
    assert len(blob) < 1000 and ct.table.tobytes() not in blob
    back: gridkey.CompileTimeConnectivity = pickle.loads(blob)
    assert back.digest == ct.digest and (back.domain, back.local, back.codomain) == dims()
    np.testing.assert_array_equal(back.table, ct.table)
    assert not back.table.flags.writeable


def _worker_sum(blob: Any) -> Any:
    ct = pickle.loads(blob)
    return ct.digest, int(ct.table.sum()), gridkey.table_digest(ct.table)


def _worker_open(blob: Any) -> Any:
    try:
        pickle.loads(blob)
    except gridkey.TableNotFoundError as e:
        return "TableNotFoundError", str(e)
    return "ok", ""


def test_a_spawned_worker_maps_the_table_by_reference(store: gridkey.TableStore) -> None:
    table = icon_like(1000, 3, seed=10)
    ct = gather(gridkey.compile_time_offset_provider(provider_of(table), store), "O0")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        digest, total, recomputed = pool.apply(_worker_sum, (pickle.dumps(ct),))
        assert (digest, total, recomputed) == (ct.digest, int(table.sum()), ct.digest)
        os.chmod(ct.path, 0o644)
        os.remove(ct.path)
        kind, message = pool.apply(_worker_open, (pickle.dumps(ct),))
        assert kind == "TableNotFoundError" and str(ct.path) in message


def test_a_connectivity_under_two_names_is_converted_once(store: gridkey.TableStore) -> None:
    conn = gridkey.Connectivity(icon_like(seed=14), *dims())
    other = gridkey.Connectivity(icon_like(seed=15), *dims())
    before = gridkey.conversion_stats()["converted"]
    view = gridkey.compile_time_offset_provider({"A": conn, "B": other, "C": conn}, store)
    assert list(view) == ["A", "B", "C"] and view["A"] is view["C"] and view["B"] is not view["A"]
    assert gridkey.conversion_stats()["converted"] - before == 2
    assert gather(view, "B").digest == digest_witness.table_digest(icon_like(seed=15))
