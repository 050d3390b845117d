"""One failure rule for every method, through the real ServerApp and ClientApp on an in-process Grid
that breaks replies or raises the way a deployment can: a client that raises once is redone (same
bytes as without the fault); a NaN, oversized, wrong-partition or malformed reply is rejected, sent once
more, then that partition is excluded by rule: the run finishes and the ledger names what stays unbuilt."""

from __future__ import annotations

import pytest

from fedforget.store import Store
from fedforget.strategies.failover import REJOIN_ENV

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
    store = run_with({"kinds": ("train",), "raise_once": {1}}, tmp_path / "s", config=FEDAVG)
    assert artifact_shas(store) == fedavg_reference
    assert _unbuilt(store) == {"artifacts": [], "partitions": []}


@pytest.mark.parametrize("how", BAD)
def test_fedavg_bad_reply_is_rejected_and_the_global_model_stays_unbuilt(fedavg_reference, tmp_path, how,
                                                                         monkeypatch):
    monkeypatch.setenv(REJOIN_ENV, "1")
    store = run_with({"kinds": ("train",), "tamper": {2: how}}, tmp_path / "s", config=FEDAVG)
    assert _unbuilt(store) == {"artifacts": ["fedavg/global"], "partitions": [2]}
    assert artifact_shas(store) == {}  # nothing built around the lost partition, so nothing inexact served
    ledger = store.ledger()
    try:
        assert not ledger.serving()["available"]
    finally:
        ledger.close()


SAFE = {**DIGITS, "method": "safe", "coarse": 2, "fine": 2, "num-rounds": 2, "adapter-steps": 6, "seed": 4}


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
