"""SAFE on multi-token backbones (fmnist-cnn: a 7×7 map of 32-wide tokens; rt-minilm: 48 MiniLM word
pieces, padding masked) into the InCA cross-attention:
forget + clique retrain is bit-exact under `verify`, the node's token cache loses the forgotten sample,
a clique trained with the sample is caught (negative control), and à-la-carte serving of the other
clients equals what is served once a client has left."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file

from fedforget.inprocess import run_in_process
from fedforget.methods.safe.graph import SafePlan, a_la_carte
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.verify import verify_store
from tests.integration.helpers import copy_store, train_in_process

NODES = 3
CNN = {"method": "safe", "task": "fmnist-cnn", "train-size": 240, "test-size": 60, "safe.coarse": 2, "safe.fine": 2,
       "num-rounds": 2, "safe.adapter-steps": 4, "safe.adapter-width": 32, "seed": 3}
TEXT = {**CNN, "task": "rt-minilm", "train-size": 48, "test-size": 16, "safe.coarse": 2, "safe.fine": 1}


def _cached_ids(state_dir) -> set[int]:  # noqa: ANN001
    files = sorted(state_dir.glob("safe-features-train-*.safetensors"))
    return {int(i) for f in files for i in load_file(str(f))["ids"].tolist()}


def _shas(store: Store) -> dict[str, str]:
    ledger = store.ledger()
    try:
        return {a["artifact"]: a["sha256"] for a in ledger.artifacts()}
    finally:
        ledger.close()


def _fresh_tokens(store: Store, ids: list[int]) -> np.ndarray:
    """The backbone's tokens of ``ids``, computed now in this process (what the node's cache must hold)."""
    from fedforget.methods.safe.client import frozen_backbone
    from fedforget.methods.safe.features import compute_tokens
    from fedforget.tasks.registry import load_task_data
    from fedforget.unlearning.evaluate import stored_config

    cfg = stored_config(store)
    return compute_tokens(frozen_backbone(cfg.task, cfg.hf.model, cfg.seed).module,
                          load_task_data(cfg).train.by_ids(ids).inputs)[0]


@pytest.mark.parametrize("config,tokens_per_sample", [(CNN, 49), (TEXT, 48)], ids=["fmnist-cnn", "rt-minilm"])
def test_multi_token_forget_and_clique_retrain_verify_bit_exact_and_purge_the_token_cache(tmp_path, config,
                                                                                           tokens_per_sample):
    store = train_in_process(tmp_path / "store", NODES, **config)
    state = store.root / "clients" / "1"
    sample = store.manifest()["partitions"]["1"][0][0]
    assert sample in _cached_ids(state)
    cache = load_file(str(next(state.glob("safe-features-train-*.safetensors"))))
    tokens = cache["tokens"]
    assert tokens.shape[1] == tokens_per_sample  # many tokens per sample, not one pooled vector
    assert np.array_equal(tokens, _fresh_tokens(store, cache["ids"].tolist()), equal_nan=True)  # cached as computed
    before = _shas(store)
    result = forget_request(store, samples=[sample])
    control = verify_store(copy_store(store.root, tmp_path, "control"), include_all=True)
    assert {r["artifact"] for r in control["compared"] if not r["equal"]} == set(result.invalidated)
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, NODES)
    assert sample not in _cached_ids(state) and _cached_ids(state)  # rebuilt without it
    after = _shas(store)
    assert {a for a in after if after[a] != before[a]} == set(result.invalidated)
    report = verify_store(store, include_all=True)
    assert report["exact"] and report["served"] == len(after)


def test_a_la_carte_serving_of_entitled_clients_equals_serving_after_the_others_left(tmp_path):
    from fedforget.methods.safe.serve import safe_accuracy
    from fedforget.unlearning.evaluate import stored_config

    store = train_in_process(tmp_path / "store", NODES, **{**CNN, "num-rounds": 1, "safe.coarse-by": "client",
                                                           "safe.coarse": 3})
    ledger = store.ledger()
    try:
        plan_json, serving, artifacts = ledger.plan(), ledger.serving(), ledger.artifacts()
    finally:
        ledger.close()
    entitled = a_la_carte(SafePlan.from_json(plan_json), serving["artifacts"], partitions=[0, 1])
    assert any("/proto/" not in a for a in entitled) and set(entitled) < set(serving["artifacts"])
    result = forget_request(store, clients=[2])
    assert sorted(result.serving["artifacts"]) == entitled  # no adapter that read client 2 is in either
    cfg = stored_config(store)
    ours = safe_accuracy(cfg, store, plan_json, {**serving, "artifacts": entitled}, artifacts)
    theirs = safe_accuracy(cfg, store, plan_json, result.serving, artifacts)
    assert np.isclose(ours["accuracy"], theirs["accuracy"], rtol=0, atol=0)
