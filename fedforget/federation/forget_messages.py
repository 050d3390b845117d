"""Forget propagation inside a retrain: the owners delete forgotten samples before anything is rebuilt.

Every method sends its forget message (the registry entry's ``forget_message``: ``query.forget``, or a
method's own type whose handler also drops what that method caches on the node) from here, with the
purge list, under the common failure policy: a partition that does not confirm stops the retrain, so
nothing rebuilt from data a node still holds is ever served. The replies are recorded as
acknowledgements (``status``, ``receipt``).
"""

from __future__ import annotations

from logging import INFO
from typing import TYPE_CHECKING

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.federation.control_messages import ForgetAck, ForgetSamples, MalformedMessage
from fedforget.federation.failover import exchange_redo_or_exclude
from fedforget.federation.messaging import NodeFailure

if TYPE_CHECKING:
    from fedforget.federation.run_setup import ServerRun
    from fedforget.store import Store
    from fedforget.store.ledger import Ledger


def malformed_ack(reply: Message, _: int) -> str | None:
    """Why a forget reply is not an acknowledgement (None when it is one): it is then redone like a lost one."""
    try:
        ForgetAck.from_record(reply.content)
    except MalformedMessage as exc:
        return f"malformed acknowledgement: {exc}"
    return None


def forget_messages(store: Store, nodes: dict[int, int], targets: dict[int, list[int]],
                    message_type: str) -> tuple[list[Message], int]:
    """The forget message for each target partition (its samples; every purged sha256, so it drops its copies
    of purged artifacts too), and the purge mark its acknowledgements confirm. Partitions without a node in
    ``nodes`` are left out. Written once for a retrain and for ``forget --propagate``."""
    from fedforget.store.purge import purge_mark, purged_sha_list

    ledger = store.ledger()
    try:
        mark = purge_mark(ledger.db)  # read before the sha256s: a request purged in between stays unconfirmed
    finally:
        ledger.close()
    shas = tuple(purged_sha_list(store))
    messages = [Message(ForgetSamples(tuple(ids), shas).to_record(), dst_node_id=nodes[p], message_type=message_type)
                for p, ids in sorted(targets.items()) if p in nodes]
    return messages, mark


def record_forget_acks(store: Store, acks: list[ForgetAck], mark: int) -> dict[int, int]:
    """Record the acknowledgements ``status`` and ``receipt`` show; partition → samples it deleted now."""
    from fedforget.store.acks import record_acks

    deleted = {ack.partition: ack.deleted for ack in acks}
    ledger = store.ledger()
    try:
        record_acks(ledger, deleted, copies_up_to=mark)
    finally:
        ledger.close()
    return deleted


def send_forget(grid: Grid, run: ServerRun, forgotten: dict[int, list[int]], message_type: str) -> dict[int, int]:
    """The method's forget message (``message_type``) to every client holding forgotten samples; they delete
    them for good."""
    if not forgotten:
        return {}
    messages, mark = forget_messages(run.store, run.nodes, forgotten, message_type)
    replies, lost = exchange_redo_or_exclude(grid, run.nodes, messages, sorted(forgotten), run.cfg.round_timeout,
                                             malformed_ack)
    if lost:
        raise NodeFailure(f"partition(s) {sorted(lost)} did not confirm deleting their forgotten samples; the "
                          "retrain stops (nothing half-done is served); run `fedforget retrain` when they are back")
    deleted = record_forget_acks(run.store, [ForgetAck.from_record(r.content) for r in replies], mark)
    log(INFO, "fedforget: clients deleted %d sample(s) for good (%s)", sum(deleted.values()),
        ", ".join(f"partition {p}: {n}" for p, n in sorted(deleted.items())))
    return deleted


def forget_before_retrain(grid: Grid, run: ServerRun, ledger: Ledger, message_type: str) -> int:
    """The first step of every retrain from scratch: the owners delete every sample forgotten up to the
    last request, for good, before anything is trained again. Returns that request (the watermark the
    rebuilt artifacts are recorded with)."""
    watermark = ledger.last_request()
    send_forget(grid, run, ledger.forgotten_by_partition(watermark), message_type)
    return watermark
