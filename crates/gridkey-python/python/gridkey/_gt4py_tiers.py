"""GT4Py's translation entries and built extensions in gridkey's cache directory (ADR 0040).

GT4Py 1.2 keeps translations in a ``FileCache`` (``<build cache>/translation_cache/gtfn/<hash>.pkl`` in 1.2.3,
``<build cache>/gtfn_cache/<hash>.pkl`` in 1.2.1) and builds each extension in a folder named by the fingerprint of
its source, GT4Py's version and its build system; the name does not encode the C++ compiler, the Python ABI or the
nanobind and gridtools-cpp headers compiled in. ``install`` adds
gridkey's store ``<cache_dir>/gt4py-v1/`` behind both:

- a translation entry GT4Py writes is stored as ``gt4py-v1/translation/<key>.bin``, keyed by GT4Py's own entry name
  and version; when GT4Py looks up an entry it lacks (``FileCache.__contains__``/``__getitem__`` of a translation
  cache), the stored one is written into its ``FileCache`` first;
- an extension GT4Py built (``CPPCompiler.__call__``) is stored as ``gt4py-v1/extension/<key>.bin`` with only the
  files loading needs (the module ``build/bin/<name>.cpython-3XX-<platform>.so`` and ``gt4py.json``), keyed by the
  extension key (``gridkey_fingerprint::gt4py``: build folder name, C++ compiler identity, extension suffix, platform,
  nanobind, gridtools-cpp and GT4Py versions); before GT4Py checks a build folder that is not usable, the stored
  extension of this key is written into it, ``gt4py.json`` last;
- every folder gridkey stored or materialized holds ``.gridkey-extension`` with its key and the size of its module: a
  folder whose key is not the key here (another compiler, another interpreter ABI) is rebuilt, never loaded, and
  one whose module is no longer that size (truncated: mapping it would kill the process) is filled again;
- a folder GT4Py built (or found unmarked) is stored and marked only when the compiler its ``compile_commands.json``
  names has the key's compiler identity (ADR 0057): GT4Py compiles with the compiler of its cached CMake
  configuration, which need not be ``CXX`` now; such a folder is used here, never stored or shared, with one warning;
- entries are checked on every read (magic, key, length, checksum, paths inside the folder); a truncated or corrupted
  one is removed and counted, and GT4Py builds again;
- the build-folder memo ``gt4py-v1/folder/`` (ADR 0058) names, under a key of a translation entry's bytes and of what
  else GT4Py's folder name is made of, the build folder GT4Py named for it, so that a warm start finds a hit's folder
  without running the bindings step and fingerprinting the extension source again (`memo_key`, `remembered_folder`,
  `remember_folder`); it is written behind and never shared.

With a shared tier configured (``GRIDKEY_REMOTE_URL``, the variables of the ``gridkey`` command, ADR 0041), what
gridkey's store lacks is looked up there next (``gridkey.Gt4pyShared``: checked, signed by a trusted key where trusted
keys are set, of GT4Py's own object kinds); a writer takes the lease around each translation and each build, so N nodes
make one of each per key, and uploads what verified here: a translation entry once GT4Py stored it and it unpickles in
this process, an extension once its module loaded in this process. What came from the shared tier and then fails here
(an entry that does not unpickle, a module that does not load) is rejected: a writer retracts it, a reader quarantines
it, and it is made here. A shared tier that cannot be reached costs one timeout and one warning per process, and the
builds are local.

Spawned build workers get the same hooks: ``install`` sets ``gt4py.next.config.GRIDKEY_GT4PY_TIERS``, which GT4Py's
process runner ships to every worker with its configuration, and whose unpickling installs them there.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import importlib.metadata
import os
import pathlib
import sysconfig
import pickle
import sys
import threading
import warnings
from typing import Any, Callable, NamedTuple, Optional, TypeVar, cast

import gt4py
from gt4py._core import file_utils as _file_utils
from gt4py._core import filecache as _filecache
from gt4py._core import locking as _locking
from gt4py.next import config as _config
from gt4py.next import fingerprinting as _fingerprinting
from gt4py.next.otf.compilation import build_data as _build_data
from gt4py.next.otf.compilation import cache as _cache
from gt4py.next.otf.compilation import compiler as _compiler

from . import _gridkey

__all__ = [
    "Counters",
    "extension_key_inputs",
    "install",
    "installed",
    "uninstall",
    "counters",
    "prepare_folder",
    "shared",
    "translate",
    "verify_loaded",
    "MARKER",
]

#: The file in a build folder that names the extension key it was built or materialized for.
MARKER = ".gridkey-extension"

_CONFIG_NAME = "GRIDKEY_GT4PY_TIERS"

#: The warnings of the hook running on this thread, given when it returns (`_hook`).
_deferred = threading.local()


def _warn(message: str) -> None:
    """Gives the warning ``message`` (a ``RuntimeWarning``): when the hook of this thread returns or raises, if one
    runs (`_hook`), else now."""
    pending: Optional[list[str]] = getattr(_deferred, "pending", None)
    if pending is None:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    else:
        pending.append(message)


_Hooked = TypeVar("_Hooked", bound=Callable[..., Any])


def _hook(function: _Hooked) -> _Hooked:
    """``function``, a hook GT4Py (or ``gridkey.gt4py``) calls, with the warnings of its work given when it returns or
    raises, in the caller's frame: once what it holds is settled (a lease taken, a folder filled but not yet marked, an
    object rejected but its folder not yet made unusable). A filter that turns warnings into errors (``-W error``,
    pytest's ``filterwarnings = error``) then raises in GT4Py's call, never halfway through the shared-tier protocol,
    where it would leave a lease held until the process exits. A hook called by another runs as part of it."""

    @functools.wraps(function)
    def hooked(*args: Any, **kwargs: Any) -> Any:
        if getattr(_deferred, "pending", None) is not None:
            return function(*args, **kwargs)
        _deferred.pending = []
        try:
            return function(*args, **kwargs)
        finally:
            pending: list[str] = getattr(_deferred, "pending", None) or []
            _deferred.pending = None
            for message in pending:
                warnings.warn(message, RuntimeWarning, stacklevel=2)

    return cast(_Hooked, hooked)


class Counters(NamedTuple):
    """What the hooks did in this process (a snapshot, see `counters`): translation entries and extensions stored into
    and materialized from gridkey's store, folders rebuilt because their key was another, and entries rejected (and
    removed). A named tuple: a dataclass would cost every import of the module about half a millisecond."""

    translations_stored: int = 0
    translations_materialized: int = 0
    extensions_stored: int = 0
    extensions_materialized: int = 0
    foreign_rebuilt: int = 0
    rejected: int = 0
    #: Translation entries and extensions that came from the shared tier (ADR 0041).
    translations_from_remote: int = 0
    extensions_from_remote: int = 0
    #: Translation entries and extensions uploaded to the shared tier.
    translations_uploaded: int = 0
    extensions_uploaded: int = 0
    #: Objects of the shared tier that failed their check here and were retracted or quarantined.
    remote_rejected: int = 0
    #: Warnings that the shared tier is off in this process (at most one).
    remote_warnings: int = 0
    #: Extensions GT4Py built or found with another compiler than the key's (its cached CMake configuration's), used
    #: here and neither stored nor shared.
    extensions_not_stored: int = 0
    #: Build folders of hits found through the build-folder memo, and memo entries written (ADR 0058).
    folders_from_memo: int = 0
    folders_remembered: int = 0


class _Tally:
    """The running counts behind `Counters`, one attribute per field of it (in its order)."""

    __slots__ = Counters._fields
    translations_stored: int
    translations_materialized: int
    extensions_stored: int
    extensions_materialized: int
    foreign_rebuilt: int
    rejected: int
    translations_from_remote: int
    extensions_from_remote: int
    translations_uploaded: int
    extensions_uploaded: int
    remote_rejected: int
    remote_warnings: int
    extensions_not_stored: int
    folders_from_memo: int
    folders_remembered: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


class _State:
    """What `install` changed and holds in this process. A plain class: every dataclass costs an import about a
    millisecond, and this module is imported at every start of a model."""

    __slots__ = (
        "cache_dir",
        "store",
        "original_call",
        "original_contains",
        "original_getitem",
        "original_setitem",
        "key_inputs",
        "key_inputs_context",
        "interpreter_inputs",
        "pending_identity",
        "shared",
        "warned",
        "warned_rejections",
        "warned_compiler",
        "folders_rejected",
        "counters",
        "fetched_translations",
    )

    def __init__(self) -> None:
        self.cache_dir: Optional[str] = None
        self.store: Any = None
        self.original_call: Any = None
        self.original_contains: Any = None
        self.original_getitem: Any = None
        self.original_setitem: Any = None
        self.key_inputs: Optional[dict[str, str]] = None
        #: The interpreter's part of `key_inputs`, read once per process (`_interpreter_inputs`).
        self.interpreter_inputs: Optional[dict[str, str]] = None
        #: The compiler's identity being computed on the Rust core's thread, with the environment and working
        #: directory it is computed for (`_identify_compiler_in_background`).
        self.pending_identity: Optional[tuple[tuple[dict[str, str], str], Any]] = None
        #: The environment and working directory `key_inputs` were computed in.
        self.key_inputs_context: Optional[tuple[dict[str, str], str]] = None
        self.shared: Any = None
        self.warned = False
        #: Whether this process said that objects of the shared tier failed their checks here (`_warn_of_shared_tier`).
        self.warned_rejections = False
        #: Whether this process said that GT4Py built with another compiler than the key's (`_built_by_key_compiler`).
        self.warned_compiler = False
        #: Marked build folders whose module was truncated since, made unusable (`_marked_for`); counted rejected
        #: with the store's rejected entries.
        self.folders_rejected = 0
        self.counters = _Tally()
        #: Translation entries this process took from the shared tier, handed to GT4Py from memory whenever it looks
        #: them up, their files written behind (ADR 0049): GT4Py's entry path -> the pickle. A few kilobytes per
        #: program taken from the tier; forgotten when the hooks are uninstalled or switch cache directories.
        self.fetched_translations: dict[str, bytes] = {}


_state = _State()
_lock = threading.Lock()


class _WorkerHook:
    """Shipped to spawned workers inside GT4Py's configuration; unpickling it installs the hooks there."""

    def __init__(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_install_in_worker, (self.cache_dir,))


def _install_in_worker(cache_dir: str) -> _WorkerHook:
    install(cache_dir=cache_dir)
    return _WorkerHook(cache_dir)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _nanobind_version() -> str:
    """The version of the nanobind GT4Py's builds import: its module's ``__version__`` (a fifth of the time of reading
    its distribution's metadata), else the distribution's."""
    try:
        nanobind = importlib.import_module("nanobind")
    except ImportError:
        return _version("nanobind")
    version = getattr(nanobind, "__version__", None)
    return version if isinstance(version, str) else _version("nanobind")


def _interpreter_inputs() -> dict[str, str]:
    """The key inputs of this interpreter and its packages: the extension suffix and platform, the installed nanobind,
    gridtools-cpp and GT4Py versions. Read once per process, in the calling thread (`install`): read in the compiler
    identity's thread, ``importlib.metadata``'s file reads handed the GIL back and forth with GT4Py's work and cost a
    warm start's first program about 3 ms (icon4py, median of 8)."""
    inputs = _state.interpreter_inputs
    if inputs is None:
        inputs = _state.interpreter_inputs = {
            "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or "",
            "platform": sysconfig.get_platform(),
            "nanobind_version": _nanobind_version(),
            "gridtools_cpp_version": _version("gridtools-cpp"),
            "gt4py_version": str(gt4py.__version__),
        }
    return inputs


def _key_inputs_of(environ: dict[str, str], cwd: str) -> dict[str, str]:
    pending = _state.pending_identity
    found = pending[1].result() if pending is not None and pending[0] == (environ, cwd) else None
    command, identity = found if found is not None else _gridkey.cxx_compiler_identity(environ, pathlib.Path(cwd))
    return {"compiler": command, "compiler_identity": identity, **_interpreter_inputs()}


def extension_key_inputs() -> dict[str, str]:
    """The inputs of every extension key of this process but the build folder's name: the C++ compiler GT4Py's CMake
    runs (``CXX``, else ``c++``/``g++``/``clang++`` on ``PATH``) and its identity (ADR 0022), the extension suffix and
    platform of this interpreter, the installed nanobind, gridtools-cpp and GT4Py versions (read once per process).

    The compiler's part is computed once per environment and working directory: its identity runs it twice
    (``--version``, ``-dumpmachine``, milliseconds), so `install` starts that computation on a thread of the Rust core
    that never holds the GIL (``_gridkey.start_cxx_compiler_identity``), and the first call takes its result,
    waiting for it if need be. A call that finds ``os.environ`` or the working directory changed since computes it
    again (a ``CXX`` set after `install` is the compiler of the builds, and so of the key).
    """
    context = (dict(os.environ), os.getcwd())
    with _key_inputs_lock:
        if _state.key_inputs is None or _state.key_inputs_context != context:
            _state.key_inputs = _key_inputs_of(*context)
            _state.key_inputs_context = context
        return _state.key_inputs


def _identify_compiler_in_background() -> None:
    """Reads the interpreter's inputs and starts the compiler's identity for this environment and working directory
    on the Rust core's thread, so that its probes run beside GT4Py's own work without taking the GIL from it (a Python
    thread doing the same cost a warm start's first program about 3 ms). A failure to start is left for
    `extension_key_inputs` to meet again, and raise."""
    _interpreter_inputs()
    context = (dict(os.environ), os.getcwd())
    try:
        _state.pending_identity = (context, _gridkey.start_cxx_compiler_identity(context[0], pathlib.Path(context[1])))
    except Exception:  # noqa: BLE001 - computed again, and raised, by the hook that needs it
        _state.pending_identity = None


def _reset_key_inputs_lock() -> None:
    # A child forked while a call held the lock would wait for it for ever, and one that joined the identity's thread,
    # which is not in the child, too: the child forgets that thread and computes its own identity.
    global _key_inputs_lock
    _key_inputs_lock = threading.Lock()
    if _state.pending_identity is not None:
        _state.pending_identity[1].abandon()
        _state.pending_identity = None


_key_inputs_lock = threading.Lock()
os.register_at_fork(after_in_child=_reset_key_inputs_lock)


def extension_key(build_folder: str) -> str:
    """The extension key (32 hex digits) of the build folder named ``build_folder`` in this process."""
    i = extension_key_inputs()
    return _gridkey.gt4py_extension_key(
        build_folder,
        i["compiler_identity"],
        i["ext_suffix"],
        i["platform"],
        i["nanobind_version"],
        i["gridtools_cpp_version"],
        i["gt4py_version"],
    )


def _read_marker(folder: pathlib.Path) -> Optional[str]:
    """The extension key ``folder``'s marker names, None when it has no marker, or ``""`` when it has one that cannot
    be read or names nothing (damaged: never taken for an unmarked folder, which is used as it stands)."""
    try:
        words = (folder / MARKER).read_text().split()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ""
    return words[0] if words else ""


def _module_size(folder: pathlib.Path, data: Any) -> Optional[int]:
    """The size in bytes of the module GT4Py's build data ``data`` of ``folder`` names, or None when it cannot be
    read."""
    try:
        return (folder / str(data.module)).stat().st_size
    except (OSError, AttributeError, TypeError):
        return None


def _write_marker(folder: pathlib.Path, key: str, data: Any) -> None:
    """Marks ``folder`` as built or materialized for ``key``, with the size of its module (`_marked_for`)."""
    size = _module_size(folder, data)
    _file_utils.atomic_write_bytes(folder / MARKER, (key if size is None else f"{key} {size}").encode())


def _marked_for(folder: pathlib.Path, key: str, data: Any) -> bool:
    """Whether ``folder``'s marker names ``key`` and its module still has the size it had when it was marked: a module
    truncated since (a full disk, an interrupted copy) would kill the process that maps it (SIGBUS), so the folder is
    prepared again instead. A marker that records no size (one written before sizes were) names the key alone."""
    try:
        words = (folder / MARKER).read_text().split()
    except (OSError, UnicodeDecodeError):
        return False
    if not words or words[0] != key:
        return False
    return len(words) < 2 or words[1] == str(_module_size(folder, data))


def _sync_rejections(store: _gridkey.Gt4pyStore) -> None:
    _state.counters.rejected = store.rejected + _state.folders_rejected


def _prepare_folder(folder: pathlib.Path, key: str) -> None:
    """Under the folder's lock: a usable folder of another key is made unusable; an unusable one is filled from the
    store when it has this key."""
    store = _state.store
    data = _build_data.read_data(folder)
    marker = _read_marker(folder)
    if _compiler.is_usable(data, folder):
        if marker is None or _marked_for(folder, key, data):
            return
        # Built or materialized for another compiler, interpreter ABI or header set, or for this key with a module
        # truncated since: never load it.
        (folder / "gt4py.json").unlink(missing_ok=True)
        (folder / MARKER).unlink(missing_ok=True)
        if marker in (key, ""):
            # This key's folder changed since it was marked, or its marker is damaged: rejected, filled again.
            _state.folders_rejected += 1
            _sync_rejections(store)
        else:
            _state.counters.foreign_rebuilt += 1
    names = store.materialize(key, folder)
    _sync_rejections(store)
    shared = _state.shared
    if names is None and shared is not None and shared.fetch_into("extension", key, store, folder):
        # Written into the folder in the same batch as into gridkey's store (ADR 0049).
        _state.counters.extensions_from_remote += 1
        names = ()
    _warn_of_shared_tier()
    if names is None:
        return
    data = _usable_data(folder)
    if data is not None:
        _write_marker(folder, key, data)
        _state.counters.extensions_materialized += 1


def _built_with(folder: pathlib.Path) -> Optional[str]:
    """The C++ compiler GT4Py's build of ``folder`` ran: the words before the first flag of the first entry of the
    folder's ``compile_commands.json`` (``build/compile_commands.json`` for GT4Py's CMake build system), or None when
    the folder does not say."""
    import json
    import shlex

    for path in (folder / "compile_commands.json", folder / "build" / "compile_commands.json"):
        try:
            first = json.loads(path.read_text())[0]
            words = first["arguments"] if "arguments" in first else shlex.split(first["command"])
        except (OSError, ValueError, LookupError, TypeError, AttributeError):
            continue
        compiler: list[str] = []
        for word in words:
            if not isinstance(word, str) or word.startswith("-"):
                break
            compiler.append(word)
        return " ".join(compiler) or None
    return None


#: The identity of each compiler command found in a build folder (`_built_with`), computed once per process.
_identities_of_record: dict[str, str] = {}


def _built_by_key_compiler(folder: pathlib.Path) -> bool:
    """Whether GT4Py built ``folder`` with a compiler of this process's extension key's compiler identity (ADR 0022).
    GT4Py's build system compiles with the compiler its cached CMake configuration recorded
    (``compile_commands_cache_*``, named without ``CXX``), which need not be ``CXX`` now: such a build is used here,
    as GT4Py would, but is never stored or shared under a key that names another compiler. One warning per process
    says so and how to build with ``CXX``."""
    recorded = _built_with(folder)
    inputs = extension_key_inputs()
    identity = _identities_of_record.get(recorded) if recorded is not None else None
    if recorded is not None and identity is None:
        context = (dict(os.environ), os.getcwd())
        try:
            _, identity = _gridkey.cxx_compiler_identity({**context[0], "CXX": recorded}, pathlib.Path(context[1]))
        except Exception:  # noqa: BLE001 - a compiler that cannot be identified is not the key's
            identity = ""
        _identities_of_record[recorded] = identity
    if identity == inputs["compiler_identity"]:
        return True
    _state.counters.extensions_not_stored += 1
    if _first_time("warned_compiler"):
        built = f"with `{recorded}`" if recorded is not None else "with a compiler its folder does not name"
        _warn(
            f"gridkey: GT4Py built {folder.name} {built}, not with `{inputs['compiler']}` (CXX, else c++ on PATH): "
            "GT4Py compiles with the compiler of its cached CMake configuration; the extension is used here but not "
            f"stored in gridkey's cache or shared. Remove the compile_commands_cache_* folders of {folder.parent} to "
            f"build with `{inputs['compiler']}`"
        )
    return False


def _store_folder(folder: pathlib.Path, key: str, *, built_here: bool) -> None:
    """Stores the usable ``folder`` GT4Py built in this process (``built_here``; not materialized: those are marked)
    in gridkey's store under ``key`` and marks it, when its build ran the compiler the key names
    (`_built_by_key_compiler`). A usable folder this process found unmarked (GT4Py built it before ``install``, or a
    process without the adapter did) is used as GT4Py would, but neither stored nor marked: nothing tells which
    interpreter ABI, nanobind or gridtools-cpp it was built with, which its key would name."""
    store = _state.store
    data = _build_data.read_data(folder)
    if not _compiler.is_usable(data, folder) or _marked_for(folder, key, data) or not built_here:
        return
    if not _built_by_key_compiler(folder):
        return
    if pathlib.Path(store.entry_path("extension", key)).is_file():
        _write_marker(folder, key, data)
        return
    module = pathlib.PurePosixPath(data.module)
    if module.is_absolute():
        return  # a folder that points outside itself does not travel
    store.put_extension(key, folder, [str(module), "gt4py.json"])
    _write_marker(folder, key, data)
    _state.counters.extensions_stored += 1


def _usable_data(folder: pathlib.Path) -> Optional[_build_data.BuildData]:
    """GT4Py's build data of ``folder`` when GT4Py would use the folder as it stands (``compiler.is_usable``), else None."""
    data = _build_data.read_data(folder)
    return data if _compiler.is_usable(data, folder) else None


@_hook
def prepare_folder(folder: pathlib.Path) -> Optional[_build_data.BuildData]:
    """What the build step's hook does before GT4Py looks at ``folder``, for a caller that looks at it itself (the
    hits ``gridkey.gt4py`` resolves in the calling process, ADR 0038): a usable folder built or materialized for
    another extension key is made unusable, and a missing one is filled from gridkey's store. Returns GT4Py's build
    data of the folder when it is usable for this process's extension key, else None.

    A folder marked with this process's extension key and usable is returned without GT4Py's folder lock: its marker
    is written, atomically, only once its build or materialization finished under that lock, and GT4Py itself loads
    a module outside the lock; anything else is prepared under the lock. With the hooks not installed, the folder's
    build data when usable, as GT4Py reads it."""
    if not installed():
        return _usable_data(folder)
    key = extension_key(folder.name)
    data = _usable_data(folder)
    if data is not None and _marked_for(folder, key, data):
        return data
    with _locking.lock(folder):
        _prepare_folder(folder, key)
        return _usable_data(folder)


def _claimed(kind: str, key: str) -> str:
    """The route of the object of ``kind`` under ``key`` that gridkey's store lacks: claimed in the shared tier, and
    waited for when another writer holds its lease."""
    shared, store = _state.shared, _state.store
    route = shared.claim(kind, key, store)
    if route == "wait":
        route = shared.wait(kind, key, store)
    _warn_of_shared_tier()
    return str(route)


def _made_here(route: str) -> bool:
    return route in ("lease", "here", "here-upload")


@_hook
def _compiler_call(self: Any, inp: Any) -> Any:
    if self.force_recompile:
        return _state.original_call(self, inp)
    build_context_id = _fingerprinting.strict_fingerprinter(self.builder_factory) if self.fingerprint_builder_factory else ""
    folder = _cache.get_cache_folder(inp, self.cache_lifetime, build_context_id)
    key = extension_key(folder.name)
    with _locking.lock(folder):
        _prepare_folder(folder, key)
        usable = _usable_data(folder) is not None
    shared = _state.shared
    route = "local"
    if shared is not None and not usable:
        # A writer takes the build's lease: of the nodes that miss this extension, one builds it.
        route = _claimed("extension", key)
        if route == "remote":
            _state.counters.extensions_from_remote += 1
            with _locking.lock(folder):
                _prepare_folder(folder, key)
    try:
        artifact = _state.original_call(self, inp)
    except BaseException:
        if shared is not None and _made_here(route):
            shared.upload("extension", key, route, _state.store, verified=False)
            _warn_of_shared_tier()
        raise
    with _locking.lock(folder):
        _store_folder(folder, key, built_here=not usable)
    if shared is None:
        return artifact
    return _verified_build(self, inp, artifact, folder, key, route)


def _loads(artifact: Any) -> Optional[BaseException]:
    """Why the module of ``artifact`` does not load in this process, or None when it does (GT4Py's own load)."""
    try:
        artifact.load()
    except Exception as e:  # noqa: BLE001 - any failure to load is a failed check
        return e
    return None


def _unusable(folder: pathlib.Path, key: str) -> None:
    """Makes ``folder`` unusable and drops gridkey's stored extension ``key``, so that GT4Py builds it here."""
    (folder / "gt4py.json").unlink(missing_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    _state.store.remove("extension", key)


def _verified_build(compiler: Any, inp: Any, artifact: Any, folder: pathlib.Path, key: str, route: str) -> Any:
    """With a shared tier: the module of an extension that came from it, or that is to be uploaded, is loaded here
    first (ADR 0041). One from the shared tier that does not load is rejected and built here; one built here is
    uploaded once it loaded, and its lease released either way."""
    shared = _state.shared
    from_remote = shared.fetched("extension", key)
    if not from_remote and not _made_here(route):
        return artifact
    failure = _loads(artifact)
    if failure is not None and from_remote:
        _reject("extension", key, f"the module of GT4Py extension {folder.name} does not load: {failure}")
        with _locking.lock(folder):
            _unusable(folder, key)
        artifact = _state.original_call(compiler, inp)
        with _locking.lock(folder):
            _store_folder(folder, key, built_here=True)
        route = "here-upload" if shared.is_writer else "here"
        failure = _loads(artifact)
    elif from_remote:
        shared.confirm("extension", key)
    if _made_here(route) and shared.upload("extension", key, route, _state.store, verified=failure is None):
        _state.counters.extensions_uploaded += 1
    # The upload, or the lease's renewal while GT4Py built, may have found the server gone.
    _warn_of_shared_tier()
    return artifact


@_hook
def verify_loaded(folder: pathlib.Path, artifact: Any) -> bool:
    """For a hit resolved in the calling process (ADR 0038): whether ``artifact``, made of ``folder``, may be used. An
    extension that came from the shared tier in this process is loaded first; one that does not load is rejected
    there, the folder made unusable, and False returned (GT4Py's runner then builds it). True otherwise."""
    shared = _state.shared
    if shared is None:
        return True
    key = extension_key(folder.name)
    if not shared.fetched("extension", key):
        return True
    failure = _loads(artifact)
    if failure is None:
        shared.confirm("extension", key)
        return True
    _reject("extension", key, f"the module of GT4Py extension {folder.name} does not load: {failure}")
    with _locking.lock(folder):
        _unusable(folder, key)
    return False


def _reject(kind: str, key: str, reason: str) -> None:
    said = _state.shared.reject(kind, key, reason)
    _state.store.remove(kind, key)
    if said is not None:
        _state.counters.remote_rejected += 1
        _warn(f"gridkey: {reason}, so it is made here; {said}")


_warned_lock = threading.Lock()


def _reset_warned_lock() -> None:
    # A child forked while another thread held the lock would wait for it for ever; one forked inside a hook holds
    # none of its parent's pending warnings.
    global _warned_lock, _deferred
    _warned_lock = threading.Lock()
    _deferred = threading.local()


os.register_at_fork(after_in_child=_reset_warned_lock)


def _first_time(flag: str) -> bool:
    """Sets the `_state` flag ``flag`` (one of its ``warned*`` fields) and says whether it was not set before: whether
    this call is the one that gives its warning. Threads of one process (thread mode) that meet the same fault at once
    give it once."""
    with _warned_lock:
        if getattr(_state, flag):
            return False
        setattr(_state, flag, True)
        return True


def _warn_of_shared_tier() -> None:
    """The warnings of this process about the shared tier, each given once: that it went off (unreachable, or a request
    failed), and that objects its lookups found failed a check here (forged, damaged, or signed by a key not trusted
    here: `Gt4pyShared.rejections`), which were made here instead."""
    shared = _state.shared
    if shared is None:
        return
    if not _state.warned_rejections and (said := shared.rejections) is not None and _first_time("warned_rejections"):
        _warn(f"gridkey: {said}")
    if _state.warned or shared.is_on or not _first_time("warned"):
        return
    _state.counters.remote_warnings += 1
    _warn(f"gridkey: {shared.warning}; GT4Py translates and builds locally in this process")


#: Where GT4Py 1.2.1 keeps its translation caches, which it names in no constant: the folder of each backend's
#: ``FileCache`` under the build cache -> the backend's name. 1.2.3 keeps them in
#: ``<build cache>/<TRANSLATION_CACHE_DIR_NAME>/<backend>`` instead.
_TRANSLATION_CACHES_1_2_1 = {"gtfn_cache": "gtfn", "translation_cache": "dace"}


def _translation_cache(cache: Any) -> Optional[str]:
    """The name of the translation cache (``gtfn``, ``dace``) a ``FileCache`` is, or None for another cache."""
    path = pathlib.Path(cache.path)
    folder = getattr(_cache, "TRANSLATION_CACHE_DIR_NAME", None)
    if folder is None:
        return _TRANSLATION_CACHES_1_2_1.get(path.name)
    return path.name if path.parent.name == folder else None


def _translation_key(cache: Any, name: str, key: Any) -> tuple[pathlib.Path, str]:
    path: pathlib.Path = cache._get_path(key)
    return path, _gridkey.gt4py_translation_key(str(gt4py.__version__), name, path.stem)


def _materialize_translation(cache: Any, key: Any) -> None:
    name = _translation_cache(cache)
    if name is None or _state.store is None:
        return
    path, gk = _translation_key(cache, name, key)
    if str(path) in _state.fetched_translations or path.exists():
        return
    data = _state.store.get_translation(gk)
    _sync_rejections(_state.store)
    shared = _state.shared
    if data is None and shared is None:
        return
    cache.path.mkdir(parents=True, exist_ok=True)
    with _locking.lock(path):
        if path.exists():
            return
        if data is not None:
            _file_utils.atomic_write_bytes(path, data)
        elif (fetched := shared.fetch_translation(gk, _state.store, path)) is not None:
            # Handed to GT4Py from memory; its file and its store entry are written behind (ADR 0049).
            _state.fetched_translations[str(path)] = fetched
            _state.counters.translations_from_remote += 1
        else:
            _warn_of_shared_tier()
            return
        _state.counters.translations_materialized += 1
    _warn_of_shared_tier()


def _fetched_pickle(cache: Any, key: Any) -> Optional[bytes]:
    """The pickle of the entry ``key`` of ``cache`` this process took from the shared tier and writes behind, or None."""
    if not _state.fetched_translations:
        return None
    return _state.fetched_translations.get(str(cache._get_path(key)))


@_hook
def _contains(self: Any, key: Any) -> bool:
    _materialize_translation(self, key)
    return bool(_state.original_contains(self, key)) or _fetched_pickle(self, key) is not None


@_hook
def _getitem(self: Any, key: Any) -> Any:
    _materialize_translation(self, key)
    shared = _state.shared
    name = _translation_cache(self) if shared is not None else None
    if name is None:
        return _state.original_getitem(self, key)
    path, gk = _translation_key(self, name, key)
    fetched = _state.fetched_translations.get(str(path))
    try:
        if fetched is None:
            value = _state.original_getitem(self, key)
        else:
            try:
                value = pickle.loads(fetched)
            except Exception as error:  # noqa: BLE001 - as GT4Py's FileCache: an entry that does not unpickle is a miss
                _state.fetched_translations.pop(str(path), None)
                flush()
                path.unlink(missing_ok=True)
                raise KeyError(key) from error
    except KeyError:
        # GT4Py could not unpickle it (and removed its file): one from the shared tier is rejected there too.
        if shared.fetched("translation", gk):
            _reject("translation", gk, "the GT4Py translation entry from the shared tier does not unpickle here")
        raise
    shared.confirm("translation", gk)
    return value


def flush() -> None:
    """Waits for the files this process writes behind (ADR 0049): the translation entries it took from the shared tier
    (GT4Py's file and gridkey's store entry) and the store entries of the extensions it took. Called at exit and before
    a task goes to GT4Py's runner, whose workers read those files. This process keeps handing GT4Py the entries it took
    from memory: a file whose write failed (a full disk) is then a miss of the next process, never a rejection here."""
    store = _state.store
    if store is not None:
        store.flush()  # the writes of the shared tier's object too: one list per process


#: Build-folder memo: the strict fingerprint of each bindings step this process met, by identity; the step is held, so
#: that its id is never another's.
_bindings_fingerprints: dict[int, tuple[Any, str]] = {}


def _bindings_fingerprint(step: Any) -> Optional[str]:
    """GT4Py's strict fingerprint of the bindings step ``step`` when it is GT4Py's own ``ExtensionGenerator`` (a frozen
    dataclass whose fields are its whole configuration), else None: a step of another kind may depend on more than
    a fingerprint says, and its folders are found GT4Py's way."""
    nanobind = sys.modules.get("gt4py.next.otf.binding.nanobind")  # imported by the workflows that use it
    if nanobind is None or type(step) is not nanobind.ExtensionGenerator:
        return None
    held = _bindings_fingerprints.get(id(step))
    if held is None or held[0] is not step:
        held = _bindings_fingerprints[id(step)] = (step, _fingerprinting.strict_fingerprinter(step))
    return held[1]


def memo_key(entry: pathlib.Path, bindings: Any, build_context_id: str) -> Optional[str]:
    """The build-folder memo key (ADR 0058) of GT4Py's translation entry file ``entry`` (``<key>.pkl``) for a workflow
    whose bindings step is ``bindings`` and whose compilation step names folders with ``build_context_id``: 32 hex
    digits over the entry's bytes, GT4Py's version, ``BUILD_CACHE_VERSION_ID``, the bindings step's fingerprint and
    the build context (``gridkey_fingerprint::gt4py::FolderMemoInputs``). None when the hooks are not installed, the
    bindings step is not GT4Py's own, or the entry cannot be read."""
    if _state.store is None:
        return None
    fingerprint = _bindings_fingerprint(bindings)
    if fingerprint is None:
        return None
    return _gridkey.gt4py_folder_memo_key(
        entry, str(gt4py.__version__), str(_config.BUILD_CACHE_VERSION_ID), fingerprint, build_context_id
    )


def remembered_folder(key: str) -> Optional[str]:
    """The name of the build folder the memo holds under ``key`` (`memo_key`), or None; an invalid memo entry is
    removed and counted rejected."""
    store = _state.store
    if store is None:
        return None
    name = store.get_folder(key)
    _sync_rejections(store)
    if name is not None:
        _state.counters.folders_from_memo += 1
    return cast(Optional[str], name)


def remember_folder(key: str, name: str) -> None:
    """Remembers, behind (`flush` waits), that the build folder under the memo key ``key`` is named ``name``."""
    store = _state.store
    if store is not None:
        store.put_folder(key, name)
        _state.counters.folders_remembered += 1


def _setitem(self: Any, key: Any, value: Any) -> None:
    _state.original_setitem(self, key, value)
    name = _translation_cache(self)
    if name is None or _state.store is None:
        return
    path, gk = _translation_key(self, name, key)
    try:
        data = path.read_bytes()
    except OSError:
        return
    _state.store.put_translation(gk, data)
    _state.counters.translations_stored += 1


def _unpickles(data: Optional[bytes]) -> bool:
    if data is None:
        return False
    try:
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - what does not unpickle here does not travel
        return False
    return True


@_hook
def translate(cache: Any, key: Any, make: Callable[[], Any]) -> Any:
    """GT4Py's translation of ``key`` into its translation cache ``cache`` (a ``FileCache``), after the cache and
    gridkey's store missed, made by ``make()`` (GT4Py's step), which ``gridkey.gt4py`` calls under the key's lock
    (ADR 0039). With a shared tier: claimed there first, so a writer translates under the key's lease, another
    writer's translation is waited for and taken, and what was translated here and unpickles is uploaded (ADR 0041).
    Returns the value GT4Py's step made (or the one that arrived)."""
    shared = _state.shared
    name = _translation_cache(cache) if shared is not None else None
    if name is None:
        value = cache[key] = make()
        return value
    _, gk = _translation_key(cache, name, key)
    route = _claimed("translation", gk)
    if route == "remote":
        _state.counters.translations_from_remote += 1
        try:
            return cache[key]
        except KeyError:
            route = "here-upload" if shared.is_writer else "here"
    try:
        value = make()
    except BaseException:
        shared.upload("translation", gk, route, _state.store, verified=False)
        _warn_of_shared_tier()
        raise
    cache[key] = value
    verified = _unpickles(_state.store.get_translation(gk))
    if _made_here(route) and shared.upload("translation", gk, route, _state.store, verified=verified):
        _state.counters.translations_uploaded += 1
    # The upload, or the lease's renewal while GT4Py translated, may have found the server gone.
    _warn_of_shared_tier()
    return value


@_hook
def install(*, cache_dir: Optional[os.PathLike[str] | str] = None, settings: Any = None) -> None:
    """Puts gridkey's store ``<cache_dir>/gt4py-v1`` behind GT4Py's translation cache and build folders (see the
    module documentation), here and in the build workers GT4Py spawns. ``cache_dir``: default
    ``gridkey.Settings().cache_dir``, made absolute now. ``settings`` (a ``gridkey.Settings``, default the
    environment's, read now) says whether a shared tier is behind the store (``GRIDKEY_REMOTE_URL`` and the variables
    of the ``gridkey`` command, ADR 0041); it is connected here, once per process, and workers connect their own.
    Idempotent; a second call with another directory switches.

    Raises ``GridkeyOSError`` when the store cannot be created, ``SettingsError`` for a misconfigured shared tier.
    """
    if settings is None:
        settings = _gridkey.Settings()
    if cache_dir is None:
        cache_dir = settings.cache_dir
    cache_dir = str(pathlib.Path(cache_dir).absolute())
    with _lock:
        if _state.cache_dir != cache_dir:
            flush()
            _state.fetched_translations.clear()
            _state.store = _gridkey.Gt4pyStore(cache_dir)
            _state.shared = _gridkey.Gt4pyShared.connect(settings, cache_dir)
            _state.warned = False
            _state.warned_rejections = False
            _state.cache_dir = cache_dir
            if _state.shared is not None and _state.shared.is_writer:
                atexit.register(_state.shared.publish_stats)
            # Registered last, so run first: the files written behind are complete before the process ends.
            atexit.register(_state.store.flush)
        if _state.original_call is None:
            _state.original_call = _compiler.CPPCompiler.__call__
            _state.original_contains = _filecache.FileCache.__contains__
            _state.original_getitem = _filecache.FileCache.__getitem__
            _state.original_setitem = _filecache.FileCache.__setitem__
            _compiler.CPPCompiler.__call__ = _compiler_call
            _filecache.FileCache.__contains__ = _contains
            _filecache.FileCache.__getitem__ = _getitem
            _filecache.FileCache.__setitem__ = _setitem
    setattr(_config, _CONFIG_NAME, _WorkerHook(cache_dir))
    if _state.key_inputs is None:
        _identify_compiler_in_background()
    _warn_of_shared_tier()


def uninstall() -> bool:
    """Restores GT4Py's own methods. Returns whether the hooks were installed."""
    flush()
    _state.fetched_translations.clear()
    with _lock:
        if _state.original_call is None:
            return False
        _compiler.CPPCompiler.__call__ = _state.original_call
        _filecache.FileCache.__contains__ = _state.original_contains
        _filecache.FileCache.__getitem__ = _state.original_getitem
        _filecache.FileCache.__setitem__ = _state.original_setitem
        _state.original_call = _state.original_contains = _state.original_getitem = _state.original_setitem = None
        _state.cache_dir = _state.store = _state.shared = None
    if hasattr(_config, _CONFIG_NAME):
        delattr(_config, _CONFIG_NAME)
    return True


def shared() -> Optional[_gridkey.Gt4pyShared]:
    """The shared tier behind gridkey's store in this process (a ``gridkey.Gt4pyShared``), or None."""
    return cast(Optional[_gridkey.Gt4pyShared], _state.shared)


def installed() -> bool:
    """Whether the hooks are installed."""
    return _state.original_call is not None


def counters() -> Counters:
    """What the hooks did in this process so far (workers count their own)."""
    return Counters(*(getattr(_state.counters, name) for name in Counters._fields))
