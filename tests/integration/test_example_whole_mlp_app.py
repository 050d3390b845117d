"""The example app examples/whole-mlp (its own MLP trained whole, its own loss and metric, CSV records with a column
per feature, method ``replay``) trains in process through its own ServerApp: what is served is the user's MLP with
trained weights under its own parameter names, its macro-F1 is reported on the server's and the nodes' test records,
it learns its task well above chance, and a record forgotten by its name is gone after a retrain through the app,
bit for bit as training from scratch without it (a reference that kept the record is not). The same with
``method=fedavg``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.training.supervised import predict_logits
from fedforget.unlearning.cli import app as cli
from fedforget.unlearning.user_app import declared_config
from fedforget.unlearning.verify import served_outputs, verify_store

from .helpers import example_home, example_script, served_sha

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "whole-mlp"
NODES = 3
RECORD = "node-2:member-2-010"
KEY = "3e" * 32  # the store's record key (a store's own is random)


def app_config(**changes: object) -> dict[str, object]:
    """The example's [tool.flwr.app.config] as Flower reads it, with ``changes``."""
    return {**declared_config(EXAMPLE), **changes}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return example_home(EXAMPLE, tmp_path, monkeypatch)


def run_app(store: Path, method: str, action: str = "train") -> Store:
    from whole_mlp.client_app import app as client_app
    from whole_mlp.server_app import app as server_app

    run_in_process(app_config(store=str(store), action=action, method=method), NODES, server_app=server_app,
                   client_app=client_app)
    return Store.open(store)


def the_users_mlp_on_the_server_records(state: dict[str, torch.Tensor]) -> np.ndarray:
    """The class probabilities of the app's own module, built by its own code with ``state`` loaded, on the
    server's test records read from their CSV columns."""
    from whole_mlp.task import COLUMNS, make_model

    model = make_model()
    model.load_state_dict(state)
    with (EXAMPLE / "data" / "server" / "test.csv").open(encoding="utf-8") as fh:
        rows = [[float(r[c]) for c in COLUMNS] for r in csv.DictReader(fh)]
    logits = predict_logits(model, (torch.tensor(rows, dtype=torch.float32),))
    return torch.softmax(logits.double(), dim=1).numpy()


def served_probabilities(store: Store) -> np.ndarray:
    ledger = store.ledger()
    try:
        probabilities, why = served_outputs(store, ledger.serving(), ledger.plan(), ledger.artifacts())
    finally:
        ledger.close()
    assert probabilities is not None, why
    return probabilities


def reference_through_the_app(method: str, keep_forgotten: bool = False):
    """``verify``'s reference: the app trained from scratch under the store's key, each node holding what the
    ledger forgot from it as deleted (``keep_forgotten``: the negative control, trained on the record)."""
    def reference(store: Store, workdir: Path, forgotten: dict[int, list[int]]) -> tuple[Store, set]:
        scratch = workdir / ("kept" if keep_forgotten else "reference")
        hand_over(scratch, KEY)
        for partition, samples in forgotten.items():
            if not keep_forgotten:
                add_tombstones(scratch / "clients" / str(partition), f"local:node-{partition}", samples)
        return run_app(scratch, method), set()

    return reference


@pytest.mark.parametrize("method", ["replay", "fedavg"])
def test_the_example_trains_its_whole_mlp_reports_its_metric_and_forgets_exactly(home, method):
    from whole_mlp.task import make_model

    root = home / "runs" / "whole-mlp"
    hand_over(root, KEY)
    store = run_app(root, method)
    manifest = store.manifest()
    assert manifest["task"] == "whole_mlp.task:TASK"
    assert manifest["app"] == {"dir": str(EXAMPLE), "name": "example/whole-mlp", "version": "1.0.0"}

    init = make_model().state_dict()
    served = {k: torch.from_numpy(np.array(v)) for k, v in store.get_arrays(served_sha(store)).items()}
    assert sorted(served) == sorted(init) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert all(served[k].shape == init[k].shape and not torch.equal(served[k], init[k]) for k in init)
    assert np.array_equal(served_probabilities(store), the_users_mlp_on_the_server_records(served))
    assert manifest["task-functions"] == {"loss": "whole_mlp.task:smoothed_cross_entropy",
                                          "metric": "whole_mlp.task:macro_f1", "metric-names": ["macro-f1"]}

    final = next(row for row in reversed(store.metrics()) if row.get("final"))
    assert final["accuracy"] > 0.8  # four classes: chance is 0.25
    assert final["macro-f1"] > 0.8 and final["federated-macro-f1"] > 0.8  # the app's own metric, server and nodes
    trained = served_sha(store)

    result = CliRunner().invoke(cli, ["forget", "--store", str(root), "--record", RECORD])
    assert result.exit_code == 0, result.output
    assert served_sha(run_app(root, method, action="retrain")) != trained

    report = verify_store(Store.open(root), reference=reference_through_the_app(method))
    assert report["exact"] is True, report["reason"]
    control = verify_store(Store.open(root), reference=reference_through_the_app(method, keep_forgotten=True))
    assert control["exact"] is False  # a reference trained on the record is caught


def test_the_example_data_script_writes_the_committed_records(tmp_path):
    example_script(EXAMPLE, "make_data").main(tmp_path)
    committed = sorted(p.relative_to(EXAMPLE / "data") for p in (EXAMPLE / "data").rglob("*.csv"))
    assert committed == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.csv"))
    for path in committed:
        assert (tmp_path / path).read_bytes() == (EXAMPLE / "data" / path).read_bytes(), path
