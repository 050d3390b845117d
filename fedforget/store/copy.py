"""A consistent copy of a store: its SQLite files through SQLite's backup API, everything else as files.

A store's SQLite files are only ever opened by SQLite (closing a Python descriptor of one drops the
process's POSIX locks on it), and a backup reads them inside one read transaction, so a copy taken while a
coordinator writes holds each database whole.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

#: the store's SQLite databases, and the files SQLite keeps beside them (never copied as bytes)
DATABASES = ("ledger.sqlite", "service.db", "opendsr.db")
SIDE_FILES = ("-journal", "-wal", "-shm")


def _sqlite_names(_: str, names: list[str]) -> set[str]:
    return {n for n in names if n in DATABASES or any(n == d + s for d in DATABASES for s in SIDE_FILES)}


def copy_store(src: str | Path, dst: str | Path) -> Path:
    """Copy the store at ``src`` to the new directory ``dst`` (which must not exist); returns ``dst``."""
    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst, ignore=_sqlite_names)
    for name in DATABASES:
        if not (src / name).is_file():
            continue
        source = sqlite3.connect(f"{(src / name).absolute().as_uri()}?mode=ro", uri=True)
        target = sqlite3.connect(dst / name)
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
        (dst / name).chmod(0o600)
    return dst
