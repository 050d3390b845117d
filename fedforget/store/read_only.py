"""A store this process may read but not write (a read-only mount, a snapshot, no write permission) is told
apart from a damaged one: commands that must write say so in one line before writing anything, and a write
refused by the OS or by SQLite is named as what it is, never as corruption.

SQLite opens a database it cannot write read-only without complaint; the first write then fails with
"attempt to write a readonly database", or with "unable to open database file" when its journal cannot be
created in a read-only directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedforget.store.refused_writes import OS_READ_ONLY as OS_READ_ONLY
from fedforget.store.refused_writes import SQLITE_READ_ONLY as SQLITE_READ_ONLY
from fedforget.store.refused_writes import is_read_only_error as is_read_only_error


def unwritable_path(root: Path) -> Path | None:
    """The first path a store write needs that this process cannot write (None when all can be written):
    the store directory (the ledger's journal, atomic renames), the ledger, the artifact and client
    directories and each client's (a purge deletes its caches), the metrics file. ``os.access`` answers
    for a read-only mount even as root."""
    from fedforget.store.ledger import LEDGER
    from fedforget.store.store import ARTIFACTS, CLIENTS, METRICS

    paths = [root, root / LEDGER, root / ARTIFACTS, root / CLIENTS, root / METRICS]
    try:
        with os.scandir(root / CLIENTS) as entries:
            paths += sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        pass
    for path in paths:
        if os.path.lexists(path) and not os.access(path, os.W_OK):
            return path
    return None


def read_only_message(root: Path, command: str, cause: str, before: bool = True) -> str:
    """The one line for ``fedforget COMMAND`` on a store it cannot write; ``before``: said before any write
    was tried (nothing was changed), else a write was refused midway and running the command again finishes."""
    return (f"the store {root} is read-only ({cause}: a read-only mount or no write permission); `fedforget "
            f"{command}` must write to it: remount it read-write or grant write permission, then run it again"
            + ("; nothing was changed (`status`, `samples`, `locate` and `purge --check` work on it as it is)"
               if before else " (it finishes what this run could not write)"))
