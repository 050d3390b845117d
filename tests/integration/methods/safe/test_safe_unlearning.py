"""SAFE through the real ServerApp/ClientApp in process: one forgotten sample costs one clique, retrain
replays only that clique, verify is bit-exact (and catches a clique that saw the sample), prototypes
equal a recomputation, and SAFE-DP charges neighbours' budgets instead of retraining them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.verify import verify_store
from tests.integration.helpers import artifact_rows, copy_store, train_in_process

NODES = 3
SAFE = {"method": "safe", "safe.coarse": 2, "safe.fine": 2, "num-rounds": 2, "safe.adapter-steps": 6}


@pytest.fixture(scope="module")
def safe_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("safe") / "store"
    train_in_process(path, NODES, **SAFE)
    return path


def _retrain(store: Store, nodes: int = NODES) -> dict:
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, nodes)
    return [m for m in store.metrics() if m.get("final")][-1]


def test_one_forgotten_sample_retrains_exactly_one_clique_and_verify_is_bit_exact(safe_store, tmp_path):
    store = copy_store(safe_store, tmp_path)
    before = artifact_rows(store)
    sample = store.manifest()["partitions"]["1"][0][0]
    result = forget_request(store, samples=[sample])
    cliques = [a for a in result.invalidated if "/proto/" not in a]
    assert len(cliques) == 1 and result.affected["safe"]["cliques"] == cliques
    assert result.serving["available"] and cliques[0] not in result.serving["artifacts"]  # left the ensemble
    assert verify_store(store)["exact"]  # what is served at once never saw the sample
    done = _retrain(store)
    assert done["rebuilt"] == cliques
    assert done["samples-visited"] == _step_budget_visits(store, cliques[0], sample)  # steps, not passes
    after = artifact_rows(store)
    changed = {a for a in after if after[a]["sha256"] != before[a]["sha256"]}
    assert changed == set(result.invalidated)
    report = verify_store(store, include_all=True)
    assert report["exact"] and report["served"] == len(after)


def _step_budget_visits(store: Store, clique: str, forgotten: int) -> int:
    """Every node of the clique takes the whole step budget, each step on min(batch, held) samples."""
    from fedforget.methods.safe.graph import SafePlan

    manifest = store.manifest()
    plan, budget = SafePlan.from_json(manifest["plan"]), manifest["adapter-budget"]
    held: dict[str, int] = {}
    for unit in plan.members[clique]:
        p, c = unit.split(":")
        ids = manifest["cells"][p][c]
        held[p] = held.get(p, 0) + len([i for i in ids if i != forgotten])
    return sum(budget["steps"] * min(budget["batch-size"], n) for n in held.values() if n)


def test_verify_fails_for_a_clique_trained_with_the_forgotten_sample(safe_store, tmp_path):
    store = copy_store(safe_store, tmp_path)
    sample = store.manifest()["partitions"]["2"][0][0]
    result = forget_request(store, samples=[sample])
    report = verify_store(store, include_all=True)  # negative control: compare the invalid ones too
    differ = {row["artifact"] for row in report["compared"] if not row["equal"]}
    assert differ == set(result.invalidated) and differ


def test_prototypes_after_retrain_equal_a_recomputation_without_the_sample(safe_store, tmp_path):
    from fedforget.methods.safe.adapters import PrototypeBank, normalised
    from fedforget.methods.safe.client import frozen_backbone
    from fedforget.methods.safe.features import compute_tokens
    from fedforget.methods.safe.graph import SafePlan
    from fedforget.methods.safe.serve import prototype_bank
    from fedforget.tasks.registry import load_task_data
    from fedforget.unlearning.evaluate import stored_config

    store = copy_store(safe_store, tmp_path)
    manifest = store.manifest()
    gone = manifest["partitions"]["0"][0][:2]
    forget_request(store, samples=gone)
    _retrain(store)
    ledger = store.ledger()
    try:
        plan, served, arts = SafePlan.from_json(ledger.plan()), ledger.serving()["artifacts"], ledger.artifacts()
    finally:
        ledger.close()
    cfg = stored_config(store)
    data = load_task_data(cfg)
    kept = sorted(set(data.train.ids.tolist()) - set(gone))
    ex = data.train.by_ids(kept)
    _, pooled = compute_tokens(frozen_backbone(cfg.task, cfg.hf.model, cfg.seed).module, ex.inputs)
    feats = normalised(torch.from_numpy(pooled))
    served_bank = prototype_bank(plan, store, {a["artifact"]: a["sha256"] for a in arts}, served, feats.shape[1])
    fresh = PrototypeBank(plan.num_classes, feats.shape[1])
    for k in range(plan.num_classes):
        rows = (ex.labels == k).numpy()
        fresh.add(k, feats[rows].sum(axis=0), int(rows.sum()))
    assert np.array_equal(served_bank.counts, fresh.counts)
    np.testing.assert_allclose(served_bank.prototypes(), fresh.prototypes(), rtol=0, atol=1e-12)
    # the paper's O(1) decrement is the same up to float64 rounding
    full = PrototypeBank(plan.num_classes, feats.shape[1])
    ex_all = data.train.by_ids(sorted(data.train.ids.tolist()))
    _, pooled_all = compute_tokens(frozen_backbone(cfg.task, cfg.hf.model, cfg.seed).module, ex_all.inputs)
    all_feats = normalised(torch.from_numpy(pooled_all))
    for k in range(plan.num_classes):
        rows = (ex_all.labels == k).numpy()
        full.add(k, all_feats[rows].sum(axis=0), int(rows.sum()))
    row_of = {int(i): r for r, i in enumerate(ex_all.ids.tolist())}
    for s in gone:
        full.forget(int(ex_all.labels[row_of[s]]), all_feats[row_of[s]])
    np.testing.assert_allclose(full.prototypes(), fresh.prototypes(), rtol=0, atol=1e-12)


def test_a_whole_client_leaving_under_client_level_coarse_groups_touches_only_its_group(tmp_path):
    store = train_in_process(tmp_path / "store", 4, **{**SAFE, "safe.coarse-by": "client", "num-rounds": 1})
    plan = store.manifest()["plan"]
    result = forget_request(store, clients=[3])
    groups = {a.split("/")[1] for a in result.invalidated if "/proto/" not in a}
    assert len(groups) == 1 and len([a for a in result.invalidated if "/proto/" not in a]) <= plan["fine"]
    _retrain(store, 4)
    assert verify_store(store)["exact"]


def test_safe_dp_drops_only_the_owner_and_charges_the_neighbours_budget(tmp_path):
    from fedforget.methods.safe.budget_store import dp_budgets

    store = train_in_process(tmp_path / "store", NODES, **{**SAFE, "safe.coarse": 1, "safe.fine": 2, "num-rounds": 1,
                                                            "train-size": 240, "safe.dp": True, "safe.dp-epsilon": 4.0,
                                                            "safe.dp-delta": 1e-5, "safe.dp-alpha": 8.0})
    plan = store.manifest()["plan"]
    assert plan["dp-k"] == 2  # ⌊α_b/ε⌋ = 2 binds before the β term
    cells = store.manifest()["cells"]["0"]
    cell = next(c for c, ids in cells.items() if len(ids) >= 3)
    owner_units = f"0:{cell}"
    result = forget_request(store, samples=[cells[cell][0]])
    adapters = [a for a in result.invalidated if "/proto/" not in a]
    assert len(adapters) == 1  # only the owner's classifier; its clique neighbours are covered by DP
    ledger = store.ledger()
    try:
        budgets = dp_budgets(ledger)
    finally:
        ledger.close()
    charged = {a for a, b in budgets.items() if b["used"] == 1}
    assert charged and adapters[0] not in charged
    report = verify_store(store)
    assert report["exact"] and set(report["dp_covered"]) == charged
    forget_request(store, samples=[cells[cell][1]])
    third = forget_request(store, samples=[cells[cell][2]])  # the (k+1)-th sample overflows the budget
    assert set(charged) <= set(third.invalidated), owner_units
