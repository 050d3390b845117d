"""``forget --propagate``: the owning clients delete forgotten samples through Flower at once (before any
retrain) and acknowledge; `status` shows who did; a client that did not answer is caught up by the next
run that reaches it (the retrain), and the retrain still works after propagation."""

from __future__ import annotations

import pytest

from fedforget.federation import forget_client
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import load_tombstones
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.status import store_status
from fedforget.unlearning.verify import verify_store

from .helpers import artifact_shas, copy_store, train_in_process

NODES = 3
FEDSGT = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2, "local-epochs": 1}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("propagate") / "store", NODES, **FEDSGT).root


def _run(store: Store, action: str) -> None:
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": action}, NODES)


def _acks(store: Store) -> dict:
    return store_status(store, accuracy=False)["acknowledgements"]


def test_propagation_deletes_on_the_owning_client_before_any_retrain_and_records_the_ack(trained, tmp_path):
    store = copy_store(trained, tmp_path)
    sample = store.manifest()["partitions"]["1"][0][0]
    result = forget_request(store, samples=[sample])
    assert _acks(store) == {"1": {"owners": [1], "acknowledged": [], "pending": [1]}}
    # the node's own copy of a purged artifact (as a deployed node would keep in its state dir)
    own_copy = store.root / "clients" / "1" / f"{artifact_shas(store)[result.invalidated[0]]}.bin"
    own_copy.parent.mkdir(parents=True, exist_ok=True)
    own_copy.write_bytes(b"frozen module")
    _run(store, "propagate")
    assert not own_copy.exists()
    assert sample in load_tombstones(store.root / "clients" / "1", "digits-mlp")  # gone on the client now
    assert not (store.root / "clients" / "0" / "tombstones.json").exists()  # only the owner was asked
    assert _acks(store)["1"] == {"owners": [1], "acknowledged": [1], "pending": []}
    _run(store, "retrain")  # retraining after propagation still works, and is exact
    assert verify_store(store)["exact"]


def test_a_client_that_does_not_answer_stays_pending_and_is_caught_up_by_the_next_retrain(trained, tmp_path,
                                                                                        monkeypatch):
    store = copy_store(trained, tmp_path)
    parts = store.manifest()["partitions"]
    forget_request(store, samples=[parts["1"][0][0], parts["2"][0][0]])
    real = forget_client.forget_samples

    def offline_partition_2(msg, context):  # noqa: ANN001, ANN202
        if int(context.node_config["partition-id"]) == 2:
            raise ConnectionError("node of partition 2 is offline")
        return real(msg, context)

    monkeypatch.setattr(forget_client, "forget_samples", offline_partition_2)
    _run(store, "propagate")
    assert _acks(store)["1"] == {"owners": [1, 2], "acknowledged": [1], "pending": [2]}
    assert not (store.root / "clients" / "2" / "tombstones.json").exists()
    monkeypatch.setattr(forget_client, "forget_samples", real)
    _run(store, "retrain")  # its next contact
    assert parts["2"][0][0] in load_tombstones(store.root / "clients" / "2", "digits-mlp")
    assert _acks(store)["1"]["pending"] == []
