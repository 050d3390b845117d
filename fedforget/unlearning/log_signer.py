"""This process is the coordinator: its ledger writes are signed with the receipt key, and each signed head
is recorded in the secrets directory (``fedforget.store.log_record``).

The CLI (before any command runs) and the forget service call :func:`act_as_coordinator` before they open a
store; a ServerApp never
does, so the key stays with the coordinator and a training run's entries wait for its next signed head.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fedforget.store.log import head_signer, set_head_signer
from fedforget.store.log_record import write_record


class CoordinatorSigner:
    """Signs with the coordinator's receipt key (loaded at the first signing, made then if none exists yet)."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, int, int], Any] = {}

    def sign(self, data: bytes) -> tuple[bytes, bytes]:
        from fedforget.unlearning.receipt import _public_raw, key_path, load_or_create_key

        path = key_path()
        try:
            st = os.stat(path)
            at = (str(path), st.st_ino, st.st_mtime_ns)  # a rotated or moved key is loaded again
        except OSError:
            at = None
        key = self._keys.get(at) if at is not None else None
        if key is None:
            key = load_or_create_key()
            st = os.stat(key_path())
            self._keys = {(str(key_path()), st.st_ino, st.st_mtime_ns): key}
        return _public_raw(key), key.sign(data)

    def after_commit(self, root: Any, head: dict[str, Any], requests: bool = False) -> None:
        try:
            write_record(Path(root), head, requests)
        except OSError:
            pass  # the head is in the store; only the outside record of it lags until the next signing

    def trusts(self, public: bytes) -> bool | None:
        """Whether ``public`` is the coordinator's key (or one it rotated away from); None when this machine
        holds no coordinator key to compare with."""
        from fedforget.unlearning.receipt import coordinator_public_key, key_path, load_public_key, primary_key_path

        try:
            if not os.path.lexists(key_path()):
                return None
            if public == coordinator_public_key():
                return True
        except (OSError, ValueError):  # a key that cannot be used is refused by the command that signs
            return None
        path = primary_key_path()
        for kept in sorted(path.parent.glob(f"{path.stem}.*.pub"))[:100]:
            try:
                if load_public_key(kept) == public:
                    return True
            except (OSError, ValueError):
                continue
        return False


def act_as_coordinator() -> None:
    """Sign this process's ledger writes from now on (idempotent)."""
    if not isinstance(head_signer(), CoordinatorSigner):
        set_head_signer(CoordinatorSigner())
