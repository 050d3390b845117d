"""Each sequence-sharded method really trains its LoRA modules: their weights move from the seeded
init, and the served ensemble with its modules switched off (backbone + the same heads) scores lower."""

from __future__ import annotations

import numpy as np
import pytest

from fedforget.federation.module_stack import assemble, split_state
from fedforget.federation.serve import load_tensors
from fedforget.methods.chains.plan import shard_vote_weights
from fedforget.tasks.registry import load_task_data
from fedforget.training.supervised import predict_logits
from fedforget.unlearning.evaluate import evaluate_store, stored_config
from tests.integration.helpers import train_in_process

NODES = 3


def _heads_only_accuracy(store) -> float:  # noqa: ANN001
    """The served ensemble's accuracy with every LoRA module switched off (same heads, same weights)."""
    cfg = stored_config(store)
    data = load_task_data(cfg)
    ledger = store.ledger()
    try:
        plan_json, serving, artifacts = ledger.plan(), ledger.serving(), ledger.artifacts()
    finally:
        ledger.close()
    shas = {a["artifact"]: a["sha256"] for a in artifacts}
    metas = {a["artifact"]: a["meta"] for a in artifacts}
    votes = shard_vote_weights(plan_json, serving, metas)
    total = 0.0
    for vote, shard in zip(votes, [s for s in serving["shards"] if s["members"]], strict=True):
        for member in shard["members"]:
            _, head = split_state(load_tensors(store, shas[member["artifacts"][-1]]))
            model = assemble(cfg, data.num_classes, "new", [], head)  # no module active
            logits = predict_logits(model, data.test.inputs).double()
            total = total + vote * member["weight"] * logits.softmax(1).numpy()
    return float((np.asarray(total).argmax(1) == data.test.labels.numpy()).mean())


@pytest.mark.parametrize("overrides", [
    {"method": "fedsgt", "chains.groups": 2, "chains.budget": 2, "chains.rounds-per-phase": 1},
    {"method": "s3t", "chains.groups": 2, "chains.shards": 2, "chains.budget": 1, "chains.rounds-per-phase": 1},
    {"method": "sisa", "chains.groups": 2, "chains.shards": 2},
    {"method": "fedcio", "chains.clusters": 2, "num-rounds": 3},
], ids=["fedsgt", "s3t", "sisa", "fedcio"])
def test_chain_methods_train_their_lora_modules_and_need_them(tmp_path, overrides):
    store = train_in_process(tmp_path / "store", NODES, **{"slices-per-client": 2, **overrides})
    ledger = store.ledger()
    try:
        served = [a for a in ledger.artifacts() if a["artifact"] in ledger.serving()["artifacts"]]
    finally:
        ledger.close()
    for artifact in served:
        lora, _ = split_state(load_tensors(store, artifact["sha256"]))
        moved = [k for k, v in lora.items() if "lora_B" in k and float(v.abs().max()) > 0]
        assert moved, f"{artifact['artifact']}: every LoRA B is still at its zero init"
    assert evaluate_store(store)["accuracy"] > _heads_only_accuracy(store) + 0.02
