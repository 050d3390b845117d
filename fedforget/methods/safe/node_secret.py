"""A training node's DP secret: 32 random bytes created once in the node's own state directory.

SAFE-DP's noise and Poisson sampling are seeded from HMAC(secret, context), so the node replays them
exactly on a retrain while nobody holding only the run config and the server's store can. The secret
never leaves the node: it is not sent in any message and not written to the store's artifacts or
ledger (in simulation the node's state dir is ``<store>/clients/<partition>/``).

A missing secret (a node that lost its state) is replaced by a new one; a file of the wrong size is
moved aside to ``dp-secret.corrupt`` and replaced the same way. DP adapters trained with the old secret
can then no longer be reproduced on that node (docs/design-decisions.md, "SAFE-DP node secret").
The file is created once, owner-only, by ``store.secret_files.create_once`` (concurrent first uses
agree on one secret); a secret found open to others is narrowed to 0600 with a warning.
"""

from __future__ import annotations

import os
import secrets
from logging import WARNING
from pathlib import Path

from flwr.common.logger import log

from fedforget.methods.safe.dp import SECRET_BYTES
from fedforget.store.secret_files import PRIVATE_FILE, create_once, open_to_others

SECRET_FILE = "dp-secret"


def secret_path(state_dir: Path) -> Path:
    return Path(state_dir) / SECRET_FILE


def node_secret(state_dir: Path) -> bytes:
    """This node's secret, created (owner-only, atomically, first writer wins) when absent or corrupt."""
    path = secret_path(state_dir)
    existing = _read(path)
    if existing is not None and len(existing) == SECRET_BYTES:
        _owner_only(path)
        return existing
    if existing is not None:
        try:
            os.replace(path, path.with_name(SECRET_FILE + ".corrupt"))
        except FileNotFoundError:
            pass  # a concurrent reader moved it aside first
        log(WARNING, "fedforget: %s had %d bytes, not %d; moved aside and replaced: DP adapters trained with the "
            "old secret can no longer be reproduced on this node", path, len(existing), SECRET_BYTES)
    return _create(path)


def _owner_only(path: Path) -> None:
    """A secret others could read is no secret: narrow it to 0600 (a node keeps training) and say so."""
    if path.stat().st_uid == os.getuid() and open_to_others(path):
        os.chmod(path, PRIVATE_FILE)
        log(WARNING, "fedforget: %s was readable by others; narrowed to 0600 (whoever read it can replay this "
            "node's DP noise)", path)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _create(path: Path) -> bytes:
    """A fresh secret, unless a concurrent creator's got there first: one node never trains with two."""
    return create_once(path, secrets.token_bytes(SECRET_BYTES), accept=lambda winner: len(winner) == SECRET_BYTES)
