"""SAFE's pure planning: graph direction, bilevel sharding invariants, |M_x|, λ and the SAFE-DP k table."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedforget.methods.safe.dp import group_privacy, request_budget
from fedforget.methods.safe.graph import (
    ShardGraph,
    bilevel_cells,
    build_safe_plan,
    forget_cost,
    prototype_weight,
    safe_serving,
)

K = 10


def _labels(parts: int, per: int, seed: int) -> dict[int, dict[int, int]]:
    rng = random.Random(seed)
    ids = iter(range(parts * per))
    return {p: {next(ids): rng.randrange(K) for _ in range(per)} for p in range(parts)}


def test_an_edge_points_from_the_adapter_to_the_data_it_reads():
    g = ShardGraph()
    for node, samples in (("a", [1]), ("b", [2, 3]), ("c", [4])):
        g.add_node(node, samples)
    g.add_edge("a", "b")  # a's adapter reads b's data
    assert g.uses("a") == {"a", "b"} and g.uses("b") == {"b"}
    assert g.dependents("b") == {"a", "b"} and g.dependents("a") == {"a"}
    assert g.forget_cost([3]) == {"affected": ["a", "b"], "revisited": 2}  # a reads {1,2,3}, b {2,3}; minus 3
    assert g.forget_cost([1]) == {"affected": ["a"], "revisited": 2}


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 5), st.integers(0, 10_000),
       st.sampled_from(["sample", "client", "uniform"]))
def test_bilevel_sharding_puts_every_sample_in_exactly_one_clique(parts, coarse, fine, seed, mode):
    labels = _labels(parts, 40, seed)
    plan, cells = build_safe_plan("safe", labels, K, coarse, fine, mode, True, seed)
    every = [s for cs in cells.values() for ids in cs.values() for s in ids]
    assert sorted(every) == sorted(s for lab in labels.values() for s in lab)
    owners = {}
    for cid, members in plan.members.items():
        for unit in members:
            assert unit not in owners, "a unit in two cliques"
            owners[unit] = cid
    assert set(owners) == set(plan.sizes)
    for cid, g, _f, classes in plan.cliques():
        for unit in plan.members[cid]:
            p, c = (int(x) for x in unit.split(":"))
            group, k = plan.split_cell(c)
            assert group == g and k in classes
            assert all(labels[p][s] == k for s in cells[p][c])
    groups = coarse * fine if mode == "uniform" else coarse
    assert len(plan.classes) == groups
    for g in range(groups):  # π_g is a partition of the classes into near-equal groups
        sizes = sorted(len(c) for c in plan.classes[g])
        assert sorted(k for c in plan.classes[g] for k in c) == list(range(K))
        assert sizes[-1] - sizes[0] <= 1
    assert len(plan.graph().data) == sum(len(plan.adapters(c)) for c, *_ in plan.cliques())


def test_sharding_is_drawn_from_seeds_and_labels_only():
    labels = _labels(3, 60, 1)
    assert bilevel_cells(labels, K, 4, 2, "sample", 5) == bilevel_cells(labels, K, 4, 2, "sample", 5)
    assert bilevel_cells(labels, K, 4, 2, "sample", 5) != bilevel_cells(labels, K, 4, 2, "sample", 6)


def test_sample_level_coarse_shards_are_class_balanced():
    labels = {0: {i: i % K for i in range(400)}}
    cells = bilevel_cells(labels, K, 4, 2, "sample", 3)[0]
    for k in range(K):
        sizes = [len(cells.get(g * K + k, [])) for g in range(4)]
        assert max(sizes) - min(sizes) <= 1


def test_client_level_coarse_groups_keep_each_client_in_one_group():
    labels = _labels(8, 30, 2)
    cells = bilevel_cells(labels, K, 3, 2, "client", 4)
    groups = {p: {c // K for c in cs} for p, cs in cells.items()}
    assert all(len(g) == 1 for g in groups.values())
    assert {next(iter(g)) for g in groups.values()} == {0, 1, 2}


def test_one_forgotten_sample_costs_exactly_its_clique():
    labels = _labels(3, 100, 7)
    plan, cells = build_safe_plan("safe", labels, K, 4, 4, "sample", True, 7)
    unit = next(u for u in sorted(plan.sizes))
    cost = forget_cost(plan, [unit], 1)
    assert len(cost["cliques"]) == 1
    (clique,) = cost["cliques"]
    assert cost["revisited"] == plan.clique_size(clique) - 1
    graph = plan.graph()  # the same number from the general shard graph (Eq. 3)
    p, c = (int(x) for x in unit.split(":"))
    sample = cells[p][c][0]
    node = f"{clique}/k{plan.split_cell(c)[1]}"
    for cid, *_ in plan.cliques():
        for adapter in plan.adapters(cid):
            graph.data[adapter] = {s for u in plan.node_units(adapter) for s in cells[int(u.split(':')[0])][
                int(u.split(':')[1])]}
    assert graph.forget_cost([sample])["revisited"] == cost["revisited"]
    assert set(graph.forget_cost([sample])["affected"]) == set(plan.adapters(clique)) and node in plan.adapters(clique)


def test_invalid_cliques_leave_the_served_ensemble():
    plan, _ = build_safe_plan("safe", _labels(2, 80, 3), K, 2, 2, "sample", True, 3)
    everything = [c for c, *_ in plan.cliques()] + plan.proto_artifacts()
    full = safe_serving(plan.to_json(), everything)
    assert full["available"] and full["cliques-served"] == 4
    dropped = safe_serving(plan.to_json(), everything[1:])
    assert dropped["cliques-served"] == 3 and everything[0] not in dropped["artifacts"]
    assert not safe_serving(plan.to_json(), plan.proto_artifacts())["available"]


def test_prototype_weight_follows_the_paper():
    assert prototype_weight(100) == pytest.approx(math.exp(-1))
    assert prototype_weight(23.4) == pytest.approx(0.791, abs=1e-3)
    assert prototype_weight(700) < 1e-3


@pytest.mark.parametrize(("epsilon", "delta", "k"), [
    (1, 1e-10, 23), (1, 1e-13, 30), (2, 1e-10, 12), (2, 1e-12, 14), (3, 1e-10, 8), (3, 1e-11, 9), (3, 1e-12, 10),
    (4, 1e-10, 6), (4, 1e-11, 7), (4, 1e-13, 7),
])
def test_safe_dp_request_budget_matches_the_table(epsilon, delta, k):
    assert request_budget(epsilon, delta, 30.0, 1.0) == k
    alpha, beta = group_privacy(k, epsilon, delta)
    assert alpha <= 30 and beta <= 1
    alpha, beta = group_privacy(k + 1, epsilon, delta)
    assert alpha > 30 or beta > 1


def test_safe_dp_budget_refuses_bad_parameters():
    with pytest.raises(ValueError):
        request_budget(0.0, 1e-10, 30, 1)
    with pytest.raises(ValueError):
        request_budget(1.0, 1e-10, 30, 2)
