"""Talking to nodes: partition discovery, exchanges with a short poll and a deadline, reply checks."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

POLL_SECONDS = 0.05
PARTITION_KEY = "partition-id"


class NodeFailure(RuntimeError):
    """A node replied with an error or did not reply in time; exactness forbids going on silently."""


def exchange(grid: Grid, messages: Sequence[Message], timeout: float) -> list[Message]:
    """Push ``messages`` and pull every reply, polling every 50 ms (``send_and_receive`` sleeps 3 s
    per pull in deployment). Raises :class:`NodeFailure` on a missing or error reply."""
    if not messages:
        return []
    ids = [mid for mid in grid.push_messages(list(messages)) if mid]
    if len(ids) != len(messages):
        raise NodeFailure(f"only {len(ids)} of {len(messages)} messages could be pushed")
    pending, replies = set(ids), []
    deadline = time.monotonic() + timeout
    while pending:
        for reply in grid.pull_messages(list(pending)):
            pending.discard(reply.metadata.reply_to_message_id)
            replies.append(reply)
        if pending:
            if time.monotonic() > deadline:
                raise NodeFailure(f"{len(pending)} node(s) did not reply within {timeout:.0f} s")
            time.sleep(POLL_SECONDS)
    check_replies(replies)
    return replies


def check_replies(replies: Sequence[Message]) -> None:
    errors = [r for r in replies if r.has_error()]
    if errors:
        first = errors[0].error
        raise NodeFailure(f"{len(errors)} node(s) replied with an error; first: [{first.code}] {first.reason}")


def discover_partitions(grid: Grid, timeout: float) -> dict[int, int]:
    """Map partition id → node id with a ``query`` round (node ids are random per run).

    Waits until every one of the ``num-partitions`` partitions the nodes report has a node.
    """
    deadline = time.monotonic() + timeout
    found: dict[int, int] = {}
    expected: int | None = None
    asked: set[int] = set()
    while True:
        new_nodes = [n for n in grid.get_node_ids() if n not in asked]
        if new_nodes:
            query = [
                Message(RecordDict({"config": ConfigRecord({"ask": "partition"})}), dst_node_id=n,
                        message_type=MessageType.QUERY)
                for n in sorted(new_nodes)
            ]
            for reply in exchange(grid, query, max(1.0, deadline - time.monotonic())):
                info = reply.content["info"]
                pid, num = int(info[PARTITION_KEY]), int(info["num-partitions"])
                if expected is not None and num != expected:
                    raise NodeFailure(f"nodes disagree on num-partitions ({expected} vs {num})")
                expected = num
                if pid in found and found[pid] != reply.metadata.src_node_id:
                    raise NodeFailure(f"two nodes claim partition {pid}; give each SuperNode its own partition-id")
                found[pid] = reply.metadata.src_node_id
            asked.update(new_nodes)
        if expected is not None and len(found) == expected:
            if sorted(found) != list(range(expected)):
                raise NodeFailure(f"partition ids {sorted(found)} are not 0..{expected - 1}")
            return found
        if time.monotonic() > deadline:
            have = "none" if expected is None else f"{len(found)} of {expected}"
            raise NodeFailure(f"timed out waiting for nodes: partitions seen {have}")
        time.sleep(0.2)


def to_numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}
