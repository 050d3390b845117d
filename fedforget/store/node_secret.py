"""A training node's DP secret: 32 random bytes created once in the node's own state directory.

SAFE-DP's noise and Poisson sampling are seeded from HMAC(secret, context), so the node replays them
exactly on a retrain while nobody holding only the run config and the server's store can. The secret
never leaves the node: it is not sent in any message and not written to the store's artifacts or
ledger (in simulation the node's state dir is ``<store>/clients/<partition>/``).

A missing secret (a node that lost its state) is replaced by a new one; a file of the wrong size is
moved aside to ``dp-secret.corrupt`` and replaced the same way. DP adapters trained with the old secret
can then no longer be reproduced on that node (docs/design-decisions.md, "SAFE-DP node secret").
"""

from __future__ import annotations

import os
import secrets
from logging import WARNING
from pathlib import Path

from flwr.common.logger import log

from fedforget.core.safe_dp import SECRET_BYTES

SECRET_FILE = "dp-secret"


def secret_path(state_dir: Path) -> Path:
    return Path(state_dir) / SECRET_FILE


def node_secret(state_dir: Path) -> bytes:
    """This node's secret, created (owner-only, atomically, first writer wins) when absent or corrupt."""
    path = secret_path(state_dir)
    existing = _read(path)
    if existing is not None and len(existing) == SECRET_BYTES:
        return existing
    if existing is not None:
        os.replace(path, path.with_name(SECRET_FILE + ".corrupt"))
        log(WARNING, "fedforget: %s had %d bytes, not %d; moved aside and replaced: DP adapters trained with the "
            "old secret can no longer be reproduced on this node", path, len(existing), SECRET_BYTES)
    return _create(path)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _create(path: Path) -> bytes:
    """Write a fresh secret to a private temp file and hard-link it into place: a concurrent creator's
    secret wins if it got there first, so one node never trains with two secrets."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret = secrets.token_bytes(SECRET_BYTES)
    tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secret)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            winner = _read(path)
            if winner is not None and len(winner) == SECRET_BYTES:
                return winner
            raise
    finally:
        os.unlink(tmp)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the link itself survives a crash
    finally:
        os.close(directory)
    return secret
