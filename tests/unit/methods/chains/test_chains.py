"""ChainPlan (``fedforget.methods.chains.plan``): lineage, validity after forgets, serving, rebuild points, δ left."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedforget.core.harmonic import harmonic
from fedforget.core.serving_plans import compute_serving, single_serving
from fedforget.methods.chains.grouping import group_units
from fedforget.methods.chains.plan import (
    PLACEMENTS,
    STACKINGS,
    Chain,
    ChainPlan,
    active_length,
    chain_serving,
    describe_invalidation,
    expected_deletions_left,
    layer_blocks,
    rebuild_from,
    serving_artifacts,
)
from fedforget.methods.chains.sequences import cyclic_sequences
from fedforget.methods.chains.serving import STRATEGIES, active_prefix

# FedSGT-like: one shard, L = 3 groups of two client slices, B = 3 cyclic orders (0,1,2), (2,0,1), (1,2,0).
G0, G1, G2 = ["0:0", "1:0"], ["0:1", "2:0"], ["1:1", "2:1"]


def fedsgt(serving: str = "allseq", stacking: str = "new") -> ChainPlan:
    return ChainPlan("fedsgt", [[G0, G1, G2]], [cyclic_sequences(3, 3)], stacking, "additive", 2, serving)


# SISA-like: two shards of three single-slice groups, one identity order each, one adapter continued.
def sisa(stacking: str = "continue", serving: str = "allseq") -> ChainPlan:
    shards = [[[f"{s}:{g}"] for g in range(3)] for s in range(2)]
    return ChainPlan("sisa", shards, [[(0, 1, 2)], [(0, 1, 2)]], stacking, "additive", 1, serving)


def all_artifacts(plan: ChainPlan) -> set[str]:
    return {a for a, _, _ in plan.artifacts()}


def invalid_after(plan: ChainPlan, forgotten: set[str]) -> set[str]:
    """What the ledger invalidates: every artifact whose lineage holds a forgotten unit."""
    return {a for a, c, p in plan.artifacts() if forgotten & set(plan.lineage(c, p))}


def valid_after(plan: ChainPlan, forgotten: set[str]) -> set[str]:
    return all_artifacts(plan) - invalid_after(plan, forgotten)


# -- shape, ids, lineage -----------------------------------------------------------------------------------


def test_chains_ids_and_artifacts_follow_the_plan():
    plan = fedsgt()
    assert [c.key for c in plan.chains()] == ["s0/q0", "s0/q1", "s0/q2"]
    assert plan.chain(0, 1) == Chain(0, 1, (2, 0, 1))
    assert plan.artifact_id(plan.chain(0, 2), 1) == "fedsgt/s0/q2/p1"
    ids = [a for a, _, _ in plan.artifacts()]
    assert ids == [f"fedsgt/s0/q{q}/p{p}" for q in range(3) for p in (1, 2, 3)]
    assert plan.num_groups() == 3 and sisa().num_groups() == 6
    assert plan.phases(plan.chain(0, 0)) == 3


def test_lineage_is_cumulative_and_equals_the_union_of_the_first_k_groups():
    plan = fedsgt()
    groups = plan.groups[0]
    for chain in plan.chains():
        assert plan.lineage(chain, 0) == []
        previous: set[str] = set()
        for k in range(1, plan.phases(chain) + 1):
            lineage = plan.lineage(chain, k)
            assert lineage == sorted(lineage)
            assert set(lineage) == {u for g in chain.order[:k] for u in groups[g]}
            assert previous < set(lineage)
            previous = set(lineage)
        assert previous == set(G0 + G1 + G2)
    assert plan.lineage(plan.chain(0, 1), 2) == sorted(G2 + G0)


def test_lineage_stays_inside_its_shard():
    plan = sisa()
    assert plan.lineage(plan.chain(1, 0), 2) == ["1:0", "1:1"]
    assert plan.lineage(plan.chain(0, 0), 3) == ["0:0", "0:1", "0:2"]


def test_a_grouping_from_algorithm_1_gives_a_consistent_plan():
    units = [f"{p}:{s}" for p in range(4) for s in range(3)]
    groups = group_units(units, 4, seed=5)
    plan = ChainPlan("fedsgt", [groups], [cyclic_sequences(4, 4)], "new", "additive", 1, "allseq")
    for chain in plan.chains():
        assert plan.lineage(chain, 4) == sorted(units)
    for unit in units:  # every unit is in exactly one group, so a forget always reaches every chain
        hit = invalid_after(plan, {unit})
        assert {plan.artifact_id(c, 4) for c in plan.chains()} <= hit


# -- validity, prefixes, serving ---------------------------------------------------------------------------


def test_forgetting_a_unit_truncates_each_chain_before_its_group():
    plan = fedsgt()
    invalid = invalid_after(plan, {"0:1"})  # group 1
    assert invalid == {"fedsgt/s0/q0/p2", "fedsgt/s0/q0/p3", "fedsgt/s0/q1/p3",
                       "fedsgt/s0/q2/p1", "fedsgt/s0/q2/p2", "fedsgt/s0/q2/p3"}
    valid = all_artifacts(plan) - invalid
    assert [active_length(plan, c, valid) for c in plan.chains()] == [1, 2, 0]
    assert rebuild_from(plan, valid) == {"s0/q0": 2, "s0/q1": 3, "s0/q2": 1}
    serving = chain_serving(plan, valid)
    assert serving["available"] is True
    (shard,) = serving["shards"]
    assert shard["prefixes"] == [1, 2, 0]
    assert [(m["sequence"], m["prefix"]) for m in shard["members"]] == [(0, 1), (1, 2)]
    assert [m["weight"] for m in shard["members"]] == pytest.approx([1 / 3, 2 / 3])
    assert shard["members"][0]["artifacts"] == ["fedsgt/s0/q0/p1"]
    assert shard["members"][1]["artifacts"] == ["fedsgt/s0/q1/p1", "fedsgt/s0/q1/p2"]
    assert serving["artifacts"] == ["fedsgt/s0/q0/p1", "fedsgt/s0/q1/p1", "fedsgt/s0/q1/p2"]
    assert serving["deletions-left"] == pytest.approx(3 * (1 + 1 / 2))


def test_longseq_and_minseq_serve_the_longest_clean_prefix_here():
    for strategy in ("longseq", "minseq"):
        plan = fedsgt(serving=strategy)
        serving = chain_serving(plan, valid_after(plan, {"2:0"}))
        (shard,) = serving["shards"]
        assert [(m["sequence"], m["prefix"], m["weight"]) for m in shard["members"]] == [(1, 2, 1.0)], strategy
        assert serving["artifacts"] == ["fedsgt/s0/q1/p1", "fedsgt/s0/q1/p2"]
        assert serving["strategy"] == strategy


def test_active_length_stops_at_the_first_hole():
    plan = fedsgt()
    chain = plan.chain(0, 0)
    assert active_length(plan, chain, {"fedsgt/s0/q0/p1", "fedsgt/s0/q0/p3"}) == 1
    assert active_length(plan, chain, {"fedsgt/s0/q0/p2", "fedsgt/s0/q0/p3"}) == 0
    assert active_length(plan, chain, all_artifacts(plan)) == 3
    assert active_length(plan, chain, set()) == 0


def test_new_stacking_serves_the_whole_prefix_and_continue_only_the_last_checkpoint():
    new, cont = sisa(stacking="new"), sisa(stacking="continue")
    chain = new.chain(0, 0)
    assert serving_artifacts(new, chain, 3) == ["sisa/s0/q0/p1", "sisa/s0/q0/p2", "sisa/s0/q0/p3"]
    assert serving_artifacts(cont, chain, 3) == ["sisa/s0/q0/p3"]
    assert serving_artifacts(new, chain, 0) == serving_artifacts(cont, chain, 0) == []


def test_sisa_shards_are_ensembled_each_from_its_last_clean_checkpoint():
    plan = sisa()
    serving = chain_serving(plan, valid_after(plan, {"0:1"}))
    assert [s["prefixes"] for s in serving["shards"]] == [[1], [3]]
    assert serving["artifacts"] == ["sisa/s0/q0/p1", "sisa/s1/q0/p3"]
    assert serving["deletions-left"] == pytest.approx(6 * harmonic(2))
    assert rebuild_from(plan, valid_after(plan, {"0:1"})) == {"s0/q0": 2}

    serving = chain_serving(plan, valid_after(plan, {"0:1", "1:0"}))
    assert [s["members"] for s in serving["shards"]][1] == []
    assert serving["artifacts"] == ["sisa/s0/q0/p1"]
    assert serving["available"] is True
    assert serving["deletions-left"] == pytest.approx(6.0)

    serving = chain_serving(plan, valid_after(plan, {"0:0", "1:0"}))
    assert serving["available"] is False and serving["artifacts"] == []
    assert serving["deletions-left"] == 0.0
    assert rebuild_from(plan, set()) == {"s0/q0": 1, "s1/q0": 1}


def test_nothing_to_rebuild_when_every_artifact_is_valid():
    plan = fedsgt()
    assert rebuild_from(plan, all_artifacts(plan)) == {}
    assert rebuild_from(plan, all_artifacts(plan) - {"fedsgt/s0/q2/p3"}) == {"s0/q2": 3}


def test_expected_deletions_left_is_n_times_h_k():
    plan = fedsgt()
    assert expected_deletions_left(plan, all_artifacts(plan)) == pytest.approx(3 * (1 + 1 / 2 + 1 / 3))
    assert expected_deletions_left(plan, valid_after(plan, {"1:1"})) == pytest.approx(3 * 1.5)
    assert expected_deletions_left(plan, valid_after(plan, {"1:1", "2:0"})) == pytest.approx(3.0)
    assert expected_deletions_left(plan, set()) == 0.0
    # Two chains with the same top group count once: k counts distinct clean top groups.
    twice = ChainPlan("fedsgt", [[G0, G1, G2]], [[(0, 1, 2), (0, 2, 1)]], "new", "additive", 1, "allseq")
    assert expected_deletions_left(twice, all_artifacts(twice)) == pytest.approx(3.0)


def test_layer_blocks_go_top_down_and_leave_the_bottom_out():
    targets = ["l0", "l1", "l2", "l3", "l4", "l5", "l6"]
    assert layer_blocks(targets, 3) == [["l5", "l6"], ["l3", "l4"], ["l1", "l2"]]
    assert layer_blocks(targets, 7) == [[t] for t in reversed(targets)]
    assert layer_blocks(targets, 1) == [targets]
    with pytest.raises(ValueError, match="at least one layer per phase: 2 layers for 3 phases"):
        layer_blocks(["a", "b"], 3)


def test_layer_blocks_count_whole_layers_not_target_modules():
    targets = [f"encoder.layer.{i}.attention.self.{t}" for i in range(3) for t in ("query", "value")]
    assert layer_blocks(targets, 2) == [targets[4:6], targets[2:4]]  # 3 layers: one each, the bottom left out
    assert layer_blocks(targets, 3) == [targets[4:6], targets[2:4], targets[0:2]]
    with pytest.raises(ValueError, match="3 layers for 4 phases"):
        layer_blocks(targets, 4)  # 6 target modules, but only 3 layers


def test_json_round_trip_keeps_the_plan():
    for plan in (fedsgt(), sisa(), fedsgt("minseq", "continue")):
        data = json.loads(json.dumps(plan.to_json()))
        assert data["kind"] == "chains"
        assert ChainPlan.from_json(data) == plan
        assert ChainPlan.from_json(data).to_json() == plan.to_json()


def test_compute_serving_dispatches_on_the_plan_kind():
    plan = fedsgt()
    valid = valid_after(plan, {"1:1"})
    assert compute_serving(json.loads(json.dumps(plan.to_json())), valid) == chain_serving(plan, valid)
    single = {"kind": "single", "artifact": "fedavg/global"}
    assert compute_serving(single, {"fedavg/global"}) == single_serving("fedavg/global", {"fedavg/global"})
    assert single_serving("fedavg/global", {"fedavg/global"})["artifacts"] == ["fedavg/global"]
    assert compute_serving(single, set()) == {"kind": "single", "available": False, "artifacts": [],
                                               "deletions-left": 0.0}
    with pytest.raises(ValueError, match="unknown plan kind 'graph'"):
        compute_serving({"kind": "graph"}, set())


def test_the_compact_serving_plan_serves_like_the_full_plan():
    for plan in (fedsgt(), sisa(), fedsgt("longseq", "continue"), sisa("new", "minseq")):
        compact = json.loads(json.dumps(plan.serving_json()))
        assert compact["groups"] == [[[] for _ in shard] for shard in plan.groups]
        assert {k: v for k, v in compact.items() if k != "groups"} == {
            k: v for k, v in plan.to_json().items() if k != "groups"}
        small = ChainPlan.from_json(compact)
        assert small.num_groups() == plan.num_groups()
        for forgotten in (set(), {"0:1"}, {"1:0", "2:1"}, {"0:0", "1:0"}):
            valid = valid_after(plan, forgotten)
            assert compute_serving(compact, valid) == chain_serving(plan, valid)
            assert rebuild_from(small, valid) == rebuild_from(plan, valid)


def test_describe_invalidation_names_the_hit_group_and_the_cut_of_each_sequence():
    plan = fedsgt()
    described = describe_invalidation(plan.serving_json(), invalid_after(plan, {"0:1"}))
    assert described == {"groups": [{"shard": 0, "group": 1}],
                         "sequences": [{"shard": 0, "sequence": 0, "prefix": 1},
                                       {"shard": 0, "sequence": 1, "prefix": 2},
                                       {"shard": 0, "sequence": 2, "prefix": 0}]}
    # A later request reports only what it newly cut: only sequence 1 still held group 2 in its clean prefix.
    later = invalid_after(plan, {"0:1", "2:1"}) - invalid_after(plan, {"0:1"})
    assert describe_invalidation(plan.to_json(), later) == {
        "groups": [{"shard": 0, "group": 2}],
        "sequences": [{"shard": 0, "sequence": 1, "prefix": 0}]}
    assert describe_invalidation(plan.to_json(), []) == {"groups": [], "sequences": []}
    assert describe_invalidation({"kind": "single", "artifact": "a"}, ["a"]) == {"groups": [], "sequences": []}
    assert describe_invalidation(None, ["a"]) == {"groups": [], "sequences": []}
    both = describe_invalidation(sisa().to_json(), invalid_after(sisa(), {"0:2", "1:0"}))
    assert both["groups"] == [{"shard": 0, "group": 2}, {"shard": 1, "group": 0}]


def test_an_unknown_serving_strategy_is_refused():
    plan = fedsgt(serving="best")
    with pytest.raises(ValueError, match="unknown serving strategy 'best'"):
        chain_serving(plan, all_artifacts(plan))


# -- properties over random plans and random forgets -------------------------------------------------------


@st.composite
def plans(draw: st.DrawFn) -> ChainPlan:
    shards = draw(st.integers(1, 3))
    width = draw(st.integers(1, 4))  # groups per shard
    sizes = draw(st.lists(st.integers(1, 3), min_size=shards * width, max_size=shards * width))
    counter = iter(range(10_000))
    groups = [[[f"{(k := next(counter)) // 4}:{k % 4}" for _ in range(sizes[s * width + g])]
               for g in range(width)] for s in range(shards)]
    sequences = []
    for _ in range(shards):
        if draw(st.booleans()):
            orders = cyclic_sequences(width, draw(st.integers(1, min(math.factorial(width), 6))))
        else:
            orders = draw(st.lists(st.permutations(range(width)).map(tuple), min_size=1, max_size=4, unique=True))
        sequences.append(list(orders))
    return ChainPlan("m", groups, sequences, draw(st.sampled_from(STACKINGS)), draw(st.sampled_from(PLACEMENTS)),
                     1, draw(st.sampled_from(STRATEGIES)))


@settings(max_examples=300, deadline=None)
@given(plans(), st.data())
def test_served_models_never_saw_a_forgotten_unit_and_keep_every_clean_prefix(plan, data):
    units = sorted({u for shard in plan.groups for g in shard for u in g})
    forgotten = data.draw(st.sets(st.sampled_from(units)))
    valid = valid_after(plan, forgotten)
    serving = chain_serving(plan, valid)

    # Validity is prefix-closed: lineage only grows along a chain.
    for chain in plan.chains():
        flags = [plan.artifact_id(chain, p) in valid for p in range(1, plan.phases(chain) + 1)]
        assert flags == sorted(flags, reverse=True)

    # No served artifact saw forgotten data.
    for artifact in serving["artifacts"]:
        assert artifact in valid
    lineages = {a: set(plan.lineage(c, p)) for a, c, p in plan.artifacts()}
    assert all(not (lineages[a] & forgotten) for a in serving["artifacts"])

    clean_tops = set()
    for shard_plan in serving["shards"]:
        s = shard_plan["shard"]
        affected = {g for g, members in enumerate(plan.groups[s]) if forgotten & set(members)}
        chains = [plan.chain(s, i) for i in range(len(plan.sequences[s]))]
        clean = [active_prefix(c.order, affected) for c in chains]
        # Each chain's servable prefix is exactly its longest prefix of clean groups.
        assert shard_plan["prefixes"] == clean
        clean_tops |= {(s, c.order[0]) for c, k in zip(chains, clean, strict=True) if k >= 1}
        members = shard_plan["members"]
        for m in members:
            chain, k = chains[m["sequence"]], m["prefix"]
            assert k == clean[m["sequence"]] >= 1
            expected = ([plan.artifact_id(chain, k)] if plan.stacking == "continue"
                        else [plan.artifact_id(chain, p) for p in range(1, k + 1)])
            assert m["artifacts"] == expected
            # The served model was trained on exactly the chain's first k groups.
            seen = set().union(*(lineages[a] for a in m["artifacts"]))
            assert seen == {u for g in chain.order[:k] for u in plan.groups[s][g]}
        alive = [i for i, k in enumerate(clean) if k >= 1]
        if members:
            assert sum(m["weight"] for m in members) == pytest.approx(1.0)
        else:
            assert alive == []
        if plan.serving == "allseq":
            # Every chain with a clean prefix serves it at full length, weighted by that length.
            assert [m["sequence"] for m in members] == alive
            assert [m["weight"] for m in members] == pytest.approx([clean[i] / sum(clean) for i in alive])
        elif plan.serving == "longseq":
            # One chain, the longest clean prefix of the shard (the first such chain on a tie).
            if alive:
                (m,) = members
                assert m["prefix"] == max(clean) and m["sequence"] == clean.index(max(clean))
        else:
            # MinSeq covers every clean group that any clean prefix covers.
            covered = {g for m in members for g in chains[m["sequence"]].order[: m["prefix"]]}
            assert covered == {g for c, k in zip(chains, clean, strict=True) for g in c.order[:k]}

    assert serving["available"] == bool(serving["artifacts"])
    assert serving["deletions-left"] == pytest.approx(plan.num_groups() * harmonic(len(clean_tops)))
    assert rebuild_from(plan, valid) == {
        c.key: active_length(plan, c, valid) + 1 for c in plan.chains()
        if active_length(plan, c, valid) < plan.phases(c)}
    assert compute_serving(plan.to_json(), valid) == serving
    assert compute_serving(plan.serving_json(), valid) == serving

    # From an all-valid plan, the forget cuts each chain at its first hit group, and reports exactly those.
    cut = [(c, active_length(plan, c, valid)) for c in plan.chains()]
    cut = [(c, k) for c, k in cut if k < plan.phases(c)]
    described = describe_invalidation(plan.serving_json(), invalid_after(plan, forgotten))
    assert described["sequences"] == [{"shard": c.shard, "sequence": c.index, "prefix": k} for c, k in cut]
    assert described["groups"] == [{"shard": s, "group": g} for s, g in sorted({(c.shard, c.order[k]) for c, k in cut})]
