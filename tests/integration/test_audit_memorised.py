"""The audit means something: a client whose 50 samples the model memorised (many local epochs on a tiny
partition) is detected before forgetting (AUC's 95% interval above 0.5, kept as the decision "memorised")
and no longer after forget + retrain (interval around 0.5); and too few forgotten samples are reported as
such."""

from __future__ import annotations

import pytest

from fedforget.inprocess import run_in_process
from fedforget.store.ledger import LedgerUsageError
from fedforget.unlearning.audit import MIN_FORGOTTEN, audit_store
from fedforget.unlearning.forget import forget_request

from .helpers import train_in_process

MEMORISE = {"method": "fedavg", "num-rounds": 6, "local-epochs": 30, "lr": 0.02, "train-size": 150,
            "partitioner": "iid", "lora-r": 16}


def test_a_memorised_client_is_detected_before_and_not_after_forget_and_retrain(tmp_path):
    store = train_in_process(tmp_path / "store", 3, **MEMORISE)
    forget_request(store, clients=[1], audit_before=True)
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, 3)
    report = audit_store(store)
    before, after = report["before"], report["after"]
    assert report["forgotten"] == 50 >= MIN_FORGOTTEN and report["verdict"] is None and report["held_out"] >= 100
    assert before["memorised"] is True  # clearly a member before (the losses behind it are purged)
    assert "forgotten_mean_loss" not in before and "loss_threshold_auc" not in before
    low, high = after["loss_threshold_ci95"]
    assert low < 0.5 < high and after["forgotten_mean_loss"] > 0.01


def test_one_forgotten_sample_is_too_few_to_tell(tmp_path):
    store = train_in_process(tmp_path / "store", 3, method="fedavg", **{"num-rounds": 1, "train-size": 150,
                                                                       "partitioner": "iid"})
    forget_request(store, samples=[store.manifest()["partitions"]["0"][0][0]])
    report = audit_store(store)
    assert report["forgotten"] == 1 and "too few forgotten samples to tell" in report["verdict"]
    assert report["before"] is None and "--audit-before" in report["note"]
    assert report["reads"] == "public data set"  # the training rows it needs come from the public set, said so


def test_a_store_whose_nodes_hold_their_own_records_is_refused_in_one_line(tmp_path, monkeypatch):
    store = train_in_process(tmp_path / "store", 3, method="fedavg", **{"num-rounds": 1, "train-size": 150,
                                                                       "partitioner": "iid"})
    forget_request(store, samples=[store.manifest()["partitions"]["0"][0][0]])
    manifest = store.manifest()
    nodes = {str(p): {"name": f"node-{p}", "records": "public"} for p in range(3)}
    monkeypatch.setattr(type(store), "manifest", lambda self: {**manifest, "nodes": nodes})
    assert audit_store(store)["reads"] == "public data set"  # the negative control: all public
    nodes["1"]["records"] = "local"

    def refuse(*args, **kwargs):
        raise AssertionError("the audit read the public data set for a store of local records")

    monkeypatch.setattr("fedforget.tasks.registry.load_task_data", refuse)
    with pytest.raises(LedgerUsageError) as err:
        audit_store(store)
    assert "\n" not in str(err.value) and "run the membership audit where the data is" in str(err.value)
