"""The registration exchange that starts every run: the nodes say what they hold; the server checks it.

It is the run's first discovery (:mod:`fedforget.federation.discovery`: node ids are random per run, so
partitions are learnt from the nodes) and the only way the server learns about the data: each node's sample
ids, the slice each falls in (drawn on the node), the ids it has already deleted, and what the method's
planning asks for (labels for SAFE's cells, class counts for FedCIO's clusters and FedShard's fairness). The
manifest's plan is built from the replies.

Everything a node says is checked before the store is touched, and a node that says something wrong refuses
the run with :class:`RegistrationRefused`, one line naming the node: a refusal from its own data check, a
reply of the wrong shape or types, a name no command could parse back, sample ids outside the ledger's range
(0..2^63-1) or, for a shipped task's public set, ids that are not rows of the pool the run uses, a sample id
twice or held by two nodes, two nodes with one name or partition, labels outside the task's classes, and more
records than the run config's ``max-records-per-node`` and ``max-records`` allow (checked on each reply's
size as it arrives, before its ids are read). At a retrain the replies must match the manifest the store was
trained from, up to what was forgotten.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedforget.core.config import ConfigError, RunConfig
from fedforget.core.ids import MAX_ID, QUOTED_CHARS
from fedforget.core.record_ids import LOCAL_RECORDS, PUBLIC_RECORDS, check_node_name, default_node_name
from fedforget.federation.control_messages import (
    INFO,
    NODE_NAME_KEY,
    PARTITION_KEY,
    SAMPLES_KEY,
    MalformedMessage,
    RegisterQuery,
    Registration,
    TooManyIds,
    register_queries,
)
from fedforget.federation.discovery import discover
from fedforget.federation.messaging import NodeFailure, exchange
from fedforget.tasks.partitioning import PartitionPlan

#: How many offending ids a refusal names.
SHOWN = 5
#: The longest text of a node's own refusal that is passed on.
REFUSAL_CHARS = 500
#: What a refusal of a node's registration tells the operator to do.
FIX_NODE = "fix that node (its data, its node config, its fedforget) and start the run again"


class RegistrationRefused(ConfigError):
    """What a node registered is wrong: the run is refused before anything is written; the message names the
    node and what is wrong with what it sent."""

    refused_as = "run refused at registration, nothing written"


@dataclass(frozen=True)
class RecordBounds:
    """How many records one node, and all nodes together, may register (run config ``max-records-per-node``,
    ``max-records``); ``public_ids``: the ids of the shipped task's public pool, when known without reading it."""

    per_node: int
    total: int
    public_ids: np.ndarray | None = None

    @classmethod
    def of(cls, cfg: RunConfig) -> RecordBounds:
        return cls(cfg.max_records_per_node, cfg.max_records, public_pool_ids(cfg))


def public_pool_ids(cfg: RunConfig) -> np.ndarray | None:
    """The sample ids of the task's public training pool, from the task's fixed sizes (no row is read), or None."""
    from fedforget.core.config import is_user_task
    from fedforget.tasks.registry import get_task

    if is_user_task(cfg.task):
        return None
    ids = get_task(cfg.task).train_ids
    return None if ids is None else np.asarray(ids(cfg), dtype=np.int64)


@dataclass
class Federation:
    """What the nodes registered: partition → node id, name, record numbering, plan, and planning inputs."""

    nodes: dict[int, int]
    names: dict[int, str]
    records: dict[int, str]
    plan: PartitionPlan
    deleted: dict[int, set[int]] = field(default_factory=dict)
    #: partition → {sample id: label} (-1: a deleted record's label is gone); only when the method asked
    labels: dict[int, dict[int, int]] = field(default_factory=dict)
    #: partition → samples per class; only when the method asked
    class_counts: dict[int, list[int]] = field(default_factory=dict)
    #: the replies' size on the wire (their arrays), for the registration's cost
    reply_bytes: int = 0

    def manifest_nodes(self) -> dict[str, dict[str, str]]:
        """The manifest's ``nodes`` field: each partition's node name and how its records are numbered."""
        return {str(p): {"name": self.names[p], "records": self.records[p]} for p in sorted(self.names)}


def manifest_node_names(manifest: Mapping[str, object]) -> dict[int, dict[str, str]]:
    """``nodes`` of a manifest; a store written before nodes named themselves gets the default names."""
    nodes = manifest.get("nodes")
    if isinstance(nodes, dict):
        return {int(p): dict(v) for p, v in nodes.items()}
    count = int(manifest.get("num-partitions", 0))  # type: ignore[arg-type]
    return {p: {"name": default_node_name(p), "records": PUBLIC_RECORDS} for p in range(count)}


def _shown(ids: Collection[int]) -> str:
    ordered = sorted(ids)
    return ", ".join(map(str, ordered[:SHOWN])) + (", …" if len(ordered) > SHOWN else "")


def _text(value: object) -> str:
    """A node's text as a refusal quotes it: one line, printable, cut short."""
    text = str(value)[:REFUSAL_CHARS]  # cut first: a node's text may be of any length
    line = text.splitlines()[0] if text else ""
    return "".join(c if c.isprintable() else "?" for c in line)


def _who(reg: Registration) -> str:
    """How a refusal names the node of ``reg``: its name when that is a valid one, else its partition."""
    try:
        return f"node {check_node_name(reg.node_name)} (partition {reg.partition})"
    except ValueError:
        return f"the node of partition {reg.partition}"


def _reply_who(content: RecordDict, node_id: int) -> str:
    """How a refusal names the node of a reply not yet read: by its name and partition when it gives valid ones."""
    info = content[INFO] if INFO in content else None
    name = info.get(NODE_NAME_KEY) if isinstance(info, ConfigRecord) else None
    partition = info.get(PARTITION_KEY) if isinstance(info, ConfigRecord) else None
    if not isinstance(partition, int) or isinstance(partition, bool):
        return f"node {node_id}"
    return _who(Registration(partition, 0, name if isinstance(name, str) else ""))


def _registration(content: RecordDict, node_id: int, limit: int, bounds: RecordBounds,
                  registered: int) -> Registration:
    """One reply as a :class:`Registration`, refused (:class:`RegistrationRefused`) when malformed or larger
    than ``limit`` ids, the room left under ``bounds`` after ``registered`` ids of the nodes before it."""
    who = _reply_who(content, node_id)
    try:
        return Registration.from_record(content, max_ids=limit)
    except TooManyIds as exc:
        if exc.key != SAMPLES_KEY:
            raise RegistrationRefused(f"{who} sent a malformed registration ({exc}); {FIX_NODE}") from None
        if exc.count > bounds.per_node:
            raise RegistrationRefused(
                f"{who} registers {exc.count} records, more than one node may (run-config "
                f"'max-records-per-node'={bounds.per_node}); {FIX_NODE}, or raise the bound") from None
        raise RegistrationRefused(
            f"{who} registers {exc.count} records, beyond the {bounds.total - registered} left of what "
            f"all nodes together may register (run-config 'max-records'={bounds.total}); {FIX_NODE}, or raise "
            "the bound") from None
    except MalformedMessage as exc:
        raise RegistrationRefused(f"{who} sent a malformed registration ({_text(exc)}); {FIX_NODE}") from None


def _collect(grid: Grid, query: RegisterQuery, timeout: float,
             bounds: RecordBounds) -> dict[int, tuple[int, Registration]]:
    """partition → (node id, its registration), once every partition the nodes report has answered; each reply
    is held to ``bounds`` as it arrives, before its ids are read."""
    found: dict[int, tuple[int, Registration]] = {}
    expected: int | None = None

    def read(reply: Message) -> int:
        nonlocal expected
        node_id = reply.metadata.src_node_id
        registered = sum(len(r.samples) for n, r in found.values() if n != node_id)
        limit = min(bounds.per_node, bounds.total - registered)
        info = _registration(reply.content, node_id, limit, bounds, registered)
        who = _who(info)
        if info.refused:
            raise RegistrationRefused(f"{who} refused the run: {_text(info.refused)}")
        if not 0 <= info.partition < info.num_partitions:
            raise RegistrationRefused(f"{who} says it holds partition {info.partition} of "
                                      f"{info.num_partitions}; give each SuperNode a partition-id in "
                                      "0..num-partitions-1")
        if expected is not None and info.num_partitions != expected:
            raise RegistrationRefused(f"nodes disagree on num-partitions ({expected} vs "
                                      f"{info.num_partitions}, {who}); give every SuperNode the same")
        expected = info.num_partitions
        if info.partition in found and found[info.partition][0] != node_id:
            raise RegistrationRefused(f"two nodes claim partition {info.partition}; give each SuperNode its "
                                      "own partition-id")
        found[info.partition] = (node_id, info)
        return info.partition

    def complete(_: dict[int, int]) -> bool:
        return expected is not None and len(found) == expected

    discover(grid, timeout, ask=lambda nodes: register_queries(nodes, query), read=read, done=complete,
             send=exchange)
    if not complete({}):
        have = "none" if expected is None else f"{len(found)} of {expected}"
        raise NodeFailure(f"timed out waiting for nodes: partitions seen {have}")
    return found


def register_nodes(grid: Grid, cfg: RunConfig, needs: tuple[str, ...], num_classes: int,
                   record_key: str | None = None) -> Federation:
    """Ask every node to register, check what they say, and build the run's plan from it. ``record_key``: the
    store's key for the sample ids of the nodes' own records (None: unkeyed)."""
    bounds = RecordBounds.of(cfg)
    replies = _collect(grid, RegisterQuery(needs, cfg.action, record_key or ""), cfg.round_timeout, bounds)
    return federation_from(replies, cfg.slices_per_client, num_classes, bounds.public_ids)


def federation_from(replies: Mapping[int, tuple[int, Registration]], slices_per_client: int,
                    num_classes: int, public_ids: np.ndarray | None = None) -> Federation:
    """The checked federation of ``replies`` (partition → (node id, registration)); :class:`RegistrationRefused`
    names a node. ``public_ids``: the public pool's ids, which a node numbering its records ``public`` must
    register only from (None: not known, only the ledger's range is checked)."""
    names: dict[str, int] = {}
    fed = Federation({}, {}, {}, PartitionPlan({}))
    slices: dict[int, list[list[int]]] = {}
    for p in sorted(replies):
        node_id, reg = replies[p]
        if reg.partition != p:
            raise RegistrationRefused(f"{_who(reg)} answered for partition {p}; {FIX_NODE}")
        try:
            check_node_name(reg.node_name)
        except ValueError as exc:
            raise RegistrationRefused(f"the node of partition {p} registered a name no record could be forgotten "
                                      f"by: {exc}; set its node-name") from None
        who = _who(reg)
        if reg.node_name in names:
            raise RegistrationRefused(f"nodes of partitions {names[reg.node_name]} and {p} are both named "
                                      f"{reg.node_name!r}; give each SuperNode its own node-name")
        names[reg.node_name] = p
        if reg.records not in (PUBLIC_RECORDS, LOCAL_RECORDS):
            raise RegistrationRefused(f"{who} numbers its records {reg.records[:QUOTED_CHARS]!r}, not "
                                      f"{PUBLIC_RECORDS} or {LOCAL_RECORDS}; {FIX_NODE}")
        _check_ids(who, reg, public_ids)
        bad_slices = reg.slices[(reg.slices < 0) | (reg.slices >= slices_per_client)]
        if len(bad_slices):
            raise RegistrationRefused(f"{who} put samples in slice {int(bad_slices[0])}, outside "
                                      f"0..{slices_per_client - 1}; {FIX_NODE}")
        if reg.labels is not None:
            gone = _member(np.sort(reg.deleted), reg.samples)
            bad = (reg.labels < -1) | (reg.labels >= num_classes) | ((reg.labels == -1) & ~gone)
            if bad.any():
                raise RegistrationRefused(f"{who} sent labels outside the task's classes 0..{num_classes - 1}; "
                                          f"{FIX_NODE}")
            fed.labels[p] = dict(zip(reg.samples.tolist(), reg.labels.tolist(), strict=True))
        if reg.class_counts is not None:
            if len(reg.class_counts) != num_classes or (reg.class_counts < 0).any():
                raise RegistrationRefused(f"{who} sent {len(reg.class_counts)} class counts for a task of "
                                          f"{num_classes} classes; {FIX_NODE}")
            fed.class_counts[p] = [int(c) for c in reg.class_counts.tolist()]
        order = np.lexsort((reg.samples, reg.slices))  # by slice, then by id
        ends = np.searchsorted(reg.slices[order], np.arange(slices_per_client + 1))
        by_slice = reg.samples[order].tolist()
        slices[p] = [by_slice[ends[s]:ends[s + 1]] for s in range(slices_per_client)]
        fed.nodes[p], fed.names[p], fed.records[p] = node_id, reg.node_name, reg.records
        fed.deleted[p] = set(reg.deleted.tolist())
        fed.reply_bytes += sum(int(a.nbytes) for a in (reg.samples, reg.slices, reg.deleted, reg.labels,
                                                        reg.class_counts) if a is not None)
    _check_disjoint(replies)
    fed.plan = PartitionPlan(slices)
    return fed


def _member(ordered: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in the sorted ``ordered`` (a binary search each: no hash set of either)."""
    if not len(ordered):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(ordered, values).clip(max=len(ordered) - 1)
    return ordered[at] == values


def _check_ids(who: str, reg: Registration, public_ids: np.ndarray | None) -> None:
    """A node's sample ids: in the ledger's range, each once, rows of the public pool for a public node, and
    its deletions among them."""
    outside = reg.samples[(reg.samples < 0) | (reg.samples > MAX_ID)]
    if len(outside):
        raise RegistrationRefused(f"{who} registered sample id {int(outside[0])}, outside the ledger's range "
                                  f"0..{MAX_ID}; {FIX_NODE}")
    ordered = np.sort(reg.samples)
    twice = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(twice):
        raise RegistrationRefused(f"{who} registered a sample id twice ({_shown(np.unique(twice).tolist())}); "
                                  f"{FIX_NODE}")
    if reg.records == PUBLIC_RECORDS and public_ids is not None:
        phantom = ordered[~_member(np.sort(public_ids), ordered)]
        if len(phantom):
            raise RegistrationRefused(f"{who} registered sample id(s) {_shown(phantom.tolist())} that are not rows of "
                                      f"the task's public training set ({len(public_ids)} rows in this run); "
                                      f"{FIX_NODE}")
    never = reg.deleted[~_member(ordered, reg.deleted)]
    if len(never):
        raise RegistrationRefused(f"{who} says it deleted samples it never held ({_shown(never.tolist())}); "
                                  f"{FIX_NODE}")


def _check_disjoint(replies: Mapping[int, tuple[int, Registration]]) -> None:
    """No sample id held by two nodes (each node's own ids are distinct already)."""
    parts = sorted(replies)
    if len(parts) < 2:
        return
    ids = np.concatenate([replies[p][1].samples for p in parts])
    owner = np.repeat(np.asarray(parts, dtype=np.int64), [len(replies[p][1].samples) for p in parts])
    order = np.argsort(ids, kind="stable")
    clash = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if len(clash):
        first, second = (replies[int(owner[order][clash[0] + k])][1] for k in (0, 1))
        shared = np.intersect1d(first.samples, second.samples)
        raise RegistrationRefused(f"nodes {first.node_name} and {second.node_name} both claim sample(s) "
                                  f"{_shown(shared.tolist())}; a record belongs to one node")


def check_against_manifest(fed: Federation, manifest: Mapping[str, object], forgotten: Collection[int]) -> None:
    """At a retrain: the nodes must hold what trained the store, less only what was forgotten (else
    :class:`RegistrationRefused`)."""
    names = manifest_node_names(manifest)
    partitions = manifest.get("partitions")
    if not isinstance(partitions, dict):
        raise ConfigError("the store's manifest has no partitions; it cannot be retrained")
    gone = set(forgotten)
    for p in sorted(fed.nodes):
        registered = names.get(p, {})
        who = f"node {fed.names[p]} (partition {p})"
        if registered.get("name") != fed.names[p]:
            raise RegistrationRefused(f"partition {p} was trained by node {registered.get('name')!r}, not "
                                      f"{fed.names[p]!r}; start each SuperNode with the node-name and partition-id "
                                      "it trained with")
        trained = {int(i) for s in partitions.get(str(p), []) for i in s}
        now = {i for s in fed.plan.slices[p] for i in s}
        added, missing = now - trained, trained - now - gone
        if added or missing:
            what = "; ".join(f"{label} {_shown(ids)}" for label, ids in (("new sample(s)", added),
                                                                            ("missing sample(s)", missing)) if ids)
            raise RegistrationRefused(f"{who} does not hold what trained this store: {what}; only `fedforget "
                                      "forget` may remove a record, and new records need a new run")
