"""The chains' server side of module shipping: which frozen chain modules travel in a ``train.chain`` message;
each goes to a node once per run.

A chain position trains on top of frozen modules that are stored artifacts, so the message names them by
sha256 (``prefix-sha256``) and carries the bytes (``modules``: sha256 → the artifact file as uint8) only
for the ones the server has not yet sent that partition in this run. The node keeps what it receives in
its module cache (:mod:`fedforget.store.module_cache`); a node that lacks one anyway (a fresh state dir,
a corrupt file) answers with a ``need`` record naming them and gets the message again with the bytes of
every module it names; the server then assumes that node holds nothing. The start of a new module is
seeded, so on a position's first round the node rebuilds it (``init-seed``) instead of receiving it. The
message's keys are :mod:`fedforget.federation.module_messages`'s, and the node's side is
:mod:`fedforget.federation.module_training`, shared with FedShard.

``FEDFORGET_CLIENT_CACHE=off`` sends every module and every start state in full and tells the node not
to keep anything: the reference a cached run must match bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from flwr.app import Message

from fedforget.federation.control_messages import MalformedMessage, ModuleNeed
from fedforget.store.module_cache import is_sha256
from fedforget.store.store import Store

CACHE_ENV = "FEDFORGET_CLIENT_CACHE"


def client_cache_enabled() -> bool:
    """Off only when ``FEDFORGET_CLIENT_CACHE`` is 0/off/false/no."""
    return os.environ.get(CACHE_ENV, "on").strip().lower() not in {"0", "off", "false", "no"}


class ModuleShipping:
    """The server's memory of which modules each partition got in this run."""

    def __init__(self, store: Store, enabled: bool | None = None) -> None:
        self.store = store
        self.enabled = client_cache_enabled() if enabled is None else enabled
        self.sent: dict[int, set[str]] = {}
        self._bytes: dict[str, np.ndarray] = {}

    def module_bytes(self, sha256: str) -> np.ndarray:
        """A module's file bytes, read from the store once per run.

        Held for the rest of the run: a request applied meanwhile may purge the file of a module this run
        builds on (what it builds on it is then recorded stale and purged when the run ends), and the run
        must still be able to send the bytes it started from."""
        if sha256 not in self._bytes:
            self._bytes[sha256] = np.frombuffer(self.store.artifact_bytes(sha256), dtype=np.uint8)
        return self._bytes[sha256]

    def carry(self, partition: int, shas: Sequence[str], everything: bool = False) -> dict[str, np.ndarray]:
        """The module bytes a message to ``partition`` must carry: the ones not sent to it yet (all of
        them when ``everything``, or when the cache is off)."""
        held = self.sent.setdefault(partition, set())
        out = {sha: self.module_bytes(sha) for sha in shas if everything or not self.enabled or sha not in held}
        if self.enabled:
            held.update(out)
        return out

    def lost(self, partition: int) -> None:
        """``partition`` lacked a module it was sent: assume it holds none of them any more."""
        self.sent.pop(partition, None)


def need_of(reply: Message) -> list[str] | None:
    """The sha256s a node asks for, or None when the reply is not a ``need``."""
    if reply.has_error() or not ModuleNeed.in_record(reply.content):
        return None
    return list(ModuleNeed.from_record(reply.content).sha256)


def check_need_reply(reply: Message, partition: int, named: Sequence[str]) -> str | None:
    """Why a ``need`` reply is unacceptable (None if it is fine): it must come from the partition
    asked and name only modules the message named."""
    try:
        need = ModuleNeed.from_record(reply.content)
    except MalformedMessage:
        return "malformed need"
    pid, shas = need.partition, list(need.sha256)
    if pid != partition:
        return f"need claims partition {pid}, not {partition}"
    if not shas or not all(is_sha256(s) for s in shas) or not set(shas) <= set(named):
        return "need names modules the message did not name"
    return None
