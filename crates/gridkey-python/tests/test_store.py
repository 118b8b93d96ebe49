"""The table store from Python: read-only, no-copy arrays over the mapping, and its checks."""

from __future__ import annotations

from typing import Any
from pathlib import Path

import gc
import os
import stat

import numpy as np
import pytest

import gridkey
from conftest import digest_witness, icon_like


def mapped_regions(path: Any) -> Any:
    """(start, end) of every mapping of `path` in this process (/proc/self/maps)."""
    regions = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == str(path):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                regions.append((start, end))
    return regions


def test_put_returns_the_digest_and_open_maps_the_file(store: gridkey.TableStore) -> None:
    table = np.asfortranarray(icon_like(500, 3).astype(np.int64))
    digest = store.put(table)
    assert digest == gridkey.table_digest(table) == digest_witness.table_digest(table)
    opened = store.open(digest, np.int64, table.shape)
    np.testing.assert_array_equal(opened, table)
    assert opened.dtype == np.dtype("<i8")
    flags = opened.flags
    assert flags.c_contiguous and not flags.writeable and not flags.owndata and flags.aligned
    assert isinstance(opened.base, gridkey.MappedTable)
    assert opened.base.digest == digest and opened.base.shape == table.shape and opened.base.dtype == "<i8"
    path = store.path_of(digest)
    assert opened.base.path == path and path.parent.parent == store.cache_dir / gridkey.TABLES_DIR
    # No copy: the array's memory is inside a mapping of the file.
    address = opened.__array_interface__["data"][0]
    assert any(start <= address < end for start, end in mapped_regions(path))
    # numpy reads the file itself.
    np.testing.assert_array_equal(np.load(path, mmap_mode="r"), table)
    assert np.shares_memory(opened, opened[1:])


def test_stored_arrays_cannot_be_written(store: gridkey.TableStore) -> None:
    table = icon_like()
    opened = store.open(store.put(table), np.int32, table.shape)
    with pytest.raises(ValueError, match="read-only"):
        opened[0, 0] = 1
    with pytest.raises(ValueError):
        opened.setflags(write=True)
    view = opened[::2]
    with pytest.raises(ValueError):
        view.setflags(write=True)
    # A store file is read-only on disk too.
    assert not os.stat(store.path_of(gridkey.table_digest(table))).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def test_the_mapping_outlives_the_store_and_the_file(store: gridkey.TableStore) -> None:
    table = icon_like(2000, 4)
    digest = store.put(table)
    opened = store.open(digest, np.int32, table.shape)
    row = opened[1234:1236]
    path = store.path_of(digest)
    del opened, store
    gc.collect()
    os.chmod(path, 0o644)
    os.remove(path)
    np.testing.assert_array_equal(row, table[1234:1236])


def test_put_is_idempotent_and_replaces_a_planted_file(store: gridkey.TableStore) -> None:
    table = icon_like()
    digest = store.put(table)
    path = store.path_of(digest)
    os.chmod(path, 0o644)
    planted = table.copy()
    planted[0, 0] += 1
    np.save(path, planted)  # the right name, size and header, the wrong content
    assert store.put(table) == digest
    np.testing.assert_array_equal(np.load(path), table)
    assert store.put(table) == digest
    leftovers = [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == []


def test_every_layout_stores_one_file(store: gridkey.TableStore) -> None:
    table = icon_like(300, 4)
    variants = [table, np.asfortranarray(table), table.astype(">i4"), table[::-1][::-1], np.ascontiguousarray(table.T).T]
    digests = {store.put(v) for v in variants}
    assert digests == {digest_witness.table_digest(table)}
    files = [p for p in (store.cache_dir / gridkey.TABLES_DIR).rglob("*.npy")]
    assert len(files) == 1


def damage(path: Any, how: Any) -> Any:
    os.chmod(path, 0o644)
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:-5])
    elif how == "not npy":
        path.write_bytes(b"garbage" * 40)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "other shape":
        np.save(path, np.zeros((7, 3), np.int32))
    elif how == "other dtype":
        np.save(path, np.zeros((60, 3), np.int64))
    elif how == "fortran":
        np.save(path, np.asfortranarray(np.zeros((60, 3), np.int32)))
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "symlink":
        target = path.with_name("elsewhere.npy")
        path.rename(target)
        path.symlink_to(target)


@pytest.mark.parametrize(
    "how, error, needle",
    [
        ("truncated", gridkey.TableFileError, "delete it so it is rebuilt"),
        ("not npy", gridkey.TableFileError, "is not a valid <i4 C-order .npy table"),
        ("empty", gridkey.TableFileError, "the file is empty"),
        ("other shape", gridkey.TableFileError, "has shape [7, 3], expected [60, 3]"),
        ("other dtype", gridkey.TableFileError, "is not a valid <i4"),
        ("fortran", gridkey.TableFileError, "is not a valid <i4 C-order"),
        ("directory", gridkey.GridkeyOSError, "is not a regular file"),
        ("symlink", gridkey.GridkeyOSError, "is not a regular file"),
    ],
)
def test_bad_files_are_typed_errors_naming_the_file(store: gridkey.TableStore, how: Any, error: Any, needle: Any) -> None:
    table = icon_like()
    digest = store.put(table)
    path = store.path_of(digest)
    damage(path, how)
    with pytest.raises(error) as info:
        store.open(digest, np.int32, table.shape)
    assert needle in str(info.value) and str(path) in str(info.value)
    # The next put repairs it (a directory or symlink under the name is not replaced: it is
    # reported again rather than followed).
    if how not in ("directory", "symlink"):
        assert store.put(table) == digest
        np.testing.assert_array_equal(store.open(digest, np.int32, table.shape), table)


def test_missing_table(store: gridkey.TableStore) -> None:
    with pytest.raises(gridkey.TableNotFoundError) as info:
        store.open("0123456789abcdef0123456789abcdef", np.int32, (4, 3))
    assert isinstance(info.value, FileNotFoundError) and info.value.errno == 2
    assert info.value.filename == str(store.path_of("0123456789abcdef0123456789abcdef"))
    assert "convert the offset provider again" in str(info.value)


def test_a_file_modified_in_place_is_caught_by_a_verifying_open(store: gridkey.TableStore, verifying_store: gridkey.TableStore) -> None:
    table = icon_like()
    digest = store.put(table)
    path = store.path_of(digest)
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:  # same inode, header intact, last element changed
        f.seek(-4, os.SEEK_END)
        f.write(np.int32(12345).tobytes())
    # A plain open checks the header only (ADR 0002) ...
    assert store.open(digest, np.int32, table.shape)[-1, -1] == 12345
    # ... a verifying one recomputes the digest.
    with pytest.raises(gridkey.TableFileError, match="modified after it was stored") as info:
        verifying_store.open(digest, np.int32, table.shape)
    assert str(path) in str(info.value)
    assert verifying_store.put(table) == digest
    np.testing.assert_array_equal(verifying_store.open(digest, np.int32, table.shape), table)


def test_settings_choose_the_cache_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDKEY_CACHE_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("GRIDKEY_VERIFY_TABLES", "yes")
    settings = gridkey.Settings()
    assert settings.cache_dir == tmp_path / "from-env" and settings.verify_tables
    store = gridkey.TableStore()
    assert store.cache_dir == tmp_path / "from-env" and store.verifies
    explicit = gridkey.TableStore(tmp_path / "explicit", settings=gridkey.Settings.from_vars({}))
    assert explicit.cache_dir == tmp_path / "explicit" and not explicit.verifies
    defaults = gridkey.Settings.from_vars({})
    assert str(defaults.cache_dir) == ".gridkey_cache" and not defaults.verify_tables
    assert defaults.build_jobs_mode == "process"


def test_put_all_stores_each_table_as_put_does(tmp_path: Path) -> None:
    settings = gridkey.Settings.from_vars({})
    store = gridkey.TableStore(tmp_path / "cache", settings=settings)
    tables = [icon_like(300, 3), np.asfortranarray(icon_like(200, 4).astype(np.int64)), icon_like(300, 3)]
    digests = store.put_all(tables)
    assert digests == [digest_witness.table_digest(t) for t in tables]
    for table, digest in zip(tables, digests):
        np.testing.assert_array_equal(store.open(digest, table.dtype, table.shape), table)
    files = sorted(p.name for p in (tmp_path / "cache" / gridkey.TABLES_DIR).rglob("*") if p.is_file())
    assert files == sorted({d + ".npy" for d in digests}), "one file per table, no temp file left"
    # A bad table fails alone: the tables before it are stored.
    other = gridkey.TableStore(tmp_path / "other", settings=settings)
    with pytest.raises(gridkey.errors.TableTypeError):
        other.put_all([tables[1], "not a table", tables[0]])  # type: ignore[list-item]  # wrong on purpose
    assert Path(other.path_of(digests[1])).is_file() and not Path(other.path_of(digests[0])).exists()
