"""``fedforget verify --federation NAME``: the from-scratch reference trained by the deployed nodes themselves.

Nodes that hold their own records (``data-dir``) are the only place their rows exist, so the reference is a
``flwr run`` of the store's recorded config (``action='train'``, ``reference=true``) into a scratch store
beside the store (``<store>/verify-scratch/store``, a path the ServerApp writes as it writes the store). The
nodes train on what they hold minus their tombstones; so every request must have reached every node that
holds its samples first (the ledger's acknowledgements, :mod:`fedforget.store.acks`). ``reference=true``
makes a node check its records as at a retrain and keep its ``registered-records.json``, so the reference
changes nothing the store's next retrain checks. The comparison is :func:`~fedforget.unlearning.verify.verify_store`'s,
plus the nodes' registration against the store's manifest (same names, same plan). The scratch area is
removed afterwards.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

from rich.console import Console

from fedforget.core.config import stored_run_config
from fedforget.core.record_ids import store_record_key
from fedforget.federation.client_site import VERIFY_SCRATCH
from fedforget.federation.record_key import hand_over
from fedforget.methods.registry import store_method
from fedforget.store import Store
from fedforget.store.acks import request_acks
from fedforget.store.ledger import LedgerUsageError
from fedforget.store.lock import check_not_busy
from fedforget.unlearning.flwr_runner import flwr_run
from fedforget.unlearning.retrain import submitted_config
from fedforget.unlearning.user_app import store_app
from fedforget.unlearning.verify import verify_store

#: The scratch area inside the store: the reference store, and what a method's reference run reads (a plan file).
SCRATCH = VERIFY_SCRATCH
#: How many pending requests a refusal names.
SHOWN = 5


class NotDelivered(LedgerUsageError):
    """A forget request has not reached every node holding its samples: the nodes would still train on them."""


class ReferenceFailed(Exception):
    """The reference run through the federation did not finish."""


def pending_requests(store: Store) -> dict[int, list[int]]:
    """request → the partitions holding its samples that have not acknowledged deleting them."""
    ledger = store.ledger()
    try:
        return {r: a["pending"] for r, a in request_acks(ledger).items() if a["pending"]}
    finally:
        ledger.close()


def check_delivered(store: Store, federation: str) -> None:
    """Refuse (one line) while a request has not reached every node that holds its samples; the line names the
    command that delivers them, as it can be run (``forget --propagate`` alone propagates what is recorded)."""
    pending = pending_requests(store)
    if pending:
        shown = ", ".join(f"#{r} (partition(s) {', '.join(map(str, p))})" for r, p in list(pending.items())[:SHOWN])
        where = f"--store {shlex.quote(str(store.root))} --federation {shlex.quote(federation)}"
        raise NotDelivered(f"request(s) {shown}{', …' if len(pending) > SHOWN else ''} have not reached the nodes "
                           f"that hold their samples; run `fedforget forget {where} --propagate` (or "
                           f"`fedforget retrain {where}`) first, then verify")


def reference_config(store: Store, extra: dict[str, Any]) -> str:
    """The store's recorded config as a training reference run (``store`` is added by :func:`flwr_run`)."""
    config = stored_run_config(store.manifest()["config"])
    config.update({"action": "train", "reference": True, **extra})
    return submitted_config(store, config)


def federation_reference(federation: str, console: Console):  # noqa: ANN201
    """A :data:`~fedforget.unlearning.verify.Reference` that trains through ``federation``."""

    def run(store: Store, _workdir: Path, _forgotten: dict[int, list[int]]) -> tuple[Store, set[int]]:
        from fedforget.unlearning.evaluate import stored_config

        area = store.root / SCRATCH
        scratch_root = area / "store"
        config: dict[str, Any] = {}
        secretless: set[int] = set()
        method = store_method(store.manifest())
        if method is not None and method.prepare_scratch:  # e.g. FedShard's stored tree, as a file the ServerApp reads
            cfg = stored_config(store)
            secretless = method.prepare_scratch(store, cfg, scratch_root, area, config)
        hand_over(scratch_root, store_record_key(store.manifest()))  # the nodes' ids keyed as the store's are
        code, log_path = flwr_run(federation, reference_config(store, config), str(scratch_root), console,
                                  app=store_app(store))
        if code != 0 or not (scratch_root / "manifest.json").is_file():
            kept = store.root / "verify-run.log"
            shutil.copyfile(log_path, kept)
            raise ReferenceFailed(f"the reference run through {federation} did not finish (flwr exit code {code}); "
                                  f"its log is {kept}")
        return Store.open(scratch_root), secretless

    return run


def verify_through(store: Store, federation: str, console: Console, include_all: bool = False) -> dict[str, Any]:
    """``verify --federation``: refuse until every request reached its nodes, then compare with their reference."""
    check_not_busy(store.root)
    check_delivered(store, federation)
    area = store.root / SCRATCH
    shutil.rmtree(area, ignore_errors=True)  # what a killed verify left
    area.mkdir(mode=0o700)
    try:
        result = verify_store(store, include_all=include_all, reference=federation_reference(federation, console))
    finally:
        shutil.rmtree(area, ignore_errors=True)
    return {**result, "federation": federation}
