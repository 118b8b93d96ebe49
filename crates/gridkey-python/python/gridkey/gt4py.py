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
- a table stored before is taken after the store's checked open of its file (no copy, no read of the file's bytes),
  and one not stored yet is kept as a private copy, stored only when a translation may read it or a worker needs its
  file (a run of hits writes no table); the bytes of every table a translation may read are checked before it runs:
  in the calling process when a task misses, where a damaged file is stored again from the runtime table with one
  warning naming it, and under the lock in the process that translates (ADR 0052);
- a worker that cannot open a table (deleted, truncated, tampered) fails only the program that needs it, with the
  store's error naming the file; the pool survives;
- execution keeps the runtime tables: only compilation is redirected;
- hits are resolved in the calling process in every build-jobs mode (ADR 0038): ``runners.get_default_runner``, which
  the compiled-programs pool looks up at every submission, returns a runner that looks a task up in GT4Py's
  translation cache and build cache first and, when both hold it, runs GT4Py's own bindings and compilation steps
  there (a build-cache hit) and returns a done future; only a miss goes to GT4Py's runner, so a warm start in process
  mode starts no worker pool;
- GT4Py's cached translation step runs under gridkey's per-key lock (ADR 0039): ranks and workers that share a GT4Py
  cache translate each key once while the others wait (at most ``GRIDKEY_LOCK_WAIT`` seconds, then they translate
  anyway with one warning) and then hit; a killed holder releases its lock with its process.

Usage::

    import gridkey.gt4py
    gridkey.gt4py.install()          # before the first program is compiled

``install()`` is idempotent and ``uninstall()`` restores GT4Py. Backends with their own ``compile`` are left alone.
``install()`` does nothing on a GT4Py that builds compile-time connectivities itself, and raises
`UnsupportedGT4PyError` on a version it was not written for.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import importlib
import multiprocessing
import os
import pathlib
import threading
import warnings
import weakref
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
from numpy.typing import NDArray

import gt4py
from gt4py.next import backend as _gtx_backend
from gt4py.next import common as _common
from gt4py.next import fingerprinting as _fingerprinting
from gt4py.next.embedded import nd_array_field as _nd_array_field
from gt4py.next.otf import compilation_tasks as _compilation_tasks

import gridkey
from gridkey import _gt4py_tiers
from gridkey.errors import GridkeyError, TableFileError, TableNotFoundError

__all__ = [
    "CompileTimeConnectivity",
    "LockedTranslation",
    "TableRef",
    "UnsupportedGT4PyError",
    "compile_time_offset_provider",
    "install",
    "installed",
    "stats",
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


class TableRef(NamedTuple):
    """Where a worker finds a compile-time table: the store's cache directory (absolute), the table digest (32 hex
    digits, format v1), its dtype (``"<i4"`` or ``"<i8"``) and shape ``(n, k)``, and whether every open recomputes
    the digest (``GRIDKEY_VERIFY_TABLES``). A named tuple (immutable, compared and hashed by value, pickled as its
    fields): a dataclass would cost every import of this module about half a millisecond."""

    cache_dir: str
    digest: str
    dtype: str
    shape: tuple[int, int]
    verify: bool


class CompileTimeConnectivity(_nd_array_field.NumPyArrayConnectivityField):
    """A GT4Py neighbour table over a read-only, C-contiguous table mapped from gridkey's store.

    Shape ``(n, k)`` of its domain, dtype int32 or int64 as the runtime table it stands for. Its fingerprint is
    ``(domain, codomain, skip value, digest)``; pickled, it is a `TableRef` that the unpickling process opens with the
    store's checks. An instance GT4Py derives from it (``restrict``, ``dataclasses.replace``) has no ``table_ref`` and
    behaves as GT4Py's own NumPy connectivity. GT4Py's dataclass with one more attribute, not a dataclass of its own:
    its fields, equality and hash are GT4Py's, and decorating it cost every import of this module 0.7 ms.
    """

    #: Where the table lives; None for an instance GT4Py derived from this one.
    table_ref: Optional[TableRef] = None

    # GT4Py's own parameter names: ``dataclasses.replace`` passes its fields by name.
    def __init__(
        self, _domain: Any, _ndarray: Any, _codomain: Any, _skip_value: Any = None, table_ref: Optional[TableRef] = None
    ) -> None:
        super().__init__(_domain, _ndarray, _codomain, _skip_value)
        if table_ref is not None:
            object.__setattr__(self, "table_ref", table_ref)

    @property
    def digest(self) -> Optional[str]:
        """The table digest, 32 hex digits, or None for a derived instance."""
        return None if self.table_ref is None else self.table_ref.digest

    def __reduce__(self) -> tuple[Any, ...]:
        if self.table_ref is None:
            return super().__reduce__()  # type: ignore[no-any-return]
        # The file a worker opens is there first (a table a trusting conversion kept as a copy is stored now).
        _check_tables((self,))
        return (_open_compile_time_connectivity, (self.table_ref, self.domain, self.codomain, self.skip_value))


class _UnreadableTable:
    """Stands, in a worker, for a compile-time connectivity whose table could not be opened.

    Unpickling a task must not raise (GT4Py 1.2's pool breaks as a whole on an unpickling error), so the error is
    kept here and raised when the program's compilation first touches the table: its translation-cache key.
    """

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def raise_error(self) -> None:
        raise self._error

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise self.__dict__["_error"]


def _deconstruct(ct: CompileTimeConnectivity) -> Any:
    if ct.table_ref is None:
        return _fingerprinting.metadata_based_deconstructor_fallback(ct)
    return _fingerprinting.Deconstruction.from_pieces(
        ct.domain, ct.codomain, ct.skip_value, ct.table_ref.digest, state=_FINGERPRINT_TAG
    )


def _deconstruct_unreadable(table: _UnreadableTable) -> None:
    table.raise_error()


# At import, so that a spawned worker, which imports this module when it unpickles the first compile-time
# connectivity of its task, fingerprints it as the main process does.
for _deconstructor in (_fingerprinting.strict_fingerprint_deconstructor, _fingerprinting.lenient_fingerprint_deconstructor):
    _deconstructor.register(CompileTimeConnectivity, _deconstruct)
    _deconstructor.register(_UnreadableTable, _deconstruct_unreadable)
del _deconstructor

# Stores and opened tables of this process, so that a worker maps each table once however many tasks name it.
_lock = threading.Lock()
_stores: dict[tuple[str, bool], gridkey.TableStore] = {}
_opened: dict[tuple[str, str], NDArray[np.int32] | NDArray[np.int64]] = {}


def _store(cache_dir: str, verify: bool) -> gridkey.TableStore:
    with _lock:
        store = _stores.get((cache_dir, verify))
        if store is None:
            settings = gridkey.Settings.from_vars({"GRIDKEY_VERIFY_TABLES": "1" if verify else "0"})
            store = _stores[(cache_dir, verify)] = gridkey.TableStore(cache_dir, settings=settings)
        return store


def _open_table(ref: TableRef) -> NDArray[np.int32] | NDArray[np.int64]:
    key = (ref.cache_dir, ref.digest)
    with _lock:
        table = _opened.get(key)
    if table is None:
        table = _store(ref.cache_dir, ref.verify).open(ref.digest, np.dtype(ref.dtype), tuple(ref.shape))
        with _lock:
            table = _opened.setdefault(key, table)
    return table


def _open_compile_time_connectivity(
    ref: TableRef, domain: Any, codomain: Any, skip_value: int | None
) -> CompileTimeConnectivity | _UnreadableTable:
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

    def __init__(
        self, cache_dir: Optional[os.PathLike[str] | str], verify: Optional[bool], settings: Optional[gridkey.Settings] = None
    ) -> None:
        # The environment's settings unless the caller read them already (`install`: each read costs 0.05-0.17 ms).
        settings = gridkey.Settings() if settings is None else settings
        self.cache_dir = str(pathlib.Path(settings.cache_dir if cache_dir is None else cache_dir).absolute())
        self.verify = settings.verify_tables if verify is None else bool(verify)
        self.store = _store(self.cache_dir, self.verify)
        self._memo = gridkey.IdentityMemo()
        self.conversions = 0
        #: The runtime connectivity of each table digest converted here (weakly): what `_check_tables` stores again
        #: when a file taken unchecked does not hold its table.
        self._runtimes: dict[str, weakref.ref[Any]] = {}

    def runtime_of(self, digest: str) -> Any:
        """The live runtime connectivity converted here into the table ``digest``, or None."""
        ref = self._runtimes.get(digest)
        return None if ref is None else ref()

    def connectivity(self, runtime: Any) -> CompileTimeConnectivity:
        ct = self._memoised(runtime)
        if ct is None:
            ct = self._convert(runtime, self.store.put(runtime.ndarray))
            self._memo.insert(runtime, ct)
        return ct

    def _memoised(self, runtime: Any) -> CompileTimeConnectivity | None:
        ct: CompileTimeConnectivity | None = self._memo.get(runtime)
        if ct is not None and (not self.verify or gridkey.table_digest(runtime.ndarray) == ct.digest):
            return ct
        return None

    def _deferred(self, runtime: Any) -> CompileTimeConnectivity:
        """The compile-time table of a host table not stored yet: over a private read-only C-order copy, named by the
        copy's digest, kept in `_unstored` until `_check_tables` stores it. A device table is stored now, and so is a
        table that would take the copies of this process over `_UNSTORED_MAX_BYTES`."""
        global _unstored_bytes
        table = runtime.ndarray
        with _lock:
            keep = isinstance(table, np.ndarray) and table.nbytes + _unstored_bytes <= _UNSTORED_MAX_BYTES
            if keep:
                _unstored_bytes += table.nbytes
        if not keep:
            return self._convert(runtime, self.store.put(table))
        dtype = np.dtype(table.dtype).newbyteorder("<")
        copy = np.array(table, dtype=dtype, order="C", copy=True)
        copy.flags.writeable = False
        digest = gridkey.table_digest(copy)
        rows, cols = (int(n) for n in runtime.domain.shape)
        ref = TableRef(self.cache_dir, digest, dtype.str, (rows, cols), self.verify)
        with _lock:
            if (self.cache_dir, digest) in _unstored:
                _unstored_bytes -= table.nbytes  # another runtime table of the same bytes kept its copy first
            else:
                _unstored[(self.cache_dir, digest)] = copy
        self.conversions += 1
        return CompileTimeConnectivity(runtime.domain, copy, runtime.codomain, runtime.skip_value, table_ref=ref)

    def _convert(self, runtime: Any, digest: str) -> CompileTimeConnectivity:
        dtype = np.dtype(runtime.ndarray.dtype).newbyteorder("<")
        rows, cols = (int(s) for s in runtime.domain.shape)
        shape = (rows, cols)
        ref = TableRef(self.cache_dir, digest, dtype.str, shape, self.verify)
        self.conversions += 1
        return CompileTimeConnectivity(runtime.domain, _open_table(ref), runtime.codomain, runtime.skip_value, table_ref=ref)

    def provider(self, offset_provider: Mapping[str, Any], *, trust_stored: bool = False) -> dict[str, Any]:
        """The compile-time view of ``offset_provider``. Each runtime table once: from the memo, or converted with
        the others not converted before. With ``trust_stored`` (ADR 0052), a table whose file is stored already is
        taken after its checked open (``TableStore.stored_digests``) and one not stored is kept as a private copy,
        both unchecked until `_check_tables` reads or stores them; without it, the new tables are stored as one
        batch (``TableStore.put_all``, ADR 0050) and every table is checked before it is returned."""
        converted: dict[int, CompileTimeConnectivity] = {}
        new: dict[int, Any] = {}
        for value in offset_provider.values():
            if _is_runtime_table(value) and id(value) not in converted and id(value) not in new:
                ct = self._memoised(value)
                if ct is None:
                    new[id(value)] = value
                else:
                    converted[id(value)] = ct
        if new and trust_stored:
            # A table not stored yet is not stored now: a copy of it is the compile-time table until a translation
            # may read it or a worker needs its file (`_check_tables`, `__reduce__`), and a run of hits never writes
            # it (ADR 0052).
            runtimes = list(new.values())
            for runtime, digest in zip(runtimes, self.store.stored_digests([r.ndarray for r in runtimes]), strict=True):
                ct = converted[id(runtime)] = (
                    self._convert(runtime, digest) if digest is not None else self._deferred(runtime)
                )
                self._memo.insert(runtime, ct)
                self._runtimes[ct.table_ref.digest if ct.table_ref is not None else ""] = weakref.ref(runtime)
        elif new:
            runtimes = list(new.values())
            digests = self.store.put_all([r.ndarray for r in runtimes])
            for runtime, digest in zip(runtimes, digests, strict=True):
                # Compared just now, and replaced where it did not hold the table: mapped anew, never through a
                # mapping opened before (of the file it replaced).
                with _lock:
                    _opened.pop((self.cache_dir, digest), None)
                ct = converted[id(runtime)] = self._convert(runtime, digest)
                self._memo.insert(runtime, ct)
                self._runtimes[digest] = weakref.ref(runtime)
                with _lock:
                    _checked[(self.cache_dir, digest)] = ct.ndarray
        result = {name: converted[id(value)] if _is_runtime_table(value) else value for name, value in offset_provider.items()}
        if not trust_stored:
            _check_tables(result.values())
        return result


def _is_runtime_table(value: object) -> bool:
    return isinstance(value, _common.NeighborTable) and not isinstance(value, CompileTimeConnectivity)


# The mapped table of this process whose bytes are known to be its digest's, by (cache directory, digest). A table the
# hook took unchecked (ADR 0052) enters it when `_check_tables` read it, or wrote it from the kept copy that holds its
# name's bytes, before any translation reads it.
_checked: dict[tuple[str, str], Any] = {}

# Copies of the tables a trusting conversion found not stored, by (cache directory, digest): stored by `_check_tables`
# when a translation may read them or a worker needs their file (ADR 0052).
_unstored: dict[tuple[str, str], Any] = {}
#: The most bytes of such copies a process holds at once: 64 MiB (every table of an R02B05 grid, 21 MB; a table over
#: the bound is stored at conversion, as the copies of a larger grid would double the memory of its tables).
_UNSTORED_MAX_BYTES = 64 << 20
_unstored_bytes = 0


def _check_tables(values: Any) -> None:
    """Checks each compile-time connectivity of ``values`` (an offset provider's values) whose table is not the one
    checked for its digest in this process: the digest of the bytes it maps is recomputed (``MappedTable.verify``,
    through ``pread``); a connectivity over another mapping of a checked digest gets the checked one. A file that does
    not hold its table is stored again from the runtime table converted into it, when this process holds it, and
    mapped anew, with one warning naming it (ADR 0052, as ADR 0028 does for ``gridkey run``).

    Raises the store's ``TableFileError`` naming the file when it cannot be stored again (a worker, which has no
    runtime table, or a runtime table changed since its conversion)."""
    for ct in values:
        ref = ct.table_ref if isinstance(ct, CompileTimeConnectivity) else None
        if ref is None:
            continue
        key = (ref.cache_dir, ref.digest)
        checked = _checked.get(key)
        if checked is None:
            if key in _unstored:
                # Written now from the copy that holds its name's bytes, and mapped after the write.
                checked = _store_deferred(ref)
            else:
                try:
                    ct.ndarray.base.verify()
                    checked = ct.ndarray
                except GridkeyError as damaged:
                    checked = _store_again(ref, damaged)
            with _lock:
                checked = _checked.setdefault(key, checked)
        if ct.ndarray is not checked:
            # Another mapping of the same digest (a damaged file stored again since, or another conversion's).
            object.__setattr__(ct, "_ndarray", checked)


def _store_deferred(ref: TableRef) -> Any:
    """Stores the copy a trusting conversion kept for ``ref`` (`_unstored`) and returns the table mapped from its file.
    The copy is immutable and named by its own digest: its file holds the bytes of its name."""
    key = (ref.cache_dir, ref.digest)
    with _lock:
        copy = _unstored.get(key)
    store = _store(ref.cache_dir, ref.verify)
    if copy is not None and store.put(copy) != ref.digest:
        raise GridkeyError(f"the copy of table {ref.digest} changed after it was named; convert the table again")
    with _lock:
        _opened.pop(key, None)
    table = _open_table(ref)
    global _unstored_bytes
    with _lock:
        stored = _unstored.pop(key, None)
        if stored is not None:
            _unstored_bytes -= stored.nbytes
    return table


def _check_files_again(values: Any) -> None:
    """After a worker could not use a table of ``values`` (an offset provider's values): the file under each table's
    name is opened verified, and one that does not hold its table is stored again from the runtime table
    (`_store_again`, one warning); then `_check_tables` gives every connectivity the checked mapping (ADR 0054).

    Raises the store's error naming the file when a damaged file cannot be stored again."""
    for ct in values:
        ref = ct.table_ref if isinstance(ct, CompileTimeConnectivity) else None
        if ref is None:
            continue
        key = (ref.cache_dir, ref.digest)
        with _lock:
            if key in _unstored:
                continue  # written by `_check_tables` from the copy that holds its name's bytes
            _checked.pop(key, None)
        try:
            table = _store(ref.cache_dir, True).open(ref.digest, np.dtype(ref.dtype), tuple(ref.shape))
        except (TableFileError, TableNotFoundError) as damaged:
            table = _store_again(ref, damaged)
        with _lock:
            _opened[key] = table
            _checked[key] = table
    _check_tables(values)


def _store_again(ref: TableRef, damaged: GridkeyError) -> Any:
    """The table ``ref`` stored again from the runtime table converted into it and mapped anew (see `_check_tables`).

    Raises ``damaged`` when this process holds no such runtime table, or one that changed since."""
    converter = _state.converter
    runtime = converter.runtime_of(ref.digest) if converter is not None and converter.cache_dir == ref.cache_dir else None
    if runtime is None:
        raise damaged
    # A verifying store replaces a file that fails its digest (ADR 0012).
    verifying = _store(ref.cache_dir, True)
    if verifying.put(runtime.ndarray) != ref.digest:
        raise damaged  # the runtime table changed since it was converted
    table = verifying.open(ref.digest, np.dtype(ref.dtype), tuple(ref.shape))
    with _lock:
        _opened[(ref.cache_dir, ref.digest)] = table
    warnings.warn(
        f"gridkey.gt4py: {verifying.path_of(ref.digest)} did not hold the table its name says ({damaged}); "
        "stored again from the runtime table",
        RuntimeWarning,
        stacklevel=4,
    )
    return table


def compile_time_offset_provider(
    offset_provider: Mapping[str, Any],
    *,
    cache_dir: Optional[os.PathLike[str] | str] = None,
    verify: Optional[bool] = None,
) -> dict[str, Any]:
    """The compile-time view of a GT4Py offset provider: the same entries in the same order, each neighbour table
    replaced by a `CompileTimeConnectivity` in the store of ``cache_dir`` (default: ``gridkey.Settings().cache_dir``).

    With `install` active, its store and memo are used; otherwise a fresh memo. Errors: those of
    ``gridkey.TableStore.put`` (``TableTypeError`` for a table that is not int32 or int64, ``GridkeyOSError`` for a
    store that cannot be written).
    """
    converter = _state.converter if _state.converter is not None and cache_dir is None else _Converter(cache_dir, verify)
    return converter.provider(offset_provider)


# GT4Py internals the warm start and the lock rely on (ADR 0038, 0039), checked by `install` on every version: present
# in 1.2.1 and 1.2.3 under these names. Module path -> attributes (a dotted attribute names a class member).
_INTERNALS = {
    "gt4py.next.otf.runners": ("get_default_runner",),
    "gt4py.next.otf.workflow": ("CachedStep.cache_key",),
    "gt4py.next.otf.recipes": ("OTFCompileWorkflow",),
    "gt4py.next.otf.compilation.compiler": ("CPPCompiler", "CPPCompiler._make_artifact", "is_usable"),
    "gt4py.next.otf.compilation.build_data": ("read_data",),
    "gt4py.next.otf.compilation.cache": ("get_cache_folder", "get_cache_base_path"),
    "gt4py._core.filecache": ("FileCache", "FileCache._get_path"),
    "gt4py.next.otf.binding.nanobind": ("ExtensionGenerator",),
    "gt4py.next.config": ("BUILD_CACHE_VERSION_ID",),
    "gt4py.next.fingerprinting": ("strict_fingerprinter",),
}


def _missing_internals() -> list[str]:
    missing = []
    for module_name, attributes in _INTERNALS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            missing.append(module_name)
            continue
        for dotted in attributes:
            value: Any = module
            for part in dotted.split("."):
                value = getattr(value, part, None)
                if value is None:
                    missing.append(f"{module_name}.{dotted}")
                    break
    return missing


def _gt(module_name: str) -> Any:
    return importlib.import_module(module_name)


class _Counters:
    """What the adapter did in this process (`stats`). A plain class, as the module's other state: every dataclass
    costs an import about a millisecond, and this module is imported at every start of a model."""

    __slots__ = ("parent_hits", "handed_to_runner", "compiled_again", "locked_translations", "lock_gave_up")

    def __init__(self) -> None:
        self.parent_hits = 0
        self.handed_to_runner = 0
        self.compiled_again = 0
        self.locked_translations = 0
        self.lock_gave_up = 0


_counters = _Counters()


def stats() -> dict[str, int]:
    """What the adapter did in this process since it was imported: ``parent_hits`` (tasks resolved here from GT4Py's
    translation and build caches, ADR 0038), ``handed_to_runner`` (tasks GT4Py's runner got: misses, and tasks the
    adapter cannot look up), ``compiled_again`` (tasks compiled once more in this process after GT4Py's worker found a
    table file damaged or missing, ADR 0054), ``locked_translations`` (translations run here under gridkey's per-key
    lock, ADR 0039) and ``lock_gave_up`` (translations run without it after the bounded wait). Workers count in their
    own process.
    """
    return {name: int(getattr(_counters, name)) for name in _Counters.__slots__}


# One `gridkey.KeyLocks` per (cache directory, wait) in this process, workers included.
_key_locks: dict[tuple[str, float], gridkey.KeyLocks] = {}


def _locks(cache_dir: str, wait: float) -> gridkey.KeyLocks:
    with _lock:
        locks = _key_locks.get((cache_dir, wait))
        if locks is None:
            settings = gridkey.Settings.from_vars({"GRIDKEY_LOCK_WAIT": repr(wait)})
            locks = _key_locks[(cache_dir, wait)] = gridkey.KeyLocks(cache_dir, settings=settings)
        return locks


class LockedTranslation:
    """GT4Py's persistent translation step (a ``CachedStep`` over a ``FileCache``) run under gridkey's per-key lock.

    A hit in GT4Py's translation cache is returned without a lock. On a miss, the lock
    ``<cache_dir>/locks/gt4py-translation-<digest>.lock`` is taken (``gridkey.KeyLocks``, the Rust lock of ADR 0025,
    waited for at most ``wait`` seconds, ADR 0033), the cache is looked up again under it, and only then does GT4Py's
    own step translate and GT4Py's cache store the result. ``<digest>`` is the first 32 hex digits of SHA-256 over
    the translation cache's folder and the key: per key and cache, and never part of a key. A holder killed by any
    signal releases the lock with its process; a wait that reaches its bound translates anyway, with one warning.

    It pickles with its step into GT4Py's workers, where the same lock applies (ADR 0039). Immutable and compared by
    value; a plain class, not a dataclass, which cost every import of this module 0.4 ms.
    """

    __slots__ = ("cached", "cache_dir", "wait")
    cached: Any
    cache_dir: str
    wait: float

    def __init__(self, cached: Any, cache_dir: str, wait: float) -> None:
        object.__setattr__(self, "cached", cached)
        object.__setattr__(self, "cache_dir", cache_dir)
        object.__setattr__(self, "wait", wait)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"LockedTranslation is immutable: cannot set {name}")

    def __reduce__(self) -> tuple[Any, tuple[Any, str, float]]:
        return (LockedTranslation, (self.cached, self.cache_dir, self.wait))

    def __eq__(self, other: object) -> bool:
        if type(other) is not LockedTranslation:
            return NotImplemented
        return (self.cached, self.cache_dir, self.wait) == (other.cached, other.cache_dir, other.wait)

    def __hash__(self) -> int:
        return hash((self.cached, self.cache_dir, self.wait))

    def __repr__(self) -> str:
        return f"LockedTranslation(cached={self.cached!r}, cache_dir={self.cache_dir!r}, wait={self.wait!r})"

    def __call__(self, inp: Any) -> Any:
        cached = self.cached
        key = cached.cache_key(inp)
        try:
            return cached.cache[key]
        except KeyError:
            pass
        folder = str(getattr(cached.cache, "path", ""))
        name = "gt4py-translation-" + hashlib.sha256(f"{folder}\0{key}".encode()).hexdigest()[:32]
        held = _locks(self.cache_dir, self.wait).lock(name)
        try:
            if held.gave_up:
                _counters.lock_gave_up += 1
                warnings.warn(
                    f"gridkey.gt4py: another process held {held.path} for {held.waited:.0f} s (GRIDKEY_LOCK_WAIT): "
                    "translating without the lock; raise GRIDKEY_LOCK_WAIT if translations take longer",
                    RuntimeWarning,
                    stacklevel=2,
                )
            try:
                # Looked up again under the lock: the holder before us stored it.
                return cached.cache[key]
            except KeyError:
                pass
            _counters.locked_translations += 1
            # The translation may read the tables: the bytes of each are checked first (ADR 0052).
            _check_tables(_offset_provider_of(inp).values())
            # With a shared tier, claimed there first: under its lease, or taken from another writer (ADR 0041).
            return _gt4py_tiers.translate(cached.cache, key, lambda: cached.step(inp))
        finally:
            held.release()


def _is_persistent_cached_step(step: Any) -> bool:
    return isinstance(step, _gt("gt4py.next.otf.workflow").CachedStep) and isinstance(
        step.cache, _gt("gt4py._core.filecache").FileCache
    )


# Executor -> the same executor with its translation step under the lock, once per executor and settings.
_locked_executors: dict[int, tuple[Any, tuple[str, float], Any]] = {}


def _with_locked_translation(executor: Any, cache_dir: str, wait: float) -> Any:
    """``executor`` (GT4Py's ``OTFCompileWorkflow``) with its persistent translation step in a `LockedTranslation`;
    any other executor unchanged."""
    with _lock:
        entry = _locked_executors.get(id(executor))
        if entry is not None and entry[0] is executor and entry[1] == (cache_dir, wait):
            return entry[2]
    workflow = _gt("gt4py.next.otf.recipes").OTFCompileWorkflow
    if not isinstance(executor, workflow) or not _is_persistent_cached_step(executor.translation):
        return executor
    locked = dataclasses.replace(executor, translation=LockedTranslation(executor.translation, cache_dir, wait))
    with _lock:
        _locked_executors[id(executor)] = (executor, (cache_dir, wait), locked)
    return locked


def _cached_translation(executor: Any) -> Any:
    """The persistent ``CachedStep`` of a GT4Py workflow (under a `LockedTranslation` or not), or None."""
    if not isinstance(executor, _gt("gt4py.next.otf.recipes").OTFCompileWorkflow):
        return None
    step = executor.translation
    if isinstance(step, LockedTranslation):
        step = step.cached
    return step if isinstance(step, _gt("gt4py.next.otf.workflow").CachedStep) else None


_MISS = object()


def _offset_provider_of(compilable: Any) -> Mapping[str, Any]:
    """The offset provider of a GT4Py compilable (empty for none, or for a task without a compilable)."""
    return getattr(getattr(compilable, "args", None), "offset_provider", None) or {}


def _resolve_in_parent(task: Any) -> Any:
    """GT4Py's artifact of ``task`` when its translation and its build are both in GT4Py's caches, else `_MISS`.

    The lookups are GT4Py's own: the translation step's key and cache, then the bindings step, the build folder
    (``cache.get_cache_folder`` with the compiler's build context) and ``compiler.is_usable``. On a double hit the
    artifact is the one GT4Py's compilation step makes of a usable build folder (``CPPCompiler._make_artifact`` of
    the folder and its build data): the step would only compute the folder again, check the build again and make
    it, which costs a serial warm start a second fingerprint of every extension source. Before the folder is
    looked at, gridkey's store has its say on it as in the build step (``_gt4py_tiers.prepare_folder``): a folder of
    another extension key is never loaded, one the store holds is filled.

    The folder of a translation entry met before is found by the entry's bytes instead (the build-folder memo, ADR
    0058): GT4Py's folder name is a function of those bytes, GT4Py's version, ``BUILD_CACHE_VERSION_ID``, its own
    bindings step's configuration and the build context, so the entry is neither unpickled nor bound nor
    fingerprinted again. A hit found GT4Py's way is remembered (written behind).
    """
    if task.no_offload_reason is not None:
        return _MISS
    executor = task.executor
    cached = _cached_translation(executor)
    compiler_module = _gt("gt4py.next.otf.compilation.compiler")
    compilation = executor.compilation if cached is not None else None
    if cached is None or not isinstance(compilation, compiler_module.CPPCompiler) or compilation.force_recompile:
        return _MISS
    compilable = task.construct_compilable(False)
    key = cached.cache_key(compilable)
    build_context_id = (
        _gt("gt4py.next.fingerprinting").strict_fingerprinter(compilation.builder_factory)
        if compilation.fingerprint_builder_factory
        else ""
    )
    cache = _gt("gt4py.next.otf.compilation.cache")
    # The folder GT4Py named for this translation entry before, found by the entry's bytes (ADR 0058).
    entry = cached.cache._get_path(key) if isinstance(cached.cache, _gt("gt4py._core.filecache").FileCache) else None
    memo = _gt4py_tiers.memo_key(entry, executor.bindings, build_context_id) if entry is not None else None
    name = _gt4py_tiers.remembered_folder(memo) if memo is not None else None
    if name is not None:
        folder = _cache_folder(cache.get_cache_base_path(compilation.cache_lifetime), name)
    else:
        try:
            program_source = cached.cache[key]
        except KeyError:
            return _MISS
        extension = executor.bindings(program_source)
        folder = cache.get_cache_folder(extension, compilation.cache_lifetime, build_context_id)
    # A folder built for another extension key (compiler, interpreter ABI, headers) is never loaded here; one that
    # gridkey's store holds is filled first (ADR 0040).
    data = _gt4py_tiers.prepare_folder(folder)
    if data is None:
        return _MISS
    artifact = compilation._make_artifact(folder, data.module, data.entry_point_name)
    # An extension that came from the shared tier is loaded here before it is used; one that does not load is
    # rejected there and built by GT4Py's runner (ADR 0041).
    if not _gt4py_tiers.verify_loaded(folder, artifact):
        return _MISS
    if name is None:
        # The entry may have been written just now (from gridkey's store): its key is taken from the file as it is.
        if memo is None and entry is not None:
            memo = _gt4py_tiers.memo_key(entry, executor.bindings, build_context_id)
        if memo is not None:
            _gt4py_tiers.remember_folder(memo, folder.name)
    return artifact


def _cache_folder(base: pathlib.Path, name: str) -> pathlib.Path:
    """The build folder ``name`` under GT4Py's cache base ``base``, made as ``cache.get_cache_folder`` makes it (both
    directories created if missing, the path resolved), for a name the build-folder memo gave (ADR 0058)."""
    base.mkdir(exist_ok=True)
    folder = base / name
    folder.mkdir(exist_ok=True)
    return folder.resolve()


class _ParentHitsRunner:
    """The runner `install` makes ``runners.get_default_runner`` return (ADR 0038).

    ``submit`` resolves a hit here (`_resolve_in_parent`) and returns a done future holding GT4Py's artifact; anything
    else goes to GT4Py's default runner, which only then is created,
    so a run without a miss starts no worker pool. A failure of the lookup itself (a table that cannot be read, an
    entry GT4Py cannot unpickle) is a miss: GT4Py's runner then raises GT4Py's own error.
    """

    def __init__(self, default_runner: Callable[[], Any]):
        self._default_runner = default_runner

    def submit(self, task: Any) -> concurrent.futures.Future[Any]:
        try:
            artifact = _resolve_in_parent(task)
        except Exception:  # noqa: BLE001 - GT4Py's runner redoes the work and raises GT4Py's own error
            artifact = _MISS
        if artifact is _MISS:
            # Checked here, where a damaged table file can be stored again from the runtime table (ADR 0052).
            values = list(_offset_provider_of(task.construct_compilable(False)).values())
            _check_tables(values)
            # A worker reads the translation entries this process took from the shared tier from their files.
            _gt4py_tiers.flush()
            _counters.handed_to_runner += 1
            return self._handed(task, values)
        _counters.parent_hits += 1
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(artifact)
        return future

    def _handed(self, task: Any, values: list[Any]) -> concurrent.futures.Future[Any]:
        """GT4Py's runner's future of ``task``, whose compile-time tables are ``values``. When its worker could not
        open a table file, or found one not holding its table (another process changed it after the check here), the
        files are checked again here, a damaged one stored again from the runtime table, and the task is compiled
        once more in this process, on a thread of its own, as GT4Py's runners compile a task they cannot hand to a
        worker (ADR 0054). Never through the runner again: GT4Py's ``wait_for_compilation`` shuts it down, holding
        the lock that ``get_default_runner`` takes, while it waits for the failed future. The second outcome, and
        every other outcome, is GT4Py's own."""
        first: concurrent.futures.Future[Any] = self._default_runner().submit(task)
        result: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def settle(outcome: Callable[[], Any]) -> None:
            try:
                value = outcome()
            except BaseException as error:  # noqa: BLE001 - the task's own error, raised by the future
                if not result.done():
                    result.set_exception(error)
                return
            if not result.done():  # else cancelled by its holder meanwhile
                result.set_result(value)

        def compile_again() -> None:
            try:
                _check_files_again(values)
            except Exception:  # noqa: BLE001 - the worker's error stands: it names the file
                settle(first.result)
                return
            _counters.compiled_again += 1
            settle(task.compile)

        def first_done(future: concurrent.futures.Future[Any]) -> None:
            if future.cancelled():
                result.cancel()
                result.set_running_or_notify_cancel()
            elif isinstance(future.exception(), (TableFileError, TableNotFoundError)):
                # Not in the pool's own thread, which calls this: the table may be stored again and compiled here.
                threading.Thread(target=compile_again, name="gridkey-compile-again", daemon=True).start()
            else:
                settle(future.result)

        first.add_done_callback(first_done)
        return result

    def shutdown(self, wait: bool = True) -> None:
        # The pool is GT4Py's default runner's: `runners.reset_default_runner` shuts it down.
        return None


class _State:
    """What `install` changed and holds (a plain class, see `_Counters`)."""

    __slots__ = ("original", "wrapper", "converter", "lock_wait", "original_runner", "runner_wrapper")

    def __init__(self) -> None:
        self.original: Optional[Callable[..., Any]] = None
        self.wrapper: Optional[Callable[..., Any]] = None
        self.converter: Optional[_Converter] = None
        self.lock_wait: float = 60.0
        self.original_runner: Optional[Callable[..., Any]] = None
        self.runner_wrapper: Optional[Callable[..., Any]] = None


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
    missing += _missing_internals()
    if missing:
        raise UnsupportedGT4PyError(
            f"GT4Py {version} lacks {', '.join(missing)}, which gridkey.gt4py wraps: "
            "install gt4py==1.2.3 or gt4py==1.2.1"
        )


def install(*, cache_dir: Optional[os.PathLike[str] | str] = None, verify: Optional[bool] = None) -> bool:
    """Makes GT4Py compile every program against compile-time connectivities, resolve hits in the calling process and
    translate each key once across processes (see the module documentation).

    ``cache_dir``: gridkey's cache directory, where the tables are stored (``<cache_dir>/tables-v1``) and the
    per-key locks live (``<cache_dir>/locks``); default ``gridkey.Settings().cache_dir`` (``GRIDKEY_CACHE_DIR``, else
    ``.gridkey_cache``), made absolute now. ``verify``: recompute the digest on every open of a stored table, here
    and in workers; default ``GRIDKEY_VERIFY_TABLES``. The lock wait is ``GRIDKEY_LOCK_WAIT`` (seconds, default 60),
    read now. Call again to change either; a second call with the same arguments changes nothing.

    Returns True when the adapter is active, False when this GT4Py has the feature built in (nothing is changed).
    Raises `UnsupportedGT4PyError` for a GT4Py other than 1.2.x or one that lacks an internal the adapter uses (named
    in the message), ``SettingsError`` for a bad ``GRIDKEY_LOCK_WAIT`` and ``GridkeyOSError`` when the store cannot
    be created.
    """
    if _builtin_feature():
        return False
    _check_supported()
    settings = gridkey.Settings()
    _state.lock_wait = settings.key_lock_wait
    converter = _Converter(cache_dir, verify, settings)
    if _state.converter is None or (_state.converter.cache_dir, _state.converter.verify) != (converter.cache_dir, converter.verify):
        _state.converter = converter
    _gt4py_tiers.install(cache_dir=_state.converter.cache_dir, settings=settings)
    _install_runner()
    current = _compilation_tasks.make_compilation_task
    if _state.wrapper is not None and current is _state.wrapper:
        return True
    original = current

    def make_compilation_task(backend: Any, definition_stage: Any, compile_time_args: Any) -> Any:
        task = original(backend, definition_stage, compile_time_args)
        converter = _state.converter
        if converter is None:
            return task  # uninstalled while another wrapper still calls this one
        if getattr(type(backend), "compile", None) is not _gtx_backend.Backend.compile:
            return task  # a customized compile closes over everything and ignores the compilable
        # GT4Py's translation step under gridkey's per-key lock, here and in workers (ADR 0039).
        executor = _with_locked_translation(task.executor, converter.cache_dir, _state.lock_wait)
        runtime = task.construct_compilable(False)
        provider = getattr(getattr(runtime, "args", None), "offset_provider", None)
        if not provider:
            return dataclasses.replace(task, executor=executor)
        # Where every translation of the task runs under the lock, which checks the tables it reads first, a table
        # stored before is taken unchecked (ADR 0052); elsewhere every table is checked now.
        trust = isinstance(getattr(executor, "translation", None), LockedTranslation)
        compilable = dataclasses.replace(
            runtime, args=dataclasses.replace(runtime.args, offset_provider=converter.provider(provider, trust_stored=trust))
        )
        # The same compilable for every runner: with or without file references (process mode), the compile-time
        # connectivities cross the process boundary as references to their own files.
        return dataclasses.replace(task, construct_compilable=lambda with_refs: compilable, executor=executor)

    make_compilation_task.__wrapped__ = original  # type: ignore[attr-defined]
    make_compilation_task.__doc__ = original.__doc__
    _state.original = original
    _state.wrapper = make_compilation_task
    _compilation_tasks.make_compilation_task = make_compilation_task
    return True


def _install_runner() -> None:
    """Makes ``runners.get_default_runner`` return the `_ParentHitsRunner` (ADR 0038); idempotent."""
    runners = _gt("gt4py.next.otf.runners")
    current = runners.get_default_runner
    if _state.runner_wrapper is not None and current is _state.runner_wrapper:
        return
    original = current
    parent_hits = _ParentHitsRunner(original)

    def get_default_runner() -> Any:
        # In a worker GT4Py's default is serial and the task is the worker's own: nothing to resolve first.
        return original() if multiprocessing.parent_process() is not None else parent_hits

    get_default_runner.__wrapped__ = original  # type: ignore[attr-defined]
    get_default_runner.__doc__ = original.__doc__
    _state.original_runner = original
    _state.runner_wrapper = get_default_runner
    runners.get_default_runner = get_default_runner


def uninstall() -> bool:
    """Restores GT4Py's own ``make_compilation_task`` and ``runners.get_default_runner``, takes gridkey's store away
    from GT4Py's translation cache and build step (``_gt4py_tiers.uninstall``), and forgets the memo. Returns whether
    the adapter was active.

    Programs already compiled keep their artifacts; the fingerprint registration stays (it concerns only
    `CompileTimeConnectivity`, which GT4Py no longer receives).
    """
    active = _state.wrapper is not None and _compilation_tasks.make_compilation_task is _state.wrapper
    _gt4py_tiers.uninstall()
    if active:
        _compilation_tasks.make_compilation_task = _state.original
    runners = _gt("gt4py.next.otf.runners")
    if _state.runner_wrapper is not None and runners.get_default_runner is _state.runner_wrapper:
        runners.get_default_runner = _state.original_runner
    _state.original = _state.wrapper = _state.converter = None
    _state.original_runner = _state.runner_wrapper = None
    with _lock:
        _locked_executors.clear()
    return active


def installed() -> bool:
    """Whether `install` is active."""
    return _state.wrapper is not None and _compilation_tasks.make_compilation_task is _state.wrapper
