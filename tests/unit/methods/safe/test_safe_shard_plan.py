"""The safe shard's pure parts: the seeded draw outside the run's rows, and what the plan records of it."""

from __future__ import annotations

import pytest

from fedforget.core.config import ConfigError
from fedforget.methods.safe.graph import SafePlan, a_la_carte, build_safe_plan, forget_cost
from fedforget.methods.safe.shard_plan import class_counts, draw_safe_shard


def test_the_draw_is_seeded_sorted_and_outside_the_rows_the_run_uses():
    pool, used = range(100), set(range(0, 100, 2))
    ids = draw_safe_shard(pool, used, 10, seed=7)
    assert ids == sorted(ids) and len(set(ids)) == 10 and not set(ids) & used
    assert ids == draw_safe_shard(pool, used, 10, seed=7) and ids != draw_safe_shard(pool, used, 10, seed=8)
    assert draw_safe_shard(pool, used, 0, seed=7) == []


def test_too_few_unused_rows_says_which_key_to_lower():
    with pytest.raises(ConfigError, match="only 50 of the task's 100 are free; lower 'safe.shard' to at most 50 "
                                          "or 'train-size' to at most 40"):
        draw_safe_shard(range(100), range(50), 60, seed=1)


def test_the_plan_records_the_shard_serves_its_prototypes_and_counts_it_in_the_forget_cost():
    labels = {0: {0: 0, 1: 1, 2: 0, 3: 1}, 1: {4: 0, 5: 1}}
    plan, _ = build_safe_plan("safe", labels, 2, 1, 2, "sample", True, 3, shard=class_counts([0, 0, 1]))
    assert plan.shard == {0: 2, 1: 1}
    assert SafePlan.from_json(plan.to_json()) == plan
    shard_protos = ["safe/proto/safe-shard/k0", "safe/proto/safe-shard/k1"]
    assert plan.proto_artifacts()[-2:] == shard_protos
    cid, _, _, classes = next(c for c in plan.cliques() if 0 in c[3])
    cost = forget_cost(plan, [plan.members[cid][0]], 1)
    assert cost["revisited"] == plan.clique_size(cid) + plan.shard_size(classes) - 1
    assert set(shard_protos) <= set(a_la_carte(plan, plan.proto_artifacts(), []))  # server data: anyone may use it
    old = {k: v for k, v in plan.to_json().items() if k != "safe-shard"}  # a store from before the safe shard
    assert SafePlan.from_json(old).shard == {}
