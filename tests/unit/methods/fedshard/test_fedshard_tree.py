"""FedShard's tree, A1, A2, costs, fairness metrics and serving (pure; digest §3–§6, §11)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedforget.methods.fedshard.angles import signed_update_angles, update_angles
from fedforget.methods.fedshard.costs import (
    client_costs,
    efficiency_fairness,
    min_distances,
    performance_fairness,
    prop3_bounds,
    speedup_r1,
    training_cost,
    unlearning_cost,
)
from fedforget.methods.fedshard.plan import (
    Child,
    ShardTree,
    allocate_rounds,
    check_tree,
    fedshard_serving,
    literal_rounds,
    merge_a1,
    merge_random,
    num_stages,
    stage_sizes,
    static_tree,
    three_means_1d,
)


@pytest.mark.parametrize(("k", "r", "sizes"), [
    (8, 2, [4, 2, 1]), (9, 3, [3, 1]), (10, 2, [5, 3, 2, 1]), (12, 2, [6, 3, 2, 1]), (16, 2, [8, 4, 2, 1]),
    (27, 3, [9, 3, 1]), (32, 2, [16, 8, 4, 2, 1]), (64, 2, [32, 16, 8, 4, 2, 1]), (125, 5, [25, 5, 1]),
])
def test_tree_has_ceil_log_stages_and_ceil_k_over_r_p_shards(k, r, sizes):
    assert num_stages(k, r) == len(sizes)
    assert stage_sizes(k, r) == sizes
    tree = static_tree(range(k), r, seed=3, rounds=1)
    assert [len(s) for s in tree.stages] == sizes
    assert sum(1 for _ in tree.shards()) == sum(sizes)  # cached shard models, App. E.5
    assert sum(sizes) <= k / (r - 1) + len(sizes)


@pytest.mark.parametrize(("k", "r"), [(16, 2), (27, 3), (10, 2), (33, 4)])
def test_every_stage_partitions_the_clients_and_a_client_has_one_shard_per_stage(k, r):
    tree = static_tree(range(k), r, seed=1, rounds=2)
    check_tree(tree)
    for c in range(k):
        path = tree.path(c)
        assert [s.stage for s in path] == list(range(1, len(tree.stages) + 1))
    assert ShardTree.from_json(tree.to_json()) == tree


def test_a_tree_whose_shard_is_not_the_union_of_its_children_is_rejected():
    data = static_tree(range(8), 2, seed=1, rounds=1).to_json()
    data["stages"][1][0]["clients"] = data["stages"][1][0]["clients"][:-1]
    with pytest.raises(ValueError, match="partition|union"):
        ShardTree.from_json(data)


def test_three_means_is_the_optimal_split_of_sorted_values_and_orders_clusters_by_centroid():
    assert three_means_1d([-1.0, -0.9, 0.0, 0.1, 1.0, 1.2]) == [0, 0, 1, 1, 2, 2]
    values = [random.Random(i).uniform(-1, 1) for i in range(12)]
    labels = three_means_1d(values)
    best = min(
        (sum((v - np.mean(g)) ** 2 for g in groups for v in g), (a, b))
        for a in range(1, 11) for b in range(a + 1, 12)
        for groups in [[sorted(values)[:a], sorted(values)[a:b], sorted(values)[b:]]]
    )
    ours = sum((v - np.mean([w for w, lab in zip(values, labels, strict=True) if lab == k])) ** 2
               for v, k in zip(values, labels, strict=True))
    assert ours == pytest.approx(best[0])


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 40), st.integers(2, 5), st.integers(0, 10_000))
def test_a1_always_allocates_every_child_into_balanced_super_shards(n, r, seed):
    rng = random.Random(seed)
    children = [Child(i, rng.uniform(-1.5, 1.5), (i,), rng.uniform(0, 10)) for i in range(n)]
    groups = merge_a1(children, r)
    flat = sorted(i for g in groups for i in g)
    assert flat == list(range(n))
    m = -(-n // r) if n > r else 1
    assert len(groups) == m
    assert {len(g) for g in groups} <= {n // m, -(-n // m)}


def test_a1_mixes_signs_so_super_shards_average_closer_to_zero_than_random_merges():
    gaps_a1, gaps_random = [], []
    for seed in range(20):
        rng = random.Random(seed)
        angles = [rng.uniform(-1, 1) for _ in range(16)]
        children = [Child(i, a, (i,), 0.0) for i, a in enumerate(angles)]
        for groups, out in ((merge_a1(children, 2), gaps_a1), (merge_random(16, 2, seed), gaps_random)):
            out.append(np.mean([abs(np.mean([angles[i] for i in g])) for g in groups]))
    assert np.mean(gaps_a1) < np.mean(gaps_random)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 2), min_size=1, max_size=12), st.integers(1, 5), st.integers(0, 5))
def test_a2_intent_rule_stays_in_range_and_gives_more_rounds_to_lower_variance(variances, t_min, extra):
    t_max = t_min + extra
    rounds = allocate_rounds(variances, t_min, t_max)
    assert all(t_min <= t <= t_max for t in rounds)
    order = sorted(range(len(variances)), key=lambda i: variances[i])
    assert [rounds[i] for i in order] == sorted(rounds, reverse=True)


def test_a2_literal_formula_exceeds_the_range_and_diverges_at_the_minimum_variance():
    raw = literal_rounds([0.0, 0.5, 1.0], 4, 7)
    assert raw[0] == math.inf and all(t >= 7 for t in raw)
    assert allocate_rounds([0.0, 0.5, 1.0], 4, 7, "literal") == [7, 7, 7]  # clipped
    assert allocate_rounds([0.0, 0.5, 1.0], 4, 7, "intent") == [7, 6, 4]
    assert allocate_rounds([0.3, 0.3], 4, 7) == [7, 7]  # stage 1: every variance equal


def test_costs_match_the_analytical_formulas_for_constant_rounds():
    tree = static_tree(range(16), 2, seed=5, rounds=3)
    assert training_cost(tree) == 192  # P·T0·K
    cost = unlearning_cost(tree, [7])
    assert (cost["member-rounds"], cost["participating-rounds"], cost["shards"]) == (90, 78, 4)
    assert training_cost(tree) / cost["member-rounds"] == pytest.approx(speedup_r1(16, 2)) == pytest.approx(2.1333,
                                                                                                        abs=1e-4)
    for k, r, t0, train, member, part in [(27, 3, 2, 162, 78, 72), (8, 2, 1, 24, 14, 11), (32, 2, 1, 160, 62, 57)]:
        tree = static_tree(range(k), r, seed=1, rounds=t0)
        c = unlearning_cost(tree, [0])
        assert (training_cost(tree), c["member-rounds"], c["participating-rounds"]) == (train, member, part)


def test_joint_unlearning_costs_packed_and_spread_leavers_as_digest_table():
    tree = static_tree(range(16), 2, seed=2, rounds=1)
    pair = list(tree.stages[0][0].clients)
    assert unlearning_cost(tree, pair)["member-rounds"] == 30  # = one request: ratio m = 2
    spread = [tree.stages[1][i].clients[0] for i in range(4)]
    assert unlearning_cost(tree, spread)["member-rounds"] == 56  # 120 one by one: ratio 2.143 < r2⁻ = 3.75
    assert sum(unlearning_cost(tree, [c])["member-rounds"] for c in spread) == 120


def test_efficiency_fairness_is_zero_for_a_full_tree_with_constant_rounds_and_not_otherwise():
    angles = {c: 0.2 + 0.01 * c for c in range(16)}
    assert efficiency_fairness(client_costs(static_tree(range(16), 2, 1, 3)), angles) == 0.0
    assert efficiency_fairness(client_costs(static_tree(range(10), 2, 1, 3)), angles) > 0.0
    costs = client_costs(static_tree(range(10), 2, 1, 3))
    scaled = {c: 3 * z for c, z in costs.items()}
    assert efficiency_fairness(scaled, angles) == pytest.approx(9 * efficiency_fairness(costs, angles))  # Prop. 14


def test_prop3_bounds_hold_for_every_leaver_under_variable_rounds():
    tree = static_tree(range(16), 2, 1, 1)
    rng = random.Random(4)
    stages = [[type(s)(s.stage, s.index, s.children, s.clients, rng.randint(2, 5)) for s in stage]
              for stage in tree.stages]
    tree = ShardTree(2, stages)
    low, high = prop3_bounds(tree)
    for c in range(16):
        ratio = training_cost(tree) / unlearning_cost(tree, [c])["member-rounds"]
        assert low - 1e-9 <= ratio <= high + 1e-9


def test_performance_fairness_is_at_least_four_and_four_exactly_when_ranks_align():
    dis = {0: 0.1, 1: 0.2, 2: 0.3}
    assert performance_fairness({0: 1.0, 1: 2.0, 2: 3.0}, dis) == pytest.approx(4.0)
    misaligned = performance_fairness({0: 3.0, 1: 2.0, 2: 1.0}, dis)
    assert misaligned > 4.0
    assert performance_fairness({0: 30.0, 1: 20.0, 2: 10.0}, {c: 7 * d for c, d in dis.items()}) == \
        pytest.approx(misaligned)  # unit-free (Prop. 8)


def test_a_client_is_not_its_own_nearest_remaining_neighbour():
    assert min_distances({0: 0.1, 1: 0.5, 2: 0.55}, leavers=[0]) == pytest.approx({0: 0.4, 1: 0.05, 2: 0.05})


def test_signed_angles_keep_magnitudes_and_split_opposite_residuals():
    rng = np.random.default_rng(0)
    base = rng.normal(size=50)
    twist = rng.normal(size=50)
    updates = np.stack([base + 0.8 * twist, base - 0.8 * twist, base + 0.01 * twist])
    signed = signed_update_angles(updates)
    assert np.allclose(np.abs(signed), update_angles(updates))
    assert np.sign(signed[0]) != np.sign(signed[1])


def _serving_plan(fallback: str, flat: bool = False) -> dict:
    tree = static_tree(range(8), 2, 1, 1, flat=flat)
    return tree, tree.serving_json(fallback)


def test_serving_falls_back_to_the_biggest_valid_shard_of_the_highest_stage_or_refuses():
    tree, plan = _serving_plan("last-valid")
    every = {s.artifact for s in tree.shards()}
    assert fedshard_serving(plan, every)["artifacts"] == [tree.root.artifact]
    hit = {s.artifact for s in tree.path(3)}
    served = fedshard_serving(plan, every - hit)
    assert served["falling-back"] and served["stage"] == 2 and 3 not in tree.shard(2, int(
        served["artifacts"][0].rsplit("/s", 1)[1])).clients
    _, refuse = _serving_plan("refuse")
    assert fedshard_serving(refuse, every - hit)["available"] is False


def test_flat_shards_serve_every_valid_shard_and_drop_the_forgotten_one_at_once():
    tree, plan = _serving_plan("last-valid", flat=True)
    every = {s.artifact for s in tree.shards()}
    assert len(tree.stages) == 1 and len(fedshard_serving(plan, every)["artifacts"]) == 4
    hit = {s.artifact for s in tree.path(3)}
    assert sorted(fedshard_serving(plan, every - hit)["artifacts"]) == sorted(every - hit)
