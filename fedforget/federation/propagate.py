"""``action='propagate'``: tell the owning clients to delete forgotten samples now, without retraining.

Sent by ``fedforget forget --propagate --federation NAME`` right after the request is committed. Every
partition that holds forgotten samples gets the same ``query.forget`` (``query.safeforget`` for SAFE,
which also drops its feature caches) that a retrain sends; each writes the samples to its tombstones
and replies, and the reply is recorded as an acknowledgement. A partition whose node does not answer
within ``round-timeout`` stays pending: the next retrain sends it the same message (its next contact).
A node that holds no forgotten sample but may hold a copy of a purged artifact (it trained on top of
one) and has not confirmed dropping it gets the same message with no samples, so it drops its copies
and confirms (the ``client-copies`` of ``fedforget purge --check``).
"""

from __future__ import annotations

from logging import INFO, WARNING

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.core.config import RunConfig
from fedforget.core.method import Method
from fedforget.federation.control_messages import (
    ForgetAck,
    MalformedMessage,
    answered_partitions,
    partition_queries,
)
from fedforget.federation.forget_messages import forget_messages, record_forget_acks
from fedforget.federation.messaging import send_with_retries
from fedforget.store import Store
from fedforget.store.purge import unconfirmed_copies, visible_partitions


def reachable_partitions(grid: Grid, timeout: float) -> dict[int, int]:
    """partition → node id of the nodes that answer a ``query`` within ``timeout`` (absent ones are left out)."""
    def malformed(reply: Message, exc: MalformedMessage) -> None:
        log(WARNING, "fedforget: node %s answered the partition query with a malformed reply (%s)",
            reply.metadata.src_node_id, exc)

    return answered_partitions(send_with_retries(grid, partition_queries(sorted(grid.get_node_ids())), timeout),
                               malformed)


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
    nodes = reachable_partitions(grid, cfg.round_timeout)
    messages, mark = forget_messages(store, nodes, {**forgotten, **holders}, method.forget_message)
    acks = []
    for reply in send_with_retries(grid, messages, cfg.round_timeout) if messages else []:
        if reply.has_error():
            continue
        try:
            acks.append(ForgetAck.from_record(reply.content))
        except MalformedMessage as exc:  # not an acknowledgement: the partition stays pending
            log(WARNING, "fedforget: node %s acknowledged with a malformed reply (%s)", reply.metadata.src_node_id, exc)
    deleted = record_forget_acks(store, acks, mark)
    missing = sorted(set(forgotten) - set(deleted))
    log(INFO, "fedforget: propagated: partition(s) %s deleted their forgotten samples", sorted(deleted))
    if missing:
        log(WARNING, "fedforget: partition(s) %s did not answer; the next retrain reaches them", missing)
    log(INFO, "fedforget: store written to %s", store.root)
    return deleted
