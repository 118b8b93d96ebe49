"""Tables written by another thread while they are stored, tables too large to read, and Ctrl-C
during long work without the GIL (ADR 0035).

The stored files are checked by the independent witness (xxhash over NumPy's own C-order
bytes of the file as NumPy loads it), never by gridkey's digest.
"""

from __future__ import annotations

from typing import Any, Literal

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import gridkey
from conftest import digest_witness, dims, gather


def stored_files(cache: Path) -> list[Path]:
    """Every file under a final table name in the store of `cache`."""
    return sorted((cache / gridkey.TABLES_DIR).glob("*/*.npy"))


def temp_files(cache: Path) -> list[Path]:
    """Every temp file left in the store of `cache`."""
    return sorted(p for p in (cache / gridkey.TABLES_DIR).rglob(".tmp*"))


def assert_file_is_named_by_its_bytes(path: Path, digest: str) -> Any:
    on_disk = np.load(path, mmap_mode="r")
    assert digest_witness.table_digest(on_disk) == digest, f"{path} does not hold the table its name says"
    assert path.name == f"{digest}.npy"


class Flipper:
    """A thread that keeps writing elements of `table` (row by row, at random) until stopped;
    the values it writes fit in int32 unless `high` says otherwise."""

    def __init__(self, table: np.ndarray, seed: int, high: int = 1 << 20, after: float = 0.0) -> None:
        self.table = table
        # Values up to 2**20 until `after` seconds have passed, then up to `high`.
        self.high = high
        self.after = after
        self.rng = np.random.default_rng(seed)
        self.stop = threading.Event()
        self.flips = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> Any:
        n = self.table.shape[0]
        started = time.monotonic()
        while not self.stop.is_set():
            rows = self.rng.integers(0, n, size=64)
            high = self.high if time.monotonic() - started >= self.after else 1 << 20
            self.table[rows, :] = self.rng.integers(0, high, size=(64, self.table.shape[1]))
            self.flips += 1

    def __enter__(self) -> Any:
        self.thread.start()
        # The flipper is running before the put starts.
        while self.flips == 0:
            time.sleep(0.001)
        return self

    def __exit__(self, *exc: Any) -> Any:
        self.stop.set()
        self.thread.join()


def flipped_table(dtype: Any, order: Literal["C", "F"], seed: int) -> NDArray[Any]:
    # 24 MiB of int32 (48 of int64): above the size at which a put writes while it hashes, or
    # compares a candidate while it hashes (16 MiB), so both happen while the flipper writes.
    rng = np.random.default_rng(seed)
    table: NDArray[Any] = np.asarray(rng.integers(0, 1 << 20, size=(1_000_000, 6)), dtype=dtype, order=order)
    return table


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("order", ["C", "F"])
def test_put_while_another_thread_writes_stores_the_bytes_of_its_name(store: gridkey.TableStore, dtype: Any, order: Any) -> None:
    for attempt in range(4):
        table = flipped_table(dtype, order, seed=attempt)
        with Flipper(table, seed=attempt) as flipper:
            digest = store.put(table)
        assert flipper.flips > 0
        assert_file_is_named_by_its_bytes(store.path_of(digest), digest)
        assert not temp_files(store.cache_dir)


@pytest.mark.parametrize("table_dtype", ["canonical", "runtime"])
def test_provider_while_another_thread_writes_maps_the_bytes_of_its_digest(store: gridkey.TableStore, table_dtype: Any) -> None:
    domain, local, codomain = dims()
    for attempt in range(4):
        c2e = flipped_table(np.int64, "C", seed=10 + attempt)
        e2c = flipped_table(np.int32, "C", seed=20 + attempt)
        provider = {
            "C2E": gridkey.Connectivity(c2e, domain, local, codomain),
            "E2C": gridkey.Connectivity(e2c, codomain, gridkey.Dimension("E2CDim", "local"), domain),
        }
        with Flipper(c2e, seed=attempt), Flipper(e2c, seed=100 + attempt):
            view = gridkey.compile_time_offset_provider(provider, store, table_dtype=table_dtype)
        for name in provider:
            ct = gather(view, name)
            assert_file_is_named_by_its_bytes(ct.path, ct.digest)
            # The view maps the file it names, and its table is those bytes.
            assert digest_witness.table_digest(ct.table) == ct.digest
        # One connectivity through compile_time_connectivity, the single-table path.
        single = gridkey.Connectivity(flipped_table(np.int64, "F", seed=30 + attempt), domain, local, codomain)
        with Flipper(single.table, seed=200 + attempt):
            ct = gridkey.compile_time_connectivity(single, store, table_dtype=table_dtype, offset="C2E")
        assert_file_is_named_by_its_bytes(ct.path, ct.digest)
        assert not temp_files(store.cache_dir)


def test_a_table_that_stops_fitting_int32_while_narrowed_is_stored_as_its_bytes(store: gridkey.TableStore) -> None:
    # The flipper writes int64 values that do not fit in int32 into a table that fitted when
    # the canonical conversion checked it: never truncated, the file is still its name's bytes.
    domain, local, codomain = dims()
    for attempt in range(4):
        c2e = flipped_table(np.int64, "C", seed=40 + attempt)
        conn = gridkey.Connectivity(c2e, domain, local, codomain)
        # Large values from a few milliseconds in: after the check that the table fits, most times.
        with Flipper(c2e[500_000:], seed=attempt, high=1 << 40, after=0.002 * attempt):
            ct = gridkey.compile_time_connectivity(conn, store, table_dtype="canonical", offset="C2E")
        assert_file_is_named_by_its_bytes(ct.path, ct.digest)
        if ct.dtype == np.int32:
            assert int(np.max(ct.table)) < 1 << 31
        assert not temp_files(store.cache_dir)


def test_a_table_stored_before_is_kept_only_with_its_bytes_while_written(store: gridkey.TableStore) -> None:
    # The second put finds the first one's file (same size and first bytes) while the flipper
    # changes the rows after the first: it must not keep that file under the new digest.
    table = flipped_table(np.int32, "C", seed=5)
    first = store.put(table)
    for attempt in range(4):
        with Flipper(table[1000:], seed=attempt):
            digest = store.put(table)
        assert_file_is_named_by_its_bytes(store.path_of(digest), digest)
    assert_file_is_named_by_its_bytes(store.path_of(first), first)


def huge_zero_stride(rows: int, cols: int, dtype: Any=np.int64) -> np.ndarray:
    """A table of `rows` x `cols` elements in 8 bytes of memory (every row the same)."""
    return as_strided(np.arange(cols, dtype=dtype), shape=(rows, cols), strides=(0, np.dtype(dtype).itemsize))


def test_a_huge_zero_stride_table_is_refused_by_the_limit_before_it_is_read(store: gridkey.TableStore) -> None:
    table = huge_zero_stride(2**40, 8)  # 2**46 bytes, over the default of 2**40
    size = 2**40 * 8 * 8
    started = time.monotonic()
    with pytest.raises(gridkey.TableTooLargeError) as put:
        store.put(table)
    with pytest.raises(gridkey.TableTooLargeError) as digest:
        gridkey.table_digest(table)
    domain, local, codomain = dims()
    provider = {"C2E": gridkey.Connectivity(table, domain, local, codomain)}
    with pytest.raises(gridkey.TableTooLargeError) as conversion:
        gridkey.compile_time_offset_provider(provider, store)
    with pytest.raises(gridkey.TableTooLargeError):
        gridkey.compile_time_connectivity(provider["C2E"], store, offset="C2E")
    assert time.monotonic() - started < 1.0
    assert store.max_table_bytes == gridkey.DEFAULT_MAX_TABLE_BYTES == 2**40
    for raised, offset in [(put, None), (digest, None), (conversion, "C2E")]:
        e = raised.value
        assert (e.offset, e.size, e.limit) == (offset, size, 2**40)
        assert isinstance(e, gridkey.GridkeyError) and isinstance(e, ValueError)
        assert f"{size} bytes" in str(e) and f"limit of {2**40} bytes" in str(e) and not str(e).endswith(".")
    assert "offset C2E: " in str(conversion.value)
    assert stored_files(store.cache_dir) == [] and temp_files(store.cache_dir) == []


@settings(max_examples=40)
@given(
    rows=st.integers(0, 3000),
    cols=st.integers(0, 9),
    dtype=st.sampled_from([np.int32, np.int64]),
    limit=st.integers(0, 3000 * 9 * 8),
)
def test_the_limit_refuses_exactly_the_tables_larger_than_it(tmp_path_factory: pytest.TempPathFactory, rows: Any, cols: Any, dtype: Any, limit: Any) -> None:
    cache = tmp_path_factory.mktemp("cache")
    store = gridkey.TableStore(cache, settings=gridkey.Settings.from_vars({}, max_table_bytes=limit))
    table = np.zeros((rows, cols), dtype)
    size = rows * cols * np.dtype(dtype).itemsize
    if size > limit:
        with pytest.raises(gridkey.TableTooLargeError) as raised:
            store.put(table)
        assert (raised.value.size, raised.value.limit) == (size, limit)
        with pytest.raises(gridkey.TableTooLargeError):
            gridkey.table_digest(table, max_table_bytes=limit)
        assert stored_files(cache) == []
    else:
        digest = store.put(table)
        assert digest == digest_witness.table_digest(table) == gridkey.table_digest(table, max_table_bytes=limit)
        assert_file_is_named_by_its_bytes(store.path_of(digest), digest)


# A child process that starts a long piece of work on a 2**39-byte zero-stride table (under
# the default limit: hashed and written for minutes), says so, and reports how it ended.
CHILD = textwrap.dedent(
    """
    import signal, sys, time
    import numpy as np
    from numpy.lib.stride_tricks import as_strided
    import gridkey

    # Ctrl-C as at a terminal, wherever the test runs: a job started in the background by a
    # shell without job control (a CI runner's `cmd &`) inherits SIGINT ignored, and Python
    # then installs no KeyboardInterrupt handler, so the child would run to its end.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cache, what, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
    cols = 8
    base = np.arange(cols, dtype=dtype)
    table = as_strided(base, shape=(2**39 // (cols * base.itemsize), cols), strides=(0, base.itemsize))
    store = gridkey.TableStore(cache, settings=gridkey.Settings.from_vars({}))
    domain, local, codomain = gridkey.Dimension("Cell"), gridkey.Dimension("C2EDim", "local"), gridkey.Dimension("Edge")
    conn = gridkey.Connectivity(table, domain, local, codomain)
    print("started", flush=True)
    try:
        if what == "put":
            store.put(table)
        elif what == "digest":
            gridkey.table_digest(table)
        elif what == "provider":
            gridkey.compile_time_offset_provider({"C2E": conn}, store)
        else:
            gridkey.compile_time_connectivity(conn, store, table_dtype="runtime", offset="C2E")
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
    print("finished", flush=True)
    """
)


# Each example writes gigabytes before it is interrupted: no shrinking (a failure is already
# one call and one delay), and each example's cache is removed whatever the outcome, so that
# a failing run cannot fill the disk for the tests after it. The cache lies in memory
# (`/dev/shm`) where there is room, so that the gigabytes written before the signal never
# wait on a disk. Uninterrupted, the work on 2**39 bytes runs for minutes (or fills the
# memory file system and fails with another exit status), so 10 s tells an answer from a
# run to its end (by hand, `put` answers in 0.03-0.09 s).
MEMORY_FS = Path("/dev/shm")


def interruptible_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh cache directory in `MEMORY_FS` when it is writable and has 8 GiB free, else under pytest's."""
    try:
        if shutil.disk_usage(MEMORY_FS).free >= 8 << 30:
            return Path(tempfile.mkdtemp(prefix="gridkey-ctrl-c-", dir=MEMORY_FS))
    except OSError:
        pass
    return tmp_path_factory.mktemp("cache")


@settings(max_examples=8, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(
    what=st.sampled_from(["put", "digest", "provider", "connectivity"]),
    dtype=st.sampled_from(["int32", "int64"]),
    delay=st.floats(0.05, 0.4),
)
def test_ctrl_c_stops_long_work_and_leaves_no_file(tmp_path_factory: pytest.TempPathFactory, what: Any, dtype: Any, delay: Any) -> None:
    cache = interruptible_cache(tmp_path_factory)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDKEY_")}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(cache), what, dtype],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{what} ({dtype}) still ran 10 s after SIGINT")
        assert child.returncode == 3 and out.strip() == "interrupted", (child.returncode, out, err)
        assert stored_files(cache) == []
        assert temp_files(cache) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        shutil.rmtree(cache, ignore_errors=True)
