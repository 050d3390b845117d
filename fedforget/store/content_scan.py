"""Every file under a store, by content: what ``purge --check`` hashes to prove no purged bytes are left.

A name proves nothing (the same bytes can sit under any name), so each regular file is hashed in
chunks (bounded memory). The walk never follows a symbolic link: a link whose target lies outside
the store is refused (reported: what it points to cannot be proven gone from here), one inside it is
skipped (its target is hashed where it is). Fifos, sockets and devices are reported, never opened
(opening a fifo blocks). The store's SQLite files are skipped by name and never opened: closing any
descriptor of a SQLite file drops the process's POSIX locks on it, which corrupts the database under
concurrency.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: the store's SQLite databases (ledger, HTTP service) and their journals, at the store's root
SQLITE_FILES = frozenset(f"{db}{suffix}" for db in ("ledger.sqlite", "service.db")
                         for suffix in ("", "-journal", "-wal", "-shm"))
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
    return scan
