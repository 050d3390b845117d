"""Reading a file the coordinator does not control (a store file, a secret, a path typed on the command line)
in bounded time and memory: only a regular file is read (a fifo would block, a device such as ``/dev/zero``
never ends, a directory is not data), and never more than a stated bound, checked on the opened file's own
``fstat`` so that a path swapped between a check and the open cannot slip past.

Every such read goes through :func:`read_bounded` (whole small files) or :func:`sha256_bounded` (artifacts,
hashed in chunks); both raise :class:`UnreadableFile`, an :class:`OSError` whose message names the path and
what is wrong with it in one line.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

#: Bytes read per step while hashing: the memory a hash of any file needs.
CHUNK_BYTES = 1 << 20


class UnreadableFile(OSError):
    """The path is not a regular file, or is over the bound for what it should hold."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(errno.EINVAL, reason, str(path))

    def __str__(self) -> str:
        return f"{self.filename} {self.strerror}"


def _not_regular(mode: int) -> str:
    """Why a file of this mode is refused, in a few words."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a fifo"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return f"is {kind}, not a regular file"
    return "is not a regular file"


def open_regular(path: str | os.PathLike[str], limit: int, what: str) -> tuple[int, int]:
    """``(fd, size)`` of ``path`` opened for reading, refusing anything but a regular file of at most ``limit``
    bytes. ``O_NONBLOCK`` keeps the open of a fifo from waiting for a writer; it changes nothing for a
    regular file. The caller closes ``fd``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "does not exist", str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile(path, _not_regular(info.st_mode))
        if info.st_size > limit:
            raise UnreadableFile(path, f"is {info.st_size:,} bytes; no {what} is that large (at most {limit:,})")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_bounded(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """A regular file's bytes, at most ``limit`` of them (a file that grows past it while read is refused too).

    The first read asks for the size ``fstat`` gave plus one byte, never for ``limit``: Python allocates what a
    read asks for up front, so asking for a 4 GiB bound to read a 10 KiB file would reserve 4 GiB."""
    fd, size = open_regular(path, limit, what)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(size + 1)
        if len(data) > size:  # grew since fstat: read on in chunks, up to one byte past the bound
            parts, seen = [data], len(data)
            while seen <= limit and (chunk := fh.read(min(CHUNK_BYTES, limit + 1 - seen))):
                parts.append(chunk)
                seen += len(chunk)
            data = b"".join(parts)
    if len(data) > limit:
        raise UnreadableFile(path, f"grew past {limit:,} bytes while read; no {what} is that large")
    return data


def sha256_bounded(path: str | os.PathLike[str], limit: int, what: str) -> str:
    """The sha256 hex digest of a regular file of at most ``limit`` bytes, read :data:`CHUNK_BYTES` at a time."""
    fd, _ = open_regular(path, limit, what)
    digest = hashlib.sha256()
    seen = 0
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            seen += len(chunk)
            if seen > limit:
                raise UnreadableFile(path, f"grew past {limit:,} bytes while read; no {what} is that large")
            digest.update(chunk)
    return digest.hexdigest()


def is_regular_or_absent(path: Path) -> bool:
    """Whether ``path`` is a regular file (following links) or names nothing: what a store may hold at a file's
    name. A dangling link counts as absent."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
