"""A user task with its own loss (label-smoothed cross-entropy) and its own metric (macro-F1), run in process
through the example app's ServerApp and ClientApp: the loss is what the nodes train with (other tensors than the
same task without it, which trains exactly the example's), a forget + retrain stays exact, the metric is reported
beside accuracy wherever what is served is evaluated (the final metrics row, Flower's Result, the nodes'
evaluation, ``status``, ``evaluate``), and a method whose training cannot take a loss refuses the task in one line
before the store exists."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flwr.serverapp import Grid, ServerApp
from typer.testing import CliRunner

from fedforget.core.config import ConfigError, parse_run_config, stored_run_config
from fedforget.federation.record_key import hand_over
from fedforget.federation.serve import serving_probabilities
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.strategies import start_from_context, strategy_for
from fedforget.tasks import user_task
from fedforget.tasks.server_data import load_server_test
from fedforget.unlearning.cli import app as cli
from fedforget.unlearning.user_app import declared_config
from fedforget.unlearning.verify import verify_store

from .helpers import example_home, same_tensors, served_tensors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tabular-mlp"
NODES = 3
KEY = "7a" * 32
RECORD = ("node-1", "patient-1-007")
MODULE = "own_functions_task"
#: the rows of the server's test set each node holds as its own test records
NODE_TESTS = {0: range(0, 40), 1: range(40, 70)}
#: the user's task module: the example's task with a loss and a metric of its own
TASK_MODULE = '''
import dataclasses

import numpy as np
import torch

from tabular_mlp.task import TASK


def smoothed_cross_entropy(logits, labels):
    return torch.nn.functional.cross_entropy(logits, labels, label_smoothing=0.2)


def macro_f1(probabilities, labels):
    predicted = probabilities.argmax(1)
    scores = []
    for k in range(probabilities.shape[1]):
        tp = int(((predicted == k) & (labels == k)).sum())
        wrong = int(((predicted == k) != (labels == k)).sum())
        scores.append(2 * tp / max(2 * tp + wrong, 1))
    return {"macro-f1": float(np.mean(scores))}


WITH_LOSS = dataclasses.replace(TASK, loss=smoothed_cross_entropy, metric=macro_f1)
METRIC_ONLY = dataclasses.replace(TASK, metric=macro_f1)
'''


def macro_f1(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """The task module's own metric, computed here (the module is on sys.path while a test runs)."""
    import importlib

    return importlib.import_module(MODULE).macro_f1(probabilities, labels)["macro-f1"]


def app_config() -> dict[str, object]:
    return declared_config(EXAMPLE)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example's records as FEDFORGET_HOME, its code and the user's task module on sys.path."""
    example_home(EXAMPLE, tmp_path, monkeypatch)
    table = pq.read_table(tmp_path / "data" / "server" / "test.parquet")
    for p, rows in NODE_TESTS.items():  # nodes 0 and 1 hold test records of their own; node 2 none (it abstains)
        part = table.take(pa.array(list(rows)))
        ids = pa.array([f"test-{p}-{i}" for i in range(part.num_rows)])
        pq.write_table(part.set_column(part.schema.get_field_index("record_id"), "record_id", ids),
                       tmp_path / "data" / f"node-{p}" / "test.parquet")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{MODULE}.py").write_text(TASK_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    return tmp_path


def users_app(results: list) -> ServerApp:
    """The example's ServerApp, its Result kept."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context) -> None:  # noqa: ANN001
        results.append(start_from_context(strategy_for(context.run_config), grid, context))

    return app


def run(store: Path, task: str, action: str = "train", **keys: object) -> list:
    from tabular_mlp.client_app import app as client_app

    results: list = []
    run_in_process({**app_config(), "task": f"{MODULE}:{task}", "store": str(store), "action": action,
                    "evaluate-on-nodes": True, **keys}, NODES, server_app=users_app(results), client_app=client_app)
    return results




def forget_retrain_and_verify(store: Path, task: str, **keys: object) -> None:
    """Forget one record, retrain, and check the store against a from-scratch run of the same task."""
    result = CliRunner().invoke(cli, ["forget", "--store", str(store), "--record", ":".join(RECORD)])
    assert result.exit_code == 0, result.output
    run(store, task, action="retrain", **keys)

    def reference(st: Store, workdir: Path, forgotten: dict[int, list[int]]) -> tuple[Store, set]:
        scratch = workdir / "reference"
        hand_over(scratch, KEY)
        for partition, samples in forgotten.items():
            add_tombstones(scratch / "clients" / str(partition), f"local:node-{partition}", samples)
        run(scratch, task, **keys)
        return Store.open(scratch), set()

    report = verify_store(Store.open(store), reference=reference)
    assert report["exact"] is True, report["reason"]


def server_macro_f1(root: Path) -> float:
    """The served model's macro-F1 on the server's test set, computed here from the store's bytes."""
    store = Store.open(root)
    cfg = parse_run_config(stored_run_config(store.manifest()["config"]))
    test = load_server_test(cfg)
    ledger = store.ledger()
    try:
        probs = serving_probabilities(cfg, test.num_classes, store, ledger.plan(), ledger.serving(),
                                      ledger.artifacts(), test.examples.inputs)
    finally:
        ledger.close()
    return macro_f1(probs, test.examples.labels.numpy())


def nodes_macro_f1(root: Path) -> float:
    """The nodes' macro-F1 of what is served, each on its own test records, weighted by their records."""
    store = Store.open(root)
    cfg = parse_run_config(stored_run_config(store.manifest()["config"]))
    probs = served_probabilities_on(store, load_server_test(cfg).examples.inputs)
    labels = load_server_test(cfg).examples.labels.numpy()
    each = [(macro_f1(probs[list(rows)], labels[list(rows)]), len(rows)) for rows in NODE_TESTS.values()]
    return sum(v * n for v, n in each) / sum(n for _, n in each)


def served_probabilities_on(store: Store, inputs: tuple) -> np.ndarray:
    cfg = parse_run_config(stored_run_config(store.manifest()["config"]))
    ledger = store.ledger()
    try:
        return serving_probabilities(cfg, 4, store, ledger.plan(), ledger.serving(), ledger.artifacts(), inputs)
    finally:
        ledger.close()


def test_fedavg_trains_with_the_tasks_own_loss_reports_its_metric_and_retrains_exactly(home):
    own, plain, metric_only = home / "own", home / "plain", home / "metric-only"
    for root in (own, plain, metric_only):
        hand_over(root, KEY)
    result = run(own, "WITH_LOSS")[0]
    run(metric_only, "METRIC_ONLY")
    from tabular_mlp.client_app import app as client_app
    from tabular_mlp.server_app import app as server_app

    run_in_process({**app_config(), "store": str(plain), "evaluate-on-nodes": True}, NODES, server_app=server_app,
                   client_app=client_app)
    assert not same_tensors(served_tensors(own), served_tensors(metric_only))  # the loss is what trained it
    assert same_tensors(served_tensors(metric_only), served_tensors(plain))  # a metric changes no training

    manifest = Store.open(own).manifest()
    assert manifest["task-functions"] == {"loss": f"{MODULE}:smoothed_cross_entropy", "metric": f"{MODULE}:macro_f1",
                                          "metric-names": ["macro-f1"]}
    assert "task-functions" not in Store.open(plain).manifest()
    final = next(r for r in reversed(Store.open(own).metrics()) if r.get("final"))
    assert final["macro-f1"] == pytest.approx(server_macro_f1(own), abs=1e-12)
    assert final["federated-macro-f1"] == pytest.approx(nodes_macro_f1(own), abs=1e-12)  # weighted by records
    assert final["federated-nodes"] == len(NODE_TESTS)
    last = max(result.evaluate_metrics_serverapp)
    assert result.evaluate_metrics_serverapp[last]["macro-f1"] == final["macro-f1"]
    assert result.evaluate_metrics_clientapp[last]["macro-f1"] == final["federated-macro-f1"]
    assert "accuracy" in result.evaluate_metrics_serverapp[last]  # accuracy and loss stay beside it

    status = CliRunner().invoke(cli, ["status", "--store", str(own), "--json"])
    assert status.exit_code == 0, status.output
    info = json.loads(status.output)
    assert info["task_metrics"] == {"macro-f1": final["macro-f1"]}
    assert info["federated_accuracy"]["metrics"] == {"macro-f1": final["federated-macro-f1"]}
    text = CliRunner().invoke(cli, ["status", "--store", str(own)])
    assert f"macro-f1 {final['macro-f1']:.4f}" in text.output
    evaluated = CliRunner().invoke(cli, ["evaluate", "--store", str(own), "--json"])
    assert evaluated.exit_code == 0 and json.loads(evaluated.output)["macro-f1"] == final["macro-f1"]

    forget_retrain_and_verify(own, "WITH_LOSS")


def test_a_chain_method_trains_with_the_tasks_own_loss_and_retrains_exactly(home):
    keys = {"method": "sisa", "chains.groups": 3}
    own, metric_only = home / "own", home / "metric-only"
    for root in (own, metric_only):
        hand_over(root, KEY)
    run(own, "WITH_LOSS", **keys)
    run(metric_only, "METRIC_ONLY", **keys)
    assert not same_tensors(served_tensors(own), served_tensors(metric_only))
    final = next(r for r in reversed(Store.open(own).metrics()) if r.get("final"))
    assert final["macro-f1"] == pytest.approx(server_macro_f1(own), abs=1e-12) and "federated-macro-f1" in final
    forget_retrain_and_verify(own, "WITH_LOSS", **keys)


@pytest.mark.parametrize(("method", "why"), [
    ("safe", "method 'safe' does not train with a task's own loss: each clique trains its own adapter"),
    ("protosisa", "method 'protosisa' does not train with a task's own loss: each clique"),
    # the split methods refuse any task of the user's first (they cut a model they know); their declaration
    # refuses a loss too (tests/unit/test_task_functions.py)
    ("hosfl", "method 'hosfl' needs a split model")])
def test_a_method_whose_training_takes_no_loss_refuses_the_task_in_one_line_before_any_store(home, method, why):
    store = home / "refused"
    with pytest.raises(ConfigError, match=why) as caught:
        run(store, "WITH_LOSS", method=method)
    assert "\n" not in str(caught.value)
    assert not store.exists()


def test_a_retrain_whose_task_lost_its_loss_is_refused_and_one_with_another_metric_records_it(home, monkeypatch):
    store = home / "own"
    hand_over(store, KEY)
    run(store, "WITH_LOSS")
    rows = len(Store.open(store).metrics())
    # the app's code changed since: the same task reference, now without its loss
    changed = TASK_MODULE.replace("loss=smoothed_cross_entropy, ", "")
    (home / "code" / f"{MODULE}.py").write_text(changed, encoding="utf-8")
    monkeypatch.delitem(sys.modules, MODULE)
    monkeypatch.setattr(user_task, "_LOADED", {})
    with pytest.raises(ConfigError, match="trained with Task\\(loss=own_functions_task:smoothed_cross_entropy\\) "
                                          "and the app's task now has loss=None"):
        run(store, "WITH_LOSS", action="retrain")
    assert len(Store.open(store).metrics()) == rows
    # a metric that reports under another name trains nothing: the retrain runs and records its names
    (home / "code" / f"{MODULE}.py").write_text(TASK_MODULE.replace('{"macro-f1"', '{"f1"'), encoding="utf-8")
    del sys.modules[MODULE]
    monkeypatch.setattr(user_task, "_LOADED", {})
    result = run(store, "WITH_LOSS", action="retrain")[0]
    assert Store.open(store).manifest()["task-functions"]["metric-names"] == ["f1"]
    assert "f1" in result.evaluate_metrics_serverapp[max(result.evaluate_metrics_serverapp)]


@pytest.mark.parametrize("keys", [{"method": "safe", "safe.fine": 2}, {"method": "fedshard"}, {"method": "replay"},
                                  {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3}])
def test_every_method_that_runs_a_users_task_reports_its_metric(home, keys):
    """A metric reads only what is served: SAFE (which takes no loss) reports it as the others do."""
    store = home / "store"
    hand_over(store, KEY)
    result = run(store, "METRIC_ONLY", **keys)[0]
    final = next(r for r in reversed(Store.open(store).metrics()) if r.get("final"))
    assert final["macro-f1"] == pytest.approx(server_macro_f1(store), abs=1e-12) and "federated-macro-f1" in final
    assert result.evaluate_metrics_serverapp[max(result.evaluate_metrics_serverapp)]["macro-f1"] == final["macro-f1"]
