"""Every file under a store, by content: what ``purge --check`` hashes to prove no purged bytes are left.

A name proves nothing (the same bytes can sit under any name), so each regular file is hashed in
chunks (bounded memory). The walk never follows a symbolic link: a link whose target lies outside
the store is refused (reported: what it points to cannot be proven gone from here), one inside it is
skipped (its target is hashed where it is). Fifos, sockets and devices are reported, never opened
(opening a fifo blocks). The store's SQLite files are never opened by Python: closing any descriptor of a
SQLite file drops the process's POSIX locks on it, which corrupts the database under concurrency. They are
checked through SQLite instead: each database must open as one and pass ``quick_check`` (purged bytes
under its name would not), and a ``-wal`` or ``-shm`` file, which a store in SQLite's rollback-journal mode
never has, is reported unopened. A ``-journal`` exists only while a write is under way (or after a crash,
until the next open rolls it back), so it is left to SQLite.
"""

from __future__ import annotations

import errno
import hashlib
import os
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: the store's SQLite databases (ledger, HTTP service) and their journals, at the store's root
SQLITE_FILES = frozenset(f"{db}{suffix}" for db in ("ledger.sqlite", "service.db")
                         for suffix in ("", "-journal", "-wal", "-shm"))
DATABASES = ("ledger.sqlite", "service.db")
#: files SQLite keeps only in WAL mode, which no store uses: their presence is reported, never read
WAL_FILES = frozenset(f"{db}{suffix}" for db in DATABASES for suffix in ("-wal", "-shm"))
CHUNK = 1 << 20


@dataclass
class StoreScan:
    """What a walk of the store found, paths relative to the store."""

    #: regular file → sha256 of its bytes
    hashed: dict[str, str] = field(default_factory=dict)
    #: ``"path -> target"`` for each symbolic link that resolves outside the store
    outside_links: list[str] = field(default_factory=list)
    #: fifos, sockets, devices (never opened)
    special: list[str] = field(default_factory=list)
    #: files and folders that could not be read
    unreadable: list[str] = field(default_factory=list)
    #: files under a SQLite name that are not a sound SQLite database (``"name: what SQLite said"``), and WAL files
    not_databases: list[str] = field(default_factory=list)


def file_sha256(path: Path) -> str | None:
    """sha256 of a regular file's bytes, read in chunks; None if ``path`` is not a regular file now (a link
    or a fifo swapped in after the walk saw it: ``O_NOFOLLOW`` refuses the one, ``O_NONBLOCK`` keeps the
    other from blocking, and the descriptor's own type is checked before reading)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        while block := os.read(fd, CHUNK):
            digest.update(block)
        return digest.hexdigest()
    finally:
        os.close(fd)


def database_problem(path: Path) -> str | None:
    """What SQLite says is wrong with the database at ``path`` (None when it opens and passes ``quick_check``),
    read only through SQLite."""
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return str(exc)
    try:
        said = db.execute("PRAGMA quick_check").fetchone()
        return None if said and said[0] == "ok" else f"quick_check: {' '.join(str(said).split())[:200]}"
    except sqlite3.Error as exc:
        return str(exc)
    finally:
        db.close()


def _entries(root: Path, scan: StoreScan) -> Iterator[tuple[os.DirEntry[str], str]]:
    """Every entry under ``root`` (not following links), with its path relative to ``root``."""
    stack = [(str(root), "")]
    while stack:
        folder, rel = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            scan.unreadable.append(rel or ".")
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                stack.append((entry.path, path))
            else:
                yield entry, path


def _inside(target: str, real_root: str) -> bool:
    return target == real_root or target.startswith(real_root.rstrip(os.sep) + os.sep)


def scan_store(root: Path) -> StoreScan:
    """Walk ``root``: hash every regular file but the store's SQLite files, report links out and non-files."""
    root = Path(root)
    real_root = os.path.realpath(root)
    scan = StoreScan()
    for entry, rel in _entries(root, scan):
        if entry.is_symlink():
            try:
                target = os.readlink(entry.path)
            except OSError:
                continue  # no longer a link: gone since the walk listed it
            if not _inside(os.path.realpath(entry.path), real_root):  # reads the link chain; opens nothing
                scan.outside_links.append(f"{rel} -> {target}")
            continue
        if "/" not in rel and rel in SQLITE_FILES:
            if rel in WAL_FILES:
                scan.not_databases.append(f"{rel}: a WAL file, which a store never has")
            elif rel in DATABASES and (said := database_problem(Path(entry.path))):
                scan.not_databases.append(f"{rel}: {said}")
            continue
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):
                scan.special.append(rel)
                continue
            sha = file_sha256(Path(entry.path))
        except FileNotFoundError:
            continue  # deleted since the walk listed it
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # replaced by a link since the walk saw it
                scan.outside_links.append(f"{rel} -> ?")
            else:
                scan.unreadable.append(rel)
            continue
        if sha is None:
            scan.special.append(rel)
        else:
            scan.hashed[rel] = sha
    scan.outside_links.sort()
    scan.special.sort()
    scan.unreadable.sort()
    scan.not_databases.sort()
    return scan
