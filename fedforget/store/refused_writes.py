"""What a write refused because the store cannot be written looks like, from SQLite and from the OS."""

from __future__ import annotations

import errno
import sqlite3

#: What SQLite says when it cannot write the database or create its journal beside it.
SQLITE_READ_ONLY = ("readonly database", "unable to open database file")
#: What the OS says when a write is refused (a read-only file system, no permission).
OS_READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def is_read_only_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused because the store cannot be written."""
    if isinstance(exc, sqlite3.OperationalError):
        said = str(exc).lower()
        return any(marker in said for marker in SQLITE_READ_ONLY)
    return isinstance(exc, OSError) and exc.errno in OS_READ_ONLY
