"""Node failures during a run, with a deterministic rule so that what is served stays exact.

Rule (docs/design-decisions.md): a message whose node is unavailable (a ``NODE_UNAVAILABLE``
error, or no reply before the round timeout) or whose reply is malformed is **redone**: sent again,
unchanged, to the node that now holds the same partition (a restarted SuperNode has a new node id,
or its old one when it authenticates with a registered key; either way it is found by the discovery
the run starts with, :mod:`fedforget.federation.discovery`). Replies are pure functions of the message and
the partition's data, so a redone message gives the bytes the first would have. A partition that has
not come back within the rejoin window is **excluded**: every artifact that needs it in this run is
left unbuilt (not recorded, so never served; the next ``fedforget retrain`` builds it), and every
artifact that does not need it is built exactly as in a run without the failure.

A ClientApp that raised is redone once on the same node (a transient fault: memory, a full disk), then
its partition is excluded like a lost one; only when every message of an exchange raised twice does the
run stop (that is a bug, not a node fault). Every method sends its training messages through
:func:`exchange_redo_or_exclude` (the round engine, :mod:`fedforget.federation.round_engine`, for fedavg,
replay, the chains, FedShard and SAFE; split learning's own exchange) and checks replies with
:func:`check_reply`; what "excluded" leaves unbuilt is each method's own, named in the ledger.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from logging import WARNING

import numpy as np
from flwr.app import Message
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.federation.discovery import find_partitions
from fedforget.federation.messaging import PARTITION_KEY, NodeFailure, send_slots

REJOIN_ENV = "FEDFORGET_NODE_REJOIN_S"
DEFAULT_REJOIN_S = 90.0
#: how often a partition whose node was reported gone is redone on that same node when it is back
MAX_SAME_NODE_REDOS = 2
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


def _find_again(grid: Grid, nodes: dict[int, int], wanted: set[int], timeout: float,
                reported_gone: set[int]) -> dict[int, int]:
    """``{partition: node}`` of the ``wanted`` partitions found within ``timeout``. Asked are the nodes the run
    has not mapped yet (a restarted SuperNode that registers itself gets a new node id) and, for the partitions
    in ``reported_gone``, their own nodes once they are online again (a SuperNode that authenticates with a
    registered key keeps its node id across restarts). A node that stayed online and fell silent is not asked
    again: it would answer the query and swallow the redone message, for ever."""
    known = set(nodes.values())
    rejoined = {nodes[p] for p in wanted & reported_gone if p in nodes}
    return find_partitions(grid, timeout, wanted, lambda node: node not in known or node in rejoined)


def exchange_redo_or_exclude(grid: Grid, nodes: dict[int, int], messages: Sequence[Message],
                             partitions: Sequence[int], timeout: float, validate: Validator | None = None,
                             rejoin: float | None = None) -> tuple[list[Message | None], set[int]]:
    """Send ``messages`` (``partitions[i]`` holds the data of message i); return the valid replies in
    message order (None where excluded) and the partitions excluded. ``nodes`` is updated in place
    when a partition comes back on a new node. A ClientApp that raised, or a reply ``validate``
    rejects, gets one more try on the same node, then its partition is excluded; if every message
    raised twice, the run stops (:class:`NodeFailure`, with the first reason)."""
    rejoin = rejoin_window() if rejoin is None else rejoin
    replies: list[Message | None] = [None] * len(messages)
    pending = list(range(len(messages)))
    current = list(messages)
    deadline: float | None = None
    rejected: dict[int, int] = {}
    same_node_redos: dict[int, int] = {}
    raised_why: dict[int, str] = {}
    while pending:
        answers = send_slots(grid, [current[i] for i in pending], timeout)
        lost = []
        reported_gone: set[int] = set()  # Flower said the node is gone (not merely silent)
        for i, reply in zip(pending, answers, strict=True):
            p = partitions[i]
            raised = reply is not None and reply.has_error() and reply.error.code not in GONE
            why = "no reply" if reply is None else (
                f"error [{reply.error.code}] {reply.error.reason}" if reply.has_error()
                else (validate(reply, i) if validate else None))
            if why is None:
                replies[i] = reply
                continue
            log(WARNING, "fedforget: partition %d: %s", p, why)
            if raised:
                raised_why[i] = why
            elif reply is not None and reply.has_error() and same_node_redos.get(p, 0) < MAX_SAME_NODE_REDOS:
                reported_gone.add(p)
            if reply is not None and (raised or not reply.has_error()):  # raised or malformed: one more try
                rejected[p] = rejected.get(p, 0) + 1
                if rejected[p] > 1:
                    continue  # excluded
            lost.append(i)
        if not lost:
            break
        deadline = deadline or time.monotonic() + rejoin
        gone = {partitions[i] for i in lost if partitions[i] not in rejected}
        # asked at least once, so a node already back is found even with no rejoin window
        moved = _find_again(grid, nodes, gone, max(0.0, deadline - time.monotonic()), reported_gone) if gone else {}
        for p, node in moved.items():
            log(WARNING, "fedforget: partition %d is back on node %d; redoing its work", p, node)
            if node == nodes.get(p):
                same_node_redos[p] = same_node_redos.get(p, 0) + 1
            nodes[p] = node
            gone.discard(p)
        pending = [i for i in lost if partitions[i] not in gone]
        for i in pending:
            current[i] = _readdress(messages[i], nodes[partitions[i]])
    excluded = {partitions[i] for i, r in enumerate(replies) if r is None}
    if messages and len(raised_why) == len(messages) and all(r is None for r in replies):
        raise NodeFailure(f"every ClientApp failed (a bug, not a node fault): {raised_why[0]}")
    if excluded:
        log(WARNING, "fedforget: partition(s) %s excluded from this run; what needs them stays unbuilt",
            sorted(excluded))
    return replies, excluded


class PartitionsExcluded(RuntimeError):
    """Partitions excluded mid-run where the method cannot build anything without them (fedavg's one
    global model): the run stops building, names them, and what they were needed for stays unbuilt."""

    def __init__(self, partitions: set[int]) -> None:
        super().__init__(f"partition(s) {sorted(partitions)} excluded")
        self.partitions = set(partitions)


#: Bytes a serialised array may add to its tensor data (its name, dtype and shape header).
FRAMING_PER_TENSOR = 512


def check_reply(reply: Message, partition: int, *, sent: dict[str, np.ndarray] | None = None,
                max_examples: int | None = None, numbers: tuple[str, ...] = ("train-loss",),
                record: str = "metrics", max_bytes: int | None = None) -> str | None:
    """Why a client's reply cannot be used (None if it can). ``content[record]`` must name the partition
    asked; ``num-examples`` (when ``max_examples`` is given) lies in 0..max_examples; every key in
    ``numbers`` is a finite number. With ``sent``, ``content["arrays"]`` must carry exactly the tensors
    sent (names, shapes, dtypes) and no more bytes than those; without it, all the reply's arrays together
    stay under ``max_bytes``. Every float tensor must be finite. A client cannot crash the run or smuggle
    data in with a bad reply."""
    content = reply.content
    if record not in content.config_records and record not in content.metric_records:
        return f"malformed reply: no {record}"
    if sent is not None and "arrays" not in content:
        return "malformed reply: no arrays"
    size = sum(r.count_bytes() for r in content.array_records.values())
    if sent is not None:
        expected = sum(int(v.nbytes) for v in sent.values())
        max_bytes = expected + 4096 + FRAMING_PER_TENSOR * len(sent)  # serialised arrays carry name + header
    if max_bytes is not None and size > max_bytes:
        return f"oversized reply: {size} bytes of arrays, at most {max_bytes} expected"
    info = content[record]
    try:
        pid = int(info[PARTITION_KEY])
        examples = int(info["num-examples"]) if max_examples is not None else 0
        values = [float(info[k]) for k in numbers]
    except (KeyError, TypeError, ValueError):
        return f"malformed {record}"
    if pid != partition:
        return f"reply claims partition {pid}, not {partition}"
    if max_examples is not None and not 0 <= examples <= max_examples:
        return f"implausible num-examples {examples}"
    if not all(math.isfinite(v) for v in values):
        return f"non-finite {', '.join(numbers)}: {values}"
    try:
        arrays = {f"{name}/{k}": v.numpy() for name, r in content.array_records.items() for k, v in r.items()}
    except Exception as exc:  # noqa: BLE001 - any undecodable array
        return f"undecodable arrays ({type(exc).__name__})"
    if sent is not None:
        got = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("arrays/")}
        if set(got) != set(sent):
            return f"unexpected tensors {sorted(set(got) ^ set(sent))[:3]}"
        for key, value in got.items():
            if value.shape != sent[key].shape or value.dtype != sent[key].dtype:
                return (f"tensor {key}: {value.dtype}{list(value.shape)}, "
                        f"expected {sent[key].dtype}{list(sent[key].shape)}")
    for key, value in arrays.items():
        if np.issubdtype(value.dtype, np.inexact) and not np.isfinite(value).all():
            return f"tensor {key} has non-finite values"
    return None


def check_chain_reply(reply: Message, partition: int, sent: dict[str, np.ndarray], max_examples: int) -> str | None:
    """:func:`check_reply` for a ``train.chain`` reply: the tensors sent, examples, a finite loss."""
    return check_reply(reply, partition, sent=sent, max_examples=max_examples)
