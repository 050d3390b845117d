"""Which node holds which partition: the one loop that asks the online nodes, used by registration at the
start of a run, by failover to find a partition's node mid-run, and by ``forget --propagate``.

Node ids are given by the runtime (random per run, new for a restarted SuperNode), so partitions are learnt
from the nodes: each node asked answers for the partition it holds, in the ``info`` record that the
registration and the partition query's answers share (``partition-id``). The loop asks every online node
it may ask, once it has answered cleanly, and keeps asking the ones that appear (or answered with an error)
until the caller has what it needs or the deadline passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from logging import WARNING

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.federation.control_messages import MalformedMessage, PartitionInfo, partition_queries
from fedforget.federation.messaging import send_slots

#: (grid, messages, timeout) → a reply (or None) per message
Send = Callable[[Grid, Sequence[Message], float], Sequence[Message | None]]


def partition_of(reply: Message) -> int | None:
    """The partition a node's answer names (None: not an answer; logged)."""
    try:
        return PartitionInfo.from_record(reply.content).partition
    except MalformedMessage as exc:
        log(WARNING, "fedforget: node %s answered the partition query with a malformed reply (%s)",
            reply.metadata.src_node_id, exc)
        return None


def discover(grid: Grid, timeout: float, *, ask: Callable[[Sequence[int]], list[Message]] = partition_queries,
             read: Callable[[Message], int | None] = partition_of,
             done: Callable[[dict[int, int]], bool] = lambda found: True,
             may_ask: Callable[[int], bool] = lambda node: True, send: Send = send_slots,
             pause: float = 0.2) -> dict[int, int]:
    """partition → node id of the nodes that answer ``ask``'s query (``read`` names the partition, or refuses
    by raising). Nodes online and ``may_ask`` are asked, each until it answers cleanly; a new round asks
    the ones that came online meanwhile, until ``done(found)`` or ``timeout`` (every node is asked at least once).
    """
    deadline = time.monotonic() + timeout
    answered: set[int] = set()
    found: dict[int, int] = {}
    while True:
        new = sorted(n for n in grid.get_node_ids() if n not in answered and may_ask(n))
        if new:
            for reply in send(grid, ask(new), max(1.0, deadline - time.monotonic())):
                if reply is None or reply.has_error():
                    continue
                answered.add(reply.metadata.src_node_id)
                partition = read(reply)
                if partition is not None:
                    found[partition] = reply.metadata.src_node_id
        if done(found) or time.monotonic() >= deadline:
            return found
        time.sleep(pause)


def find_partitions(grid: Grid, timeout: float, wanted: Collection[int] | None = None,
                    may_ask: Callable[[int], bool] = lambda node: True) -> dict[int, int]:
    """partition → node id of the ``wanted`` partitions (None: all that answer) found within ``timeout``."""
    if wanted is None:
        return discover(grid, timeout, may_ask=may_ask)
    wanted = set(wanted)
    found = discover(grid, timeout, may_ask=may_ask, done=lambda got: wanted <= set(got), pause=0.5)
    return {p: n for p, n in found.items() if p in wanted}
