"""Node failures during a run, with a deterministic rule so that what is served stays exact.

Rule (docs/design-decisions.md): a message whose node is unavailable (a ``NODE_UNAVAILABLE``
error, or no reply before the round timeout) or whose reply is malformed is **redone**: sent again,
unchanged, to the node that now holds the same partition (a restarted SuperNode has a new node id;
it is found with the same ``query`` the run starts with). Replies are pure functions of the message and
the partition's data, so a redone message gives the bytes the first would have. A partition that has
not come back within the rejoin window is **excluded**: every artifact that needs it in this run is
left unbuilt (not recorded, so never served; the next ``fedforget retrain`` builds it), and every
artifact that does not need it is built exactly as in a run without the failure.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from logging import WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.strategies.messaging import PARTITION_KEY, NodeFailure, send_slots

REJOIN_ENV = "FEDFORGET_NODE_REJOIN_S"
DEFAULT_REJOIN_S = 90.0
#: errors that mean "the node is gone" (redo elsewhere), as opposed to a ClientApp that raised (a bug)
GONE = frozenset({ErrorCode.NODE_UNAVAILABLE, ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
                  ErrorCode.CLIENT_APP_CRASHED})
#: (reply, message index) -> why the reply is unacceptable, or None
Validator = Callable[[Message, int], str | None]


def rejoin_window() -> float:
    """Seconds a lost partition may take to come back (env ``FEDFORGET_NODE_REJOIN_S``, default 90)."""
    try:
        return max(0.0, float(os.environ.get(REJOIN_ENV, DEFAULT_REJOIN_S)))
    except ValueError:
        return DEFAULT_REJOIN_S


def _readdress(msg: Message, node: int) -> Message:
    meta = msg.metadata
    return Message(msg.content, dst_node_id=node, message_type=meta.message_type, group_id=meta.group_id or None)


def find_partition_nodes(grid: Grid, nodes: dict[int, int], wanted: set[int], timeout: float) -> dict[int, int]:
    """Ask nodes the run has not mapped yet which partition they hold; return the new ``{partition: node}``."""
    known = set(nodes.values())
    fresh = sorted(n for n in grid.get_node_ids() if n not in known)
    if not fresh or not wanted:
        return {}
    query = [Message(RecordDict({"config": ConfigRecord({"ask": "partition"})}), dst_node_id=n,
                     message_type=MessageType.QUERY) for n in fresh]
    found = {}
    for reply in send_slots(grid, query, timeout):
        if reply is None or reply.has_error():
            continue
        pid = int(reply.content["info"][PARTITION_KEY])
        if pid in wanted:
            found[pid] = reply.metadata.src_node_id
    return found


def exchange_redo_or_exclude(grid: Grid, nodes: dict[int, int], messages: Sequence[Message],
                             partitions: Sequence[int], timeout: float, validate: Validator | None = None,
                             rejoin: float | None = None) -> tuple[list[Message | None], set[int]]:
    """Send ``messages`` (``partitions[i]`` holds the data of message i); return the valid replies in
    message order (None where excluded) and the partitions excluded. ``nodes`` is updated in place
    when a partition comes back on a new node. A ClientApp that raised stops the run (NodeFailure)."""
    rejoin = rejoin_window() if rejoin is None else rejoin
    replies: list[Message | None] = [None] * len(messages)
    pending = list(range(len(messages)))
    current = list(messages)
    deadline: float | None = None
    rejected: dict[int, int] = {}
    while pending:
        answers = send_slots(grid, [current[i] for i in pending], timeout)
        lost = []
        for i, reply in zip(pending, answers, strict=True):
            p = partitions[i]
            if reply is not None and reply.has_error() and reply.error.code not in GONE:
                raise NodeFailure(f"partition {p}'s ClientApp failed: [{reply.error.code}] {reply.error.reason}")
            why = "no reply" if reply is None else (
                f"error {reply.error.code}" if reply.has_error() else (validate(reply, i) if validate else None))
            if why is None:
                replies[i] = reply
                continue
            log(WARNING, "fedforget: partition %d: %s", p, why)
            if reply is not None and not reply.has_error():  # malformed: the same node gets one more try
                rejected[p] = rejected.get(p, 0) + 1
                if rejected[p] > 1:
                    continue  # excluded
            lost.append(i)
        if not lost:
            break
        deadline = deadline or time.monotonic() + rejoin
        gone = {partitions[i] for i in lost if partitions[i] not in rejected}
        while gone and time.monotonic() < deadline:
            moved = find_partition_nodes(grid, nodes, gone, max(1.0, deadline - time.monotonic()))
            for p, node in moved.items():
                log(WARNING, "fedforget: partition %d is back on node %d; redoing its work", p, node)
                nodes[p] = node
                gone.discard(p)
            if gone:
                time.sleep(0.5)
        pending = [i for i in lost if partitions[i] not in gone]
        for i in pending:
            current[i] = _readdress(messages[i], nodes[partitions[i]])
    excluded = {partitions[i] for i, r in enumerate(replies) if r is None}
    if excluded:
        log(WARNING, "fedforget: partition(s) %s excluded from this run; what needs them stays unbuilt",
            sorted(excluded))
    return replies, excluded


#: Bytes a serialised array may add to its tensor data (its name, dtype and shape header).
FRAMING_PER_TENSOR = 512


def check_chain_reply(reply: Message, partition: int, sent: dict[str, np.ndarray], max_examples: int) -> str | None:
    """Why a client's ``train.chain`` reply cannot be aggregated (None if it can): it must come from the
    partition asked, carry exactly the tensors sent (names, shapes, dtypes, finite values), no more bytes
    than those, and sane metrics. A client cannot crash the run or smuggle data in with a bad reply."""
    content = reply.content
    if "arrays" not in content or "metrics" not in content:
        return "malformed reply: no arrays or metrics"
    expected = sum(int(v.nbytes) for v in sent.values())
    size = content["arrays"].count_bytes()
    if size > expected + 4096 + FRAMING_PER_TENSOR * len(sent):  # serialised arrays carry name + header each
        return f"oversized reply: {size} bytes of arrays, {expected} expected"
    metrics = content["metrics"]
    try:
        pid, examples, loss = int(metrics[PARTITION_KEY]), int(metrics["num-examples"]), float(metrics["train-loss"])
    except (KeyError, TypeError, ValueError):
        return "malformed metrics"
    if pid != partition:
        return f"reply claims partition {pid}, not {partition}"
    if not 0 <= examples <= max_examples or not math.isfinite(loss):
        return f"implausible metrics (num-examples {examples}, loss {loss})"
    try:
        arrays = {k: v.numpy() for k, v in content["arrays"].items()}
    except Exception as exc:  # noqa: BLE001 - any undecodable array
        return f"undecodable arrays ({type(exc).__name__})"
    if set(arrays) != set(sent):
        return f"unexpected tensors {sorted(set(arrays) ^ set(sent))[:3]}"
    for key, value in arrays.items():
        if value.shape != sent[key].shape or value.dtype != sent[key].dtype:
            return f"tensor {key}: {value.dtype}{list(value.shape)}, expected {sent[key].dtype}{list(sent[key].shape)}"
        if not np.isfinite(value).all():
            return f"tensor {key} has non-finite values"
    return None
