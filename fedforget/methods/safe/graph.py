"""SAFE's shard graph and synergistic bilevel sharding, federated (pure: no torch, no flwr).

Edge convention (the paper's): an edge ``(u, v)`` means "u points to v": the adapter of
``u`` is trained on ``v``'s data. :meth:`ShardGraph.uses` is that out-neighbourhood (self included);
:meth:`ShardGraph.dependents` is the in-neighbourhood, the adapters to retrain when ``v`` changes.

Federated mapping: a *refined node* is a cell ``(client, coarse group g, class k)``; the
cells of coarse group ``g`` whose class is in ``π_g(f)`` form clique ``(g, f)``. One clique = one
artifact (its per-class queries and heads), so a forgotten sample costs exactly its clique. Cells are
stored as the ledger's units ``"partition:cell"`` with ``cell = g·K + k``, so ``--slice P:C`` names one.
Everything is drawn from seeds and labels, never from sample contents (paper §5 footnote).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedforget.core.config import ConfigError
from fedforget.core.harmonic import harmonic
from fedforget.core.seeds import derive_seed
from fedforget.core.slicing import array_split
from fedforget.methods.safe.config import SafeLayout

COARSE_MODES = ("sample", "client", "uniform")


# -- the general graph --------------------------------------------------------------------------
@dataclass
class ShardGraph:
    """Nodes with disjoint data, directed edges ``u → v`` = "u's adapter may read v's data"."""

    data: dict[str, set[int]] = field(default_factory=dict)
    out: dict[str, set[str]] = field(default_factory=dict)

    def add_node(self, node: str, samples: Iterable[int] = ()) -> None:
        self.data.setdefault(node, set()).update(int(s) for s in samples)
        self.out.setdefault(node, set()).add(node)  # the self-loop is always there

    def add_edge(self, u: str, v: str) -> None:
        if u not in self.data or v not in self.data:
            raise KeyError(f"edge {u}->{v} names an unknown node")
        self.out[u].add(v)

    def add_clique(self, nodes: Sequence[str]) -> None:
        for u in nodes:
            for v in nodes:
                self.add_edge(u, v)

    def uses(self, node: str) -> set[str]:
        """N_out(node): whose data the adapter of ``node`` trains on (itself included)."""
        return set(self.out[node])

    def dependents(self, node: str) -> set[str]:
        """N_in(node): the adapters that saw ``node``'s data and must retrain when it changes."""
        return {u for u, vs in self.out.items() if node in vs}

    def train_set(self, node: str) -> set[int]:
        return set().union(*(self.data[v] for v in self.out[node]))

    def node_of(self, sample: int) -> str:
        for node, samples in self.data.items():
            if sample in samples:
                return node
        raise KeyError(f"sample {sample} is in no node")

    def forget_cost(self, samples: Collection[int]) -> dict[str, Any]:
        """|M_x| (Eq. 3): the data revisited to retrain every adapter that saw ``samples``."""
        gone = {int(s) for s in samples}
        touched = {self.node_of(s) for s in gone}
        affected = set().union(*(self.dependents(n) for n in touched)) if touched else set()
        revisit = set().union(*(self.train_set(a) for a in affected)) - gone if affected else set()
        return {"affected": sorted(affected), "revisited": len(revisit)}


# -- bilevel sharding over clients --------------------------------------------------------------
def _rotating_split(ids: Sequence[int], parts: int, seed: int) -> list[list[int]]:
    """A seeded permutation of ``ids`` dealt round-robin from a seeded offset into ``parts`` lists,
    so small classes do not always land in part 0."""
    rng = random.Random(seed)
    order = sorted(ids)
    rng.shuffle(order)
    offset = rng.randrange(parts)
    out: list[list[int]] = [[] for _ in range(parts)]
    for i, sample in enumerate(order):
        out[(i + offset) % parts].append(sample)
    return [sorted(p) for p in out]


def class_partition(num_classes: int, fine: int, seed: int) -> list[list[int]]:
    """π_g: a seeded random partition of the classes into ``fine`` near-equal groups."""
    classes = list(range(num_classes))
    random.Random(seed).shuffle(classes)
    return [sorted(g) for g in array_split(classes, fine)]


def client_groups(counts: Mapping[int, Sequence[int]], coarse: int, seed: int) -> dict[int, int]:
    """Option A: clients → coarse groups, greedily balancing per-class counts (seeded visiting order)."""
    parts = sorted(counts)
    random.Random(seed).shuffle(parts)
    k = len(next(iter(counts.values()))) if counts else 0
    totals = [[0] * k for _ in range(coarse)]
    out: dict[int, int] = {}
    for i, p in enumerate(parts):
        if i < coarse:  # every group gets a client first
            g = i
        else:
            g = min(range(coarse), key=lambda g: (sum((t + c) ** 2 for t, c in zip(totals[g], counts[p], strict=True)),
                                                  sum(totals[g]), g))
        out[p] = g
        totals[g] = [t + c for t, c in zip(totals[g], counts[p], strict=True)]
    return out


@dataclass(frozen=True)
class SafePlan:
    """The graph every SAFE run, retrain and verify agrees on (drawn before any deletion)."""

    method: str
    num_classes: int
    coarse: int
    fine: int
    mode: str
    #: g -> f -> classes of clique (g, f)
    classes: list[list[list[int]]]
    #: clique artifact id -> sorted units ("partition:cell")
    members: dict[str, list[str]]
    #: unit -> size at plan time
    sizes: dict[str, int]
    prototypes: bool
    lam: float
    dp: bool = False
    dp_k: int = 0
    #: the server-held safe shard: class -> its samples of that class (every clique of the class reads them)
    shard: dict[int, int] = field(default_factory=dict)

    def cell(self, g: int, k: int) -> int:
        return g * self.num_classes + k

    def split_cell(self, cell: int) -> tuple[int, int]:
        return divmod(cell, self.num_classes)

    @staticmethod
    def clique_id(method: str, g: int, f: int) -> str:
        return f"{method}/g{g}/f{f}"

    def cliques(self) -> list[tuple[str, int, int, list[int]]]:
        """(artifact id, g, f, classes) for every clique that holds data."""
        out = []
        for g, groups in enumerate(self.classes):
            for f, cls in enumerate(groups):
                cid = self.clique_id(self.method, g, f)
                if cid in self.members:
                    out.append((cid, g, f, cls))
        return out

    def adapters(self, clique: str) -> list[str]:
        """Per-class adapter ids of a clique (SAFE-DP artifacts: one binary classifier per class node)."""
        g, f = (int(x[1:]) for x in clique.split("/")[1:])
        return [f"{clique}/k{k}" for k in self.classes[g][f] if self._node_units(g, k)]

    def _node_units(self, g: int, k: int) -> list[str]:
        cell = self.cell(g, k)
        return [u for u in self.sizes if int(u.split(":")[1]) == cell and self.sizes[u] > 0]

    def node_units(self, adapter: str) -> list[str]:
        """The units of a class node (``…/g{g}/f{f}/k{k}``)."""
        parts = adapter.split("/")
        return sorted(self._node_units(int(parts[1][1:]), int(parts[3][1:])))

    def proto_id(self, unit: str) -> str:
        p, c = unit.split(":")
        return f"{self.method}/proto/p{p}/c{c}"

    def shard_proto_id(self, label: int) -> str:
        """The safe shard's prototype sum of one class: no lineage, so no request ever invalidates it."""
        return f"{self.method}/proto/safe-shard/k{label}"

    def shard_proto_artifacts(self) -> list[str]:
        return [self.shard_proto_id(k) for k, n in sorted(self.shard.items()) if n > 0] if self.prototypes else []

    def proto_artifacts(self) -> list[str]:
        cells = [self.proto_id(u) for u in sorted(self.sizes) if self.sizes[u] > 0] if self.prototypes else []
        return cells + self.shard_proto_artifacts()

    def shard_size(self, classes: Iterable[int]) -> int:
        """Safe-shard samples a clique of ``classes`` also trains on."""
        return sum(self.shard.get(int(k), 0) for k in classes)

    def participants(self, units: Iterable[str]) -> dict[int, list[int]]:
        """partition -> the cells it holds among ``units``."""
        out: dict[int, list[int]] = {}
        for u in units:
            p, c = (int(x) for x in u.split(":"))
            out.setdefault(p, []).append(c)
        return {p: sorted(c) for p, c in sorted(out.items())}

    def clique_size(self, clique: str) -> int:
        return sum(self.sizes[u] for u in self.members[clique])

    def to_json(self) -> dict[str, Any]:
        return {"kind": "safe", "method": self.method, "num-classes": self.num_classes, "coarse": self.coarse,
                "fine": self.fine, "mode": self.mode, "classes": self.classes, "members": self.members,
                "sizes": self.sizes, "prototypes": self.prototypes, "lambda": self.lam, "dp": self.dp,
                "dp-k": self.dp_k, "safe-shard": {str(k): n for k, n in sorted(self.shard.items())}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SafePlan:
        return cls(str(d["method"]), int(d["num-classes"]), int(d["coarse"]), int(d["fine"]), str(d["mode"]),
                   [[list(map(int, c)) for c in g] for g in d["classes"]],
                   {str(k): list(map(str, v)) for k, v in d["members"].items()},
                   {str(k): int(v) for k, v in d["sizes"].items()}, bool(d["prototypes"]), float(d["lambda"]),
                   bool(d.get("dp", False)), int(d.get("dp-k", 0)),
                   {int(k): int(v) for k, v in (d.get("safe-shard") or {}).items()})

    def graph(self) -> ShardGraph:
        """The refined shard graph: class nodes, each clique fully connected (for |M_x| and tests)."""
        graph = ShardGraph()
        for cid, *_ in self.cliques():
            nodes = self.adapters(cid)
            for node in nodes:
                graph.add_node(node)
            graph.add_clique(nodes)
        return graph


def prototype_weight(samples_per_adapter: float) -> float:
    """λ = exp(−d·|S|/100) (paper §7): lean on prototypes when each adapter saw little data."""
    return math.exp(-samples_per_adapter / 100.0)


def bilevel_cells(labels: Mapping[int, Mapping[int, int]], num_classes: int, coarse: int, fine: int, mode: str,
                  seed: int) -> dict[int, dict[int, list[int]]]:
    """partition -> cell -> sorted sample ids, from ``labels[partition][sample] = class``.

    ``sample``: each client deals each class round-robin (seeded) into the ``coarse`` groups
    (class-balanced subsampling, Option B). ``client``: a client's whole data goes to one group
    (Option A, client-level forgetting touches ≤ ``fine`` cliques). ``uniform``: SISA's uniform
    random shards (``coarse·fine`` groups, all classes in each).
    """
    if mode not in COARSE_MODES:
        raise ValueError(f"coarse mode {mode!r} is not one of {COARSE_MODES}")
    groups = coarse * fine if mode == "uniform" else coarse
    owner: dict[int, int] = {}
    if mode == "client":
        counts = {p: [sum(1 for y in lab.values() if y == k) for k in range(num_classes)] for p, lab in labels.items()}
        owner = client_groups(counts, coarse, derive_seed(seed, "safe", "client-groups"))
    out: dict[int, dict[int, list[int]]] = {}
    for p, lab in sorted(labels.items()):
        cells: dict[int, list[int]] = {}
        if mode == "uniform":
            parts = _rotating_split(list(lab), groups, derive_seed(seed, "safe", "uniform", p))
            for g, ids in enumerate(parts):
                for s in ids:
                    cells.setdefault(g * num_classes + lab[s], []).append(s)
        else:
            for k in range(num_classes):
                ids = [s for s, y in lab.items() if y == k]
                if not ids:
                    continue
                if mode == "client":
                    cells[owner[p] * num_classes + k] = sorted(ids)
                    continue
                for g, part in enumerate(_rotating_split(ids, coarse, derive_seed(seed, "safe", "coarse", p, k))):
                    if part:
                        cells[g * num_classes + k] = part
        out[p] = {c: sorted(v) for c, v in sorted(cells.items())}
    return out


def check_clique_classes(layout: SafeLayout, num_classes: int, fine: int, task: str) -> None:
    """SAFE's cliques need two classes each: a one-class clique's one-vs-all adapters see no negative.

    ``fine`` class groups split the K classes near-equally, so the smallest has ⌊K/fine⌋ classes. A
    :class:`ConfigError` names the largest ``safe.fine`` that works; ProtoSISA's shards hold every class.
    """
    if layout.class_cliques and num_classes // fine < 2:
        raise ConfigError(f"safe.fine={fine} leaves a SAFE clique with one class of {task}'s {num_classes}, whose "
                          f"adapters would never see a negative; use safe.fine <= {max(1, num_classes // 2)}")


def build_safe_plan(method: str, labels: Mapping[int, Mapping[int, int]], num_classes: int, coarse: int, fine: int,
                    mode: str, prototypes: bool, seed: int, dp: bool = False, dp_k: int = 0,
                    shard: Mapping[int, int] | None = None) -> tuple[SafePlan, dict[int, dict[int, list[int]]]]:
    """The plan and its cells. ``method='protosisa'`` (and SISA, ``prototypes=False``) use uniform shards."""
    if coarse < 1 or fine < 1:
        raise ValueError(f"coarse and fine must be >= 1, got {coarse} and {fine}")
    if fine > num_classes:
        raise ValueError(f"fine={fine} exceeds the {num_classes} classes: a clique needs at least one class")
    cells = bilevel_cells(labels, num_classes, coarse, fine, mode, seed)
    if mode == "uniform":
        groups, classes = coarse * fine, [[list(range(num_classes))] for _ in range(coarse * fine)]
    else:
        groups = coarse
        classes = [class_partition(num_classes, fine, derive_seed(seed, "safe", "classes", g)) for g in range(groups)]
    sizes = {f"{p}:{c}": len(ids) for p, cs in cells.items() for c, ids in cs.items()}
    members: dict[str, list[str]] = {}
    for g in range(groups):
        for f, cls in enumerate(classes[g]):
            wanted = {g * num_classes + k for k in cls}
            units = sorted(u for u in sizes if int(u.split(":")[1]) in wanted)
            if units:
                members[SafePlan.clique_id(method, g, f)] = units
    total = sum(sizes.values())
    n = sum(len(c) for c in classes)
    plan = SafePlan(method, num_classes, groups if mode == "uniform" else coarse, 1 if mode == "uniform" else fine,
                    mode, classes, members, sizes, prototypes, prototype_weight(total / n) if prototypes else 0.0,
                    dp, dp_k, {int(k): int(v) for k, v in sorted((shard or {}).items()) if v > 0})
    return plan, cells


# -- serving and forgetting cost ----------------------------------------------------------------
def safe_serving(plan_json: Mapping[str, Any], valid: Collection[str]) -> dict[str, Any]:
    """Instant forgetting: invalid cliques (or class adapters, SAFE-DP) leave the ensemble; prototypes
    of touched cells drop out until retrain refreshes them."""
    plan = SafePlan.from_json(plan_json)
    valid = set(valid)
    cliques = plan.cliques()
    served = []
    for cid, _, _, _ in cliques:
        served += [a for a in plan.adapters(cid) if a in valid] if plan.dp else ([cid] if cid in valid else [])
    protos = [a for a in plan.proto_artifacts() if a in valid]
    n_valid = sum(1 for cid, *_ in cliques if cid in valid or any(a in valid for a in plan.adapters(cid)))
    return {"kind": "safe", "available": bool(served), "cliques": len(cliques), "cliques-served": n_valid,
            "artifacts": sorted(served + protos), "lambda": plan.lam,
            "deletions-left": len(cliques) * harmonic(n_valid) if n_valid else 0.0}


def a_la_carte(plan: SafePlan, served: Collection[str], partitions: Collection[int]) -> list[str]:
    """À-la-carte serving (paper §3, Fig. 1): of what is served, only the adapters whose whole training
    data (every unit of their clique) and the prototypes whose cell come from ``partitions``, the
    clients a caller is entitled to. Nothing retrains: it is the served model minus the adapters that
    read anyone else, the same set instant forgetting of every other client leaves."""
    allowed = {int(p) for p in partitions}

    def entitled(units: Iterable[str]) -> bool:
        return all(int(u.split(":")[0]) in allowed for u in units)

    keep = []
    for cid, *_ in plan.cliques():
        if entitled(plan.members[cid]):
            keep += [a for a in (plan.adapters(cid) if plan.dp else [cid]) if a in served]
    keep += [plan.proto_id(u) for u in plan.sizes if entitled([u]) and plan.proto_id(u) in served]
    keep += [a for a in plan.shard_proto_artifacts() if a in served]  # server data: everyone is entitled
    return sorted(keep)


def forget_cost(plan: SafePlan, touched_units: Collection[str], removed: int) -> dict[str, Any]:
    """Predicted cost of a request: cliques (exact SAFE) retrained and |M_x|, the samples they revisit."""
    touched = set(touched_units)
    hit = [(cid, cls) for cid, _, _, cls in plan.cliques() if touched & set(plan.members[cid])]
    revisited = sum(plan.clique_size(c) + plan.shard_size(cls) for c, cls in hit) - removed
    return {"cliques": [c for c, _ in hit], "revisited": revisited}


def forget_detail(plan_json: Mapping[str, Any], touched_units: Collection[str], removed: int,
                  serving: Mapping[str, Any]) -> dict[str, Any]:
    """What ``fedforget forget`` reports for a SAFE store: the cliques hit, |M_x|, the cliques still served."""
    return {"safe": {**forget_cost(SafePlan.from_json(dict(plan_json)), touched_units, removed),
                     "cliques-served": serving.get("cliques-served")}}
