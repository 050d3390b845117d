"""The one forget sender: a retrain's first step and ``forget --propagate`` both send through :func:`send_forget`.

Every method's forget message (the registry entry's ``forget_message``: ``query.forget``, or SAFE's
``query.safeforget``, answered by the nodes' one handler) carries the samples and the purge list, goes out
under the common failure policy (:func:`~fedforget.federation.failover.exchange_redo_or_exclude`), and each
acknowledgement is recorded (``status``, ``receipt``). What differs is what a partition that does not confirm
means: a retrain stops (nothing rebuilt from data a node still holds is ever served); a propagation leaves it
pending, without waiting for it to come back (the next retrain is its next contact).
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


def send_forget(grid: Grid, store: Store, nodes: dict[int, int], targets: dict[int, list[int]], message_type: str,
                timeout: float, rejoin: float | None = None) -> tuple[dict[int, int], set[int]]:
    """``message_type`` to each target partition's node (its samples; every purged sha256, so it drops its copies
    of purged artifacts too), under the failure policy (``rejoin``: how long a lost node may take to come back;
    None: the run's window). Records the acknowledgements; returns partition → samples it deleted now, and the
    target partitions that did not confirm (those without a node in ``nodes`` among them)."""
    from fedforget.store.acks import record_acks
    from fedforget.store.purge import purge_mark, purged_sha_list

    sent = sorted(p for p in targets if p in nodes)
    if not sent:
        return {}, set(targets)
    ledger = store.ledger()
    try:
        mark = purge_mark(ledger.db)  # read before the sha256s: a request purged in between stays unconfirmed
    finally:
        ledger.close()
    shas = tuple(purged_sha_list(store))
    messages = [Message(ForgetSamples(tuple(targets[p]), shas).to_record(), dst_node_id=nodes[p],
                        message_type=message_type) for p in sent]
    replies, lost = exchange_redo_or_exclude(grid, nodes, messages, sent, timeout, malformed_ack, rejoin)
    deleted = {ack.partition: ack.deleted for ack in (ForgetAck.from_record(r.content) for r in replies if r)}
    ledger = store.ledger()
    try:
        record_acks(ledger, deleted, copies_up_to=mark)
    finally:
        ledger.close()
    return deleted, lost | (set(targets) - set(nodes))


def forget_before_retrain(grid: Grid, run: ServerRun, ledger: Ledger, message_type: str) -> int:
    """The first step of every retrain from scratch: the owners delete every sample forgotten up to the
    last request, for good, before anything is trained again. Returns that request (the watermark the
    rebuilt artifacts are recorded with)."""
    watermark = ledger.last_request()
    forgotten = ledger.forgotten_by_partition(watermark)
    if not forgotten:
        return watermark
    deleted, lost = send_forget(grid, run.store, run.nodes, forgotten, message_type,
                                run.cfg.round_timeout)
    if lost:
        raise NodeFailure(f"partition(s) {sorted(lost)} did not confirm deleting their forgotten samples; the "
                          "retrain stops (nothing half-done is served); run `fedforget retrain` when they are back")
    log(INFO, "fedforget: clients deleted %d sample(s) for good (%s)", sum(deleted.values()),
        ", ".join(f"partition {p}: {n}" for p, n in sorted(deleted.items())))
    return watermark
