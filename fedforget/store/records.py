"""Records as their owners know them (``NODE:RECORD_ID``), resolved against a store's manifest alone.

A data owner names a record by its node and its own record id; the ledger indexes integer sample ids. The
manifest's ``nodes`` table says, per partition, the node's name and how its sample ids are derived
(:mod:`fedforget.core.record_ids`): "public" records are the shipped task's row numbers, "local" records
are ``hmac-sha256(key, node, record id)`` under the store's record key (its manifest's ``record-ids``; a
store written before the key has none, and its ids are the unkeyed ``sha256(node, record id)``). Old stores
have no ``nodes``: partition ``p`` is then ``node-<p>`` with public records. A record is accepted only when
its sample id lies in that node's own partition, so a record id typed for the wrong node is refused, never
forgotten elsewhere.

The coordinator keeps no raw record id of a "local" node: a local sample id maps back to its node only
(:func:`sample_record` returns None). Pure: numpy only, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedforget.core.ids import QUOTED_CHARS
from fedforget.core.record_ids import (
    LOCAL_RECORDS,
    PUBLIC_RECORDS,
    check_node_name,
    default_node_name,
    local_sample_id,
    parse_record,
    store_record_key,
)
from fedforget.store.forget_plan import PlanError, partition_ids
from fedforget.store.ledger import LedgerUsageError

#: Where a refusal points to find a record's node (the CLI commands that list and locate records).
FIND_RECORDS = ("`fedforget samples --store DIR --node NAME` lists a node's samples, "
                "`fedforget locate --store DIR --record NODE:RECORD_ID` finds a record")


class RecordError(LedgerUsageError):
    """A record the store does not hold, or text that is not ``NODE:RECORD_ID``; nothing was written."""


class NodesError(PlanError):
    """The manifest's ``nodes`` table is not what a training run writes: the store is not what it claims."""


@dataclass(frozen=True)
class Node:
    """One node of a store: its name, its partition, and how its sample ids are derived."""

    name: str
    partition: int
    records: str

    def to_json(self) -> dict[str, Any]:
        return {"node": self.name, "partition": self.partition, "records": self.records}


def _shown(text: str) -> str:
    return repr(text[:QUOTED_CHARS]) + ("…" if len(text) > QUOTED_CHARS else "")


def _partitions(manifest: Mapping[str, Any]) -> list[int]:
    parts = manifest.get("partitions")
    if parts is None:
        raise RecordError("this store has no trained plan yet; run training first")
    if not isinstance(parts, dict):
        raise NodesError("the manifest's partitions are not a table")
    out = []
    for key in parts:
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and str(int(key)) == key):
            raise NodesError(f"the manifest's partition {str(key)[:QUOTED_CHARS]!r} is not a partition number")
        out.append(int(key))
    return sorted(out)


def store_nodes(manifest: Mapping[str, Any]) -> dict[str, Node]:
    """Node name → :class:`Node`, for every partition of the manifest's plan (old stores: ``node-<p>``, public).

    Raises :class:`NodesError` when ``nodes`` does not name exactly the plan's partitions, each once, with a
    valid name and a known kind of records; :class:`RecordError` before training wrote a plan."""
    partitions = _partitions(manifest)
    table = manifest.get("nodes")
    if table is None:
        return {default_node_name(p): Node(default_node_name(p), p, PUBLIC_RECORDS) for p in partitions}
    if not isinstance(table, dict):
        raise NodesError("the manifest's nodes are not a table")
    if sorted(table) != sorted(map(str, partitions)):
        extra = sorted(set(table) - set(map(str, partitions)))
        missing = sorted(set(map(str, partitions)) - set(table))
        raise NodesError("the manifest's nodes do not match its partitions: " + (
            f"partition {missing[0]} has no node" if missing else f"node entry {extra[0][:QUOTED_CHARS]!r} has no "
            "partition"))
    out: dict[str, Node] = {}
    for p in partitions:
        entry = table[str(p)]
        name = entry.get("name") if isinstance(entry, dict) else None
        kind = entry.get("records") if isinstance(entry, dict) else None
        if not isinstance(name, str) or kind not in (PUBLIC_RECORDS, LOCAL_RECORDS):
            raise NodesError(f"the manifest's node of partition {p} is not {{'name': NAME, 'records': "
                             f"'{PUBLIC_RECORDS}' or '{LOCAL_RECORDS}'}}")
        try:
            check_node_name(name)
        except ValueError as exc:
            raise NodesError(f"the manifest's node of partition {p}: {exc}") from None
        if name in out:
            raise NodesError(f"the manifest names node {name!r} for partitions {out[name].partition} and {p}")
        out[name] = Node(name, p, kind)
    return out


def node_named(manifest: Mapping[str, Any], name: str) -> Node:
    """The node called ``name``; :class:`RecordError` (one line, listing some known names) otherwise."""
    nodes = store_nodes(manifest)
    if name not in nodes:
        names = sorted(nodes, key=lambda n: nodes[n].partition)
        shown = ", ".join(names[:5]) + (f" … ({len(names)} in all)" if len(names) > 5 else "")
        raise RecordError(f"unknown node {_shown(name)}: this store's nodes are {shown or 'none'}")
    return nodes[name]


def node_of_partition(manifest: Mapping[str, Any], partition: int) -> Node | None:
    """The node holding ``partition``, or None for a partition the plan does not have."""
    return next((n for n in store_nodes(manifest).values() if n.partition == partition), None)


def record_key(manifest: Mapping[str, Any]) -> str | None:
    """The store's record key (None: unkeyed ids); :class:`NodesError` when the manifest's is not one."""
    try:
        return store_record_key(manifest)
    except ValueError as exc:
        raise NodesError(str(exc)) from None


def _sample_id(node: Node, record_id: str, text: str, key: str | None) -> int:
    if node.records == LOCAL_RECORDS:
        return local_sample_id(node.name, record_id, key)
    if not (record_id.isascii() and record_id.isdigit() and str(int(record_id)) == record_id
            and int(record_id) < 2**63):
        raise RecordError(f"record {_shown(text)}: node {node.name} holds the shipped data set's rows, whose record "
                          "ids are their row numbers written in digits without leading zeros (e.g. 17)")
    return int(record_id)


def record_sample_ids(manifest: Mapping[str, Any], records: Sequence[str]) -> dict[str, int]:
    """Each record ``NODE:RECORD_ID`` → its sample id, every one checked to lie in its node's own partition.

    Raises :class:`RecordError` (one line, the first problem) for text that is not ``NODE:RECORD_ID``, an
    unknown node, or a record its node's partition does not hold; :class:`NodesError` for a broken manifest."""
    nodes = store_nodes(manifest)
    key = record_key(manifest)
    wanted: dict[str, tuple[Node, int]] = {}
    for text in records:
        if text in wanted:
            continue
        try:
            name, record_id = parse_record(text)
        except ValueError as exc:
            raise RecordError(str(exc)) from None
        node = nodes.get(name) or node_named(manifest, name)
        wanted[text] = (node, _sample_id(node, record_id, text, key))
    by_partition: dict[int, list[str]] = {}
    for text, (node, _) in wanted.items():
        by_partition.setdefault(node.partition, []).append(text)
    for partition, texts in sorted(by_partition.items()):
        held = partition_ids(manifest, partition)
        ids = np.asarray([wanted[t][1] for t in texts], dtype=np.int64)
        absent = np.flatnonzero(~np.isin(ids, held))
        if len(absent):
            text = texts[int(absent[0])]
            more = f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""
            raise RecordError(f"unknown record {_shown(text)}: not in node {wanted[text][0].name}'s training data "
                              f"in this store{more}; {FIND_RECORDS}")
    return {text: sid for text, (_, sid) in wanted.items()}


def record_sample_id(manifest: Mapping[str, Any], record: str) -> int:
    """The sample id of one record ``NODE:RECORD_ID`` (see :func:`record_sample_ids`)."""
    return record_sample_ids(manifest, [record])[record]


def sample_node(manifest: Mapping[str, Any], sample: int) -> Node:
    """The node whose partition holds ``sample``; :class:`RecordError` when no partition does."""
    for node in sorted(store_nodes(manifest).values(), key=lambda n: n.partition):
        held = partition_ids(manifest, node.partition)
        pos = int(np.searchsorted(held, sample))
        if pos < len(held) and int(held[pos]) == sample:
            return node
    raise RecordError(f"unknown sample {sample}: in no node's training data in this store; {FIND_RECORDS}")


def record_of(node: Node, sample: int) -> str | None:
    """``NODE:RECORD_ID`` of ``sample`` in ``node``: the row number for public records, None for local ones
    (the coordinator keeps no raw record id)."""
    return f"{node.name}:{sample}" if node.records == PUBLIC_RECORDS else None


def sample_record(manifest: Mapping[str, Any], sample: int) -> str | None:
    """``NODE:RECORD_ID`` of a held sample on a public node; None on a local node (its record id is known
    only to the node). :class:`RecordError` for a sample no partition holds."""
    return record_of(sample_node(manifest, sample), sample)
