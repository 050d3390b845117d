"""Flower's own strategies made forgettable: forgetting a record invalidates the rounds from the first one
that saw its partition; the retrain restores the last round before it (the model and the strategy's server
state) and replays the rest, and what is served is bit-identical to training from scratch without the record
(``fedforget verify``). Negative controls: a replay that drops the strategy's server state, or draws other
nodes than the first run drew, is caught by the same check."""

from __future__ import annotations

import json

import pytest
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, FedAdam, FedAvg, FedProx
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.inprocess import run_in_process
from fedforget.methods.replay import flower_strategies, server
from fedforget.store import Store
from fedforget.strategies import Forgettable
from fedforget.unlearning.cli import app

from ...helpers import artifact_rows, served_ids

NODES = 3
ROUNDS = 4
BASE = {"task": "digits-mlp", "lr": 0.02, "local-epochs": 1, "train-size": 300, "test-size": 100,
        "slices-per-client": 1, "method": "replay", "num-rounds": ROUNDS, "fraction-train": 0.34}
runner = CliRunner()


def _train(path, strategy: str) -> Store:  # noqa: ANN001
    run_in_process({**BASE, "replay.strategy": strategy, "store": str(path)}, NODES)
    return Store.open(path)


def _late_partition(store: Store) -> tuple[int, int]:
    """The partition first trained latest, and that round."""
    first: dict[int, int] = {}
    for row in store.metrics():
        for p in row.get("trained", []):
            first.setdefault(int(p), int(row["round"]))
    partition = max(first, key=lambda p: (first[p], p))
    return partition, first[partition]


def _forget_then_retrain(store: Store) -> int:
    partition, first = _late_partition(store)
    sample = store.manifest()["partitions"][str(partition)][0][0]
    forgot = runner.invoke(app, ["forget", "--store", str(store.root), "--sample", str(sample), "--json"])
    assert forgot.exit_code == 0, forgot.output
    invalid = {a for a, r in artifact_rows(store).items() if not r["valid"]}
    assert invalid == {a for a in artifact_rows(store) if int(a.rsplit("-", 1)[1]) >= first}
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, NODES)
    return first


def _verify(store: Store) -> dict:
    result = runner.invoke(app, ["verify", "--store", str(store.root), "--json"])
    return json.loads(result.stdout)


@pytest.mark.parametrize("strategy", flower_strategies.STRATEGIES_IN_ORDER)
def test_forgetting_rolls_back_to_the_last_round_before_the_record_and_replays_exactly(strategy, tmp_path):
    store = _train(tmp_path / "store", strategy)
    before = {a: r["sha256"] for a, r in artifact_rows(store).items()}
    first = _forget_then_retrain(store)
    assert 1 < first <= ROUNDS, "the partition forgotten from trained in the first round: nothing to roll back to"
    replayed = [r for r in store.metrics() if r.get("action") == "retrain" and "round" in r and "trained" in r]
    assert [r["round"] for r in replayed] == list(range(first, ROUNDS + 1))  # only the rounds that saw it
    after = {a: r["sha256"] for a, r in artifact_rows(store).items()}
    assert all(after[a] == before[a] for a in before if int(a.rsplit("-", 1)[1]) < first)
    assert served_ids(store) == [f"replay/round-{ROUNDS}"]
    report = _verify(store)
    assert report["exact"] is True, report


def test_a_replay_without_the_strategys_server_state_is_not_exact(tmp_path, monkeypatch):
    store = _train(tmp_path / "store", "fedadam")
    monkeypatch.setattr(flower_strategies, "restore_state", lambda *_: None)
    _forget_then_retrain(store)
    monkeypatch.undo()
    report = _verify(store)
    assert report["exact"] is False and not report["served_equal"], report


def test_a_replay_that_draws_other_nodes_than_the_first_run_is_not_exact(tmp_path, monkeypatch):
    """Flower draws node ids without a seed; a replay must draw the partitions the first run drew."""
    store = _train(tmp_path / "store", "fedavg")
    monkeypatch.setattr(server, "sampled", lambda run, server_round: sorted(run.nodes))
    _forget_then_retrain(store)
    monkeypatch.undo()
    report = _verify(store)
    assert report["exact"] is False, report


def test_forgettable_takes_flowers_strategy_and_refuses_what_it_cannot_replay():
    wrapped = Forgettable(FedProx(proximal_mu=0.25, fraction_train=0.5), task="digits-mlp")
    assert wrapped.config.replay.strategy == "fedprox" and wrapped.config.replay.proximal_mu == 0.25
    assert wrapped.config.fraction_train == 0.5
    assert Forgettable(FedAdam(eta=0.05)).config.replay.eta == 0.05
    assert Forgettable("fedyogi", task="digits-mlp").config.replay.strategy == "fedyogi"
    with pytest.raises(ConfigError, match="cannot be replayed exactly: it adds noise drawn without a seed"):
        Forgettable(DifferentialPrivacyClientSideFixedClipping(FedAvg(), 1.0, 1.0, 2))

    class MyFedAvg(FedAvg):
        pass

    assert Forgettable(MyFedAvg()).config.replay.strategy == "fedavg"  # a subclass runs as built


def test_the_coordinator_reads_a_replayed_store_like_any_other(tmp_path):
    """status, purge --check, the store check and a receipt on a store forgotten from and replayed."""
    store = _train(tmp_path / "store", "fedyogi")
    _forget_then_retrain(store)
    status = runner.invoke(app, ["status", "--store", str(store.root), "--json"])
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["available"] and not json.loads(status.stdout)["retrain_required"]
    check = runner.invoke(app, ["purge", "--store", str(store.root), "--check", "--json"])
    assert check.exit_code == 0 and json.loads(check.stdout)["clean"], check.stdout
    receipt = runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--json"])
    assert receipt.exit_code == 0, receipt.output
    assert json.loads(receipt.stdout)["verify"]["exact"]
