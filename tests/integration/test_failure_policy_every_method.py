"""One failure rule for every method, through the real ServerApp and ClientApp on an in-process Grid
that breaks replies or raises the way a deployment can: a client that raises once is redone (same
bytes as without the fault); a NaN, oversized, wrong-partition or malformed reply is rejected, sent once
more, then that partition is excluded by rule: the run finishes and the ledger names what stays unbuilt."""

from __future__ import annotations

import numpy as np
import pytest
from rich.console import Console

from fedforget.federation.failover import REJOIN_ENV
from fedforget.store import Store
from fedforget.unlearning.status import print_status, store_status

from .helpers import DIGITS, artifact_shas, train_in_process
from .test_node_failure import run_with

NODES = 3
FEDAVG = {**DIGITS, "method": "fedavg", "num-rounds": 2, "local-epochs": 1, "seed": 4}
BAD = ["nan", "oversized", "partition", "malformed"]


def _unbuilt(store: Store) -> dict:
    ledger = store.ledger()
    try:
        return ledger.get_meta("unbuilt")
    finally:
        ledger.close()


@pytest.fixture(scope="module")
def fedavg_reference(tmp_path_factory) -> dict[str, str]:
    return artifact_shas(train_in_process(tmp_path_factory.mktemp("fedavg") / "s", NODES, **FEDAVG))


def test_fedavg_client_that_raises_once_is_redone_bit_identically(fedavg_reference, tmp_path):
    store = run_with({"kinds": ("train.fedavg",), "raise_once": {1}}, tmp_path / "s", config=FEDAVG)
    assert artifact_shas(store) == fedavg_reference
    assert _unbuilt(store) == {"artifacts": [], "partitions": []}


def test_fedavg_node_that_restarts_with_a_new_id_mid_round_is_remapped_and_redone_bit_identically(fedavg_reference,
                                                                                                   tmp_path):
    store = run_with({"kinds": ("train.fedavg",), "die": {1: True}}, tmp_path / "s", config=FEDAVG)
    assert artifact_shas(store) == fedavg_reference
    assert _unbuilt(store) == {"artifacts": [], "partitions": []}


@pytest.mark.parametrize("how", [*BAD, "received"])
def test_fedavg_bad_reply_is_rejected_and_the_global_model_stays_unbuilt(fedavg_reference, tmp_path, how,
                                                                         monkeypatch):
    monkeypatch.setenv(REJOIN_ENV, "1")
    store = run_with({"kinds": ("train.fedavg",), "tamper": {2: how}}, tmp_path / "s", config=FEDAVG)
    assert _unbuilt(store) == {"artifacts": ["fedavg/global"], "partitions": [2]}
    assert artifact_shas(store) == {}  # nothing built around the lost partition, so nothing inexact served
    ledger = store.ledger()
    try:
        assert not ledger.serving()["available"]
    finally:
        ledger.close()
    console = Console(record=True, width=200)
    print_status(store_status(store, accuracy=False), console)
    assert "1 artifact(s) unbuilt (fedavg/global): partition(s) [2] were lost" in console.export_text()


SAFE = {**DIGITS, "method": "safe", "safe.coarse": 2, "safe.fine": 2, "num-rounds": 2, "safe.adapter-steps": 6,
        "seed": 4}


@pytest.fixture(scope="module")
def safe_reference(tmp_path_factory) -> dict[str, str]:
    return artifact_shas(train_in_process(tmp_path_factory.mktemp("safe") / "s", NODES, **SAFE))


def test_safe_client_that_raises_once_is_redone_bit_identically(safe_reference, tmp_path):
    store = run_with({"kinds": ("train.safe",), "raise_once": {0}}, tmp_path / "s", config=SAFE)
    assert artifact_shas(store) == safe_reference
    assert _unbuilt(store) == {"artifacts": [], "partitions": []}


@pytest.mark.parametrize("how", BAD)
def test_safe_bad_reply_leaves_only_what_reads_that_partition_unbuilt(safe_reference, tmp_path, how, monkeypatch):
    monkeypatch.setenv(REJOIN_ENV, "1")
    store = run_with({"kinds": ("train.safe", "query.safeproto"), "tamper": {1: how}}, tmp_path / "s", config=SAFE)
    built, unbuilt = artifact_shas(store), _unbuilt(store)
    assert unbuilt["partitions"] == [1] and unbuilt["artifacts"]
    assert set(built).isdisjoint(unbuilt["artifacts"])
    assert set(built) | set(unbuilt["artifacts"]) == set(safe_reference)
    assert all(built[a] == safe_reference[a] for a in built)  # every built artifact is bit-identical


FEDSHARD = {**DIGITS, "method": "fedshard", "fedshard.fanout": 2, "fedshard.rounds-min": 1, "fedshard.rounds-max": 1,
            "local-epochs": 1, "seed": 4}
SHARD_NODES = 4


@pytest.fixture(scope="module")
def fedshard_reference(tmp_path_factory) -> dict[str, str]:
    return artifact_shas(train_in_process(tmp_path_factory.mktemp("fedshard") / "s", SHARD_NODES, **FEDSHARD))


def test_fedshard_client_that_raises_once_is_redone_bit_identically(fedshard_reference, tmp_path):
    store = run_with({"kinds": ("train.fedshard",), "raise_once": {3}}, tmp_path / "s", nodes=SHARD_NODES,
                     config=FEDSHARD)
    assert artifact_shas(store) == fedshard_reference
    assert _unbuilt(store) == {"artifacts": [], "partitions": []}


@pytest.mark.parametrize("how", BAD)
def test_fedshard_bad_reply_leaves_that_clients_path_unbuilt_and_serving_falls_back(fedshard_reference, tmp_path,
                                                                                     how, monkeypatch):
    monkeypatch.setenv(REJOIN_ENV, "1")
    store = run_with({"kinds": ("train.fedshard",), "tamper": {0: how}}, tmp_path / "s", nodes=SHARD_NODES,
                     config=FEDSHARD)
    built, unbuilt = artifact_shas(store), _unbuilt(store)
    assert unbuilt["partitions"] == [0] and unbuilt["artifacts"]
    assert set(built).isdisjoint(unbuilt["artifacts"])
    assert set(built) | set(unbuilt["artifacts"]) == set(fedshard_reference)
    assert all(built[a] == fedshard_reference[a] for a in built)
    ledger = store.ledger()
    try:
        clients = {a["artifact"]: a["meta"]["clients"] for a in ledger.artifacts()}
        assert all(0 not in c for c in clients.values())  # what is built never saw the lost partition
        assert ledger.serving()["available"]  # served from the shards that do not need it
    finally:
        ledger.close()


HOSFL = {"task": "digits-mlp", "partitioner": "iid", "lr": 0.02, "hosfl.client-lr": 0.01, "method": "hosfl",
         "num-rounds": 2, "hosfl.clients-per-round": 3, "hosfl.perturbations": 2, "hosfl.eval-every": 2, "seed": 4}


@pytest.fixture(scope="module")
def hosfl_reference(tmp_path_factory) -> dict[str, str]:
    return artifact_shas(train_in_process(tmp_path_factory.mktemp("hosfl") / "s", NODES, **HOSFL))


def test_hosfl_client_that_raises_once_is_redone_bit_identically(hosfl_reference, tmp_path):
    store = run_with({"kinds": ("train.forward", "train.zo"), "raise_once": {1}}, tmp_path / "s", config=HOSFL)
    assert artifact_shas(store) == hosfl_reference
    assert all(r["dropped"] == [] for r in store.metrics() if r["round"] > 0)


@pytest.mark.parametrize("how", BAD)
def test_hosfl_bad_reply_is_rejected_and_that_client_dropped_from_the_round(hosfl_reference, tmp_path, how):
    store = run_with({"kinds": ("train.forward",), "tamper": {1: how}}, tmp_path / "s", config=HOSFL)
    rows = [r for r in store.metrics() if r["round"] > 0]
    assert len(rows) == HOSFL["num-rounds"]  # the run finished
    assert all(r["dropped"] == [1] and r["forward-ok"] == [0, 2] for r in rows)
    assert all(np.isfinite(r["train-loss"]) for r in rows)  # nothing of the bad reply reached θ_s
    assert artifact_shas(store)  # the model over the clients that answered is built and served


REPLAY = {**DIGITS, "method": "replay", "replay.strategy": "fedavgm", "num-rounds": 2, "local-epochs": 1,
          "seed": 4}


@pytest.fixture(scope="module")
def replay_reference(tmp_path_factory) -> dict[str, str]:
    return artifact_shas(train_in_process(tmp_path_factory.mktemp("replay") / "s", NODES, **REPLAY))


def test_replay_client_that_raises_once_is_redone_bit_identically(replay_reference, tmp_path):
    store = run_with({"kinds": ("train.replay",), "raise_once": {1}}, tmp_path / "s", config=REPLAY)
    assert artifact_shas(store) == replay_reference
    assert _unbuilt(store) == {"artifacts": [], "partitions": []}


@pytest.mark.parametrize("how", BAD)
def test_replay_bad_reply_stops_the_rounds_and_nothing_averaged_around_it_is_built(replay_reference, tmp_path, how,
                                                                                   monkeypatch):
    monkeypatch.setenv(REJOIN_ENV, "1")
    store = run_with({"kinds": ("train.replay",), "tamper": {2: how}}, tmp_path / "s", config=REPLAY)
    rounds = ["replay/round-1", "replay/state-1", "replay/round-2", "replay/state-2"]
    assert _unbuilt(store) == {"artifacts": rounds, "partitions": [2]}
    assert artifact_shas(store) == {}  # every round needs partition 2: nothing is built around it
