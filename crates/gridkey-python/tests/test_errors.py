"""Every public call raises only ``GridkeyError`` subclasses, naming the argument at fault, and the
classes the extension raises are the very classes of ``gridkey.errors``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gridkey
import gridkey._gridkey as core
import gridkey.errors as errors

KEY = "0" * 32


@dataclass(frozen=True)
class Case:
    """A public call with one argument replaced by ``bad``: ``call(bad)``."""

    what: str
    argument: str
    call: Callable[[Any], object]
    accepts: Callable[[Any], bool]


def is_str(x: object) -> bool:
    return isinstance(x, str)


def is_path(x: object) -> bool:
    return isinstance(x, (str, os.PathLike))


def is_bytes(x: object) -> bool:
    return isinstance(x, bytes)


def is_int(x: object) -> bool:
    return isinstance(x, int)


def is_str_sequence(x: object) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(i, str) for i in x)


def never(x: object) -> bool:
    return False


def dims() -> tuple[gridkey.Dimension, gridkey.Dimension, gridkey.Dimension]:
    return gridkey.Dimension("Cell"), gridkey.Dimension("C2EDim", "local"), gridkey.Dimension("Edge")


def cases(root: Path) -> list[Case]:
    table = np.arange(6, dtype=np.int32).reshape(2, 3)
    store = gridkey.TableStore(root / "store")
    conn = gridkey.Connectivity(table, *dims())
    view = gridkey.compile_time_offset_provider({"C2E": conn}, store)
    inputs = gridkey.KeyInputs("f", "1", "p", b"", {}, view)
    locks = gridkey.KeyLocks(root / "locks")
    gt4py = gridkey._gridkey.Gt4pyStore(root / "gt4py")
    # A shared tier that is off at once (nothing listens on the port): its calls check their arguments all the same.
    off = gridkey.Settings.from_vars(
        {"GRIDKEY_REMOTE_URL": "redis://127.0.0.1:9/", "GRIDKEY_REMOTE_TRUST": "acl", "GRIDKEY_REMOTE_CONNECT_TIMEOUT": "0.2"}
    )
    shared = core.Gt4pyShared.connect(off, root / "shared")
    assert shared is not None and not shared.is_on
    domain, local, codomain = dims()
    key_args: dict[str, Any] = dict(
        frontend="f", frontend_version="1", program="p", encoding=b"", options={}, provider=view
    )

    def key_inputs(name: str) -> Callable[[Any], object]:
        return lambda bad: gridkey.KeyInputs(**{**key_args, name: bad})

    ext_args = dict(
        build_folder="b",
        compiler_identity=KEY,
        ext_suffix=".so",
        platform="linux",
        nanobind_version="2",
        gridtools_cpp_version="2",
        gt4py_version="1.2.3",
    )

    def ext_key(name: str) -> Callable[[Any], object]:
        return lambda bad: core.gt4py_extension_key(**{**ext_args, name: bad})

    def tr_key(name: str) -> Callable[[Any], object]:
        args = dict(gt4py_version="1.2.3", cache_name="gtfn", gt4py_key="k")
        return lambda bad: core.gt4py_translation_key(**{**args, name: bad})

    return [
        Case("table_digest", "max_table_bytes", lambda b: gridkey.table_digest(table, max_table_bytes=b), is_int),
        Case("Settings", "max_table_bytes", lambda b: gridkey.Settings(max_table_bytes=b), is_int),
        Case("Settings.from_vars", "vars", lambda b: gridkey.Settings.from_vars(b), lambda x: x == {}),
        Case("Settings.from_vars", "vars", lambda b: gridkey.Settings.from_vars({"GRIDKEY_CC": b}), is_str),
        Case("TableStore", "cache_dir", lambda b: gridkey.TableStore(b), lambda x: x is None or is_path(x)),
        Case("TableStore", "settings", lambda b: gridkey.TableStore(root, settings=b), lambda x: x is None),
        Case("TableStore.open", "digest", lambda b: store.open(b, np.int32, (2, 3)), never),
        Case("TableStore.path_of", "digest", lambda b: store.path_of(b), never),
        Case("Dimension", "name", lambda b: gridkey.Dimension(b), is_str),
        Case("Dimension", "kind", lambda b: gridkey.Dimension("Cell", b), never),
        Case("Connectivity", "domain", lambda b: gridkey.Connectivity(table, b, local, codomain), never),
        Case("Connectivity", "local", lambda b: gridkey.Connectivity(table, domain, b, codomain), never),
        Case("Connectivity", "codomain", lambda b: gridkey.Connectivity(table, domain, local, b), never),
        Case("Connectivity", "skip_value", lambda b: gridkey.Connectivity(table, *dims(), b), lambda x: x is None or is_int(x)),
        Case("table_digest", "table", lambda b: gridkey.table_digest(b), never),
        Case("TableStore.put", "table", lambda b: store.put(b), never),
        Case("TableStore.open", "shape", lambda b: store.open(KEY, np.int32, b), never),
        Case("Connectivity", "table", lambda b: gridkey.Connectivity(b, domain, local, codomain), never),
        Case("IdentityMemo.get_or_insert", "factory", lambda b: gridkey.IdentityMemo().get_or_insert(table, b), never),
        Case("compile_time_connectivity", "connectivity", lambda b: gridkey.compile_time_connectivity(b, store), never),
        Case("compile_time_connectivity", "store", lambda b: gridkey.compile_time_connectivity(conn, b), never),
        Case("compile_time_connectivity", "table_dtype", lambda b: gridkey.compile_time_connectivity(conn, store, table_dtype=b), never),
        Case("compile_time_connectivity", "offset", lambda b: gridkey.compile_time_connectivity(conn, store, offset=b), is_str),
        Case("compile_time_offset_provider", "provider", lambda b: gridkey.compile_time_offset_provider(b, store), lambda x: x == {}),
        Case("compile_time_offset_provider", "store", lambda b: gridkey.compile_time_offset_provider({}, b), never),
        Case("compile_time_offset_provider", "table_dtype", lambda b: gridkey.compile_time_offset_provider({}, store, table_dtype=b), never),
        Case("KeyLocks", "cache_dir", lambda b: gridkey.KeyLocks(b), lambda x: x is None or is_path(x)),
        Case("KeyLocks", "settings", lambda b: gridkey.KeyLocks(root, settings=b), lambda x: x is None),
        Case("KeyLocks.path", "name", lambda b: locks.path(b), is_str),
        Case("KeyLocks.lock", "name", lambda b: locks.lock(b), is_str),
        *(Case("KeyInputs", n, key_inputs(n), is_str) for n in ("frontend", "frontend_version", "program")),
        Case("KeyInputs", "encoding", key_inputs("encoding"), lambda x: is_bytes(x) or x == [1]),
        Case("KeyInputs", "options", key_inputs("options"), lambda x: x == {}),
        Case("KeyInputs", "provider", key_inputs("provider"), lambda x: x == {}),
        Case("KeyInputs", "frontend_fingerprint", key_inputs("frontend_fingerprint"), is_str),
        Case("KeyInputs.from_json", "text", lambda b: gridkey.KeyInputs.from_json(b), is_str),
        Case("translation_key", "inputs", lambda b: gridkey.translation_key(b), never),
        Case("explain", "a", lambda b: gridkey.explain(b, inputs), never),
        Case("explain", "b", lambda b: gridkey.explain(inputs, b), never),
        Case("Gt4pyStore", "cache_dir", lambda b: core.Gt4pyStore(b), is_path),
        Case("Gt4pyStore.entry_path", "kind", lambda b: gt4py.entry_path(b, KEY), never),
        Case("Gt4pyStore.entry_path", "key", lambda b: gt4py.entry_path("translation", b), never),
        Case("Gt4pyStore.get_translation", "key", lambda b: gt4py.get_translation(b), never),
        Case("Gt4pyStore.put_translation", "key", lambda b: gt4py.put_translation(b, b""), never),
        Case("Gt4pyStore.put_translation", "data", lambda b: gt4py.put_translation(KEY, b), lambda x: is_bytes(x) or x == [1]),
        Case("Gt4pyStore.put_extension", "key", lambda b: gt4py.put_extension(b, root, []), never),
        Case("Gt4pyStore.put_extension", "folder", lambda b: gt4py.put_extension(KEY, b, []), is_path),
        Case("Gt4pyStore.put_extension", "names", lambda b: gt4py.put_extension(KEY, root, b), is_str_sequence),
        Case("Gt4pyStore.materialize", "key", lambda b: gt4py.materialize(b, root), never),
        Case("Gt4pyStore.materialize", "folder", lambda b: gt4py.materialize(KEY, b), is_path),
        Case("Gt4pyStore.remove", "kind", lambda b: gt4py.remove(b, KEY), never),
        Case("Gt4pyStore.remove", "key", lambda b: gt4py.remove("translation", b), never),
        Case("Gt4pyShared.connect", "settings", lambda b: core.Gt4pyShared.connect(b, root), never),
        Case("Gt4pyShared.connect", "cache_dir", lambda b: core.Gt4pyShared.connect(gridkey.Settings.from_vars({}), b), is_path),
        *(
            Case(f"Gt4pyShared.{name}", "kind", call, never)
            for name, call in [
                ("fetch", lambda b: shared.fetch(b, KEY, gt4py)),
                ("fetch_into", lambda b: shared.fetch_into(b, KEY, gt4py, root / "t")),
                ("claim", lambda b: shared.claim(b, KEY, gt4py)),
                ("wait", lambda b: shared.wait(b, KEY, gt4py)),
                ("upload", lambda b: shared.upload(b, KEY, "here", gt4py)),
                ("fetched", lambda b: shared.fetched(b, KEY)),
                ("confirm", lambda b: shared.confirm(b, KEY)),
                ("reject", lambda b: shared.reject(b, KEY, "r")),
            ]
        ),
        *(
            Case(f"Gt4pyShared.{name}", "key", call, never)
            for name, call in [
                ("fetch", lambda b: shared.fetch("translation", b, gt4py)),
                ("fetch_into", lambda b: shared.fetch_into("translation", b, gt4py, root / "t")),
                ("claim", lambda b: shared.claim("translation", b, gt4py)),
                ("upload", lambda b: shared.upload("translation", b, "here", gt4py)),
                ("fetched", lambda b: shared.fetched("translation", b)),
                ("confirm", lambda b: shared.confirm("translation", b)),
                ("reject", lambda b: shared.reject("translation", b, "r")),
            ]
        ),
        Case("Gt4pyShared.fetch", "store", lambda b: shared.fetch("translation", KEY, b), never),
        Case("Gt4pyShared.fetch_into", "store", lambda b: shared.fetch_into("translation", KEY, b, root / "t"), never),
        Case("Gt4pyShared.fetch_into", "target", lambda b: shared.fetch_into("translation", KEY, gt4py, b), is_path),
        Case("Gt4pyShared.wait", "store", lambda b: shared.wait("translation", KEY, b), never),
        Case("Gt4pyShared.upload", "route", lambda b: shared.upload("translation", KEY, b, gt4py), never),
        Case("Gt4pyShared.upload", "verified", lambda b: shared.upload("translation", KEY, "here", gt4py, verified=b), never),
        Case("Gt4pyShared.reject", "reason", lambda b: shared.reject("translation", KEY, b), is_str),
        Case("cxx_compiler_identity", "environ", lambda b: core.cxx_compiler_identity(b, root), lambda x: x == {}),
        Case("cxx_compiler_identity", "environ", lambda b: core.cxx_compiler_identity({"CXX": b}, root), is_str),
        Case("cxx_compiler_identity", "cwd", lambda b: core.cxx_compiler_identity({"CXX": "c++"}, b), is_path),
        *(Case("gt4py_extension_key", n, ext_key(n), is_str) for n in ext_args),
        *(Case("gt4py_translation_key", n, tr_key(n), is_str) for n in ("gt4py_version", "cache_name", "gt4py_key")),
    ]


#: Values of every kind the arguments take and do not take.
VALUES: list[object] = [3, -1, 2**64, 2.5, None, "x", b"x", [1], ("x",), {}, {"x": 1}, object(), Path("x")]


@pytest.fixture(scope="module")
def all_cases(tmp_path_factory: pytest.TempPathFactory) -> list[Case]:
    return cases(tmp_path_factory.mktemp("errors"))


def check(case: Case, bad: object) -> None:
    """``case.call(bad)`` either returns, or raises a ``GridkeyError`` naming ``case.argument``."""
    try:
        case.call(bad)
    except errors.GridkeyError as e:
        if not case.accepts(bad):
            assert case.argument in str(e), f"{case.what}({case.argument}={bad!r}): {e}"
        assert not str(e).endswith("."), str(e)
        return
    except BaseException as e:
        raise AssertionError(f"{case.what}({case.argument}={bad!r}) raised {type(e).__mro__}: {e}") from e
    assert case.accepts(bad), f"{case.what}({case.argument}={bad!r}) returned"


@given(st.data())
def test_every_public_call_raises_gridkey_errors_naming_the_argument(all_cases: list[Case], data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(all_cases), label="case")
    bad = data.draw(st.sampled_from(VALUES), label="value")
    check(case, bad)


@pytest.mark.parametrize("bad", VALUES, ids=repr)
def test_every_case_with_every_value(all_cases: list[Case], bad: object) -> None:
    for case in all_cases:
        check(case, bad)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: gridkey.explain("key", "key"), errors.TableTypeError),  # type: ignore[arg-type]
        (lambda: gridkey.table_digest(np.zeros((1, 1), np.int32), max_table_bytes=-1), errors.TableValueError),
        (lambda: gridkey.Connectivity(np.zeros((1, 1), np.int32), *dims(), 2**63), errors.TableValueError),
        (lambda: gridkey.Settings(max_table_bytes=2**64), errors.TableValueError),
    ],
)
def test_argument_errors_are_gridkey_errors_with_the_standard_base(call: Callable[[], object], error: type) -> None:
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error
    assert isinstance(info.value, TypeError if issubclass(error, TypeError) else ValueError)
    # The cause is PyO3's own conversion error, where there was a conversion.
    assert (info.value.__cause__ is None) == (info.value.args[0].startswith("argument a must be a gridkey"))


def test_the_extension_holds_the_classes_of_gridkey_errors() -> None:
    for name in errors.__all__:
        assert getattr(core, name) is getattr(errors, name), name
        assert getattr(gridkey, name) is getattr(errors, name), name


def test_raised_exceptions_are_instances_of_exactly_those_classes(tmp_path: Path) -> None:
    store = gridkey.TableStore(tmp_path)
    with pytest.raises(errors.TableNotFoundError) as missing:
        store.open(KEY, np.int32, (1, 1))
    assert type(missing.value) is core.TableNotFoundError
    with pytest.raises(errors.TableValueError) as bad_digest:
        store.path_of("nope")
    assert type(bad_digest.value) is core.TableValueError
    with pytest.raises(errors.SettingsError) as settings:
        gridkey.Settings.from_vars({"GRIDKEY_VERIFY_TABLES": "maybe"})
    assert type(settings.value) is core.SettingsError


def test_what_pyo3_raises_itself_is_a_plain_type_error() -> None:
    # A call of the wrong arity is refused by PyO3 before gridkey sees the arguments.
    with pytest.raises(TypeError) as info:
        gridkey.explain()  # type: ignore[call-arg]
    assert not isinstance(info.value, errors.GridkeyError)


def test_a_blank_cxx_is_an_error_that_names_cxx(tmp_path: Path) -> None:
    """GT4Py's compiler comes from ``CXX``: its error names ``CXX``, not the ``CC`` of gridkey's own C compiler."""
    with pytest.raises(errors.SettingsError) as raised:
        core.cxx_compiler_identity({"CXX": "   "}, tmp_path)
    message = str(raised.value)
    assert message.startswith('CXX="   " is not valid'), message
    assert "CC=" not in message.replace("CXX=", ""), message
