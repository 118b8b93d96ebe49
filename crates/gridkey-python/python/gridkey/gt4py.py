"""Compile-time connectivities for released GT4Py 1.2.x: one translation-cache key in every build-jobs mode.

GT4Py 1.2 fingerprints the runtime connectivity tables into its persistent translation-cache key: their bytes, memory
order and array class. Its process-mode runner ships every table as a temporary ``.npy`` file that a worker turns back
into a connectivity of another layout and class, so a cache filled in one mode misses in another, and the key of every
program hashes every whole table. ``install()`` makes GT4Py compile against gridkey's compile-time view instead:

- ``gt4py.next.otf.compilation_tasks.make_compilation_task``, where the runtime offset provider becomes compile input
  (its one caller looks the function up on the module at every call), is wrapped, so that every runner (serial,
  thread, process) gets the same compilable, whose offset provider holds a `CompileTimeConnectivity` in place of each
  neighbour table;
- a `CompileTimeConnectivity` is a GT4Py NumPy connectivity over a read-only, C-contiguous table memory-mapped from
  gridkey's table store (``<cache_dir>/tables-v1``, named by its digest, format v1), of the runtime table's dtype (the
  gtfn parameter types and the nanobind signatures follow it), created once per runtime connectivity (memo by
  identity, validated by a weak reference: connectivities are not hashable; ``gridkey.IdentityMemo``);
- its fingerprint is its domain, codomain, skip value and digest (registered on GT4Py's strict and lenient
  deconstructors, which are ``functools.singledispatch`` functions, taken before their dataclass fallback); it pickles
  as a reference to its file, and unpickling it imports this module, which registers the fingerprint in spawned
  workers that run no user code;
- a worker that cannot open a table (deleted, truncated, tampered) fails only the program that needs it, with the
  store's error naming the file; the pool survives;
- execution keeps the runtime tables: only compilation is redirected.

Usage::

    import gridkey.gt4py
    gridkey.gt4py.install()          # before the first program is compiled

``install()`` is idempotent and ``uninstall()`` restores GT4Py. Backends with their own ``compile`` are left alone.
``install()`` does nothing on a GT4Py that builds compile-time connectivities itself, and raises
`UnsupportedGT4PyError` on a version it was not written for.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import threading
from typing import Any, Callable, Optional

import numpy as np

import gt4py
from gt4py.next import backend as _gtx_backend
from gt4py.next import common as _common
from gt4py.next import fingerprinting as _fingerprinting
from gt4py.next.embedded import nd_array_field as _nd_array_field
from gt4py.next.otf import compilation_tasks as _compilation_tasks

import gridkey
from gridkey import _gt4py_tiers
from gridkey.errors import GridkeyError

__all__ = [
    "CompileTimeConnectivity",
    "TableRef",
    "UnsupportedGT4PyError",
    "compile_time_offset_provider",
    "install",
    "installed",
    "uninstall",
    "SUPPORTED_VERSIONS",
]

#: The GT4Py releases whose internals this adapter was checked against (major, minor): 1.2.1 (the release icon4py
#: 0.4.1 pins) and 1.2.3, whose ``make_compilation_task``, ``construct_compilable``, ``Backend.compile``,
#: fingerprinting and NumPy connectivity are the same for what the adapter touches (ADR 0044).
SUPPORTED_VERSIONS = ((1, 2),)

#: Tag of the fingerprint of a `CompileTimeConnectivity`; a change of what it contains bumps the version.
_FINGERPRINT_TAG = b"gridkey.gt4py.CompileTimeConnectivity\0v1"


class UnsupportedGT4PyError(GridkeyError, RuntimeError):
    """The installed GT4Py is not a version `install` supports, or lacks what it wraps."""


@dataclasses.dataclass(frozen=True)
class TableRef:
    """Where a worker finds a compile-time table: the store's cache directory (absolute), the table digest (32 hex
    digits, format v1), its dtype (``"<i4"`` or ``"<i8"``) and shape ``(n, k)``, and whether every open recomputes
    the digest (``GRIDKEY_VERIFY_TABLES``)."""

    cache_dir: str
    digest: str
    dtype: str
    shape: tuple[int, int]
    verify: bool


@dataclasses.dataclass(frozen=True)
class CompileTimeConnectivity(_nd_array_field.NumPyArrayConnectivityField):
    """A GT4Py neighbour table over a read-only, C-contiguous table mapped from gridkey's store.

    Shape ``(n, k)`` of its domain, dtype int32 or int64 as the runtime table it stands for. Its fingerprint is
    ``(domain, codomain, skip value, digest)``; pickled, it is a `TableRef` that the unpickling process opens with the
    store's checks. An instance GT4Py derives from it (``restrict``) has no ``table_ref`` and behaves as GT4Py's own
    NumPy connectivity.
    """

    table_ref: Optional[TableRef] = None

    @property
    def digest(self) -> Optional[str]:
        """The table digest, 32 hex digits, or None for a derived instance."""
        return None if self.table_ref is None else self.table_ref.digest

    def __reduce__(self):
        if self.table_ref is None:
            return super().__reduce__()
        return (_open_compile_time_connectivity, (self.table_ref, self.domain, self.codomain, self.skip_value))


class _UnreadableTable:
    """Stands, in a worker, for a compile-time connectivity whose table could not be opened.

    Unpickling a task must not raise (GT4Py 1.2's pool breaks as a whole on an unpickling error), so the error is
    kept here and raised when the program's compilation first touches the table: its translation-cache key.
    """

    def __init__(self, error: BaseException):
        self._error = error

    def raise_error(self):
        raise self._error

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise self.__dict__["_error"]


def _deconstruct(ct: CompileTimeConnectivity):
    if ct.table_ref is None:
        return _fingerprinting.metadata_based_deconstructor_fallback(ct)
    return _fingerprinting.Deconstruction.from_pieces(
        ct.domain, ct.codomain, ct.skip_value, ct.table_ref.digest, state=_FINGERPRINT_TAG
    )


def _deconstruct_unreadable(table: _UnreadableTable):
    table.raise_error()


# At import, so that a spawned worker, which imports this module when it unpickles the first compile-time
# connectivity of its task, fingerprints it as the main process does.
for _deconstructor in (_fingerprinting.strict_fingerprint_deconstructor, _fingerprinting.lenient_fingerprint_deconstructor):
    _deconstructor.register(CompileTimeConnectivity, _deconstruct)
    _deconstructor.register(_UnreadableTable, _deconstruct_unreadable)
del _deconstructor

# Stores and opened tables of this process, so that a worker maps each table once however many tasks name it.
_lock = threading.Lock()
_stores: dict[tuple[str, bool], Any] = {}
_opened: dict[tuple[str, str], np.ndarray] = {}


def _store(cache_dir: str, verify: bool):
    with _lock:
        store = _stores.get((cache_dir, verify))
        if store is None:
            settings = gridkey.Settings.from_vars({"GRIDKEY_VERIFY_TABLES": "1" if verify else "0"})
            store = _stores[(cache_dir, verify)] = gridkey.TableStore(cache_dir, settings=settings)
        return store


def _open_table(ref: TableRef) -> np.ndarray:
    key = (ref.cache_dir, ref.digest)
    with _lock:
        table = _opened.get(key)
    if table is None:
        table = _store(ref.cache_dir, ref.verify).open(ref.digest, np.dtype(ref.dtype), tuple(ref.shape))
        with _lock:
            table = _opened.setdefault(key, table)
    return table


def _open_compile_time_connectivity(ref: TableRef, domain, codomain, skip_value):
    """Unpickles a `CompileTimeConnectivity`; an error is kept in an `_UnreadableTable` (see there)."""
    try:
        table = _open_table(ref)
        return CompileTimeConnectivity(domain, table, codomain, skip_value, table_ref=ref)
    except Exception as error:  # noqa: BLE001 - any failure must fail only the program, not the pool
        return _UnreadableTable(error)


class _Converter:
    """The compile-time view of runtime connectivities into one store, once per connectivity.

    The memo is ``gridkey.IdentityMemo``: keyed by the connectivity's identity, validated by a weak reference. On a
    verifying store a memo hit recomputes the runtime table's digest, and a table changed in place is converted again.
    """

    def __init__(self, cache_dir: Optional[os.PathLike | str], verify: Optional[bool]):
        settings = gridkey.Settings()
        self.cache_dir = str(pathlib.Path(settings.cache_dir if cache_dir is None else cache_dir).absolute())
        self.verify = settings.verify_tables if verify is None else bool(verify)
        self.store = _store(self.cache_dir, self.verify)
        self._memo = gridkey.IdentityMemo()
        self.conversions = 0

    def connectivity(self, runtime) -> CompileTimeConnectivity:
        ct = self._memo.get(runtime)
        if ct is not None and (not self.verify or gridkey.table_digest(runtime.ndarray) == ct.digest):
            return ct
        ct = self._convert(runtime)
        self._memo.insert(runtime, ct)
        return ct

    def _convert(self, runtime) -> CompileTimeConnectivity:
        table = runtime.ndarray
        digest = self.store.put(table)
        dtype = np.dtype(table.dtype).newbyteorder("<")
        shape = tuple(int(s) for s in runtime.domain.shape)
        ref = TableRef(self.cache_dir, digest, dtype.str, shape, self.verify)
        self.conversions += 1
        return CompileTimeConnectivity(runtime.domain, _open_table(ref), runtime.codomain, runtime.skip_value, table_ref=ref)

    def provider(self, offset_provider):
        return {
            name: self.connectivity(value) if _is_runtime_table(value) else value
            for name, value in offset_provider.items()
        }


def _is_runtime_table(value) -> bool:
    return isinstance(value, _common.NeighborTable) and not isinstance(value, CompileTimeConnectivity)


def compile_time_offset_provider(offset_provider, *, cache_dir=None, verify=None):
    """The compile-time view of a GT4Py offset provider: the same entries in the same order, each neighbour table
    replaced by a `CompileTimeConnectivity` in the store of ``cache_dir`` (default: ``gridkey.Settings().cache_dir``).

    With `install` active, its store and memo are used; otherwise a fresh memo. Errors: those of
    ``gridkey.TableStore.put`` (``TableTypeError`` for a table that is not int32 or int64, ``GridkeyOSError`` for a
    store that cannot be written).
    """
    converter = _state.converter if _state.converter is not None and cache_dir is None else _Converter(cache_dir, verify)
    return converter.provider(offset_provider)


@dataclasses.dataclass
class _State:
    original: Optional[Callable] = None
    wrapper: Optional[Callable] = None
    converter: Optional[_Converter] = None


_state = _State()


def _builtin_feature() -> bool:
    """Whether this GT4Py builds compile-time connectivities itself (the names of the design it would follow)."""
    return hasattr(_common, "CompileTimeConnectivity") or hasattr(_compilation_tasks, "compile_time_offset_provider")


def _check_supported() -> None:
    version = getattr(gt4py, "__version__", "unknown")
    try:
        major_minor = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        major_minor = None
    if major_minor not in SUPPORTED_VERSIONS:
        supported = ", ".join(f"{a}.{b}.x" for a, b in SUPPORTED_VERSIONS)
        raise UnsupportedGT4PyError(
            f"gridkey.gt4py supports GT4Py {supported}, found GT4Py {version}: install gt4py>=1.2,<1.3 "
            "or a gridkey release that supports this GT4Py"
        )
    missing = [
        name
        for name, present in (
            ("gt4py.next.otf.compilation_tasks.make_compilation_task", hasattr(_compilation_tasks, "make_compilation_task")),
            ("gt4py.next.backend.Backend.compile", hasattr(_gtx_backend.Backend, "compile")),
            ("gt4py.next.fingerprinting.strict_fingerprint_deconstructor.register", hasattr(_fingerprinting.strict_fingerprint_deconstructor, "register")),
        )
        if not present
    ]
    if missing:
        raise UnsupportedGT4PyError(
            f"GT4Py {version} lacks {', '.join(missing)}, which gridkey.gt4py wraps: "
            "install gt4py==1.2.3 or gt4py==1.2.1"
        )


def install(*, cache_dir: Optional[os.PathLike | str] = None, verify: Optional[bool] = None) -> bool:
    """Makes GT4Py compile every program against compile-time connectivities (see the module documentation).

    ``cache_dir``: where the tables are stored (``<cache_dir>/tables-v1``); default ``gridkey.Settings().cache_dir``
    (``GRIDKEY_CACHE_DIR``, else ``.gridkey_cache``), made absolute now. ``verify``: recompute the digest on every
    open of a stored table, here and in workers; default ``GRIDKEY_VERIFY_TABLES``. Call again to change either; a
    second call with the same arguments changes nothing.

    Returns True when the adapter is active, False when this GT4Py has the feature built in (nothing is changed).
    Raises `UnsupportedGT4PyError` for a GT4Py other than 1.2.x, and ``GridkeyOSError`` when the store cannot be
    created.
    """
    if _builtin_feature():
        return False
    _check_supported()
    converter = _Converter(cache_dir, verify)
    if _state.converter is None or (_state.converter.cache_dir, _state.converter.verify) != (converter.cache_dir, converter.verify):
        _state.converter = converter
    _gt4py_tiers.install(cache_dir=_state.converter.cache_dir)
    current = _compilation_tasks.make_compilation_task
    if _state.wrapper is not None and current is _state.wrapper:
        return True
    original = current

    def make_compilation_task(backend, definition_stage, compile_time_args):
        task = original(backend, definition_stage, compile_time_args)
        converter = _state.converter
        if converter is None:
            return task  # uninstalled while another wrapper still calls this one
        if getattr(type(backend), "compile", None) is not _gtx_backend.Backend.compile:
            return task  # a customized compile closes over everything and ignores the compilable
        runtime = task.construct_compilable(False)
        provider = getattr(getattr(runtime, "args", None), "offset_provider", None)
        if not provider:
            return task
        compilable = dataclasses.replace(
            runtime, args=dataclasses.replace(runtime.args, offset_provider=converter.provider(provider))
        )
        # The same compilable for every runner: with or without file references (process mode), the compile-time
        # connectivities cross the process boundary as references to their own files.
        return dataclasses.replace(task, construct_compilable=lambda with_refs: compilable)

    make_compilation_task.__wrapped__ = original  # type: ignore[attr-defined]
    make_compilation_task.__doc__ = original.__doc__
    _state.original = original
    _state.wrapper = make_compilation_task
    _compilation_tasks.make_compilation_task = make_compilation_task
    return True


def uninstall() -> bool:
    """Restores GT4Py's own ``make_compilation_task`` and forgets the memo. Returns whether the adapter was active.

    Programs already compiled keep their artifacts; the fingerprint registration stays (it concerns only
    `CompileTimeConnectivity`, which GT4Py no longer receives).
    """
    active = _state.wrapper is not None and _compilation_tasks.make_compilation_task is _state.wrapper
    if active:
        _compilation_tasks.make_compilation_task = _state.original
    _state.original = _state.wrapper = _state.converter = None
    return active


def installed() -> bool:
    """Whether `install` is active."""
    return _state.wrapper is not None and _compilation_tasks.make_compilation_task is _state.wrapper
