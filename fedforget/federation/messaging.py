"""Talking to nodes: partition discovery, exchanges with a short poll, a deadline and safe retries.

Every client reply is a pure function of the message and the node's partition (seeds come from the
message), so re-sending a message that was lost in transport cannot change a result:
that is what makes retrying compatible with exactness. A ClientApp that raised is not retried (it
would raise again); the run stops with its reason instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from logging import WARNING

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.federation.carried_config import Value, carry
from fedforget.federation.control_messages import PARTITION_KEY as PARTITION_KEY  # re-exported: replies name it
from fedforget.federation.message_types import CHAIN, FORGET

POLL_SECONDS = 0.05
CHAIN_MESSAGE = CHAIN  # train one LoRA module on given slices (chains, FedShard)
FORGET_MESSAGE = FORGET  # delete forgotten samples for good (every LoRA-family method)
#: Prefix of a train reply's metrics about the model it received (evaluation folded into training).
RECEIVED = "received-"
MAX_ATTEMPTS = 3
#: Transport-level failures worth another attempt: the message or reply objects went missing, or the
#: ClientApp process crashed (e.g. killed for memory) before it could answer.
RETRYABLE = frozenset({ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
                       ErrorCode.CLIENT_APP_CRASHED})


class NodeFailure(RuntimeError):
    """A node replied with an error or did not reply in time; exactness forbids going on silently."""


def _resend_copy(msg: Message) -> Message:
    meta = msg.metadata
    return Message(msg.content, dst_node_id=meta.dst_node_id, message_type=meta.message_type,
                   group_id=meta.group_id or None)


def send_with_retries(grid: Grid, messages: Sequence[Message], timeout: float,
                      attempts: int = MAX_ATTEMPTS) -> list[Message]:
    """:func:`send_slots`, keeping only the messages that were answered (in message order)."""
    return [a for a in send_slots(grid, messages, timeout, attempts) if a is not None]


def send_slots(grid: Grid, messages: Sequence[Message], timeout: float,
               attempts: int = MAX_ATTEMPTS) -> list[Message | None]:
    """Push ``messages`` and pull their replies, polling every 50 ms (``HttpGrid.send_and_receive``
    sleeps 3 s per pull). A message is sent again, up to ``attempts`` times in all, when its reply
    carries a :data:`RETRYABLE` error, or when it has waited much longer than its peers (a SuperNode
    whose reply upload failed never answers: seen with SQLite "database is locked" on a loaded
    SuperLink). The first reply to any copy counts; later ones are ignored.

    Returns, for each message, its reply (error replies included) or None if none came before ``timeout``.
    """
    if not messages:
        return []
    start = time.monotonic()
    deadline = start + timeout
    copies: dict[str, int] = {}  # pushed message id -> slot
    tries = [0] * len(messages)
    sent_at = [0.0] * len(messages)
    answer: list[Message | None] = [None] * len(messages)
    latencies: list[float] = []

    def push(slots: list[int], fresh: bool) -> None:
        batch = [messages[i] if not fresh else _resend_copy(messages[i]) for i in slots]
        ids = list(grid.push_messages(batch))
        if len(ids) != len(batch) or not all(ids):
            raise NodeFailure(f"only {len([i for i in ids if i])} of {len(batch)} messages could be pushed")
        now = time.monotonic()
        for slot, mid in zip(slots, ids, strict=True):
            copies[mid] = slot
            tries[slot] += 1
            sent_at[slot] = now

    def resend(slot: int, why: str) -> None:
        meta = messages[slot].metadata
        log(WARNING, "fedforget: re-sending a %s message to node %s after %s (attempt %d of %d)",
            meta.message_type, meta.dst_node_id, why, tries[slot] + 1, attempts)
        push([slot], fresh=True)

    push(list(range(len(messages))), fresh=False)
    while any(a is None for a in answer):
        live = [mid for mid, slot in copies.items() if answer[slot] is None]
        for reply in grid.pull_messages(live):
            slot = copies.get(reply.metadata.reply_to_message_id)
            if slot is None or answer[slot] is not None:
                continue  # a late reply to a copy that was already answered
            if reply.has_error() and reply.error.code in RETRYABLE and tries[slot] < attempts:
                resend(slot, f"[{reply.error.code}] {reply.error.reason}")
                continue
            answer[slot] = reply
            latencies.append(time.monotonic() - sent_at[slot])
        now = time.monotonic()
        if now > deadline:
            break
        patience = _patience(latencies, timeout, attempts)
        for slot, a in enumerate(answer):
            if a is None and tries[slot] < attempts and now - sent_at[slot] > patience:
                resend(slot, f"no reply for {now - sent_at[slot]:.0f} s")
        time.sleep(POLL_SECONDS)
    return answer


#: Never re-send a silent message sooner than this, however fast its peers answered.
MIN_PATIENCE_S = 120.0


def _patience(latencies: list[float], timeout: float, attempts: int) -> float:
    """How long a message may stay silent before it is sent again: 4x the slowest reply so far
    (at least :data:`MIN_PATIENCE_S`), or an equal share of the timeout while nothing has answered."""
    share = timeout / attempts
    if not latencies:
        return max(MIN_PATIENCE_S, share)
    return max(MIN_PATIENCE_S, 4 * max(latencies))


def exchange(grid: Grid, messages: Sequence[Message], timeout: float) -> list[Message]:
    """:func:`send_with_retries`, then raise :class:`NodeFailure` unless every node answered cleanly."""
    replies = send_with_retries(grid, messages, timeout)
    check_replies(replies)
    if len(replies) != len(messages):
        raise NodeFailure(f"{len(messages) - len(replies)} node(s) did not reply within {timeout:.0f} s")
    return replies


def check_replies(replies: Sequence[Message]) -> None:
    errors = [r for r in replies if r.has_error()]
    if errors:
        first = errors[0].error
        raise NodeFailure(f"{len(errors)} node(s) replied with an error; first: [{first.code}] {first.reason}")


class ReliableGrid(Grid):
    """The runtime's Grid, with :func:`send_with_retries` as its ``send_and_receive``.

    Flower's strategies call ``send_and_receive``; wrapping the Grid gives them the short poll and the
    safe retries without re-implementing their round loop. Given the run's config, every message it pushes
    carries it (:mod:`fedforget.federation.carried_config`): the nodes train by the strategy as it was built.
    """

    def __init__(self, inner: Grid, run_config: Mapping[str, Value] | None = None) -> None:
        self.inner = inner
        self.run_config = dict(run_config) if run_config is not None else None

    def set_run(self, run) -> None:  # noqa: ANN001
        self.inner.set_run(run)

    @property
    def run(self):  # noqa: ANN201
        return self.inner.run

    def create_message(self, *args, **kwargs) -> Message:  # noqa: ANN002, ANN003
        return self.inner.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        if self.run_config is None:
            return self.inner.push_messages(messages)
        return self.inner.push_messages([carry(m, self.run_config) for m in messages])

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.inner.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return send_with_retries(self, list(messages), timeout if timeout is not None else float("inf"))


def to_record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    from flwr.app import Array

    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def to_numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def record_bytes(record: ArrayRecord) -> int:
    """The tensor payload of a record, without framing: what the traffic figures count."""
    return int(sum(v.nbytes for v in to_numpy(record).values()))


def payload_bytes(content: RecordDict) -> int:
    """Tensor bytes a message really carries (every ArrayRecord in it)."""
    return sum(record_bytes(record) for record in content.array_records.values())
