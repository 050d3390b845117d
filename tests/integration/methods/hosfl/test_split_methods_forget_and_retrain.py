"""HO-SFL, SFL and ZO-SFL forget and come back: after a forget request nothing is served, and
``retrain`` rebuilds the split model from scratch without the forgotten sample, bit for bit what a
from-scratch run serves (files, artifact, serving plan and served outputs); a served model that saw
the forgotten sample fails on its hash and on its outputs. What each serves after training and after the
retrain is pinned in ``served_sha256.json`` (:mod:`tests.integration.served_bytes`)."""

from __future__ import annotations

import shutil

import pytest
import torch

from fedforget.core.config import parse_run_config
from fedforget.federation.client_site import dataset_key
from fedforget.federation.serve import ServingError
from fedforget.inprocess import run_in_process
from fedforget.methods.hosfl import client as hosfl_client
from fedforget.methods.hosfl import zo
from fedforget.methods.hosfl.server import client_theta_from_artifact
from fedforget.methods.hosfl.split_model import build_split_model
from fedforget.store import Store
from fedforget.store.tombstones import load_tombstones
from fedforget.unlearning.evaluate import evaluate_store
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.status import store_status
from fedforget.unlearning.verify import verify_store
from tests.integration.helpers import artifact_shas, copy_store, served_ids, served_sha, train_in_process
from tests.integration.served_bytes import assert_changed_served_byte_is_caught, assert_serves_recorded_bytes

NODES = 3
SPLIT = {"task": "digits-mlp", "partitioner": "iid", "lr": 0.02, "hosfl.client-lr": 0.01, "batch-size": 64,
         "hosfl.clients-per-round": NODES}  # every partition in every round: the forgotten sample's is too
METHODS = {
    "hosfl": {"method": "hosfl", "num-rounds": 2, "hosfl.perturbations": 2, "hosfl.eval-every": 2},
    "sfl": {"method": "sfl", "num-rounds": 1, "local-epochs": 1},
    "zo-sfl": {"method": "zo-sfl", "num-rounds": 2, "hosfl.client-lr": 1e-3},
}


@pytest.fixture(scope="module", params=sorted(METHODS))
def retrained(request, tmp_path_factory):
    """(method, trained store, the copy that forgot one sample and was retrained, what forget left served,
    the forgotten sample, verify's report after the retrain)."""
    root = tmp_path_factory.mktemp(request.param)
    trained = train_in_process(root / "trained", NODES, **{**SPLIT, **METHODS[request.param]}).root
    store = copy_store(trained, root, "erased")
    sample = store.manifest()["partitions"]["1"][0][0]
    assert forget_request(store, samples=[sample]).invalidated
    after_forget = served_ids(store)
    with pytest.raises(ServingError):
        evaluate_store(store)
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, NODES)
    return request.param, trained, store.root, after_forget, sample, verify_store(store)


def test_after_forget_nothing_is_served_until_the_retrain(retrained):
    _, _, erased, after_forget, _, _ = retrained
    assert after_forget == []
    assert served_ids(Store.open(erased)) != []


def test_retrain_serves_exactly_what_a_run_from_scratch_serves(retrained):
    _, trained, _, _, _, report = retrained
    assert report["exact"], report["reason"]
    assert not report["files"] and report["served"] == report["served_equal"] == 1
    assert report["forgotten_samples"] == 1
    assert report["serving_plan"] == {"equal_recomputed": True, "equal_scratch": True}
    assert report["outputs"]["compared"] and report["outputs"]["equal"], report["outputs"]
    assert report["compared"][0]["sha256"] != served_sha(Store.open(trained))  # the sample made a difference


def test_retrain_deletes_the_sample_on_its_client_and_logs_its_rounds_as_a_retrain(retrained):
    method, _, erased, _, sample, _ = retrained
    store = Store.open(erased)
    cfg = parse_run_config(store.manifest()["config"])
    assert sample in load_tombstones(store.client_dir(1), dataset_key(cfg))
    rows = store.metrics()
    retrain_rows = [r for r in rows if r.get("action") == "retrain"]
    rounds = METHODS[method]["num-rounds"]
    assert [r["round"] for r in retrain_rows] == list(range(rounds + 1))
    assert all(r.get("action") == "train" for r in rows[: len(rows) - len(retrain_rows)])
    ledger = store.ledger()
    try:
        assert ledger.retrained_watermark() == ledger.last_request() == 1
    finally:
        ledger.close()
    status = store_status(store)
    assert status["split"]["rounds"] == rounds and status["split"]["client_rounds"] == rounds * NODES
    assert 0.0 < status["accuracy"] <= 1.0  # measured on the served model, through the serving path


def test_retrain_starts_every_client_fresh_and_hosfl_clients_replay_to_the_served_model(retrained):
    """The retrain's clients keep their state under a new run tag (none resumes from the run that saw the
    forgotten sample); HO-SFL clients' θ_c, replayed to the end, is the served θ_c bit for bit."""
    method, trained, erased, _, _, _ = retrained
    store = Store.open(erased)
    info = store.manifest()["split"]
    before = Store.open(trained).manifest()["split"]
    assert info["run-tag"] != before["run-tag"]
    if method == "hosfl":  # the replaced run's history (seeds, v̄ computed on the forgotten sample) is gone
        assert before["history"] != info["history"] and store.artifact_path(info["history"]).is_file()
        assert not store.artifact_path(before["history"]).exists()
    paths = [store.client_dir(part) / f"split-{info['run-tag']}.safetensors" for part in range(NODES)]
    assert all(path.is_file() for path in paths)
    if method != "hosfl":  # SFL and ZO-SFL clients take the global θ_c with every round's first message
        return
    cfg = parse_run_config(store.manifest()["config"])
    split = build_split_model(cfg, 10)
    served = client_theta_from_artifact(store.get_arrays(served_sha(store)), split.client_names)
    history = store.get_arrays(info["history"])
    entries = [(history["seeds"][i].tolist(), history["vbar"][i].tolist()) for i in range(len(history["seeds"]))]
    for part, path in enumerate(paths):
        theta, version = hosfl_client.load_state(path, split.initial_client)
        assert torch.equal(zo.replay(theta, entries[version:], cfg.hosfl.mu, cfg.hosfl.client_lr), served), part


def test_a_retrained_store_serving_the_model_that_saw_the_sample_fails_on_hash_and_outputs(retrained, tmp_path):
    """Negative control: the served split artifact swapped for the pre-forget one."""
    _, trained, erased, _, _, _ = retrained
    store = copy_store(erased, tmp_path)
    (artifact,) = served_ids(store)
    old = artifact_shas(Store.open(trained))[artifact]
    assert old != artifact_shas(store)[artifact]
    shutil.copyfile(Store.open(trained).artifact_path(old), store.artifact_path(old))
    ledger = store.ledger()
    try:
        ledger.db.execute("UPDATE artifacts SET sha256=? WHERE artifact=?", (old, artifact))
    finally:
        ledger.close()
    report = verify_store(store)
    assert not report["exact"] and not report["files"]
    assert [c["artifact"] for c in report["compared"] if not c["equal"]] == [artifact]
    assert report["outputs"]["compared"] and report["outputs"]["equal"] is False
    assert report["outputs"]["max_abs_diff"] > 0


def test_each_split_method_serves_the_recorded_bytes_after_training_and_after_retraining(retrained):
    method, trained, erased, _, _, _ = retrained
    assert_serves_recorded_bytes(method, {**SPLIT, **METHODS[method]}, trained, erased)


def test_a_changed_split_served_byte_is_caught_by_the_recorded_sha256s(retrained, tmp_path):
    method, trained, _, _, _, _ = retrained
    assert_changed_served_byte_is_caught(method, trained, tmp_path)
