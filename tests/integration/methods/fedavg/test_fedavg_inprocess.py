import pytest
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedforget.client_app import app as client_app
from fedforget.core.config import ConfigError
from fedforget.federation.messaging import NodeFailure
from fedforget.inprocess import run_in_process
from fedforget.server_app import app as server_app
from fedforget.store import Store
from tests.integration.helpers import lineage, served_sha, train_in_process


def test_fedavg_on_digits_reaches_85_percent_in_8_rounds(tmp_path):
    store = train_in_process(tmp_path / "s", num_nodes=10, **{"num-rounds": 8})
    rows = [m for m in store.metrics() if m["round"] == 8]
    assert rows and rows[0]["accuracy"] >= 0.85
    assert "client-accuracy" in rows[0]


def test_same_seed_same_artifact_other_seed_other_artifact(tmp_path):
    a = served_sha(train_in_process(tmp_path / "a", **{"num-rounds": 2, "seed": 5}))
    b = served_sha(train_in_process(tmp_path / "b", **{"num-rounds": 2, "seed": 5}))
    c = served_sha(train_in_process(tmp_path / "c", **{"num-rounds": 2, "seed": 6}))
    assert a == b
    assert c != a


def test_store_records_plan_lineage_and_metrics(tmp_path):
    store = train_in_process(tmp_path / "s", num_nodes=4, **{"num-rounds": 1, "slices-per-client": 3})
    manifest = store.manifest()
    assert manifest["num-partitions"] == 4
    ids = [i for slices in manifest["partitions"].values() for s in slices for i in s]
    assert len(ids) == len(set(ids)) == 1437
    assert lineage(store, "fedavg/global") == sorted(f"{p}:{s}" for p in range(4) for s in range(3))
    assert store.verify_artifact(served_sha(store))
    assert store.verify_artifact(manifest["backbone"]["artifact"])
    rows = store.metrics()
    assert [m["round"] for m in rows] == [0, 1]
    assert rows[1]["trained"] == [0, 1, 2, 3] and rows[1]["train-examples"] == 1437
    assert set(rows[1]["client-accuracies"]) == {"0", "1", "2", "3"}
    assert rows[1]["train-loss"] > 0


def test_lineage_holds_only_the_partitions_that_trained(tmp_path):
    store = train_in_process(tmp_path / "s", num_nodes=10, **{"num-rounds": 1, "fraction-train": 0.3})
    assert len({u.split(":")[0] for u in lineage(store, "fedavg/global")}) == 3


def test_only_the_sampled_partitions_evaluate_a_round(tmp_path):
    store = train_in_process(tmp_path / "s", num_nodes=10, **{"num-rounds": 2, "fraction-train": 0.3})
    rows = store.metrics()
    for row in rows[1:]:
        assert len(row["trained"]) == 3
        assert sorted(int(p) for p in row["received-accuracies"]) == row["trained"]
    assert sorted(int(p) for p in rows[-1]["client-accuracies"]) == rows[-1]["trained"]


def _counting_client(counts: list[str]) -> ClientApp:
    """The real ClientApp behind a wrapper that notes each message's type."""
    counting = ClientApp()

    def relay(msg: Message, context: Context) -> Message:
        counts.append(msg.metadata.message_type)
        return client_app(msg, context)

    counting.query()(relay)
    counting.train("fedavg")(relay)
    counting.evaluate("fedavg")(relay)
    return counting


def test_evaluation_rides_on_the_train_messages_and_trains_nothing(tmp_path):
    counts: list[str] = []
    run_in_process({"task": "digits-mlp", "store": str(tmp_path / "s"), "num-rounds": 3}, 3,
                   server_app=server_app, client_app=_counting_client(counts))
    # only the last model is evaluated on its own: 3 + 0 + 0 + 3
    assert counts.count("train.fedavg") == 9 and counts.count("evaluate.fedavg") == 3
    rows = Store.open(tmp_path / "s").metrics()
    assert [sorted(r["received-accuracies"]) for r in rows[1:]] == [["0", "1", "2"]] * 3
    assert 0 < rows[1]["received-accuracy"] < rows[3]["received-accuracy"] < 1  # model 0 vs model 2
    assert sorted(rows[3]["client-accuracies"]) == ["0", "1", "2"] and "client-accuracies" not in rows[2]

    from fedforget.methods.fedavg import client as client_work

    def train_without_evaluating(msg: Message, context: Context) -> Message:
        msg.content["config"]["evaluate-received"] = False
        reply = client_work.train_adapter(msg, context)
        assert "received-accuracy" not in reply.content["metrics"]
        reply.content["metrics"].update({"received-accuracy": 0.5, "received-loss": 1.0, "received-examples": 1})
        return reply

    plain = ClientApp()
    plain.query()(client_app)
    plain.evaluate("fedavg")(client_app)
    plain.train("fedavg")(train_without_evaluating)
    run_in_process({"task": "digits-mlp", "store": str(tmp_path / "p"), "num-rounds": 3}, 3,
                   server_app=server_app, client_app=plain)
    assert served_sha(Store.open(tmp_path / "p")) == served_sha(Store.open(tmp_path / "s"))


@pytest.mark.parametrize(
    ("override", "message"),
    [({"task": "nope"}, "'task'='nope'"), ({"method": "nope"}, "'method'='nope'"), ({"num-rounds": -1}, "num-rounds")],
)
def test_bad_run_config_fails_before_anything_is_written(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        train_in_process(tmp_path / "s", **override)
    assert not (tmp_path / "s").exists()


def test_a_client_that_raises_stops_the_run_with_its_reason(tmp_path):
    broken = ClientApp()

    @broken.query()
    def query(msg: Message, context: Context) -> Message:
        return client_app(msg, context)

    @broken.train("fedavg")
    def train(msg: Message, context: Context) -> Message:
        raise RuntimeError("disk full on the client")

    with pytest.raises(NodeFailure, match="disk full on the client"):
        run_in_process({"task": "digits-mlp", "store": str(tmp_path / "s"), "num-rounds": 1}, 2,
                       server_app=server_app, client_app=broken)


def test_a_node_without_a_partition_is_named_in_the_error(tmp_path):
    from flwr.app import RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fedforget.inprocess import InProcessGrid, default_run_config

    config = {**default_run_config(), "task": "digits-mlp", "store": str(tmp_path / "s")}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    grid = InProcessGrid(client_app, 2, config)
    next(iter(grid.contexts.values())).node_config = {}
    with pytest.raises(NodeFailure, match="start it with --node-config 'partition-id=I num-partitions=N'"):
        server_app(grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config))
