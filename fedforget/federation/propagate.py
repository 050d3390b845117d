"""``action='propagate'``: tell the owning clients to delete forgotten samples now, without retraining.

Sent by ``fedforget forget --propagate --federation NAME`` right after the request is committed. The nodes
online are found by the run's discovery (:mod:`fedforget.federation.discovery`), and every partition that holds
forgotten samples gets, through the one forget sender (:func:`~fedforget.federation.forget_messages.send_forget`),
the same message a retrain sends (``query.forget``, ``query.safeforget`` for SAFE); each writes the samples to
its tombstones and replies, and the reply is recorded as an acknowledgement. A partition whose node does not
answer within ``round-timeout`` stays pending: the next retrain sends it the same message (its next contact).
A node that holds no forgotten sample but may hold a copy of a purged artifact (it trained on top of
one) and has not confirmed dropping it gets the same message with no samples, so it drops its copies
and confirms (the ``client-copies`` of ``fedforget purge --check``).
"""

from __future__ import annotations

from logging import INFO, WARNING

from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.core.config import RunConfig
from fedforget.core.method import Method
from fedforget.federation.discovery import find_partitions
from fedforget.federation.forget_messages import send_forget
from fedforget.store import Store
from fedforget.store.purge import unconfirmed_copies, visible_partitions


def run_propagation(grid: Grid, cfg: RunConfig, method: Method) -> dict[int, int]:
    """Send every reachable owner its forgotten samples, in ``method``'s forget message; record and return
    partition → newly deleted."""
    store = Store.open(cfg.store)
    ledger = store.ledger()
    try:
        forgotten = ledger.forgotten_by_partition()
        unseen = unconfirmed_copies(ledger.db, visible_partitions(store.root), method)  # what `purge --check` reports
        holders = {p: [] for p in unseen if p not in forgotten}
    finally:
        ledger.close()
    nodes = find_partitions(grid, cfg.round_timeout)
    deleted, _ = send_forget(grid, store, nodes, {**forgotten, **holders}, method.forget_message,
                             cfg.round_timeout, rejoin=0.0)  # an absent node stays pending: not waited for
    missing = sorted(set(forgotten) - set(deleted))
    log(INFO, "fedforget: propagated: partition(s) %s deleted their forgotten samples", sorted(deleted))
    if missing:
        log(WARNING, "fedforget: partition(s) %s did not answer; the next retrain reaches them", missing)
    log(INFO, "fedforget: store written to %s", store.root)
    return deleted
