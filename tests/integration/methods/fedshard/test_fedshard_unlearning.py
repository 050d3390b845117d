"""FedShard through the real ServerApp/ClientApp in process: forgetting invalidates one path, retraining
rebuilds only that path at the analytical cost, and the result is bit-identical to a from-scratch run
on the same plan, for one leaver, two sequential and two simultaneous ones."""

from __future__ import annotations

import pytest
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedforget.federation import module_training as chain_client
from fedforget.federation.node_records import register
from fedforget.inprocess import run_in_process
from fedforget.methods.fedshard.costs import speedup_r1, training_cost, unlearning_cost
from fedforget.methods.fedshard.fairness import fairness_of_store
from fedforget.methods.fedshard.plan import ShardTree
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.status import store_status
from fedforget.unlearning.verify import verify_store
from tests.integration.helpers import artifact_shas, copy_store, served_sha, train_in_process

NODES = 8
FEDSHARD = {"method": "fedshard", "fedshard.fanout": 2, "fedshard.rounds-min": 1, "fedshard.rounds-max": 2,
            "local-epochs": 1}


@pytest.fixture(scope="module")
def fedshard_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("fedshard") / "store"
    train_in_process(path, NODES, **FEDSHARD)
    return path


def _retrain(store: Store, nodes: int = NODES) -> dict:
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, nodes)
    return [m for m in store.metrics() if m.get("final")][-1]


def _tree(store: Store) -> ShardTree:
    return ShardTree.from_json(store.manifest()["plan"])


def test_forgetting_a_client_invalidates_exactly_its_path_and_serving_falls_back(fedshard_store, tmp_path):
    store = copy_store(fedshard_store, tmp_path)
    tree = _tree(store)
    result = forget_request(store, clients=[5])
    assert sorted(result.invalidated) == sorted(s.artifact for s in tree.path(5))
    status = store_status(store, accuracy=False)
    assert status["tree"]["falling_back"] and status["available"]
    (served,) = status["serving"]
    assert served not in result.invalidated
    report = verify_store(store, include_all=True)
    assert report["exact"]
    for row in report["compared"]:  # negative control: every shard on the path saw client 5
        assert row["equal"] == (row["artifact"] not in result.invalidated), row


def test_retrain_after_one_leaver_rebuilds_only_the_path_and_is_bit_identical_to_scratch(fedshard_store, tmp_path):
    store = copy_store(fedshard_store, tmp_path)
    tree = _tree(store)
    before = artifact_shas(store)
    forget_request(store, clients=[2])
    final = _retrain(store)
    path = [s.artifact for s in tree.path(2)]
    assert final["rebuilt"] == path
    assert final["client-rounds"] == unlearning_cost(tree, [2])["participating-rounds"]
    after = artifact_shas(store)
    assert {a: after[a] for a in before if a not in path} == {a: before[a] for a in before if a not in path}
    assert all(after[a] != before[a] for a in path)
    report = verify_store(store, include_all=True)
    assert report["exact"] and report["served"] == 1
    assert all(row["equal"] for row in report["compared"])
    assert served_sha(store) != before[tree.root.artifact]  # the model that saw client 2 is not served


def test_two_sequential_leavers_equal_two_simultaneous_ones_and_scratch(fedshard_store, tmp_path):
    sequential = copy_store(fedshard_store, tmp_path, "sequential")
    forget_request(sequential, clients=[1])
    _retrain(sequential)
    forget_request(sequential, clients=[6])
    _retrain(sequential)
    simultaneous = copy_store(fedshard_store, tmp_path, "simultaneous")
    forget_request(simultaneous, clients=[1, 6])
    joint = _retrain(simultaneous)
    assert artifact_shas(sequential) == artifact_shas(simultaneous)
    tree = _tree(simultaneous)
    assert joint["client-rounds"] == unlearning_cost(tree, [1, 6])["participating-rounds"]
    report = verify_store(simultaneous)
    assert report["exact"]
    fairness = fairness_of_store(simultaneous)
    assert fairness["leavers"] == [1, 6] and fairness["mp"] >= 4.0


def test_client_rounds_of_an_unlearning_equal_the_analytical_formula_k16_r2_t3(tmp_path):
    store = train_in_process(tmp_path / "k16", 16, method="fedshard", **{"fedshard.fanout": 2, "fedshard.rounds-max": 3,
                             "fedshard.rounds-rule": "constant", "train-size": 800, "test-size": 200})
    tree = _tree(store)
    train = [m for m in store.metrics() if m.get("final")][-1]["client-rounds"]
    assert train == training_cost(tree) == 192
    forget_request(store, clients=[11])
    unlearn = _retrain(store, 16)["client-rounds"]
    cost = unlearning_cost(tree, [11])
    assert (cost["member-rounds"], unlearn) == (90, 78)  # 78 = 90 minus the leaver's own 12 rounds
    assert train / cost["member-rounds"] == pytest.approx(speedup_r1(16, 2))


def _dying_client_app(dead_partition: int, dead_artifact: str) -> ClientApp:
    """The real ClientApp handlers, except one node that dies in one shard's first round."""
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return register(msg, context)

    @app.train("fedshard")
    def train_chain(msg: Message, context: Context) -> Message:
        config = msg.content["config"]
        if (int(context.node_config["partition-id"]) == dead_partition and str(config["artifact"]) == dead_artifact
                and int(config["server-round"]) == 1):
            raise RuntimeError("node died mid-round")
        return chain_client.train_chain_position(msg, context)

    return app


def test_a_node_dying_in_a_shards_round_is_excluded_by_rule_and_the_rest_of_the_stage_is_exact(
        fedshard_store, tmp_path, monkeypatch):
    from fedforget.federation.failover import REJOIN_ENV

    monkeypatch.setenv(REJOIN_ENV, "1")
    clean = Store.open(fedshard_store)
    tree = _tree(clean)
    victim = tree.shard(2, 0)
    partition = victim.clients[0]
    run_in_process({**FEDSHARD, "task": "digits-mlp", "lr": 0.02, "store": str(tmp_path / "s"),
                    "local-epochs": 1}, NODES, client_app=_dying_client_app(partition, victim.artifact))
    store = Store.open(tmp_path / "s")
    ledger = store.ledger()
    try:
        unbuilt = ledger.get_meta("unbuilt")
        assert ledger.serving()["available"]  # served from what does not need the lost partition
    finally:
        ledger.close()
    path = [s.artifact for s in tree.shards() if s.stage >= 2 and partition in s.clients]
    assert unbuilt == {"artifacts": path, "partitions": [partition]}
    same, other = artifact_shas(store), artifact_shas(clean)
    untouched = [s.artifact for s in tree.shards() if s.stage == 1 or (s.stage == 2 and s.index != 0)]
    assert {a: same[a] for a in untouched} == {a: other[a] for a in untouched}
    assert set(same).isdisjoint(path)


def test_status_and_fairness_json_describe_the_tree_costs_and_fallback(fedshard_store, tmp_path):
    import json

    from typer.testing import CliRunner

    from fedforget.unlearning.cli import app

    store = copy_store(fedshard_store, tmp_path)
    runner = CliRunner()
    status = json.loads(runner.invoke(app, ["status", "--store", str(store.root), "--json"]).output)
    assert [len(s) for s in status["tree"]["stages"]] == [4, 2, 1] and status["tree"]["cached"] == 7
    assert not status["tree"]["falling_back"] and status["tree"]["served_stage"] == 3
    fairness = json.loads(runner.invoke(app, ["fairness", "--store", str(store.root), "--json"]).output)
    assert fairness["mp"] is None and fairness["me-client-rounds"] == 0.0  # K = R^P, constant rounds
    assert fairness["training-client-rounds"] == training_cost(_tree(store))


def test_a_corrupt_cached_shard_is_rebuilt_by_retrain_with_the_same_bytes(fedshard_store, tmp_path):
    store = copy_store(fedshard_store, tmp_path)
    before = artifact_shas(store)
    victim = _tree(store).shard(1, 1).artifact
    path = store.artifact_path(before[victim])
    path.chmod(0o600)
    path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)
    assert victim in store_status(store, accuracy=False)["corrupt"]
    final = _retrain(store)
    assert final["rebuilt"] == [victim]
    assert artifact_shas(store) == before and store.verify_artifact(before[victim])
