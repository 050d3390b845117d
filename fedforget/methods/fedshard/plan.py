"""FedShard's stage-wise shard tree, shard merging (A1), round allocation (A2) and serving (pure).

Clients are the leaves. Stage 1 deals a seeded permutation of the clients into ``⌈K/R⌉`` shards;
each later stage merges about ``R`` shards of the stage below (A1), until one shard holds every
client (``P = ⌈log_R K⌉`` stages). Every shard is one artifact whose lineage is its clients, so a
leaving client invalidates exactly its path to the root, and retraining walks that path only, each
shard starting from the re-aggregation of its (retrained or cached) children, never from a cached
init that held the leaver.

The tree (members, children, rounds) is the *plan*: retraining and ``verify`` replay it and never
re-run A1/A2, because those read update angles that the leaver influenced.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

FALLBACKS = ("last-valid", "refuse")
MERGES = ("a1", "random")
ROUND_RULES = ("intent", "literal", "constant")
#: Stages whose rounds are fixed at ``rounds-max`` before A2 takes over (the calibration stages, G6).
CALIBRATION_STAGES = 2


@dataclass(frozen=True)
class ShardNode:
    """One shard: ``children`` are partitions at stage 1 and shard indices of the stage below after."""

    stage: int  # 1-based
    index: int  # 0-based within its stage
    children: tuple[int, ...]
    clients: tuple[int, ...]
    rounds: int

    @property
    def artifact(self) -> str:
        return artifact_id(self.stage, self.index)


def artifact_id(stage: int, index: int) -> str:
    return f"fedshard/p{stage}/s{index}"


def parse_artifact(artifact: str) -> tuple[int, int]:
    _, stage, index = artifact.split("/")
    return int(stage[1:]), int(index[1:])


def num_stages(clients: int, fanout: int) -> int:
    """``P = ⌈log_R K⌉`` by integer arithmetic (``math.log(125, 5)`` is 3.0000000000000004)."""
    if fanout < 2:
        raise ValueError(f"fanout must be >= 2, got {fanout}")
    if clients < 1:
        raise ValueError("a shard tree needs at least one client")
    stages, reach = 0, 1
    while reach < clients:
        reach *= fanout
        stages += 1
    return max(1, stages)


def stage_sizes(clients: int, fanout: int) -> list[int]:
    """``N_p = ⌈K/R^p⌉`` shards at each stage ``p = 1..P``."""
    return [-(-clients // fanout**p) for p in range(1, num_stages(clients, fanout) + 1)]


@dataclass(frozen=True)
class ShardTree:
    """The whole plan of a FedShard run; ``flat`` is the one-stage SISA-style baseline (ensembled)."""

    fanout: int
    stages: list[list[ShardNode]]
    flat: bool = False

    @property
    def num_clients(self) -> int:
        return sum(len(s.clients) for s in self.stages[0])

    @property
    def root(self) -> ShardNode:
        return self.stages[-1][0]

    def shards(self) -> Iterable[ShardNode]:
        for stage in self.stages:
            yield from stage

    def shard(self, stage: int, index: int) -> ShardNode:
        return self.stages[stage - 1][index]

    def path(self, client: int) -> list[ShardNode]:
        """The shards holding ``client``, one per stage, leaf to root."""
        return [s for stage in self.stages for s in stage if client in s.clients]

    def affected(self, leavers: Collection[int]) -> list[ShardNode]:
        """Every shard holding a leaver, in training order (stage by stage, index order)."""
        gone = set(leavers)
        return [s for s in self.shards() if gone.intersection(s.clients)]

    def to_json(self) -> dict[str, Any]:
        return {"kind": "fedshard", "fanout": self.fanout, "flat": self.flat,
                "stages": [[{"children": list(s.children), "clients": list(s.clients), "rounds": s.rounds}
                            for s in stage] for stage in self.stages]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardTree:
        stages = [[ShardNode(p, i, tuple(int(c) for c in s["children"]), tuple(int(c) for c in s["clients"]),
                             int(s["rounds"])) for i, s in enumerate(stage)]
                  for p, stage in enumerate(data["stages"], start=1)]
        tree = cls(int(data["fanout"]), stages, bool(data.get("flat", False)))
        check_tree(tree)
        return tree

    def serving_json(self, fallback: str) -> dict[str, Any]:
        """What serving needs (artifact ids and client counts), stored in the ledger's plan."""
        return {"kind": "fedshard", "flat": self.flat, "fallback": fallback,
                "stages": [[{"artifact": s.artifact, "clients": len(s.clients)} for s in stage]
                           for stage in self.stages]}


def check_tree(tree: ShardTree) -> None:
    """Every stage partitions the clients, each shard is the union of its children, one root."""
    clients = sorted(c for s in tree.stages[0] for c in s.clients)
    if len(set(clients)) != len(clients):
        raise ValueError("stage 1 assigns a client to two shards")
    for p, stage in enumerate(tree.stages, start=1):
        if sorted(c for s in stage for c in s.clients) != clients:
            raise ValueError(f"stage {p} is not a partition of the clients")
        for s in stage:
            if s.rounds < 1:
                raise ValueError(f"shard {s.artifact} has {s.rounds} rounds")
            if p > 1:
                below = tree.stages[p - 2]
                union = sorted(c for i in s.children for c in below[i].clients)
                if union != list(s.clients):
                    raise ValueError(f"shard {s.artifact} is not the union of its children")
    if not tree.flat and len(tree.stages[-1]) != 1:
        raise ValueError("the last stage must be a single root shard")


# -- building the tree ----------------------------------------------------------------------
def deal(items: Sequence[int], groups: int, seed: int) -> list[list[int]]:
    """A seeded permutation of ``items`` dealt round-robin into ``groups`` (sizes differ by ≤ 1)."""
    order = list(items)
    random.Random(seed).shuffle(order)
    return [sorted(order[g::groups]) for g in range(groups)]


def first_stage(partitions: Sequence[int], fanout: int, seed: int, rounds: int) -> list[ShardNode]:
    """Stage 1: clients dealt at random into ``⌈K/R⌉`` shards ("randomly picking up clients")."""
    groups = sorted(deal(sorted(partitions), -(-len(partitions) // fanout), seed), key=min)
    return [ShardNode(1, i, tuple(g), tuple(g), rounds) for i, g in enumerate(groups)]


def merged_stage(below: Sequence[ShardNode], groups: Sequence[Sequence[int]], rounds: Sequence[int]) -> list[ShardNode]:
    """The next stage: each group of child indices (of ``below``) becomes one shard."""
    stage = below[0].stage + 1
    return [ShardNode(stage, i, tuple(sorted(g)), tuple(sorted(c for j in g for c in below[j].clients)), r)
            for i, (g, r) in enumerate(zip(groups, rounds, strict=True))]


def static_tree(partitions: Sequence[int], fanout: int, seed: int, rounds: int, flat: bool = False) -> ShardTree:
    """A tree with seeded random merges and constant rounds (naive sharding; tests and cost tables)."""
    stages = [first_stage(partitions, fanout, seed, rounds)]
    while not flat and len(stages[-1]) > 1:
        groups = merge_random(len(stages[-1]), fanout, seed + len(stages))
        stages.append(merged_stage(stages[-1], groups, [rounds] * len(groups)))
    return ShardTree(fanout, stages, flat)


def three_means_1d(values: Sequence[float]) -> list[int]:
    """Optimal 1-D k-means with k = 3 by dynamic programming over the sorted values: deterministic,
    unlike a seeded Lloyd run. Labels 0/1/2 = clusters ordered by centroid (negative, middle, positive)."""
    n = len(values)
    k = min(3, n)
    order = sorted(range(n), key=lambda i: (values[i], i))
    xs = [values[i] for i in order]
    prefix, prefix2 = [0.0], [0.0]
    for x in xs:
        prefix.append(prefix[-1] + x)
        prefix2.append(prefix2[-1] + x * x)

    def sse(i: int, j: int) -> float:  # values xs[i:j]
        m = j - i
        s = prefix[j] - prefix[i]
        return prefix2[j] - prefix2[i] - s * s / m

    inf = float("inf")
    cost = [[inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    cost[0][0] = 0.0
    for c in range(1, k + 1):
        for j in range(c, n + 1):
            for i in range(c - 1, j):
                v = cost[c - 1][i] + sse(i, j)
                if v < cost[c][j] - 1e-15:
                    cost[c][j], cut[c][j] = v, i
    bounds, j = [], n
    for c in range(k, 0, -1):
        bounds.append((cut[c][j], j))
        j = cut[c][j]
    bounds.reverse()
    labels = [0] * n
    offset = 3 - k  # with fewer than 3 values, the clusters present are the upper ones
    for c, (i, j) in enumerate(bounds):
        for pos in range(i, j):
            labels[order[pos]] = c + offset
    return labels


@dataclass(frozen=True)
class Child:
    """A shard of the stage below, as A1 sees it."""

    index: int
    angle: float  # signed update angle (radians)
    clients: tuple[int, ...]
    cost: float  # cumulative retraining cost of its clients' paths so far (client-rounds)


def _merge_score(group: list[Child], cand: Child) -> tuple[float, float, int]:
    """``calculateMe`` completed: M_e over the clients of the candidate super-shard, each
    client's cost its path so far plus the candidate's size; ties by |mean angle|, then index."""
    members = [*group, cand]
    size = sum(len(m.clients) for m in members)
    zs, alphas = [], []
    for m in members:
        for _ in m.clients:
            zs.append(m.cost + size)
            alphas.append(abs(m.angle))
    z_avg = sum(zs) / len(zs)
    me = sum((z_avg - z) ** 2 / (a + 1e-9) for z, a in zip(zs, alphas, strict=True)) / len(zs)
    mean_angle = sum(m.angle for m in members) / len(members)
    return me, abs(mean_angle), cand.index


def merge_a1(children: Sequence[Child], fanout: int) -> list[list[int]]:
    """Algorithm 3 completed: cluster children by signed angle into (negative, middle, positive), place
    the middle ones first, then alternate sides so each super-shard's mean angle stays near 0, then
    place what the paper's loop leaves over. Always fills the smallest super-shard, so sizes are
    ``⌊N/M⌋`` or ``⌈N/M⌉``. Returns child indices per super-shard, each sorted."""
    n = len(children)
    if n <= fanout:
        return [sorted(c.index for c in children)]
    m = -(-n // fanout)
    labels = three_means_1d([c.angle for c in children])
    clusters = [sorted((c for c, lab in zip(children, labels, strict=True) if lab == k),
                       key=lambda c: (c.angle, c.index)) for k in range(3)]
    neg, mid, pos = clusters
    groups: list[list[Child]] = [[] for _ in range(m)]

    def smallest() -> list[Child]:
        j = min(range(m), key=lambda j: (len(groups[j]), sum(len(c.clients) for c in groups[j]), j))
        return groups[j]

    def place(group: list[Child], source: list[Child]) -> None:
        best = min(source, key=lambda c: _merge_score(group, c))
        source.remove(best)
        group.append(best)

    while mid:
        place(smallest(), mid)
    while neg and pos:
        group = smallest()
        mean = sum(c.angle for c in group) / len(group) if group else 0.0
        place(group, neg if mean >= 0 else pos)
    rest = neg + pos
    while rest:
        place(smallest(), rest)
    return sorted((sorted(c.index for c in g) for g in groups), key=min)


def merge_random(num_children: int, fanout: int, seed: int) -> list[list[int]]:
    """Naive sharding (the ablation without A1): a seeded random partition into ``⌈N/R⌉`` groups."""
    if num_children <= fanout:
        return [list(range(num_children))]
    return sorted(deal(range(num_children), -(-num_children // fanout), seed), key=min)


def variance(values: Sequence[float]) -> float:
    """Population variance (ddof 0); a single value has variance 0."""
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


def allocate_rounds(variances: Sequence[float], t_min: int, t_max: int, rule: str = "intent") -> list[int]:
    """A2: rounds per new shard from the variance of its children's angles.

    ``intent`` (default): linear and decreasing, the most homogeneous shard gets
    ``t_max`` and the least ``t_min``. ``literal``: Eq. 2 as printed, ``T0 + (T1−T0)/v`` (≥ T1, → ∞ at
    the minimum variance), clipped to the range. ``constant``: every shard ``t_max``.
    """
    if not 1 <= t_min <= t_max:
        raise ValueError(f"rounds range [{t_min}, {t_max}] is empty")
    if rule not in ROUND_RULES:
        raise ValueError(f"unknown rounds rule {rule!r}; known: {', '.join(ROUND_RULES)}")
    if rule == "constant" or not variances:
        return [t_max] * len(variances)
    low, high = min(variances), max(variances)
    if high - low < 1e-12:
        return [t_max] * len(variances)
    out = []
    for v in variances:
        x = (v - low) / (high - low)
        if rule == "intent":
            out.append(int(round(t_max - x * (t_max - t_min))))
        else:
            t = math.inf if x == 0 else t_min + (t_max - t_min) / x
            out.append(int(min(t_max, max(t_min, t))))
    return out


def literal_rounds(variances: Sequence[float], t_min: int, t_max: int) -> list[float]:
    """Eq. 2 unclipped, for showing the defect: ≥ ``t_max`` everywhere, ``inf`` at the minimum."""
    low, high = min(variances), max(variances)
    out = []
    for v in variances:
        x = (v - low) / (high - low) if high > low else 0.0
        out.append(math.inf if x == 0 else t_min + (t_max - t_min) / x)
    return out


# -- serving ---------------------------------------------------------------------------------
def fedshard_serving(plan: dict[str, Any], valid: Collection[str]) -> dict[str, Any]:
    """The root while it is valid. After a forget, until the retrain: ``last-valid`` serves the valid
    shard of the highest stage covering the most clients, ``refuse`` serves nothing. The flat baseline
    ensembles its valid shards (SISA: forgetting drops a shard at once)."""
    valid = set(valid)
    stages = plan["stages"]
    base = {"kind": "fedshard", "fallback": plan["fallback"], "deletions-left": None}
    if plan.get("flat"):
        served = [s["artifact"] for s in stages[0] if s["artifact"] in valid]
        return {**base, "available": bool(served), "artifacts": served, "stage": 1, "clients":
                sum(s["clients"] for s in stages[0] if s["artifact"] in valid), "falling-back": False}
    root = stages[-1][0]
    if root["artifact"] in valid:
        return {**base, "available": True, "artifacts": [root["artifact"]], "stage": len(stages),
                "clients": root["clients"], "falling-back": False}
    if plan["fallback"] == "last-valid":
        for p in range(len(stages) - 1, 0, -1):
            candidates = [s for s in stages[p - 1] if s["artifact"] in valid]
            if candidates:
                best = max(candidates, key=lambda s: s["clients"])  # max keeps the first (lowest index)
                return {**base, "available": True, "artifacts": [best["artifact"]], "stage": p,
                        "clients": best["clients"], "falling-back": True}
    return {**base, "available": False, "artifacts": [], "stage": None, "clients": 0, "falling-back": True}
