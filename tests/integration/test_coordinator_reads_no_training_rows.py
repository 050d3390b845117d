"""The coordinator's readers (evaluate, verify's served outputs, the service's predict) evaluate on the server's
test set without loading the task, and get exactly what the loader's test split gives."""

from __future__ import annotations

import numpy as np
import pytest

from fedforget.federation.serve import serving_probabilities
from fedforget.tasks.registry import load_task_data
from fedforget.unlearning.evaluate import evaluate_store, stored_config
from fedforget.unlearning.verify import served_outputs

from .helpers import train_in_process


def _refuse_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(cfg: object) -> None:
        raise AssertionError("a coordinator reader loaded the task's data")

    monkeypatch.setattr("fedforget.tasks.registry.load_task_data", refuse)


def test_evaluate_verify_and_predict_read_the_server_test_set_only(tmp_path, monkeypatch):
    store = train_in_process(tmp_path / "store", 3, method="fedavg", **{"num-rounds": 1, "train-size": 150,
                                                                       "test-size": 120, "partitioner": "iid"})
    cfg = stored_config(store)
    test = load_task_data(cfg).test
    ledger = store.ledger()
    try:
        plan, serving, artifacts = ledger.plan(), ledger.serving(), ledger.artifacts()
    finally:
        ledger.close()
    reference = serving_probabilities(cfg, 10, store, plan, serving, artifacts, test.inputs)
    hits = (reference.argmax(1) == test.labels.numpy()).mean()

    _refuse_rows(monkeypatch)
    result = evaluate_store(store)
    assert result["num-examples"] == 120 and result["accuracy"] == pytest.approx(hits, abs=1e-12)
    probs, why = served_outputs(store, serving, plan, artifacts)
    assert why is None and np.array_equal(probs, reference)  # bit for bit

    from fedforget.service.predict import ModelCache

    cache = ModelCache(store)
    assert cache.num_classes == 10 and cache.example_shape == (64,)
    _, predicted = cache.predict(test.inputs)
    assert np.array_equal(predicted, reference)
