"""``verify`` checks what is served: after forget and after retrain, for every method, the re-hashed
files, the serving plan and the served outputs on the test split equal a from-scratch run bit for bit;
and negative controls fail on a real mismatch (a stale model, a corrupt file, a wrong ensemble weight).
The served bytes themselves are pinned: after training and after forget + retrain, every method (Flower's
FedAvg and FedProx through ``replay`` included) serves the sha256s recorded in ``served_sha256.json``
(:mod:`tests.integration.served_bytes`), so moving code around cannot change what is served unnoticed."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.verify import verify_store

from .helpers import artifact_shas, copy_store, train_in_process
from .served_bytes import assert_changed_served_byte_is_caught, assert_serves_recorded_bytes

NODES = 3
METHODS = {
    "fedavg": {"method": "fedavg", "num-rounds": 2},
    "fedsgt": {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2},
    "s3t": {"method": "s3t", "chains.groups": 2, "chains.shards": 2, "chains.budget": 2, "slices-per-client": 2},
    "sisa": {"method": "sisa", "chains.groups": 2, "chains.shards": 2, "slices-per-client": 2},
    "fedcio": {"method": "fedcio", "chains.clusters": 2, "num-rounds": 2},
    "fedshard": {"method": "fedshard", "fedshard.fanout": 2, "fedshard.rounds-min": 1, "fedshard.rounds-max": 1,
                 "local-epochs": 1},
    "safe": {"method": "safe", "safe.coarse": 2, "safe.fine": 2, "num-rounds": 2, "local-epochs": 1},
    "protosisa": {"method": "protosisa", "safe.coarse": 2, "num-rounds": 2, "local-epochs": 1},
    # Flower's FedAvg and FedProx made forgettable, as `method='replay'` runs them from the run config
    "replay": {"method": "replay", "num-rounds": 2, "local-epochs": 1},
    "replay-fedprox": {"method": "replay", "replay.strategy": "fedprox", "replay.proximal-mu": 0.1, "num-rounds": 2,
                       "local-epochs": 1},
}
#: Methods serving one model trained on every partition: a forget leaves nothing to serve until the retrain.
ONE_MODEL = {"fedavg", "replay", "replay-fedprox"}


@pytest.fixture(scope="module", params=sorted(METHODS))
def forgotten_and_retrained(request, tmp_path_factory):
    """(trained store, the same store after forgetting one sample, the report after forget, after retrain)."""
    root = tmp_path_factory.mktemp(request.param)
    trained = train_in_process(root / "trained", NODES, **METHODS[request.param]).root
    store = copy_store(trained, root, "erased")
    result = forget_request(store, samples=[store.manifest()["partitions"]["1"][0][0]])
    assert result.invalidated
    after_forget = verify_store(store)
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, NODES)
    return request.param, trained, store.root, after_forget, verify_store(store)


def _exact_all_the_way(report: dict) -> None:
    assert report["exact"], report["reason"]
    assert not report["files"] and report["served"] == report["served_equal"] > 0
    assert report["serving_plan"]["equal_recomputed"]
    assert report["outputs"]["compared"] and report["outputs"]["equal"], report["outputs"]


def test_after_forget_what_is_served_equals_scratch_files_plan_and_outputs(forgotten_and_retrained):
    method, _, _, report, _ = forgotten_and_retrained
    if method in ONE_MODEL:  # one model, trained on everything: nothing is left to serve until the retrain
        assert not report["exact"] and report["served"] == 0 and "nothing is served" in report["reason"]
        return
    _exact_all_the_way(report)


def test_after_retrain_the_served_model_equals_scratch_including_its_plan(forgotten_and_retrained):
    _, _, _, _, report = forgotten_and_retrained
    _exact_all_the_way(report)
    assert report["serving_plan"]["equal_scratch"] is True


def test_a_served_model_that_saw_the_forgotten_sample_fails_on_hash_and_outputs(forgotten_and_retrained, tmp_path):
    """Negative control: a retrain that silently kept the old model is caught by a real mismatch."""
    _, trained, erased, _, _ = forgotten_and_retrained
    store = copy_store(erased, tmp_path)
    old, new = artifact_shas(Store.open(trained)), artifact_shas(store)
    ledger = store.ledger()
    try:
        served = ledger.serving()["artifacts"]
        stale = next(a for a in served if old.get(a) != new[a])
        shutil.copyfile(Store.open(trained).artifact_path(old[stale]), store.artifact_path(old[stale]))
        ledger.db.execute("UPDATE artifacts SET sha256=? WHERE artifact=?", (old[stale], stale))
    finally:
        ledger.close()
    report = verify_store(store)
    assert not report["exact"] and not report["files"]
    assert [c["artifact"] for c in report["compared"] if not c["equal"]] == [stale]
    assert report["outputs"]["compared"] and report["outputs"]["equal"] is False
    assert report["outputs"]["max_abs_diff"] > 0


@pytest.fixture(scope="module")
def fedsgt_store(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("fedsgt-served") / "store", NODES, **METHODS["fedsgt"]).root


def test_a_corrupt_served_file_makes_verify_exit_1_naming_it(fedsgt_store, tmp_path):
    store = copy_store(fedsgt_store, tmp_path)
    ledger = store.ledger()
    try:
        artifact = ledger.serving()["artifacts"][0]
    finally:
        ledger.close()
    path = store.artifact_path(artifact_shas(store)[artifact])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["verify", "--store", str(store.root), "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert not report["exact"] and report["files"] == [
        {"artifact": artifact, "sha256": path.stem, "problem": "corrupt"}]
    assert artifact in result.stderr and "corrupt" in result.stderr
    path.unlink()
    report = verify_store(store)
    assert not report["exact"] and report["files"][0]["problem"] == "missing"


def test_a_wrong_ensemble_weight_fails_on_the_plan_and_the_outputs(fedsgt_store, tmp_path):
    """Negative control on the served model as a whole: every artifact equal, one weight changed."""
    store = copy_store(fedsgt_store, tmp_path)
    ledger = store.ledger()
    try:
        serving = ledger.serving()
        members = serving["shards"][0]["members"]
        assert len(members) > 1
        members[0]["weight"], members[1]["weight"] = members[0]["weight"] + 0.25, members[1]["weight"] - 0.25
        ledger.set_meta("serving", serving)
    finally:
        ledger.close()
    report = verify_store(store)
    assert not report["exact"] and report["served"] == report["served_equal"]
    assert report["serving_plan"]["equal_recomputed"] is False
    assert report["outputs"]["equal"] is False


def test_every_method_serves_the_recorded_bytes_after_training_and_after_retraining(forgotten_and_retrained):
    method, trained, erased, _, _ = forgotten_and_retrained
    assert_serves_recorded_bytes(method, METHODS[method], trained, erased)


def test_a_changed_served_byte_is_caught_by_the_recorded_sha256s(forgotten_and_retrained, tmp_path):
    """Negative control: the same comparison fails once one served file holds other bytes."""
    method, trained, _, _, _ = forgotten_and_retrained
    assert_changed_served_byte_is_caught(method, trained, tmp_path)


def test_after_retrain_every_owner_of_the_forgotten_sample_has_acknowledged_deleting_it(forgotten_and_retrained):
    """Every method's retrain sends its forget message through one sender, which records the owners'
    acknowledgements that `status` and receipts show."""
    from fedforget.store.acks import request_acks

    _, _, erased, _, _ = forgotten_and_retrained
    ledger = Store.open(erased).ledger()
    try:
        acks = request_acks(ledger)
    finally:
        ledger.close()
    assert acks and all(entry["owners"] and entry["acknowledged"] == entry["owners"] and not entry["pending"]
                        for entry in acks.values()), acks
