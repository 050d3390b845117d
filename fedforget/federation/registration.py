"""The registration exchange that starts every run: the nodes say what they hold; the server checks it.

It replaces node discovery (node ids are random per run, so partitions are learnt from the nodes) and is the
only way the server learns about the data: each node's sample ids, the slice each falls in (drawn on the
node), the ids it has already deleted, and what the method's planning asks for (labels for SAFE's cells,
class counts for FedCIO's clusters and FedShard's fairness). The manifest's plan is built from the replies.

Everything a node says is checked before the store is touched: a refusal from a node's own data check, two
nodes with one name or partition, a sample id twice, labels outside the task's classes. At a retrain the
replies must match the manifest the store was trained from, up to what was forgotten.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np
from flwr.serverapp import Grid

from fedforget.core.config import ConfigError, RunConfig
from fedforget.core.record_ids import LOCAL_RECORDS, PUBLIC_RECORDS, default_node_name
from fedforget.federation.control_messages import (
    MalformedMessage,
    RegisterQuery,
    Registration,
    register_queries,
)
from fedforget.federation.messaging import NodeFailure, exchange
from fedforget.tasks.partitioning import PartitionPlan

#: How many offending ids a refusal names.
SHOWN = 5


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


def _collect(grid: Grid, query: RegisterQuery, timeout: float) -> dict[int, tuple[int, Registration]]:
    """partition → (node id, its registration), once every partition the nodes report has answered."""
    deadline = time.monotonic() + timeout
    found: dict[int, tuple[int, Registration]] = {}
    expected: int | None = None
    asked: set[int] = set()
    while True:
        new_nodes = [n for n in grid.get_node_ids() if n not in asked]
        if new_nodes:
            for reply in exchange(grid, register_queries(sorted(new_nodes), query),
                                  max(1.0, deadline - time.monotonic())):
                try:
                    info = Registration.from_record(reply.content)
                except MalformedMessage as exc:
                    raise NodeFailure(f"node {reply.metadata.src_node_id} answered the registration with a "
                                      f"malformed reply: {exc}") from None
                if info.refused:
                    raise ConfigError(f"node {info.node_name} (partition {info.partition}) refused the run: "
                                      f"{info.refused}")
                if expected is not None and info.num_partitions != expected:
                    raise NodeFailure(f"nodes disagree on num-partitions ({expected} vs {info.num_partitions})")
                expected = info.num_partitions
                if info.partition in found and found[info.partition][0] != reply.metadata.src_node_id:
                    raise NodeFailure(f"two nodes claim partition {info.partition}; give each SuperNode its own "
                                      "partition-id")
                found[info.partition] = (reply.metadata.src_node_id, info)
            asked.update(new_nodes)
        if expected is not None and len(found) == expected:
            if sorted(found) != list(range(expected)):
                raise NodeFailure(f"partition ids {sorted(found)} are not 0..{expected - 1}")
            return found
        if time.monotonic() > deadline:
            have = "none" if expected is None else f"{len(found)} of {expected}"
            raise NodeFailure(f"timed out waiting for nodes: partitions seen {have}")
        time.sleep(0.2)


def register_nodes(grid: Grid, cfg: RunConfig, needs: tuple[str, ...], num_classes: int,
                   record_key: str | None = None) -> Federation:
    """Ask every node to register, check what they say, and build the run's plan from it. ``record_key``: the
    store's key for the sample ids of the nodes' own records (None: unkeyed)."""
    replies = _collect(grid, RegisterQuery(needs, cfg.action, record_key or ""), cfg.round_timeout)
    return federation_from(replies, cfg.slices_per_client, num_classes)


def federation_from(replies: Mapping[int, tuple[int, Registration]], slices_per_client: int,
                    num_classes: int) -> Federation:
    """The checked federation of ``replies`` (partition → (node id, registration)); ConfigError names a node."""
    names: dict[str, int] = {}
    owner: dict[int, int] = {}
    fed = Federation({}, {}, {}, PartitionPlan({}))
    slices: dict[int, list[list[int]]] = {}
    for p in sorted(replies):
        node_id, reg = replies[p]
        who = f"node {reg.node_name} (partition {p})"
        if reg.node_name in names:
            raise ConfigError(f"nodes of partitions {names[reg.node_name]} and {p} are both named "
                              f"{reg.node_name!r}; give each SuperNode its own node-name")
        names[reg.node_name] = p
        if reg.records not in (PUBLIC_RECORDS, LOCAL_RECORDS):
            raise ConfigError(f"{who} numbers its records {reg.records!r}, not {PUBLIC_RECORDS} or {LOCAL_RECORDS}")
        ids = reg.samples.tolist()
        values, counts = np.unique(reg.samples, return_counts=True)
        if (counts > 1).any():
            raise ConfigError(f"{who} registered a sample id twice ({_shown(values[counts > 1].tolist())})")
        bad_slices = reg.slices[(reg.slices < 0) | (reg.slices >= slices_per_client)]
        if len(bad_slices):
            raise ConfigError(f"{who} put samples in slice {int(bad_slices[0])}, outside 0..{slices_per_client - 1}")
        claimed = [i for i in ids if i in owner]
        if claimed:
            other = fed.names[owner[claimed[0]]]
            raise ConfigError(f"nodes {other} and {reg.node_name} both claim sample(s) {_shown(claimed)}; "
                              "a record belongs to one node")
        owner.update(dict.fromkeys(ids, p))
        deleted = set(reg.deleted.tolist())
        if not deleted <= set(ids):
            raise ConfigError(f"{who} says it deleted samples it never held ({_shown(deleted - set(ids))})")
        if reg.labels is not None:
            bad = reg.labels[(reg.labels < -1) | (reg.labels >= num_classes)]
            lost = [i for i, y in zip(ids, reg.labels.tolist(), strict=True) if y == -1 and i not in deleted]
            if len(bad) or lost:
                raise ConfigError(f"{who} sent labels outside the task's classes 0..{num_classes - 1}")
            fed.labels[p] = dict(zip(ids, reg.labels.tolist(), strict=True))
        if reg.class_counts is not None:
            if len(reg.class_counts) != num_classes or (reg.class_counts < 0).any():
                raise ConfigError(f"{who} sent {len(reg.class_counts)} class counts for a task of {num_classes} "
                                  "classes")
            fed.class_counts[p] = [int(c) for c in reg.class_counts.tolist()]
        by_slice: list[list[int]] = [[] for _ in range(slices_per_client)]
        for i, s in zip(ids, reg.slices.tolist(), strict=True):
            by_slice[s].append(int(i))
        slices[p] = [sorted(s) for s in by_slice]
        fed.nodes[p], fed.names[p], fed.records[p], fed.deleted[p] = node_id, reg.node_name, reg.records, deleted
        fed.reply_bytes += sum(int(a.nbytes) for a in (reg.samples, reg.slices, reg.deleted, reg.labels,
                                                        reg.class_counts) if a is not None)
    fed.plan = PartitionPlan(slices)
    return fed


def check_against_manifest(fed: Federation, manifest: Mapping[str, object], forgotten: Collection[int]) -> None:
    """At a retrain: the nodes must hold what trained the store, less only what was forgotten (ConfigError)."""
    names = manifest_node_names(manifest)
    partitions = manifest.get("partitions")
    if not isinstance(partitions, dict):
        raise ConfigError("the store's manifest has no partitions; it cannot be retrained")
    gone = set(forgotten)
    for p in sorted(fed.nodes):
        registered = names.get(p, {})
        who = f"node {fed.names[p]} (partition {p})"
        if registered.get("name") != fed.names[p]:
            raise ConfigError(f"partition {p} was trained by node {registered.get('name')!r}, not {fed.names[p]!r}; "
                              "start each SuperNode with the node-name and partition-id it trained with")
        trained = {int(i) for s in partitions.get(str(p), []) for i in s}
        now = {i for s in fed.plan.slices[p] for i in s}
        added, missing = now - trained, trained - now - gone
        if added or missing:
            what = "; ".join(f"{label} {_shown(ids)}" for label, ids in (("new sample(s)", added),
                                                                            ("missing sample(s)", missing)) if ids)
            raise ConfigError(f"{who} does not hold what trained this store: {what}; only `fedforget forget` may "
                              "remove a record, and new records need a new run")
