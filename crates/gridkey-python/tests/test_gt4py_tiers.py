"""GT4Py's translation entries and built extensions in gridkey's store (``gridkey._gt4py_tiers``, ADR 0040).

The key and the store are checked without GT4Py; the nodes test runs real GT4Py builds (cmake, the C++ compiler) in
fresh interpreters with separate GT4Py caches, as ``crates/gridkey-python/proof/gt4py_nodes.py`` does.
"""

from __future__ import annotations

from typing import Any
from pathlib import Path

import os
import pathlib
import shutil
import stat
import sys

import pytest

import gridkey
from gridkey import _gridkey

ROOT = pathlib.Path(__file__).resolve().parents[3]
KEY_ARGS = ("div_pyext_abc_1.2.3_def", "0" * 32, ".cpython-312-x86_64-linux-gnu.so", "linux-x86_64", "3.1.0", "2.3.9", "1.2.3")
OTHER = ("rot_pyext_abc_1.2.3_def", "1" * 32, ".cpython-313-x86_64-linux-gnu.so", "linux-aarch64", "2.0.0", "2.3.8", "1.2.1")


def test_every_extension_key_input_changes_the_key() -> None:
    base = _gridkey.gt4py_extension_key(*KEY_ARGS)
    assert len(base) == 32 and base == _gridkey.gt4py_extension_key(*KEY_ARGS)
    for i, other in enumerate(OTHER):
        args = list(KEY_ARGS)
        args[i] = other
        assert _gridkey.gt4py_extension_key(*args) != base, f"input {i} does not enter the extension key"


def test_the_compiler_identity_follows_the_compiler_not_its_path(tmp_path: Path) -> None:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    env = {"PATH": os.environ.get("PATH", "")}
    command, identity = _gridkey.cxx_compiler_identity(env, tmp_path)
    # The same compiler reached through another directory: the same identity.
    elsewhere = tmp_path / "bin"
    found = shutil.which(command, path=env["PATH"])
    assert found is not None, command
    elsewhere.mkdir()
    (elsewhere / pathlib.Path(command).name).symlink_to(os.path.realpath(found))
    assert _gridkey.cxx_compiler_identity({"PATH": f"{elsewhere}{os.pathsep}{env['PATH']}"}, tmp_path)[1] == identity
    # Another compiler behind CXX (a wrapper with other bytes): another identity.
    wrapper = tmp_path / "cxx-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec {cxx} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    other = _gridkey.cxx_compiler_identity({**env, "CXX": str(wrapper)}, tmp_path)
    assert other[0] == str(wrapper) and other[1] != identity


def test_the_identity_started_on_its_own_thread_is_the_one_computed_in_place(tmp_path: Path) -> None:
    """`start_cxx_compiler_identity` (the Rust core's thread `install` starts, ADR 0040) gives what
    `cxx_compiler_identity` gives, however often its result is asked for; an abandoned one and a blank ``CXX`` give
    None there, and the blank ``CXX`` the error (naming ``CXX``) where it is computed in place."""
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler on PATH")
    env = {"PATH": os.environ.get("PATH", "")}
    pending = _gridkey.start_cxx_compiler_identity(env, tmp_path)
    expected = _gridkey.cxx_compiler_identity(env, tmp_path)
    assert pending.result() == expected and pending.result() == expected
    # What a child forked while the thread ran does (the thread is not in the child): forgets it, and computes in place.
    forgotten = _gridkey.start_cxx_compiler_identity(env, tmp_path)
    forgotten.abandon()
    assert forgotten.result() is None
    blank = _gridkey.start_cxx_compiler_identity({**env, "CXX": "  "}, tmp_path)
    assert blank.result() is None
    with pytest.raises(gridkey.errors.SettingsError, match="CXX"):
        _gridkey.cxx_compiler_identity({**env, "CXX": "  "}, tmp_path)
    with pytest.raises(TypeError):
        _gridkey.start_cxx_compiler_identity([("PATH", "/bin")], tmp_path)  # type: ignore[arg-type]


def test_the_extension_key_follows_a_compiler_set_after_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`install` starts the compiler's identity in a thread of its own; a ``CXX`` set after it is the compiler of the
    builds, so the key inputs follow it, and they return to the first once ``CXX`` is gone."""
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    from gridkey import _gt4py_tiers as tiers

    monkeypatch.delenv("CXX", raising=False)
    tiers.install(cache_dir=tmp_path / "gridkey")
    try:
        first = dict(tiers.extension_key_inputs())
        command, identity = _gridkey.cxx_compiler_identity(dict(os.environ), pathlib.Path.cwd())
        assert (first["compiler"], first["compiler_identity"]) == (command, identity)
        wrapper = tmp_path / "cxx-wrapper"
        wrapper.write_text(f'#!/bin/sh\nexec {cxx} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("CXX", str(wrapper))
        later = tiers.extension_key_inputs()
        assert later["compiler"] == str(wrapper) and later["compiler_identity"] != identity
        assert tiers.extension_key("div_pyext_x") != _gridkey.gt4py_extension_key(
            "div_pyext_x", identity, first["ext_suffix"], first["platform"], first["nanobind_version"],
            first["gridtools_cpp_version"], first["gt4py_version"],
        )  # fmt: skip
        monkeypatch.delenv("CXX")
        assert tiers.extension_key_inputs() == first
    finally:
        tiers.uninstall()


def _folder(tmp_path: Path) -> pathlib.Path:
    folder = tmp_path / "div_pyext_x"
    (folder / "build" / "bin").mkdir(parents=True)
    (folder / "build" / "bin" / "div.so").write_bytes(os.urandom(4096))
    (folder / "gt4py.json").write_text('{"status": "COMPILED", "module": "build/bin/div.so", "entry_point_name": "div"}')
    return folder


def test_a_folder_built_by_another_compiler_than_the_keys_is_used_but_never_stored(tmp_path: Path) -> None:
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    import json
    import warnings

    from gridkey import _gt4py_tiers as tiers

    cxx = shutil.which("c++") or shutil.which("g++")
    assert cxx is not None
    other = tmp_path / "other-c++"
    other.write_text(f'#!/bin/sh\nexec {cxx} "$@"\n')
    other.chmod(0o755)

    def built_with(folder: pathlib.Path, compiler: str) -> pathlib.Path:
        entry = {"directory": str(folder), "command": f"{compiler} -O3 -c div_bindings.cpp", "file": "div_bindings.cpp"}
        (folder / "compile_commands.json").write_text(json.dumps([entry]))
        return folder

    tiers.install(cache_dir=tmp_path / "gridkey")
    try:
        key = tiers.extension_key("div_pyext_x")
        assert tiers.extension_key_inputs()["compiler"] != str(other), "the key's compiler is c++ on PATH"
        # GT4Py's cached CMake configuration ran another compiler (a CXX set when it was made): the folder is used
        # as GT4Py would, but neither marked nor stored under a key that names c++; one warning says it.
        folder = built_with(_folder(tmp_path), str(other))
        assert tiers._built_with(folder) == str(other)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            tiers._store_folder(folder, key, built_here=True)
            tiers._store_folder(folder, key, built_here=True)
        assert [str(w.message) for w in said if "compile_commands_cache_" in str(w.message)] != []
        assert len([w for w in said if issubclass(w.category, RuntimeWarning)]) == 1
        assert tiers._read_marker(folder) is None and tiers._usable_data(folder) is not None
        assert not pathlib.Path(tiers._state.store.entry_path("extension", key)).exists()
        assert tiers.counters().extensions_not_stored == 2
        # A folder that does not say which compiler built it is not stored either.
        (folder / "compile_commands.json").unlink()
        assert tiers._built_with(folder) is None
        tiers._store_folder(folder, key, built_here=True)
        assert not pathlib.Path(tiers._state.store.entry_path("extension", key)).exists()
        # Built by the key's compiler, named by its path as CMake records it, but found here, not built: nothing
        # tells which interpreter ABI, nanobind or gridtools-cpp it was built with, so it is used, never stored.
        built_with(folder, cxx)
        tiers._store_folder(folder, key, built_here=False)
        assert tiers._read_marker(folder) is None and tiers._usable_data(folder) is not None
        assert not pathlib.Path(tiers._state.store.entry_path("extension", key)).exists()
        # Built here by the key's compiler: stored and marked.
        tiers._store_folder(folder, key, built_here=True)
        assert tiers._read_marker(folder) == key
        assert pathlib.Path(tiers._state.store.entry_path("extension", key)).is_file()
    finally:
        tiers.uninstall()


def test_a_marked_folder_whose_module_was_truncated_is_filled_again_not_loaded(tmp_path: Path) -> None:
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    from gridkey import _gt4py_tiers as tiers

    folder = _folder(tmp_path)
    module = folder / "build" / "bin" / "div.so"
    whole = module.read_bytes()
    tiers.install(cache_dir=tmp_path / "gridkey")
    try:
        key = tiers.extension_key(folder.name)
        tiers._state.store.put_extension(key, folder, ["build/bin/div.so", "gt4py.json"])
        tiers._write_marker(folder, key, tiers._usable_data(folder))
        assert (folder / tiers.MARKER).read_text() == f"{key} {len(whole)}"
        assert tiers.prepare_folder(folder) is not None
        # Truncated after it was marked (a full disk, an interrupted copy): loading it would kill the process with
        # SIGBUS. It is filled again from gridkey's store, and counted rejected.
        module.write_bytes(whole[:100])
        before = tiers.counters().rejected
        data = tiers.prepare_folder(folder)
        assert data is not None and module.read_bytes() == whole
        assert tiers.counters().rejected == before + 1
        # A marker that cannot be read, or names nothing, is damaged, not absent: the folder (here with a truncated
        # module) is never used as it stands, but filled again and counted rejected.
        for damaged in (b"\xff\xfe not utf-8", b"", b"  \n"):
            module.write_bytes(whole[:100])
            (folder / tiers.MARKER).write_bytes(damaged)
            assert tiers._read_marker(folder) == ""
            before = tiers.counters().rejected
            data = tiers.prepare_folder(folder)
            assert data is not None and module.read_bytes() == whole, damaged
            assert tiers.counters().rejected == before + 1 and tiers._read_marker(folder) == key
        # With no stored copy: made unusable, so that GT4Py builds it again.
        tiers._state.store.remove("extension", key)
        module.write_bytes(whole[:100])
        assert tiers.prepare_folder(folder) is None and not (folder / "gt4py.json").exists()
        # A marker written before markers recorded sizes names the key alone, and still counts.
        (folder / "gt4py.json").write_text('{"status": "COMPILED", "module": "build/bin/div.so", "entry_point_name": "div"}')
        (folder / tiers.MARKER).write_text(key)
        assert tiers._marked_for(folder, key, tiers._usable_data(folder))
    finally:
        tiers.uninstall()


def test_a_materialization_that_cannot_write_its_build_record_leaves_no_module(tmp_path: Path) -> None:
    store = _gridkey.Gt4pyStore(tmp_path / "gridkey")
    key = _gridkey.gt4py_extension_key(*KEY_ARGS)
    store.put_extension(key, _folder(tmp_path), ["build/bin/div.so", "gt4py.json"])
    target = tmp_path / "fresh"
    # A directory where the build record goes: its rename fails after the module's was ready.
    (target / "gt4py.json").mkdir(parents=True)
    with pytest.raises(gridkey.GridkeyOSError, match=r"gt4py\.json.*free space or fix permissions"):
        store.materialize(key, target)
    assert not (target / "build" / "bin" / "div.so").exists(), "a module was left without its build record"
    assert not [p for p in (target / "build" / "bin").iterdir()], "a temp file was left"
    # Once the way is clear, both files arrive, byte for byte.
    (target / "gt4py.json").rmdir()
    assert store.materialize(key, target) == ["build/bin/div.so", "gt4py.json"]
    assert (target / "build" / "bin" / "div.so").read_bytes() == (tmp_path / "div_pyext_x" / "build" / "bin" / "div.so").read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "corrupted", "emptied"])
def test_a_damaged_extension_entry_is_rejected_removed_and_never_materialized(tmp_path: Path, damage: Any) -> None:
    store = _gridkey.Gt4pyStore(tmp_path / "gridkey")
    key = _gridkey.gt4py_extension_key(*KEY_ARGS)
    path, size = store.put_extension(key, _folder(tmp_path), ["build/bin/div.so", "gt4py.json"])
    assert pathlib.Path(path).stat().st_size == size + 40
    good = pathlib.Path(path).read_bytes()
    bad = {"truncated": good[:-100], "corrupted": good[:2000] + bytes([good[2000] ^ 1]) + good[2001:], "emptied": b""}[damage]
    os.chmod(path, 0o644)
    pathlib.Path(path).write_bytes(bad)
    target = tmp_path / "fresh"
    assert store.materialize(key, target) is None
    assert store.rejected == 1 and str(path) in (store.last_rejection or "")
    assert not pathlib.Path(path).exists(), "a damaged entry was left to be read again"
    assert not (target / "gt4py.json").exists()


def test_a_materialized_folder_holds_exactly_the_stored_files(tmp_path: Path) -> None:
    store = _gridkey.Gt4pyStore(tmp_path / "gridkey")
    folder = _folder(tmp_path)
    key = _gridkey.gt4py_extension_key(*KEY_ARGS)
    store.put_extension(key, folder, ["build/bin/div.so", "gt4py.json"])
    assert store.materialize(_gridkey.gt4py_extension_key(*OTHER), tmp_path / "other") is None
    target = tmp_path / "elsewhere" / "div_pyext_x"
    assert store.materialize(key, target) == ["build/bin/div.so", "gt4py.json"]
    for name in ("build/bin/div.so", "gt4py.json"):
        assert (target / name).read_bytes() == (folder / name).read_bytes()
    assert store.rejected == 0


# Real GT4Py builds across nodes (each node: a fresh interpreter, its own GT4Py cache)


@pytest.fixture(scope="module")
def nodes() -> Any:
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    if shutil.which("cmake", path=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}") is None:
        pytest.skip("GT4Py's builds need cmake")
    sys.path.insert(0, str(ROOT / "crates" / "gridkey-python" / "proof"))
    import gt4py_nodes

    return gt4py_nodes


def test_nodes_share_builds_and_refuse_damaged_and_foreign_extensions(nodes: Any, tmp_path: Path) -> None:
    store = tmp_path / "gridkey"
    first = nodes.run_node(tmp_path / "a" / ".gt4py_cache", store, ["div"])
    assert (first["translations"], first["builds"], first["extensions_stored"], first["verified"]) == (1, 1, 1, True)

    # A node with an empty GT4Py cache: everything from gridkey's store, nothing translated or built.
    fresh = nodes.run_node(tmp_path / "b" / ".gt4py_cache", store, ["div"])
    assert (fresh["translations"], fresh["builds"]) == (0, 0)
    assert (fresh["translations_materialized"], fresh["extensions_materialized"], fresh["verified"]) == (1, 1, True)

    # A folder GT4Py built before the adapter was installed (no marker), in a GT4Py cache of its own whose translation
    # cache was cleared: GT4Py translates again and its build step finds the folder built, so it is used as it is, as
    # GT4Py's own folders are, and never stored under this process's key nor marked, whatever compiler, interpreter
    # or nanobind built it (ADR 0057).
    from gridkey import _gt4py_tiers as tiers

    unmarked = tmp_path / "u" / ".gt4py_cache"
    shutil.copytree(tmp_path / "a" / ".gt4py_cache", unmarked, symlinks=True)
    for marker in unmarked.rglob(tiers.MARKER):
        marker.unlink()
    # GT4Py 1.2.3 keeps its translations in translation_cache/, 1.2.1 gtfn's in gtfn_cache/.
    for translations in [*unmarked.rglob("translation_cache"), *unmarked.rglob("gtfn_cache")]:
        shutil.rmtree(translations)
    found = nodes.run_node(unmarked, tmp_path / "u" / "gridkey", ["div"])
    assert (found["translations"], found["builds"], found["extensions_stored"], found["verified"]) == (1, 0, 0, True)
    assert not list(unmarked.rglob(tiers.MARKER)), "a folder not built in this process was marked"

    # Process mode: the spawned build workers get the hooks too (their counts stay in the workers, so the folder
    # says it: gridkey's marker and the two stored files, none of the build system's).
    spawned = nodes.run_node(tmp_path / "p" / ".gt4py_cache", store, ["div"], extra_env={"GT4PY_BUILD_JOBS_MODE": "process"})
    assert spawned["verified"]
    (folder,) = [p for p in (tmp_path / "p").rglob("div_pyext_*") if p.is_dir()]
    assert (folder / ".gridkey-extension").is_file() and (folder / "gt4py.json").is_file()
    assert not (folder / "build.sh").exists() and not list(folder.rglob("*.cpp")), "the worker built the program"

    # A corrupted extension object is rejected and the program built again (and stored again, good).
    (entry,) = (store / gridkey.GT4PY_DIR / "extension").rglob("*.bin")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(entry, 0o644)
    entry.write_bytes(bytes(data))
    damaged = nodes.run_node(tmp_path / "c" / ".gt4py_cache", store, ["div"])
    assert (damaged["rejected"], damaged["builds"], damaged["extensions_stored"], damaged["verified"]) == (1, 1, 1, True)

    # Another compiler on node a: its folder, built by c++, is not loaded but built here.
    cxx = shutil.which("c++") or shutil.which("g++")
    wrapper = tmp_path / "other-cxx"
    wrapper.write_text(f'#!/bin/sh\nexec {cxx} "$@"\n')
    wrapper.chmod(0o755)
    # GT4Py builds it with the compiler of node a's cached CMake configuration, c++, not with the wrapper: that build
    # is used there but not stored under the wrapper's key, and a warning says so.
    foreign = nodes.run_node(tmp_path / "a" / ".gt4py_cache", store, ["div"], extra_env={"CXX": str(wrapper)})
    assert (foreign["foreign_rebuilt"], foreign["builds"], foreign["extensions_materialized"]) == (1, 1, 0)
    assert (foreign["extensions_not_stored"], foreign["extensions_stored"], foreign["verified"]) == (1, 0, True)
    assert "compile_commands_cache_" in foreign["stderr"]
    assert len(list((store / gridkey.GT4PY_DIR / "extension").rglob("*.bin"))) == 1
    # A node whose GT4Py cache is configured with the wrapper builds with it, and stores it under its own key.
    other = nodes.run_node(tmp_path / "w" / ".gt4py_cache", store, ["div"], extra_env={"CXX": str(wrapper)})
    assert (other["builds"], other["extensions_stored"], other["extensions_not_stored"]) == (1, 1, 0)
    assert other["verified"]
    assert len(list((store / gridkey.GT4PY_DIR / "extension").rglob("*.bin"))) == 2


def test_an_extension_for_another_python_abi_is_never_materialized_or_loaded(tmp_path: Path) -> None:
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    from gridkey import _gt4py_tiers as tiers

    here = tiers.extension_key_inputs()
    other_abi = ".cpython-399-x86_64-linux-gnu.so"
    assert here["ext_suffix"] != other_abi
    folder = _folder(tmp_path)
    key_here = tiers.extension_key(folder.name)
    key_other = _gridkey.gt4py_extension_key(
        folder.name, here["compiler_identity"], other_abi, here["platform"], here["nanobind_version"],
        here["gridtools_cpp_version"], here["gt4py_version"],
    )
    tiers.install(cache_dir=tmp_path / "gridkey")
    try:
        store = tiers._state.store
        # Another interpreter's node stored its build: a fresh folder here is not filled from it.
        store.put_extension(key_other, folder, ["build/bin/div.so", "gt4py.json"])
        fresh = tmp_path / "fresh" / folder.name
        fresh.mkdir(parents=True)
        tiers._prepare_folder(fresh, key_here)
        assert not (fresh / "gt4py.json").exists()
        # A usable folder that was filled for the other interpreter is made unusable, so GT4Py builds it here.
        (folder / tiers.MARKER).write_text(key_other)
        before = tiers.counters().foreign_rebuilt
        tiers._prepare_folder(folder, key_here)
        assert tiers.counters().foreign_rebuilt == before + 1
        assert not (folder / "gt4py.json").exists()
    finally:
        tiers.uninstall()


def test_a_folder_marked_with_this_key_is_returned_without_the_folder_lock(tmp_path: Path, monkeypatch: Any) -> None:
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    from gt4py._core import locking

    from gridkey import _gt4py_tiers as tiers

    folder = _folder(tmp_path)
    key_here = tiers.extension_key(folder.name)
    locked: list[pathlib.Path] = []
    real_lock = locking.lock

    def counting_lock(path: Any, *args: Any) -> Any:
        locked.append(pathlib.Path(path))
        return real_lock(path, *args)

    monkeypatch.setattr(locking, "lock", counting_lock)
    tiers.install(cache_dir=tmp_path / "gridkey")
    try:
        # Marked with this process's key and usable: GT4Py's build data, no lock taken.
        (folder / tiers.MARKER).write_text(key_here)
        data = tiers.prepare_folder(folder)
        assert data is not None and str(data.module) == "build/bin/div.so" and data.entry_point_name == "div"
        assert locked == []
        # Marked for another extension key: prepared under the lock, made unusable, None.
        (folder / tiers.MARKER).write_text("0" * 32)
        before = tiers.counters().foreign_rebuilt
        assert tiers.prepare_folder(folder) is None
        assert locked == [folder] and tiers.counters().foreign_rebuilt == before + 1
        assert not (folder / "gt4py.json").exists()
        # Marked with this key but its module gone (an interrupted clean-up): under the lock, not usable.
        (folder / "gt4py.json").write_text('{"status": "COMPILED", "module": "build/bin/div.so", "entry_point_name": "div"}')
        (folder / tiers.MARKER).write_text(key_here)
        (folder / "build" / "bin" / "div.so").unlink()
        assert tiers.prepare_folder(folder) is None
        assert locked == [folder, folder]
    finally:
        tiers.uninstall()


def test_the_build_folder_memo_key_follows_its_inputs_and_nothing_else(tmp_path: Path, monkeypatch: Any) -> None:
    """ADR 0058 at the Python edge: the entry's bytes, GT4Py's ``BUILD_CACHE_VERSION_ID``, the bindings step's
    configuration and the build context each change the key; the entry's path does not; a bindings step that is not
    GT4Py's own, an entry that cannot be read or uninstalled hooks give no key; the memo is read back once written
    behind and a name that is not one folder is refused."""
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    from gt4py.next import config
    from gt4py.next.otf.binding import nanobind

    from gridkey import _gt4py_tiers as tiers

    entry = tmp_path / "a" / "0123.pkl"
    entry.parent.mkdir()
    entry.write_bytes(b"a pickled program source")
    bindings = nanobind.ExtensionGenerator(unstructured_horizontal_has_unit_stride=False)
    assert tiers.memo_key(entry, bindings, "ctx") is None  # not installed
    tiers.install(cache_dir=tmp_path / "gridkey")
    try:
        base = tiers.memo_key(entry, bindings, "ctx")
        assert base is not None and len(base) == 32
        elsewhere = tmp_path / "b" / "4567.pkl"
        elsewhere.parent.mkdir()
        shutil.copyfile(entry, elsewhere)
        assert tiers.memo_key(elsewhere, bindings, "ctx") == base
        assert tiers.memo_key(entry, nanobind.ExtensionGenerator(unstructured_horizontal_has_unit_stride=False), "ctx") == base
        assert tiers.memo_key(entry, nanobind.ExtensionGenerator(unstructured_horizontal_has_unit_stride=True), "ctx") != base
        assert tiers.memo_key(entry, bindings, "") != base
        monkeypatch.setattr(config, "BUILD_CACHE_VERSION_ID", "site-2")
        assert tiers.memo_key(entry, bindings, "ctx") != base
        monkeypatch.undo()
        elsewhere.write_bytes(b"another pickled program source")
        assert tiers.memo_key(elsewhere, bindings, "ctx") != base
        assert tiers.memo_key(tmp_path / "missing.pkl", bindings, "ctx") is None
        assert tiers.memo_key(entry, lambda source: source, "ctx") is None

        before = tiers.counters()
        assert tiers.remembered_folder(base) is None
        tiers.remember_folder(base, "div_pyext_abc_1.2.3_ctx")
        tiers.flush()
        assert tiers.remembered_folder(base) == "div_pyext_abc_1.2.3_ctx"
        after = tiers.counters()
        assert (after.folders_remembered, after.folders_from_memo) == (before.folders_remembered + 1, before.folders_from_memo + 1)
        for bad in ("../div", "a/b", ""):
            with pytest.raises(gridkey.TableValueError, match="not the name of a build folder"):
                tiers.remember_folder(base, bad)
    finally:
        tiers.uninstall()


def test_the_counters_snapshot_has_every_running_count_and_is_a_copy() -> None:
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    from gridkey import _gt4py_tiers as tiers

    # The running counts and the snapshot name the same fields in the same order.
    assert tuple(tiers._Tally.__annotations__) == tiers.Counters._fields == tiers._Tally.__slots__
    before = tiers.counters()
    tiers._state.counters.rejected += 2
    try:
        after = tiers.counters()
        assert after.rejected == before.rejected + 2
        assert after._replace(rejected=before.rejected) == before, "the other counts are unchanged"
    finally:
        tiers._state.counters.rejected -= 2


def test_threads_that_meet_a_shared_tier_fault_at_once_warn_of_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread mode: the build jobs of one process that find objects rejected, and the tier off, at the same moment give
    each warning once (the check and the mark are one step)."""
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    import threading
    import time
    import warnings

    from gridkey import _gt4py_tiers as tiers

    class Shared:
        """A shared tier that took a while to say what it rejected and that it is off, as a lookup under load does."""

        warning = "shared tier redis://127.0.0.1:1/: the server stopped answering"

        @property
        def rejections(self) -> str:
            time.sleep(0.05)
            return "8 objects looked up failed a check here"

        @property
        def is_on(self) -> bool:
            time.sleep(0.05)
            return False

    monkeypatch.setattr(tiers._state, "shared", Shared())
    monkeypatch.setattr(tiers._state, "warned", False)
    monkeypatch.setattr(tiers._state, "warned_rejections", False)
    remote_warnings = tiers._state.counters.remote_warnings
    threads = 8
    start = threading.Barrier(threads)

    def job() -> None:
        start.wait()
        tiers._warn_of_shared_tier()

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        running = [threading.Thread(target=job) for _ in range(threads)]
        for t in running:
            t.start()
        for t in running:
            t.join()
    messages = sorted(str(w.message) for w in said)
    try:
        assert messages == [
            "gridkey: 8 objects looked up failed a check here",
            f"gridkey: {Shared.warning}; GT4Py translates and builds locally in this process",
        ], messages
        assert tiers._state.counters.remote_warnings == remote_warnings + 1
    finally:
        tiers._state.counters.remote_warnings = remote_warnings


def test_a_table_ref_is_a_value_that_pickles() -> None:
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    import pickle

    from gridkey.gt4py import TableRef

    ref = TableRef("/cache", "0" * 32, "<i4", (10, 3), False)
    assert pickle.loads(pickle.dumps(ref)) == ref and hash(ref) == hash(TableRef(*ref))
    assert ref.shape == (10, 3) and ref != ref._replace(verify=True)
    with pytest.raises(AttributeError):
        ref.digest = "1" * 32  # type: ignore[misc]  # immutable on purpose


def test_a_warning_made_an_error_raises_only_once_the_lease_is_settled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """``-W error`` (pytest's ``filterwarnings = error``): a warning the shared tier gives while a writer holds a lease
    (the server went away during the claim) raises in GT4Py's call, after the translation was made and stored and the
    lease released; raised at the claim, it would leave the lease held until the process exits."""
    pytest.importorskip("gt4py", reason="GT4Py needs CPython 3.12 or later; cargo xtask gt4py installs it")
    import warnings

    from gt4py._core import filecache

    from gridkey import _gt4py_tiers as tiers

    steps: list[str] = []

    class Shared:
        """A writer's shared tier that grants the lease, and is off by the time the claim returns."""

        is_writer = True
        is_on = False
        rejections = None
        warning = "shared tier redis://127.0.0.1:1/: the server stopped answering"

        def claim(self, kind: str, key: str, store: object) -> str:
            steps.append("claim")
            return "lease"

        def upload(self, kind: str, key: str, route: str, store: object, verified: bool) -> bool:
            steps.append(f"upload {route} verified={verified}")
            return False

        def fetched(self, kind: str, key: str) -> bool:
            return False

        def confirm(self, kind: str, key: str) -> None:
            return None

        def flush(self) -> None:
            return None

    def make() -> str:
        steps.append("translate")
        return "int translated;"

    tiers.install(cache_dir=tmp_path / "gridkey")
    try:
        monkeypatch.setattr(tiers._state, "shared", Shared())
        monkeypatch.setattr(tiers._state, "warned", False)
        cache = filecache.FileCache(tmp_path / "gt4py" / "translation_cache" / "gtfn")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            with pytest.raises(RuntimeWarning, match="the server stopped answering"):
                tiers.translate(cache, "program-key", make)
        assert steps == ["claim", "translate", "upload lease verified=True"], steps
        assert cache["program-key"] == "int translated;"
        # Given once: the next hook says nothing more.
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            assert tiers.translate(cache, "another-key", make) == "int translated;"
    finally:
        tiers.uninstall()
