"""gridkey.gt4py against the real GT4Py (skipped where GT4Py is not installed: it needs CPython 3.12+): 1.2.3 in
``cargo xtask py-test``, 1.2.1 in ``cargo xtask gt4py --icon4py``.

The mode matrix at scale is ``cargo xtask gt4py``; these tests check the adapter's parts: install/uninstall, the
compile-time connectivity (dtype, layout, memo, fingerprint, pickling into a fresh interpreter), the compilable every
runner gets, the translated C++ with and without the adapter, a worker that cannot open a table, the translation
under gridkey's per-key lock across fresh interpreters (one translation, a killed holder, a bounded wait; ADR 0039)
and, with one real C++ build, warm starts resolved in the parent without a pool (ADR 0038).
"""

from __future__ import annotations

from typing import Any
from pathlib import Path

import concurrent.futures
import dataclasses
import gc
import json
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

if "gt4py" in os.environ.get("GRIDKEY_TEST_REQUIRE", "").split(","):
    import gt4py  # the test command installed it: a failed import fails the run
    import gt4py.next as gtx
else:
    gt4py = pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask test installs it there")
    gtx = pytest.importorskip("gt4py.next")

from gt4py.next import fingerprinting  # noqa: E402
from gt4py.next import backend as gtx_backend  # noqa: E402
from gt4py.next.otf import compilation_tasks, runners  # noqa: E402
from gt4py.next.program_processors.runners.gtfn import run_gtfn  # noqa: E402

import gridkey  # noqa: E402
import gridkey.gt4py as adapter  # noqa: E402
from gridkey import _gt4py_tiers  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
GRID = ROOT / "data" / "grids" / "icon_grid_0013_R02B04_R.nc"
sys.path.insert(0, str(ROOT / "crates" / "gridkey-python" / "proof"))
import icon_programs as ip  # noqa: E402


@pytest.fixture(scope="module")
def tables() -> Any:
    return ip.read_icon_tables(GRID)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Any:
    return tmp_path / "gridkey"


@pytest.fixture
def installed(cache_dir: Any) -> Any:
    assert adapter.install(cache_dir=cache_dir)
    yield
    adapter.uninstall()


def conn(table: Any, offset: Any="V2E", *, order: Any="C", dtype: Any=np.int32, allocator: Any=np, skip: Any=-1) -> Any:
    _, _, domain, local, codomain = next(t for t in ip.TABLES if t[0] == offset)
    data = np.array(table, dtype=dtype, order=order)
    return gtx.as_connectivity([domain, local], codomain, data, skip_value=skip, allocator=allocator)


def fingerprint(obj: Any) -> str:
    return str(fingerprinting.strict_fingerprinter(obj))


# install / uninstall


def test_install_is_idempotent_and_uninstall_restores(cache_dir: Any) -> None:
    original = compilation_tasks.make_compilation_task
    try:
        assert adapter.install(cache_dir=cache_dir)
        wrapper = compilation_tasks.make_compilation_task
        assert wrapper is not original and wrapper.__wrapped__ is original
        assert adapter.install(cache_dir=cache_dir)
        assert compilation_tasks.make_compilation_task is wrapper
        assert adapter.installed() and _gt4py_tiers.installed()
    finally:
        assert adapter.uninstall()
    assert compilation_tasks.make_compilation_task is original
    # The store's hooks on GT4Py's translation cache and build step go with it.
    assert not adapter.installed() and not _gt4py_tiers.installed()
    assert not adapter.uninstall()


def test_unsupported_version_says_so_and_changes_nothing(monkeypatch: pytest.MonkeyPatch, cache_dir: Any) -> None:
    original = compilation_tasks.make_compilation_task
    monkeypatch.setattr(gt4py, "__version__", "1.3.0")
    with pytest.raises(adapter.UnsupportedGT4PyError) as info:
        adapter.install(cache_dir=cache_dir)
    assert "found GT4Py 1.3.0" in str(info.value) and "1.2.x" in str(info.value)
    assert isinstance(info.value, gridkey.errors.GridkeyError)
    assert compilation_tasks.make_compilation_task is original


def test_missing_hook_is_unsupported(monkeypatch: pytest.MonkeyPatch, cache_dir: Any) -> None:
    monkeypatch.delattr(compilation_tasks, "make_compilation_task")
    with pytest.raises(adapter.UnsupportedGT4PyError, match="make_compilation_task"):
        adapter.install(cache_dir=cache_dir)


def test_builtin_feature_means_nothing_to_do(monkeypatch: pytest.MonkeyPatch, cache_dir: Any) -> None:
    original = compilation_tasks.make_compilation_task
    monkeypatch.setattr(gtx.common, "CompileTimeConnectivity", object, raising=False)
    assert adapter.install(cache_dir=cache_dir) is False
    assert compilation_tasks.make_compilation_task is original
    assert not adapter.installed()


# the compile-time connectivity


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("order", ["C", "F"])
def test_compile_time_table_is_mapped_read_only_c_order_and_keeps_dtype(tables: Any, cache_dir: Any, dtype: Any, order: Any) -> None:
    runtime = conn(tables["V2E"], order=order, dtype=dtype)
    (ct,) = adapter.compile_time_offset_provider({"V2E": runtime}, cache_dir=cache_dir).values()
    assert isinstance(ct, adapter.CompileTimeConnectivity) and isinstance(ct, gtx.common.NeighborTable)
    a = ct.ndarray
    assert a.dtype == np.dtype(dtype) and a.flags.c_contiguous and not a.flags.writeable
    np.testing.assert_array_equal(a, tables["V2E"])
    assert ct.digest == gridkey.table_digest(runtime.ndarray)
    assert pathlib.Path(gridkey.TableStore(cache_dir).path_of(ct.digest)).is_file()
    assert (ct.domain, ct.codomain, ct.skip_value) == (runtime.domain, runtime.codomain, runtime.skip_value)
    # the type GT4Py generates code from: dtype included
    assert ct.__gt_type__() == runtime.__gt_type__()


def test_memo_by_identity_with_weak_reference(tables: Any, cache_dir: Any) -> None:
    converter = adapter._Converter(cache_dir, False)
    runtime = conn(tables["C2E"], "C2E", skip=None)
    first = converter.connectivity(runtime)
    assert converter.connectivity(runtime) is first and converter.conversions == 1
    equal_but_other = conn(tables["C2E"], "C2E", skip=None)
    assert converter.connectivity(equal_but_other) is not first and converter.conversions == 2
    del runtime, equal_but_other
    gc.collect()
    assert len(converter._memo) == 0


def test_table_changed_in_place_is_converted_again_on_a_verifying_store(tables: Any, cache_dir: Any) -> None:
    data = np.array(tables["C2E"])
    runtime = gtx.as_connectivity([ip.Cell, ip.C2EDim], ip.Edge, data, skip_value=None, allocator=np)
    trusting, verifying = adapter._Converter(cache_dir, False), adapter._Converter(cache_dir, True)
    before = (trusting.connectivity(runtime), verifying.connectivity(runtime))
    runtime.ndarray[0, 0] = (runtime.ndarray[0, 0] + 1) % 30720
    assert trusting.connectivity(runtime) is before[0]  # the memo trusts a table not to change (documented)
    again = verifying.connectivity(runtime)
    assert again.digest == gridkey.table_digest(runtime.ndarray) != before[1].digest
    np.testing.assert_array_equal(again.ndarray, runtime.ndarray)


def test_fingerprint_is_domain_codomain_skip_and_digest(tables: Any, cache_dir: Any) -> None:
    def ct_of(c: Any) -> Any:
        return adapter.compile_time_offset_provider({"x": c}, cache_dir=cache_dir)["x"]

    base = ct_of(conn(tables["V2E"]))
    # memory order, allocator and array class do not enter the fingerprint
    for same in (ct_of(conn(tables["V2E"], order="F")), ct_of(conn(tables["V2E"], allocator=None))):
        assert same is not base and fingerprint(same) == fingerprint(base)
    changed = tables["V2E"].copy()
    changed[5, 1] = (changed[5, 1] + 1) % 30720
    _, _, domain, local, codomain = next(t for t in ip.TABLES if t[0] == "V2E")
    different = [
        ct_of(conn(changed)),  # content
        ct_of(conn(tables["V2E"], dtype=np.int64)),  # dtype (another digest)
        ct_of(conn(tables["V2E"], skip=None)),  # skip value
        ct_of(gtx.as_connectivity([domain, local], ip.Cell, tables["V2E"], skip_value=-1, allocator=np)),  # codomain
        ct_of(gtx.as_connectivity([domain, ip.V2CDim], codomain, tables["V2E"], skip_value=-1, allocator=np)),  # domain
    ]
    fingerprints = {fingerprint(base), *(fingerprint(d) for d in different)}
    assert len(fingerprints) == 1 + len(different)
    # the table itself is not among what is hashed
    pieces = fingerprinting.strict_fingerprint_deconstructor(base).pieces
    assert base.digest in pieces and not any(isinstance(p, np.ndarray) for p in pieces)


def test_pickle_is_a_reference_and_a_fresh_interpreter_fingerprints_it_alike(tables: Any, cache_dir: Any) -> None:
    tiled = ip.tile_tables({"V2E": tables["V2E"]}, 20)["V2E"]
    ct = adapter.compile_time_offset_provider({"V2E": conn(tiled)}, cache_dir=cache_dir)["V2E"]
    blob = pickle.dumps({"V2E": ct})
    assert len(blob) < 4096 < tiled.nbytes
    code = (
        "import pickle, sys\n"
        "from gt4py.next import fingerprinting\n"
        "assert 'gridkey.gt4py' not in sys.modules\n"
        "provider = pickle.loads(sys.stdin.buffer.read())\n"
        "assert 'gridkey.gt4py' in sys.modules\n"
        "a = provider['V2E'].ndarray\n"
        "assert not a.flags.writeable and a.flags.c_contiguous\n"
        "print(fingerprinting.strict_fingerprinter(provider))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True)
    assert done.stdout.decode().strip() == fingerprint({"V2E": ct})


def test_a_worker_that_cannot_open_a_table_fails_only_that_task(tables: Any, cache_dir: Any) -> None:
    good = adapter.compile_time_offset_provider({"C2E": conn(tables["C2E"], "C2E", skip=None)}, cache_dir=cache_dir)
    bad = adapter.compile_time_offset_provider({"E2C": conn(tables["E2C"], "E2C", skip=None)}, cache_dir=cache_dir)
    pathlib.Path(gridkey.TableStore(cache_dir).path_of(bad["E2C"].digest)).unlink()

    def task(provider: Any) -> Any:
        return runners.CompilationTask(
            name="fingerprint",
            construct_compilable=lambda with_refs: provider,
            executor=fingerprinting.strict_fingerprinter,
        )

    runner = runners.ProcessRunner(max_workers=1, shared_session_cache_dir=str(cache_dir.parent))
    try:
        first = runner.submit(task(good)).result(timeout=300)
        with pytest.raises(gridkey.errors.TableNotFoundError) as info:
            runner.submit(task(bad)).result(timeout=300)
        assert bad["E2C"].digest in str(info.value)
        # the pool survived: the same worker serves the next task
        assert runner.submit(task(good)).result(timeout=300) == first == fingerprint(good)
    except concurrent.futures.process.BrokenProcessPool as broken:  # pragma: no cover - the failure this prevents
        pytest.fail(f"the pool broke: {broken}")
    finally:
        runner.shutdown()


def test_a_table_damaged_after_the_check_is_stored_again_and_the_task_compiled_once_more(
    tables: Any, installed: Any, cache_dir: Any
) -> None:
    """ADR 0054: another process damages a table file in place after the parent's check and before GT4Py's worker
    opens it. The worker fails the task with the store's error; the adapter checks the file again, stores it again
    from the runtime table and compiles the task once more in this process. Before, the worker's ``TableFileError``
    was the program's result."""
    runtime = {"C2E": conn(tables["C2E"], "C2E", skip=None)}
    ct = adapter.compile_time_offset_provider(runtime)
    values = list(ct.values())
    adapter._check_tables(values)  # the parent's check before it hands a task to the runner (ADR 0052)
    digest = ct["C2E"].digest
    path = pathlib.Path(gridkey.TableStore(cache_dir).path_of(digest))
    assert _file_holds_its_table(cache_dir, digest, np.int32, tables["C2E"].shape)
    task = runners.CompilationTask(
        name="fingerprint", construct_compilable=lambda with_refs: ct, executor=fingerprinting.strict_fingerprinter
    )
    pool = runners.ProcessRunner(max_workers=1, shared_session_cache_dir=str(cache_dir.parent))
    handed: list[Any] = []

    class DamagingRunner:
        """GT4Py's pool, behind a first submit that damages the table's header in place (another process)."""

        def submit(self, task: Any) -> Any:
            if not handed:
                _damage_header(path)
            handed.append(task)
            return pool.submit(task)

    again = adapter.stats()["compiled_again"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the warning naming the file stored again
            future = adapter._ParentHitsRunner(DamagingRunner)._handed(task, values)
            # What GT4Py's `wait_for_compilation` does first: the pool shut down while the task fails in it.
            pool.shutdown(wait=True)
            result = future.result(timeout=300)
    finally:
        pool.shutdown()
    assert result == fingerprint(ct)
    assert len(handed) == 1 and adapter.stats()["compiled_again"] == again + 1
    assert _file_holds_its_table(cache_dir, digest, np.int32, tables["C2E"].shape)


def test_a_table_the_parent_cannot_store_again_leaves_the_workers_error(tables: Any, installed: Any, cache_dir: Any) -> None:
    """ADR 0054: a file damaged for good (its runtime table gone from this process) is not compiled again: the
    worker's error, naming the file, is the task's."""
    ct = adapter.compile_time_offset_provider({"E2C": conn(tables["E2C"], "E2C", skip=None)})
    values = list(ct.values())
    adapter._check_tables(values)
    gc.collect()  # the runtime table is gone: nothing to store the file again from
    path = pathlib.Path(gridkey.TableStore(cache_dir).path_of(ct["E2C"].digest))
    _damage_header(path)
    task = runners.CompilationTask(
        name="fingerprint", construct_compilable=lambda with_refs: ct, executor=fingerprinting.strict_fingerprinter
    )
    pool = runners.ProcessRunner(max_workers=1, shared_session_cache_dir=str(cache_dir.parent))
    again = adapter.stats()["compiled_again"]
    try:
        with pytest.raises(gridkey.errors.TableFileError) as info:
            adapter._ParentHitsRunner(lambda: pool)._handed(task, values).result(timeout=300)
    finally:
        pool.shutdown()
    assert str(path) in str(info.value)
    assert adapter.stats()["compiled_again"] == again


# the compilable every runner gets


class _RecordingRunner:
    """A runner that records tasks and runs nothing (its futures never finish)."""

    def __init__(self) -> None:
        self.tasks: list[Any] = []
        self.futures: list[Any] = []

    def submit(self, task: Any) -> Any:
        self.tasks.append(task)
        self.futures.append(concurrent.futures.Future())
        return self.futures[-1]

    def shutdown(self, wait: Any=True) -> Any:
        pass


@pytest.fixture
def recording_runner(monkeypatch: pytest.MonkeyPatch) -> Any:
    runner = _RecordingRunner()
    monkeypatch.setattr(runners, "_default_runner", runner)
    yield runner
    for future in runner.futures:
        future.set_result(None)  # so that a later wait_for_compilation does not wait on them


def _div_program() -> Any:
    # A fresh program object: its pool of compiled variants starts empty.
    return gtx.program(backend=run_gtfn)(ip.div.definition_stage.definition)


def _task_for(recording_runner: Any, provider: Any) -> Any:
    program = _div_program()
    program.compile(offset_provider=provider)
    return recording_runner.tasks[-1]


def test_every_runner_gets_one_compilable_whose_key_ignores_layout(tables: Any, installed: Any, recording_runner: Any) -> None:
    step = run_gtfn.executor.translation
    keys = set()
    for order, allocator, dtype in [("C", np, np.int32), ("F", np, np.int32), ("C", None, np.int32)]:
        provider = ip.offset_provider(tables, order=order, allocator=allocator, dtype=dtype)
        task = _task_for(recording_runner, provider)
        compilable = task.construct_compilable(False)
        assert task.construct_compilable(True) is compilable
        ct = compilable.args.offset_provider
        assert list(ct) == list(provider)
        assert all(isinstance(c, adapter.CompileTimeConnectivity) for c in ct.values())
        keys.add(step.cache_key(compilable))
        keys.add(step.cache_key(pickle.loads(pickle.dumps(compilable))))
    assert len(keys) == 1


def _damage(path: Any) -> None:
    """Flips one bit of the last element of the table file ``path``, in place: same size, header and name."""
    path = pathlib.Path(path)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def _damage_header(path: pathlib.Path) -> None:
    """Writes ``#`` over the first byte of the ``.npy`` header's dictionary of the table file ``path``, in place: the
    file no longer opens as a table."""
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(10)  # after the magic, the version and the header's length
        f.write(b"#")


def _file_holds_its_table(cache_dir: Any, digest: str, dtype: Any, shape: Any) -> bool:
    verifying = gridkey.TableStore(cache_dir, settings=gridkey.Settings.from_vars({"GRIDKEY_VERIFY_TABLES": "1"}))
    try:
        verifying.open(digest, dtype, shape)
    except gridkey.errors.TableFileError:
        return False
    return True


def test_a_table_file_damaged_at_rest_is_taken_unchecked_then_stored_again_before_a_translation(
    tables: Any, installed: Any, recording_runner: Any, cache_dir: Any
) -> None:
    """ADR 0052: the hook takes a table stored before after its checked open alone; a task that misses checks the
    bytes first and stores a damaged file again from the runtime table, with one warning naming it; a conversion that
    does not trust (``compile_time_offset_provider``) returns only checked tables."""
    adapter.compile_time_offset_provider(ip.offset_provider(tables), cache_dir=cache_dir)  # stored, and compared
    provider = ip.offset_provider(tables)
    converter = adapter._state.converter
    assert converter is not None
    cts = converter.provider(provider, trust_stored=True)
    ct, runtime = cts["C2E"], provider["C2E"]
    path = pathlib.Path(gridkey.TableStore(cache_dir).path_of(ct.digest))
    _damage(path)
    adapter._checked.clear()
    # Taken unchecked: the damaged file is what the compile-time table maps, until a translation could read it.
    again = ip.offset_provider(tables)
    damaged = converter.provider(again, trust_stored=True)["C2E"]
    assert not np.array_equal(damaged.ndarray, again["C2E"].ndarray)
    assert not _file_holds_its_table(cache_dir, damaged.digest, np.int32, damaged.ndarray.shape)
    # A task that misses checks its tables before it goes to GT4Py's runner.
    with pytest.warns(RuntimeWarning, match=str(path)) as caught:
        task = _task_for(recording_runner, again)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning) and "gridkey.gt4py" in str(w.message)]) == 1
    assert _file_holds_its_table(cache_dir, damaged.digest, np.int32, damaged.ndarray.shape)
    in_task = task.construct_compilable(False).args.offset_provider["C2E"]
    np.testing.assert_array_equal(in_task.ndarray, again["C2E"].ndarray)
    # A compile-time table of the same digest made before (GT4Py's compilable holds connectivities of its own) gets the
    # checked mapping when it is checked: no second warning, no second store.
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert adapter.compile_time_offset_provider(again)["C2E"] is damaged
    np.testing.assert_array_equal(damaged.ndarray, again["C2E"].ndarray)
    # `compile_time_offset_provider` through the installed memo checks what a trusting conversion kept.
    _damage(path)
    adapter._checked.clear()
    with pytest.warns(RuntimeWarning, match=str(path)):
        checked = adapter.compile_time_offset_provider(provider)
    np.testing.assert_array_equal(checked["C2E"].ndarray, runtime.ndarray)
    assert _file_holds_its_table(cache_dir, ct.digest, np.int32, ct.ndarray.shape)


def test_a_table_not_stored_is_written_only_when_a_translation_or_a_worker_needs_it(
    tables: Any, installed: Any, cache_dir: Any
) -> None:
    """ADR 0052: the hook's conversion stores no new table (a run of hits never reads one); its compile-time table is
    a private read-only copy of the runtime table, named by its digest, until a check (a miss, a translation) or a
    pickle for a worker stores it and maps the file."""
    converter = adapter._state.converter
    assert converter is not None
    provider = ip.offset_provider(tables, order="F", allocator=np)
    cts = converter.provider(provider, trust_stored=True)
    store = gridkey.TableStore(cache_dir)
    c2e, e2c = cts["C2E"], cts["E2C"]
    for name, ct in (("C2E", c2e), ("E2C", e2c)):
        assert ct.digest == gridkey.table_digest(provider[name].ndarray)
        assert not pathlib.Path(store.path_of(ct.digest)).exists(), name
        np.testing.assert_array_equal(ct.ndarray, provider[name].ndarray)
        assert ct.ndarray.flags.c_contiguous and not ct.ndarray.flags.writeable
    # A check stores the copy and maps the file.
    adapter._check_tables([c2e])
    assert _file_holds_its_table(cache_dir, c2e.digest, np.int32, c2e.ndarray.shape)
    assert isinstance(c2e.ndarray.base, gridkey.MappedTable)
    np.testing.assert_array_equal(c2e.ndarray, provider["C2E"].ndarray)
    # A pickle for a worker stores it first; the unpickled table opens the file.
    assert not pathlib.Path(store.path_of(e2c.digest)).exists()
    again = pickle.loads(pickle.dumps(e2c))
    assert _file_holds_its_table(cache_dir, e2c.digest, np.int32, e2c.ndarray.shape)
    np.testing.assert_array_equal(again.ndarray, provider["E2C"].ndarray)
    assert fingerprint(again) == fingerprint(e2c)


def test_copies_kept_unstored_are_bounded_and_a_table_over_the_bound_is_stored_at_conversion(
    tables: Any, installed: Any, cache_dir: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADR 0052: a process keeps at most `_UNSTORED_MAX_BYTES` of copies; a table that would go over it is stored at
    conversion, and storing a copy gives its bytes back to the bound."""
    converter = adapter._state.converter
    assert converter is not None
    before = adapter._unstored_bytes
    monkeypatch.setattr(adapter, "_UNSTORED_MAX_BYTES", before + 300_000)
    provider = ip.offset_provider(tables, allocator=np)
    first, second = provider["E2V"], provider["C2E"]
    assert first.ndarray.nbytes <= 300_000 < first.ndarray.nbytes + second.ndarray.nbytes
    cts = converter.provider({"E2V": first, "C2E": second}, trust_stored=True)
    store = gridkey.TableStore(cache_dir)
    assert not pathlib.Path(store.path_of(cts["E2V"].digest)).exists()
    assert pathlib.Path(store.path_of(cts["C2E"].digest)).exists()
    assert adapter._unstored_bytes == before + first.ndarray.nbytes
    adapter._check_tables([cts["E2V"]])
    assert pathlib.Path(store.path_of(cts["E2V"].digest)).exists() and adapter._unstored_bytes == before


def test_a_comparing_conversion_after_a_trusting_one_maps_the_file_it_compared(
    tables: Any, installed: Any, cache_dir: Any
) -> None:
    """ADR 0052: a conversion that compares (``compile_time_offset_provider``, a backend without the lock) replaces a
    damaged file and maps the replacement, never a mapping a trusting conversion opened before; a compile-time table
    of that trusting conversion, checked later, gets the checked mapping."""
    adapter.compile_time_offset_provider(ip.offset_provider(tables), cache_dir=cache_dir)
    converter = adapter._state.converter
    assert converter is not None
    trusted = converter.provider(ip.offset_provider(tables), trust_stored=True)["C2E"]
    _damage(gridkey.TableStore(cache_dir).path_of(trusted.digest))
    adapter._checked.clear()
    assert not np.array_equal(trusted.ndarray, tables["C2E"])
    fresh = adapter.compile_time_offset_provider(ip.offset_provider(tables), cache_dir=cache_dir)["C2E"]
    np.testing.assert_array_equal(fresh.ndarray, tables["C2E"])
    assert _file_holds_its_table(cache_dir, fresh.digest, np.int32, fresh.ndarray.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        adapter._check_tables([trusted])
    np.testing.assert_array_equal(trusted.ndarray, tables["C2E"])


def test_a_damaged_table_without_its_runtime_table_fails_the_translation_with_the_file_named(
    tables: Any, installed: Any, recording_runner: Any, cache_dir: Any
) -> None:
    """ADR 0052: where no runtime table is at hand (a worker; here, one collected), a damaged file is not stored
    again: `LockedTranslation` raises the store's error naming it before GT4Py's translation step runs."""
    adapter.compile_time_offset_provider(ip.offset_provider(tables), cache_dir=cache_dir)
    task = _task_for(recording_runner, ip.offset_provider(tables))
    compilable = task.construct_compilable(False)
    digest = compilable.args.offset_provider["C2E"].digest
    path = pathlib.Path(gridkey.TableStore(cache_dir).path_of(digest))
    _damage(path)
    adapter._checked.clear()
    assert adapter._state.converter is not None
    adapter._state.converter._runtimes.clear()
    translations_before = adapter.stats()["locked_translations"]
    with pytest.raises(gridkey.errors.TableFileError, match=digest):
        task.executor.translation(compilable)
    assert adapter.stats()["locked_translations"] == translations_before + 1  # it got as far as the lock, no further
    assert not _file_holds_its_table(cache_dir, digest, np.int32, compilable.args.offset_provider["C2E"].ndarray.shape)


def test_without_the_adapter_process_mode_changes_the_key(tables: Any, recording_runner: Any) -> None:
    """The fault the adapter fixes, as GT4Py 1.2.3 has it: the worker's compilable keys differently."""
    step = run_gtfn.executor.translation
    provider = ip.offset_provider(tables, order="F", allocator=np)
    task = _task_for(recording_runner, provider)
    in_process = step.cache_key(task.construct_compilable(False))
    in_worker = step.cache_key(pickle.loads(pickle.dumps(task.construct_compilable(True))))
    assert in_process != in_worker


def test_translated_cpp_is_identical_with_and_without(tables: Any, cache_dir: Any, recording_runner: Any) -> None:
    provider = ip.offset_provider(tables, order="F", allocator=np)
    translate = run_gtfn.executor.translation.step
    without = translate(_task_for(recording_runner, provider).construct_compilable(False))
    adapter.install(cache_dir=cache_dir)
    try:
        with_ = translate(_task_for(recording_runner, provider).construct_compilable(False))
    finally:
        adapter.uninstall()
    assert with_.source_code == without.source_code
    assert with_.entry_point == without.entry_point


def test_backends_with_their_own_compile_are_left_alone(installed: Any) -> None:
    class OwnCompile(gtx_backend.Backend):  # type: ignore[misc]  # GT4Py is Any to mypy (untyped)
        def compile(self, program: Any, compile_time_args: Any) -> Any:  # pragma: no cover - never called here
            raise AssertionError

    backend = OwnCompile(name="own", executor=run_gtfn.executor, allocator=run_gtfn.allocator, transforms=run_gtfn.transforms)
    task = compilation_tasks.make_compilation_task(backend, object(), object())
    assert task.no_offload_reason is not None and task.construct_compilable(False) is None


def test_provider_order_and_non_tables_are_kept(tables: Any, cache_dir: Any) -> None:
    provider = ip.offset_provider(tables)
    view = adapter.compile_time_offset_provider(provider, cache_dir=cache_dir)
    assert list(view) == list(provider)
    again = adapter.compile_time_offset_provider(view, cache_dir=cache_dir)
    assert all(again[k] is view[k] for k in view)


def test_derived_connectivity_behaves_as_gt4py_own(tables: Any, cache_dir: Any) -> None:
    ct = adapter.compile_time_offset_provider({"C2E": conn(tables["C2E"], "C2E", skip=None)}, cache_dir=cache_dir)["C2E"]
    # GT4Py derives connectivities with dataclasses.replace (and restrict): the table reference is not one of
    # GT4Py's fields, so a derived instance, even over other bytes, never keeps the digest of the table it came from.
    derived = dataclasses.replace(ct)
    assert derived.digest is None and "table_ref" not in {f.name for f in dataclasses.fields(ct)}
    assert fingerprint(derived) != fingerprint(ct)
    assert pickle.loads(pickle.dumps(derived)).table_ref is None
    other_bytes = dataclasses.replace(ct, _ndarray=np.zeros_like(ct.ndarray))
    assert other_bytes.digest is None and fingerprint(other_bytes) != fingerprint(derived)


# internals the warm start and the lock use (ADR 0038, 0039)


def test_a_missing_internal_is_unsupported_and_named(monkeypatch: pytest.MonkeyPatch, cache_dir: Any) -> None:
    from gt4py.next.otf.compilation import compiler

    original = compilation_tasks.make_compilation_task
    monkeypatch.delattr(compiler, "is_usable")
    with pytest.raises(adapter.UnsupportedGT4PyError, match=r"gt4py\.next\.otf\.compilation\.compiler\.is_usable"):
        adapter.install(cache_dir=cache_dir)
    assert compilation_tasks.make_compilation_task is original


def test_install_wraps_the_default_runner_and_uninstall_restores_it(cache_dir: Any) -> None:
    original = runners.get_default_runner
    assert adapter.install(cache_dir=cache_dir)
    try:
        wrapper = runners.get_default_runner
        assert wrapper is not original and wrapper.__wrapped__ is original
        assert adapter.install(cache_dir=cache_dir) and runners.get_default_runner is wrapper
        assert isinstance(runners.get_default_runner(), adapter._ParentHitsRunner)
    finally:
        adapter.uninstall()
    assert runners.get_default_runner is original


def test_the_task_translates_under_the_lock_with_gt4py_own_step(tables: Any, installed: Any, recording_runner: Any, cache_dir: Any) -> None:
    task = _task_for(recording_runner, ip.offset_provider(tables))
    locked = task.executor.translation
    assert isinstance(locked, adapter.LockedTranslation) and locked.cached is run_gtfn.executor.translation
    assert locked.cache_dir == str(cache_dir.absolute()) and locked.wait == 60.0
    assert task.executor.bindings is run_gtfn.executor.bindings and task.executor.compilation is run_gtfn.executor.compilation
    # it crosses into a worker: pickled with GT4Py's step
    again = pickle.loads(pickle.dumps(task.executor))
    assert isinstance(again.translation, adapter.LockedTranslation)


# across processes: fresh interpreters on one GT4Py cache (tests/gt4py_child.py)

CHILD = pathlib.Path(__file__).resolve().parent / "gt4py_child.py"


def child_env(tmp_path: Path, mode: Any="serial", lock_wait: Any=None) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GT4PY_", "GRIDKEY_"))}
    env.update(
        GT4PY_BUILD_CACHE_LIFETIME="persistent",
        GT4PY_BUILD_CACHE_DIR=str(tmp_path / "gt4py"),
        GT4PY_BUILD_JOBS="2",
        GT4PY_BUILD_JOBS_MODE=mode,
        GRIDKEY_CACHE_DIR=str(tmp_path / "gridkey"),
        # cmake and ninja of the virtual environment
        PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    if lock_wait is not None:
        env["GRIDKEY_LOCK_WAIT"] = str(lock_wait)
    return env


def translation_entries(tmp_path: Path) -> Any:
    """GT4Py's translation-cache entries of gtfn: ``translation_cache/gtfn`` in 1.2.3, ``gtfn_cache`` in 1.2.1."""
    base = tmp_path / "gt4py" / ".gt4py_cache"
    return sorted([*(base / "translation_cache" / "gtfn").glob("*.pkl"), *(base / "gtfn_cache").glob("*.pkl")])


def start_translation(tmp_path: Path, *, adapter_on: Any=True, sleep: Any=0.0, lock_wait: Any=None) -> Any:
    command = [sys.executable, str(CHILD), "translate", "--adapter", str(int(adapter_on))]
    command += ["--count", str(tmp_path / "count"), "--start", str(tmp_path / "start"), "--sleep", str(sleep)]
    child = subprocess.Popen(command, env=child_env(tmp_path, lock_wait=lock_wait), stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def finish(child: Any, timeout: Any=300) -> Any:
    out, _ = child.communicate(timeout=timeout)
    assert child.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def translations(tmp_path: Path) -> list[str]:
    path = tmp_path / "count"
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("adapter_on, expected", [(True, 1), (False, 2)], ids=["with", "without"])
def test_two_processes_on_one_cache_translate_a_key_once(tmp_path: Path, adapter_on: Any, expected: Any) -> None:
    """Without the adapter both translate (the control shows the test can fail); with it, one does."""
    children = [start_translation(tmp_path, adapter_on=adapter_on, sleep=1.5) for _ in range(2)]
    (tmp_path / "start").touch()
    results = [finish(c) for c in children]
    assert len(translations(tmp_path)) == expected
    assert len(translation_entries(tmp_path)) == 1
    assert results[0]["entry_point"] == results[1]["entry_point"] == "div"
    assert results[0]["source_bytes"] == results[1]["source_bytes"] > 0
    if adapter_on:
        assert sorted(r["stats"]["locked_translations"] for r in results) == [0, 1]
        assert all(not r["warnings"] for r in results)


def test_a_holder_killed_with_sigkill_does_not_block_the_other(tmp_path: Path) -> None:
    (tmp_path / "start").touch()
    holder = start_translation(tmp_path, sleep=600)
    try:
        deadline = time.monotonic() + 120
        while not translations(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(translations(tmp_path)) == 1  # the holder translates, under the lock
        other = start_translation(tmp_path, lock_wait=200)
        time.sleep(1.0)
        assert other.poll() is None and len(translations(tmp_path)) == 1  # waiting for the holder
        os.kill(holder.pid, signal.SIGKILL)
        result = finish(other)
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    assert 1.0 <= result["seconds"] < 60, result
    assert result["stats"]["locked_translations"] == 1 and result["stats"]["lock_gave_up"] == 0
    assert not result["warnings"]
    assert translations(tmp_path)[-1] != str(holder.pid) and len(translation_entries(tmp_path)) == 1


def test_a_wait_is_bounded_and_then_translates_with_one_warning(tmp_path: Path) -> None:
    (tmp_path / "start").touch()
    holder = start_translation(tmp_path, sleep=600)
    try:
        deadline = time.monotonic() + 120
        while not translations(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        result = finish(start_translation(tmp_path, lock_wait=1.5))
    finally:
        holder.kill()
        holder.wait()
    assert 1.5 <= result["seconds"] < 60, result
    assert result["stats"]["lock_gave_up"] == 1 and result["stats"]["locked_translations"] == 1
    assert len(result["warnings"]) == 1 and "GRIDKEY_LOCK_WAIT" in result["warnings"][0]
    assert len(translations(tmp_path)) == 2 and len(translation_entries(tmp_path)) == 1


def run_child(tmp_path: Path, mode: Any, *programs: Any, adapter_on: Any=True) -> Any:
    command = [sys.executable, str(CHILD), "run", "--adapter", str(int(adapter_on)), "--programs", *programs]
    done = subprocess.run(command, env=child_env(tmp_path, mode), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_warm_start_starts_no_pool_and_a_miss_still_goes_to_it(tmp_path: Path) -> None:
    """One real C++ build of ``div`` (serial), then warm starts in process and thread mode resolved in the parent, then
    a translation miss that GT4Py's process pool serves."""
    cold = run_child(tmp_path, "serial", "div")
    assert cold["verified"] and cold["stats"]["handed_to_runner"] == 1 and cold["stats"]["parent_hits"] == 0
    for mode in ("process", "thread"):
        warm = run_child(tmp_path, mode, "div")
        assert warm["verified"], warm
        assert warm["default_runner"] is None and warm["children"] == 0, warm  # no pool, no worker
        assert warm["stats"]["parent_hits"] == 1 and warm["stats"]["handed_to_runner"] == 0, warm
    for entry in translation_entries(tmp_path):
        entry.unlink()
    # gridkey's own copy of GT4Py's translation entries (ADR 0040) would serve the lookup: a real miss removes it too.
    shutil.rmtree(tmp_path / "gridkey" / gridkey.GT4PY_DIR / "translation", ignore_errors=True)
    miss = run_child(tmp_path, "process", "div")
    assert miss["verified"], miss
    assert miss["default_runner"] == "ProcessRunner" and miss["pool_workers"] >= 1, miss
    assert miss["stats"]["handed_to_runner"] == 1 and miss["stats"]["parent_hits"] == 0, miss
    assert len(translation_entries(tmp_path)) == 1  # the worker translated (under the lock) and stored it
    # Without the adapter the same warm cache goes to the pool: what the adapter removes.
    without = run_child(tmp_path, "process", "div", adapter_on=False)
    assert without["verified"] and without["default_runner"] == "ProcessRunner" and without["pool_workers"] >= 1


def memo_entries(tmp_path: Path) -> list[Path]:
    """The build-folder memo's entries (ADR 0058) in gridkey's store."""
    return sorted((tmp_path / "gridkey" / gridkey.GT4PY_DIR / "folder").glob("*/*.bin"))


def test_a_hit_met_before_finds_its_build_folder_by_the_entry_bytes(tmp_path: Path) -> None:
    """The build-folder memo (ADR 0058) on a real build of ``div``: the first warm start finds the folder GT4Py's way
    and remembers it; the next ones take it from the memo, in another mode and with both caches moved to another
    path (neither enters its key); a damaged memo entry is a miss of the memo alone (removed, counted, written again);
    the same program source pickled into other bytes is another key; every run verified against NumPy."""

    def memo_counts(run: dict[str, Any]) -> tuple[int, int]:
        assert run["verified"] and run["stats"]["parent_hits"] == 1 and run["stats"]["handed_to_runner"] == 0, run
        return run["stats"]["tiers"]["folders_from_memo"], run["stats"]["tiers"]["folders_remembered"]

    cold = run_child(tmp_path, "serial", "div")
    assert cold["verified"] and cold["stats"]["handed_to_runner"] == 1
    assert memo_entries(tmp_path) == []  # a build is not a hit: nothing is remembered by the runner's task
    assert memo_counts(run_child(tmp_path, "serial", "div")) == (0, 1)
    [memo] = memo_entries(tmp_path)
    assert memo_counts(run_child(tmp_path, "thread", "div")) == (1, 0)

    moved = tmp_path / "moved"
    moved.mkdir()
    for part in ("gt4py", "gridkey"):
        shutil.move(tmp_path / part, moved / part)
    assert memo_counts(run_child(moved, "serial", "div")) == (1, 0)
    for part in ("gt4py", "gridkey"):
        shutil.move(moved / part, tmp_path / part)

    good = memo.read_bytes()
    memo.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    damaged = run_child(tmp_path, "serial", "div")
    assert memo_counts(damaged) == (0, 1) and damaged["stats"]["tiers"]["rejected"] == 1, damaged
    assert memo.read_bytes() == good  # written again, the same bytes

    [entry] = translation_entries(tmp_path)
    repickled = pickle.dumps(pickle.loads(entry.read_bytes()), protocol=4)
    assert repickled != entry.read_bytes()
    entry.write_bytes(repickled)
    assert memo_counts(run_child(tmp_path, "serial", "div")) == (0, 1)
    assert len(memo_entries(tmp_path)) == 2
    assert memo_counts(run_child(tmp_path, "serial", "div")) == (1, 0)


@pytest.mark.parametrize(
    "folder, constant, expected",
    [
        ("translation_cache/gtfn", "translation_cache", "gtfn"),  # GT4Py 1.2.3
        ("gtfn_cache", None, "gtfn"),  # GT4Py 1.2.1, which names the folder in no constant
        ("translation_cache", None, "dace"),  # GT4Py 1.2.1's DaCe backend
        ("gtfn_cache", "translation_cache", None),  # not a translation cache of 1.2.3
        ("other", None, None),
    ],
)
def test_translation_caches_are_found_in_both_gt4py_layouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str, constant: str | None, expected: str | None
) -> None:
    """GT4Py 1.2.1 has no ``TRANSLATION_CACHE_DIR_NAME``: looking it up ended every compile there with an
    AttributeError (5 of this file's tests failed on 1.2.1 so)."""
    from gt4py.next.otf.compilation import cache as gt4py_cache  # the module the adapter reads the constant from

    if constant is None:
        monkeypatch.delattr(gt4py_cache, "TRANSLATION_CACHE_DIR_NAME", raising=False)
    else:
        monkeypatch.setattr(gt4py_cache, "TRANSLATION_CACHE_DIR_NAME", constant, raising=False)

    class Cache:
        path = str(tmp_path / ".gt4py_cache" / folder)

    assert _gt4py_tiers._translation_cache(Cache()) == expected


EXAMPLE = ROOT / "crates" / "gridkey-python" / "examples" / "gt4py_model.py"


def test_the_readme_example_model_runs_cold_then_warm_without_a_pool(tmp_path: Path) -> None:
    """The README's GT4Py example, as a user runs it: cold in process mode (GT4Py's pool translates and builds),
    then warm in process mode (the hit resolved in the calling process, no pool), both equal to NumPy."""
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, str(EXAMPLE)], env=child_env(tmp_path, "process"), capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stdout + out.stderr
        runs.append(out.stdout.strip().splitlines()[-1])
    assert "'handed_to_runner': 1" in runs[0], runs[0]
    assert "'parent_hits': 1" in runs[1] and "'handed_to_runner': 0" in runs[1], runs[1]
    assert all("largest relative error" in r for r in runs), runs
