"""One run writes a store at a time: an OS file lock on ``<store>/run.lock`` that dies with its holder.

The lock is taken by the process that writes the store: the ServerApp (in Flower's ServerApp or
simulation process, or in process), never the CLI that submitted the run, so a ServerApp whose CLI was
killed still holds it and a second run cannot start beside it. ``flock`` is released by the kernel when
the holder exits, however it exits (``kill -9`` included): a lock is never left stale.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fedforget.store.store import StoreError

LOCK_FILE = "run.lock"
#: What a holder writes into the lock file (pid, host, action, start), read back for the refusal line.
HOLDER_BYTES = 512
#: A busy lock is asked again this many times, this far apart, before a refusal: a concurrent
#: :func:`check_not_busy` holds it shared for microseconds, which must not refuse a starting run.
LOCK_TRIES, LOCK_RETRY_S = 5, 0.02


class StoreBusy(StoreError):
    """Another live process holds the store's run lock; the message is the one line a user sees."""


def lock_path(root: Path) -> Path:
    return Path(root) / LOCK_FILE


def _open_lock(path: Path, create: bool) -> int:
    """The lock file's descriptor (read-write to hold it, read-only to check it: flock needs no more); a
    planted symlink or a non-file is refused, never followed."""
    access = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
    flags = access | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:
        raise
    except OSError as exc:
        what = "a symbolic link" if exc.errno == errno.ELOOP else f"unusable ({exc.strerror})"
        raise StoreError(f"{path} is {what}, not fedforget's lock file; remove it") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreError(f"{path} is not a regular file, not fedforget's lock file; remove it")
    return fd


def _holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it ("a retrain, pid 12 on host, since 15:02:11 UTC")."""
    try:
        data = json.loads(os.pread(fd, HOLDER_BYTES, 0).decode("utf-8"))
        since = time.strftime("%H:%M:%S UTC", time.gmtime(float(data["since"])))
        return f"a {str(data['action'])[:20]} run (pid {int(data['pid'])} on {str(data['host'])[:64]}, since {since})"
    except (OSError, ValueError, KeyError, TypeError, OverflowError):
        return "another run"


def busy_message(root: Path, holder: str) -> str:
    return (f"{root} is busy: {holder} holds its run lock ({LOCK_FILE}); wait for it to finish, or stop it "
            "(`flwr ls` / `flwr stop RUN_ID`), then run this again")


def _try_lock(fd: int, root: Path, mode: int) -> None:
    """``flock(mode)`` without waiting on a run; :class:`StoreBusy` (and ``fd`` closed) if one holds it."""
    for attempt in range(LOCK_TRIES):
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt + 1 < LOCK_TRIES:
                time.sleep(LOCK_RETRY_S)
    holder = _holder(fd)
    os.close(fd)
    raise StoreBusy(busy_message(root, holder))


@contextmanager
def store_run_lock(root: str | os.PathLike[str], action: str) -> Iterator[None]:
    """Hold ``root``'s run lock for the block, or raise :class:`StoreBusy` at once if a live process holds it.

    A training run (``action='train'``) creates ``root`` (owner-only) if missing, as it would anyway; any
    other action needs an existing store.
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise StoreError(f"{root} exists and is not a directory; pass another --store / store= path")
    if action != "train" and not root.is_dir():
        raise StoreError(f"{root} is not a store (no such directory); pass the store= path of a run")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = lock_path(root)
    for _ in range(10):  # the file was replaced between open and flock: lock the one the path names now
        fd = _open_lock(path, create=True)
        _try_lock(fd, root, fcntl.LOCK_EX)
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    else:
        raise StoreError(f"{path} keeps being replaced; stop whatever rewrites it")
    try:
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "action": action, "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode("utf-8")[:HOLDER_BYTES], 0)
        yield
    finally:
        os.close(fd)  # releases the flock


def check_not_busy(root: str | os.PathLike[str]) -> None:
    """Raise :class:`StoreBusy` if a live process holds ``root``'s run lock; writes nothing.

    What a command checks before it changes a store and submits a run: it fails fast, store unchanged.
    The run itself takes the lock; a run that starts between this check and its own lock is refused there.
    """
    path = lock_path(Path(root))
    try:
        fd = _open_lock(path, create=False)
    except FileNotFoundError:
        return  # never locked: holders create the file
    _try_lock(fd, Path(root), fcntl.LOCK_SH)
    os.close(fd)
