"""The exceptions of gridkey: one base class, with OSError, ValueError and TypeError subclasses.

Every exception carries the message of the Rust error it stands for, which names the file,
the offset or the argument and what to do. ``errors.rs`` in the extension is the one place
that maps the Rust error enums to these classes.
"""

from __future__ import annotations

import os

__all__ = [
    "GridkeyError",
    "GridkeyOSError",
    "TableNotFoundError",
    "TableFileError",
    "TableValueError",
    "TableTypeError",
    "TableTooLargeError",
    "SettingsError",
    "DeviceCopyError",
    "InternalError",
]


class GridkeyError(Exception):
    """Base class of every exception gridkey raises."""


class GridkeyOSError(GridkeyError, OSError):
    """The file system refused: a cache directory that cannot be created or written, a table
    that cannot be written (full disk, permissions) or read, a path that is not a regular file.

    ``errno`` and ``filename`` are set where known; ``str()`` is the message alone.
    """

    def __init__(self, message: str, errno: int | None = None, filename: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.errno = errno
        self.strerror = os.strerror(errno) if errno is not None else None
        self.filename = filename

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[type[GridkeyOSError], tuple[str, int | None, str | os.PathLike[str] | None]]:
        return (type(self), (str(self), self.errno, self.filename))


class TableNotFoundError(GridkeyOSError, FileNotFoundError):
    """A table is not in the store under its digest (``errno`` is ``ENOENT``)."""


class TableFileError(GridkeyError, ValueError):
    """A stored table file is not the table it should be: truncated, not ``.npy``, another dtype
    or shape, or (on a verifying open) content that does not match its digest."""


class TableValueError(GridkeyError, ValueError):
    """A table or an argument has a bad value: not 2-D, a shape too large, a digest or key text
    that is not 32 hex digits, a malformed key-input record, a bad dimension."""


class TableTypeError(GridkeyError, TypeError):
    """Not a table: an object without the buffer protocol or ``__array__``, or an array whose
    dtype is not int32 or int64 (float, bool, unsigned, object)."""


class TableTooLargeError(GridkeyError, ValueError):
    """A table larger than the limit, refused before any of it is read: ``max_table_bytes`` of
    ``gridkey.Settings`` (or of ``table_digest``), by default ``DEFAULT_MAX_TABLE_BYTES``
    (2**40). ``offset`` is the offset name (``None`` outside a conversion), ``size`` the
    table's size and ``limit`` the limit, both in bytes of its elements in C order."""

    def __init__(self, message: str, offset: str | None = None, size: int | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
        self.size = size
        self.limit = limit

    def __reduce__(self) -> tuple[type[TableTooLargeError], tuple[str, str | None, int | None, int | None]]:
        return (type(self), (str(self), self.offset, self.size, self.limit))


class SettingsError(GridkeyError, ValueError):
    """An environment variable of gridkey has a value it does not accept."""


class DeviceCopyError(GridkeyError, RuntimeError):
    """Copying a device table to the host failed or returned something else than the table;
    the exception raised by the array library is the ``__cause__``."""


class InternalError(GridkeyError, RuntimeError):
    """A bug of gridkey, caught before it could end the interpreter; please report it."""
