"""``evaluate-on-nodes``: once a run is served, every node evaluates what is served on its own test records (one
``evaluate.served`` message, one handler, the method's ``serving`` hook), and the server records their
example-weighted mean beside its own evaluation: in the final metrics row, in ``status``, and in Flower's
``Result.evaluate_metrics_clientapp``. The number is the mean of each node's accuracy computed directly from the
store; a node whose test records differ changes it, a node with none abstains; a server with no test set of its
own still reports one; and what is served is the pinned bytes, evaluation or not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.serverapp import Grid, ServerApp
from typer.testing import CliRunner

from fedforget.client_app import app as client_app
from fedforget.core.config import RunConfig, parse_run_config, stored_run_config
from fedforget.federation.evaluate_messages import EvaluateServed, served_entries
from fedforget.federation.federated_evaluation import weighted_evaluation
from fedforget.federation.message_types import EVALUATE_SERVED
from fedforget.federation.messaging import send_with_retries
from fedforget.federation.run_setup import local_test_share
from fedforget.federation.serve import probability_metrics, serving_probabilities
from fedforget.inprocess import InProcessGrid, default_run_config, run_in_process
from fedforget.store import Store
from fedforget.strategies import FedAvgLoRA, start_from_context, strategy_for
from fedforget.tasks.base import Examples
from fedforget.tasks.local_records import read_local_records
from fedforget.tasks.registry import load_task_data
from fedforget.unlearning.cli import app as cli

from .helpers import DIGITS
from .served_bytes import bytes_platform, recorded_bytes, served_shas

NODES = 3
#: the pinned configs of served_sha256.json (tests/integration/test_verify_what_is_served.py), evaluated on the nodes
PINNED = {"fedavg": {"method": "fedavg", "num-rounds": 2},
          "fedsgt": {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2}}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tabular-mlp"


def _users_app(results: list) -> ServerApp:
    """A user's ServerApp: the run config's strategy, started as the coordinator would; its Result kept."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        results.append(start_from_context(strategy_for(context.run_config), grid, context))

    return app


def _final(store: Store) -> dict:
    return next(r for r in reversed(store.metrics()) if r.get("final"))


def _stored_config(store: Store) -> RunConfig:
    return parse_run_config(stored_run_config(store.manifest()["config"]))


def _direct(store: Store, tests: list[Examples], num_classes: int) -> dict[str, float]:
    """What is served, evaluated here on each node's test records from the store's own bytes, and the mean
    weighted by their records, in partition order (nodes without records left out)."""
    cfg = _stored_config(store)
    ledger = store.ledger()
    try:
        plan, serving, artifacts = ledger.plan(), ledger.serving(), ledger.artifacts()
    finally:
        ledger.close()
    each = [probability_metrics(serving_probabilities(cfg, num_classes, store, plan, serving, artifacts, t.inputs),
                                t.labels) for t in tests if len(t)]
    total = sum(e["num-examples"] for e in each)
    return {"accuracy": sum(e["accuracy"] * e["num-examples"] for e in each) / total,
            "loss": sum(e["loss"] * e["num-examples"] for e in each) / total, "examples": total, "nodes": len(each)}


def _assert_recorded(store: Store, direct: dict[str, float]) -> None:
    final = _final(store)
    assert final["federated-accuracy"] == direct["accuracy"]
    assert final["federated-loss"] == pytest.approx(direct["loss"], rel=1e-9)  # the nodes' rows, their order
    assert (final["federated-examples"], final["federated-nodes"]) == (direct["examples"], direct["nodes"])


@pytest.fixture(scope="module", params=sorted(PINNED))
def public_nodes(request, tmp_path_factory):
    """A pinned config trained with evaluate-on-nodes through a user's ServerApp: (name, store, its Result)."""
    root = tmp_path_factory.mktemp(request.param) / "store"
    results: list = []
    run_in_process({**DIGITS, **PINNED[request.param], "store": str(root), "evaluate-on-nodes": True}, NODES,
                   server_app=_users_app(results))
    return request.param, Store.open(root), results[0]


def test_the_nodes_evaluation_is_the_weighted_mean_of_each_nodes_share_of_the_test_split(public_nodes):
    _, store, _ = public_nodes
    cfg = _stored_config(store)
    data = load_task_data(cfg)
    shares = [local_test_share(data, p, NODES, cfg.seed) for p in range(NODES)]
    assert sum(len(s) for s in shares) == len(data.test) and all(len(s) for s in shares)
    direct = _direct(store, shares, data.num_classes)
    _assert_recorded(store, direct)
    assert 0.0 < direct["accuracy"] <= 1.0 and direct["nodes"] == NODES


def test_the_result_carries_the_nodes_and_the_servers_evaluation_per_round(public_nodes):
    name, store, result = public_nodes
    final = _final(store)
    last = max(result.train_metrics_clientapp)
    assert dict(result.evaluate_metrics_clientapp) == {last: result.evaluate_metrics_clientapp[last]}
    assert result.evaluate_metrics_clientapp[last]["accuracy"] == final["federated-accuracy"]
    assert result.evaluate_metrics_clientapp[last]["num-examples"] == final["federated-examples"]
    assert result.evaluate_metrics_serverapp[last]["accuracy"] == final["accuracy"]
    if name == "fedavg":  # the server evaluates the seeded model and every round's: Flower's rounds 0..N, the
        rows = [r for r in store.metrics() if "round" in r and not r.get("final")]  # last as what is served
        assert sorted(result.evaluate_metrics_serverapp) == [0, 1, 2] == [r["round"] for r in rows]
        assert [result.evaluate_metrics_serverapp[r["round"]]["accuracy"] for r in rows[:-1]] == [
            r["accuracy"] for r in rows[:-1]]
        assert result.evaluate_metrics_serverapp[2]["accuracy"] == pytest.approx(rows[-1]["accuracy"], abs=1e-6)


def test_status_says_which_evaluation_each_accuracy_is(public_nodes):
    _, store, _ = public_nodes
    out = CliRunner().invoke(cli, ["status", "--store", str(store.root), "--json"])
    assert out.exit_code == 0, out.output
    info = json.loads(out.output)
    final = _final(store)
    assert info["accuracy"] == final["accuracy"] and info["accuracy_on"] == "the server's test set"
    assert info["federated_accuracy"] == {"accuracy": final["federated-accuracy"], "loss": final["federated-loss"],
                                         "examples": final["federated-examples"], "nodes": NODES,
                                         "on": "the nodes' own test records"}
    text = CliRunner().invoke(cli, ["status", "--store", str(store.root)])
    assert "(server's test set)" in text.output and "on the nodes' test records" in text.output


def test_evaluating_on_the_nodes_leaves_the_served_bytes_pinned(public_nodes):
    name, store, _ = public_nodes
    pinned = recorded_bytes()["platforms"].get(bytes_platform(), {}).get(name)
    if pinned is None:
        pytest.skip(f"no served bytes of {name} recorded on {bytes_platform()}")
    assert served_shas(store.root) == pinned["trained"]


class FirstNodeOnly(FedAvgLoRA):
    """A user's override, as of Flower's strategies: evaluate on the first node only, and count the replies."""

    seen: ClassVar[list] = []

    def configure_evaluate(self, server_round, arrays, config, grid):  # noqa: ANN001, ANN201
        FirstNodeOnly.seen.append((server_round, sorted(arrays), config["server-round"]))
        return list(super().configure_evaluate(server_round, arrays, config, grid))[:1]

    def aggregate_evaluate(self, server_round, replies):  # noqa: ANN001, ANN201
        replies = list(replies)
        metrics = super().aggregate_evaluate(server_round, replies)
        metrics["replies"] = len(replies)
        return metrics


def test_an_override_of_configure_and_aggregate_evaluate_is_what_the_store_records(tmp_path):
    results: list = []
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        results.append(start_from_context(FirstNodeOnly.from_run_config(context.run_config), grid, context))

    root = tmp_path / "store"
    run_in_process({**DIGITS, "method": "fedavg", "num-rounds": 1, "store": str(root), "evaluate-on-nodes": True},
                   NODES, server_app=app)
    store = Store.open(root)
    assert FirstNodeOnly.seen == [(1, sorted(results[0].arrays), 1)]  # handed what is served, under round 1
    cfg = _stored_config(store)
    data = load_task_data(cfg)
    direct = _direct(store, [local_test_share(data, 0, NODES, cfg.seed)], data.num_classes)
    _assert_recorded(store, direct)
    assert _final(store)["federated-replies"] == 1
    assert results[0].evaluate_metrics_clientapp[1]["replies"] == 1


def test_configure_evaluate_outside_start_says_start_calls_it(tmp_path):
    strategy = FedAvgLoRA(store=str(tmp_path / "s"), task="digits-mlp")
    with pytest.raises(RuntimeError, match=r"called by start\(\) once the run is served"):
        strategy.configure_evaluate(1, ArrayRecord(), ConfigRecord(), None)  # type: ignore[arg-type]
    assert strategy.aggregate_evaluate(1, []) is None  # no node answered: no evaluation


# -- nodes with their own records ---------------------------------------------------------------------------
#: each node's share of the server's test records as its own test split: node 2 holds none and abstains
TEST_ROWS = {0: range(0, 120), 1: range(120, 200)}
OWN = {"method": "fedavg", "num-rounds": 2, "slices-per-client": 2, "local-epochs": 1, "task": "digits-mlp",
       "lr": 0.02}


def _node_tests(data: Path, server_test: Path, shares: dict[int, range] = TEST_ROWS) -> None:
    """Each node in ``shares`` given those rows of ``server_test`` as its own test split."""
    table = pq.read_table(server_test)
    for p, rows in shares.items():
        part = table.take(pa.array(list(rows)))
        ids = pa.array([f"test-{p}-{i}" for i in range(part.num_rows)])
        pq.write_table(part.set_column(part.schema.get_field_index("record_id"), "record_id", ids),
                       data / f"node-{p}" / "test.parquet")


def _flip_labels(path: Path) -> None:
    table = pq.read_table(path)
    flipped = pa.array([(int(v) + 1) % 10 for v in table.column("label").to_pylist()], type=pa.int64())
    pq.write_table(table.set_column(table.schema.get_field_index("label"), "label", flipped), path)


def _node_configs(data: Path) -> list[dict[str, object]]:
    return [{"data-dir": str(data / f"node-{p}"), "node-name": f"clinic-{p}"} for p in range(NODES)]


def _evaluate_again(store: Store, data: Path, num_classes: int) -> dict:
    """What is served sent once more, as the driver sends it, to nodes holding ``data``: their aggregate."""
    ledger = store.ledger()
    try:
        serving = ledger.serving()
        artifacts = served_entries(serving, ledger.artifacts())
        request = EvaluateServed(ledger.plan(), serving, artifacts,
                                 {a["sha256"]: store.get_arrays(a["sha256"]) for a in artifacts}, num_classes, 2)
    finally:
        ledger.close()
    config = {**default_run_config(), **store.manifest()["config"], "store": str(store.root)}
    grid = InProcessGrid(client_app, NODES, config, _node_configs(data))
    messages = [Message(request.to_record(), dst_node_id=node, message_type=EVALUATE_SERVED)
                for node in grid.get_node_ids()]
    return dict(weighted_evaluation(send_with_retries(grid, messages, 300.0)) or {})


def test_nodes_with_their_own_test_records_evaluate_it_and_one_without_abstains(tmp_path):
    split = tmp_path / "split"
    done = CliRunner().invoke(cli, ["data", "split", "--task", "digits-mlp", "--nodes", str(NODES), "--out",
                                    str(split), "--train-size", "300"])
    assert done.exit_code == 0, done.output
    _node_tests(split, split / "server" / "test.parquet")
    store_root = tmp_path / "store"
    run_in_process({**OWN, "store": str(store_root), "test-data": str(split / "server"), "evaluate-on-nodes": True},
                   NODES, node_configs=_node_configs(split))
    store = Store.open(store_root)
    cfg = _stored_config(store)
    tests = [read_local_records(split / f"node-{p}", cfg, f"clinic-{p}", 10, split="test").examples
             for p in TEST_ROWS]
    direct = _direct(store, tests, 10)
    _assert_recorded(store, direct)
    assert direct["examples"] == 200 and direct["nodes"] == 2  # node 2 holds no test split: it abstains

    again = _evaluate_again(store, split, 10)  # the same nodes, the same message: the same number
    assert again["accuracy"] == direct["accuracy"] and again["num-examples"] == 200
    changed = tmp_path / "changed"
    shutil.copytree(split, changed)
    _flip_labels(changed / "node-0" / "test.parquet")  # negative control: node 0's test records differ
    assert _evaluate_again(store, changed, 10)["accuracy"] != direct["accuracy"]


# -- a server without a test set ----------------------------------------------------------------------------
#: the example's 80 server test records, as nodes 0 and 1's own test splits
EXAMPLE_ROWS = {0: range(0, 50), 1: range(50, 80)}


def test_a_server_without_a_test_set_reports_the_nodes_accuracy(tmp_path, monkeypatch):
    """The example app's own task has no public data set: without ``test-data`` its server holds no test set,
    and with evaluate-on-nodes the nodes' own test records still measure what is served."""
    shutil.copytree(EXAMPLE / "data", tmp_path / "data")
    _node_tests(tmp_path / "data", tmp_path / "data" / "server" / "test.parquet", EXAMPLE_ROWS)
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from tabular_mlp.task import CLASSES

    store = tmp_path / "store"
    config = {"method": "fedavg", "task": "tabular_mlp.task:TASK", "num-rounds": 2, "local-epochs": 2, "lr": 0.02,
              "slices-per-client": 2, "store": str(store)}
    with pytest.raises(RuntimeError, match="evaluate-on-nodes=true"):  # no test set, and nothing else measures it
        run_in_process(config, NODES)
    assert not store.exists()
    results: list = []
    run_in_process({**config, "evaluate-on-nodes": True}, NODES, server_app=_users_app(results))
    trained = Store.open(store)
    final = _final(trained)
    assert "accuracy" not in final and 0.0 < final["federated-accuracy"] <= 1.0
    assert final["federated-examples"] == 80 and final["federated-nodes"] == 2
    assert all("accuracy" not in r for r in trained.metrics())  # the server measured nothing itself
    result = results[0]
    assert result.evaluate_metrics_clientapp[2]["accuracy"] == final["federated-accuracy"]
    assert not result.evaluate_metrics_serverapp
    cfg = _stored_config(trained)
    tests = [read_local_records(tmp_path / "data" / f"node-{p}", cfg, f"node-{p}", CLASSES, split="test").examples
             for p in EXAMPLE_ROWS]
    _assert_recorded(trained, _direct(trained, tests, CLASSES))
    out = CliRunner().invoke(cli, ["status", "--store", str(store), "--json"])
    assert out.exit_code == 0, out.output
    info = json.loads(out.output)
    assert info["accuracy"] is None and info["federated_accuracy"]["accuracy"] == final["federated-accuracy"]
