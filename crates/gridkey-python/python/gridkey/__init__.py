"""gridkey: compile-time views of connectivity tables that make translation-cache keys identical
whether compilation runs serially, in threads or in worker processes.

A neighbour table is converted once per connectivity into a read-only, C-contiguous table
memory-mapped from a content-addressed ``.npy`` store and named by its digest; keys see digests,
never runtime objects. See the package README for the API and ``gridkey.gt4py`` for GT4Py.
"""

from __future__ import annotations

from . import errors
from ._gridkey import (
    DEFAULT_MAX_TABLE_BYTES,
    DIGEST_FORMAT_VERSION,
    GT4PY_DIR,
    KEY_FORMAT_VERSION,
    TABLES_DIR,
    CompileTimeConnectivity,
    Connectivity,
    Dimension,
    IdentityMemo,
    KeyInputs,
    KeyLock,
    KeyLocks,
    MappedTable,
    Settings,
    TableStore,
    compile_time_connectivity,
    compile_time_offset_provider,
    conversion_stats,
    explain,
    table_digest,
    translation_key,
)
from .errors import (
    DeviceCopyError,
    GridkeyError,
    GridkeyOSError,
    InternalError,
    SettingsError,
    TableFileError,
    TableNotFoundError,
    TableTooLargeError,
    TableTypeError,
    TableValueError,
)

__all__ = [
    "DEFAULT_MAX_TABLE_BYTES",
    "DIGEST_FORMAT_VERSION",
    "GT4PY_DIR",
    "KEY_FORMAT_VERSION",
    "TABLES_DIR",
    "CompileTimeConnectivity",
    "Connectivity",
    "DeviceCopyError",
    "Dimension",
    "GridkeyError",
    "GridkeyOSError",
    "IdentityMemo",
    "InternalError",
    "KeyInputs",
    "KeyLock",
    "KeyLocks",
    "MappedTable",
    "Settings",
    "SettingsError",
    "TableFileError",
    "TableNotFoundError",
    "TableStore",
    "TableTooLargeError",
    "TableTypeError",
    "TableValueError",
    "compile_time_connectivity",
    "compile_time_offset_provider",
    "conversion_stats",
    "errors",
    "explain",
    "table_digest",
    "translation_key",
]
