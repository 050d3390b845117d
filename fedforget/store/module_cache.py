"""A node's cache of frozen chain modules, so a chain message can name a module by sha256 instead of carrying it.

Each entry is a stored artifact's bytes verbatim, ``<state-dir>/module-cache/<sha256>.safetensors``:
written atomically, trusted only while its bytes still hash to its name (a corrupt or missing entry
is a miss, and the node asks the server again), and named by the artifact's sha256 so a purge of an
artifact's files on a node is a lookup by name. Decoding stays with the caller (safetensors only).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from fedforget.store.atomic import atomic_write_bytes
from fedforget.store.secret_files import mkdir_private

CACHE_DIR = "module-cache"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_sha256(text: str) -> bool:
    """Whether ``text`` is a lowercase hex sha256 (names from the network become file names)."""
    return bool(_SHA256.fullmatch(text))


def cache_path(state_dir: Path, sha256: str) -> Path:
    if not is_sha256(sha256):
        raise ValueError(f"{sha256[:80]!r} is not a sha256; the server sent a malformed module name")
    return Path(state_dir) / CACHE_DIR / f"{sha256}.safetensors"


def keep_module(state_dir: Path, sha256: str, data: bytes) -> None:
    """Check ``data`` against its name and keep it (unless an intact copy is already there)."""
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"module {sha256[:12]}… arrived with bytes that do not match its sha256")
    path = cache_path(state_dir, sha256)
    if cached_module(state_dir, sha256) is None:
        mkdir_private(path.parent)
        atomic_write_bytes(path, data)


def cached_module(state_dir: Path, sha256: str) -> bytes | None:
    """The cached bytes of ``sha256``, or None when absent or no longer matching their name."""
    try:
        data = cache_path(state_dir, sha256).read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None
