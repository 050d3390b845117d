"""Owner-only files and directories: the receipt signing key, a node's DP secret, receipts, state dirs.

``Path.mkdir(parents=True, mode=0o700)`` applies the mode to the last component only; the parents it
creates get the umask's default (usually 0755). :func:`mkdir_private` creates every missing component
0700 instead. :func:`create_once` writes a secret so that concurrent first uses agree on one: a
private temp file (``O_CREAT|O_EXCL``, 0600), fsynced, is hard-linked into place, which either makes
the whole file appear or fails because another writer's file is already there, whose bytes are then
read (at most :data:`MAX_SECRET_BYTES`, a regular file only); nobody reads a half-written secret and nobody's
secret is silently replaced.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from fedforget.store.atomic import fsync_dir
from fedforget.store.bounded_read import read_bounded

SECRETS_ENV = "FEDFORGET_SECRETS"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
#: No secret comes near this (a PEM key is about 120 bytes); a path to a device or a huge file is refused.
MAX_SECRET_BYTES = 64 * 2**10


def mkdir_private(path: Path) -> Path:
    """Create ``path`` and every missing parent owner-only (0700); tighten ``path`` itself to 0700 when it
    already exists, belongs to this user and is open to others. Existing parents are left as they are."""
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue
        os.chmod(directory, PRIVATE_DIR)  # a umask that strips owner bits must not leave it unusable
    info = path.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"{path} is not a directory")
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        os.chmod(path, PRIVATE_DIR)
    return path


def open_to_others(path: Path) -> int:
    """The permission bits of ``path`` that group or others hold (0 for an owner-only file)."""
    return stat.S_IMODE(Path(path).stat().st_mode) & 0o077


def create_once(path: Path, data: bytes, accept: Callable[[bytes], bool] = lambda _: True) -> bytes:
    """Write ``data`` to ``path`` (0600, parents 0700) unless a file is there; return what ``path`` holds.

    When another writer's file won the race (or was there already), its bytes are returned if
    ``accept(bytes)`` says they are usable; otherwise :class:`FileExistsError` says the file is there
    but unusable, and the caller decides (e.g. move it aside and call again)."""
    path = Path(path)
    mkdir_private(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            winner = read_bounded(path, MAX_SECRET_BYTES, "secret")
            if accept(winner):
                return winner
            raise FileExistsError(f"{path} exists but does not hold a usable secret") from None
    finally:
        os.unlink(tmp)
    fsync_dir(path.parent)
    return data


def secrets_dir() -> Path:
    """The coordinator's secrets directory: ``$FEDFORGET_SECRETS``, else ``${XDG_CONFIG_HOME:-~/.config}/fedforget``."""
    if os.environ.get(SECRETS_ENV):
        return Path(os.path.expanduser(os.environ[SECRETS_ENV]))
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "fedforget"
