"""FedShard's costs and fairness metrics, counted on the tree (pure).

Cost unit: a *client-round* is one client doing one FedAvg round of local training. "Member-rounds"
count every member of a retrained shard, the leaver included (the paper's Eq. 14);
"participating rounds" count only the members still holding data, which is what a retrain sends.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from fedforget.methods.fedshard.plan import ShardTree, num_stages

#: Default ε of M_p's normalisation; it is reported with every value.
MP_EPSILON = 0.1


def training_cost(tree: ShardTree) -> int:
    """Client-rounds of a full training: ``Σ_shards T_s·|C_s|`` (= ``P·T0·K`` with constant rounds)."""
    return sum(s.rounds * len(s.clients) for s in tree.shards())


def unlearning_cost(tree: ShardTree, leavers: Collection[int], removed: Collection[int] = ()) -> dict[str, int]:
    """What retraining after ``leavers`` costs, with ``removed`` clients already gone before.

    ``critical-path-rounds`` is the latency in rounds (stages run one after another, G18).
    """
    gone = set(removed) | set(leavers)
    shards = tree.affected(leavers)
    per_stage: dict[int, int] = {}
    for s in shards:
        per_stage[s.stage] = max(per_stage.get(s.stage, 0), s.rounds)
    return {
        "shards": len(shards),
        "member-rounds": sum(s.rounds * len(s.clients) for s in shards),
        "participating-rounds": sum(s.rounds * len(set(s.clients) - gone) for s in shards),
        "critical-path-rounds": sum(per_stage.values()),
    }


def client_costs(tree: ShardTree) -> dict[int, int]:
    """``Z_c``: member-rounds of unlearning each client alone (computed on the tree, not run)."""
    return {c: sum(s.rounds * len(s.clients) for s in tree.path(c)) for s in tree.stages[0] for c in s.clients}


def speedup_r1(clients: int, fanout: int) -> float:
    """Prop. 2: ``r1 = ((R−1)/R)·(K/(K−1))·P`` for constant rounds and ``K = R^P``."""
    p = num_stages(clients, fanout)
    return (fanout - 1) / fanout * clients / (clients - 1) * p


def prop3_bounds(tree: ShardTree) -> tuple[float, float]:
    """Prop. 3: ``r1·T̄/T_max ≤ r̂1 ≤ r1·T̄/T_min`` with ``T̄ = T_train/(P·K)`` (variable rounds)."""
    k = tree.num_clients
    p = len(tree.stages)
    rounds = [s.rounds for s in tree.shards()]
    t_bar = training_cost(tree) / (p * k)
    r1 = speedup_r1(k, tree.fanout)
    return r1 * t_bar / max(rounds), r1 * t_bar / min(rounds)


def efficiency_fairness(costs: Mapping[int, float], angles: Mapping[int, float], eps: float = 1e-9) -> float:
    """M_e (Eq. 7): ``mean_c (Z_avg − Z_c)² / |α_c|``; lower is fairer; scales with the cost unit²."""
    clients = sorted(costs)
    z_avg = sum(costs[c] for c in clients) / len(clients)
    return sum((z_avg - costs[c]) ** 2 / (abs(angles[c]) + eps) for c in clients) / len(clients)


def min_distances(angles: Mapping[int, float], leavers: Collection[int]) -> dict[int, float]:
    """``min over remaining c_r ≠ c of |α_c − α_{c_r}|`` (G9: a client is not its own neighbour)."""
    remaining = [c for c in sorted(angles) if c not in set(leavers)]
    out = {}
    for c in sorted(angles):
        others = [abs(angles[c] - angles[r]) for r in remaining if r != c]
        out[c] = min(others) if others else 0.0
    return out


def _normalise(values: Sequence[float], eps0: float, eps1: float = 1e-12) -> list[float]:
    low, high = min(values), max(values)
    return [eps0 + (v - low) / (high - low + eps1) for v in values]


def performance_fairness(delta_y: Mapping[int, float], min_dis: Mapping[int, float],
                         eps0: float = MP_EPSILON) -> float:
    """M_p (Eq. 6): ``mean_c f⊕(ΔY_c, minDis_c)``, ``f⊕(x, y) = (x̃+ỹ)(1/x̃+1/ỹ) ≥ 4``; lower is fairer."""
    clients = sorted(delta_y)
    xs = _normalise([delta_y[c] for c in clients], eps0)
    ys = _normalise([min_dis[c] for c in clients], eps0)
    return sum((x + y) * (1 / x + 1 / y) for x, y in zip(xs, ys, strict=True)) / len(clients)


def fairness_report(tree: ShardTree, angles: Mapping[int, float], leavers: Collection[int],
                    delta_y: Mapping[int, float] | None = None, eps0: float = MP_EPSILON) -> dict[str, Any]:
    """M_e in client-rounds and in relative cost (100·Z/Z_avg, unit-free), and M_p when ΔY is known."""
    costs = client_costs(tree)
    z_avg = sum(costs.values()) / len(costs)
    relative = {c: 100.0 * z / z_avg for c, z in costs.items()}
    out: dict[str, Any] = {
        "me-client-rounds": efficiency_fairness(costs, angles),
        "me-relative": efficiency_fairness(relative, angles),
        "cost-min": min(costs.values()), "cost-max": max(costs.values()), "cost-mean": z_avg,
        "leavers": sorted(leavers), "epsilon": eps0,
    }
    if delta_y is not None:
        out["mp"] = performance_fairness(delta_y, min_distances(angles, leavers), eps0)
    return out
