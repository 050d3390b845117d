"""A user's Flower app whose nodes hold CSV files with a column per feature (``record_id, label, f0 … f29``) and whose
task reads them as such (``Task(input_columns=["f0", …, "f29"])``) trains in process; a record forgotten by its name
is gone after a retrain through the app, bit for bit as the app trained from scratch without it (and a reference
that kept it differs: the negative control). The same records as Parquet files train the same bytes
(tests/unit/test_records_with_a_column_per_input.py: and read as the one-column form reads them); the run config's
``node-data`` is where the simulated nodes read their records instead of the task's ``simulation_data``; the forget
service's predict takes a record's 30 numbers in the listed order."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.core.record_ids import local_sample_id, store_record_key
from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.unlearning.cli import app as cli
from fedforget.unlearning.verify import verify_store

from .app_folder import app_pyproject
from .helpers import served_sha

NODES, ROWS_PER_NODE, TEST_ROWS, FEATURES, CLASSES = 3, 40, 60, 30, 3
COLUMNS = [f"f{i}" for i in range(FEATURES)]
RECORD = ("node-1", "patient-1-007")
KEY = "5c" * 32  # the stores' record key, so that runs of the same records can be compared byte for byte

CONFIG = """method = "fedavg"
task = "{package}.task:TASK"
store = "runs/columns"
test-data = "data/server"
node-data = ""
action = "train"
reference = false
num-rounds = 3
local-epochs = 2
lr = 0.02
slices-per-client = 2
seed = 1
"""

TASK = '''"""An MLP over 30 tabular features, 3 classes; a node's records hold one column per feature."""

import torch
from torch import nn

from fedforget.client import Task

COLUMNS = [f"f{{i}}" for i in range(30)]


def make_backbone() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(20240601)
        return nn.Sequential(nn.Linear(30, 48), nn.ReLU(), nn.Linear(48, 24), nn.ReLU())


TASK = Task(name="columns-mlp", backbone=make_backbone, feature_dim=24, lora_targets=["0", "2"], num_classes=3,
            input_columns=COLUMNS, simulation_data="{simulation_data}")
'''

SERVER_APP = '''from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedforget.strategies import start_from_context, strategy_for

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    start_from_context(strategy_for(context.run_config), grid, context)
'''


def draw_records() -> dict[str, tuple[list[str], np.ndarray, np.ndarray]]:
    """Each node's and the server's records: (record ids, labels, features), three Gaussian classes."""
    rng = np.random.default_rng(11)
    centres = rng.normal(0, 1.2, (CLASSES, FEATURES))
    out = {}
    for who, prefix, rows in [*((f"node-{p}", f"patient-{p}", ROWS_PER_NODE) for p in range(NODES)),
                              ("server", "test", TEST_ROWS)]:
        labels = rng.integers(0, CLASSES, rows)
        out[who] = ([f"{prefix}-{i:03d}" for i in range(rows)], labels, centres[labels] + rng.normal(0, 1, (rows,
                                                                                                          FEATURES)))
    return out


def write_csv(path: Path, ids: list[str], labels: np.ndarray, features: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["record_id", "label", *COLUMNS])
        for rid, label, row in zip(ids, labels.tolist(), features.tolist(), strict=True):
            writer.writerow([rid, label, *(repr(v) for v in row)])  # repr: the float64 itself, read back exactly


def write_parquet(path: Path, ids: list[str], labels: np.ndarray, features: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    inputs = {c: pa.array(features[:, j]) for j, c in enumerate(COLUMNS)}
    pq.write_table(pa.table({"record_id": ids, "label": pa.array(labels, pa.int64()), **inputs}), path)


def write_data(root: Path, folder: str, fmt: str) -> None:
    """``root/<folder>/node-<p>/train.<fmt>`` and ``root/<folder>/server/test.<fmt>``."""
    for who, (ids, labels, features) in draw_records().items():
        name = "test" if who == "server" else "train"
        if fmt == "csv":
            write_csv(root / folder / who / f"{name}.csv", ids, labels, features)
        else:
            write_parquet(root / folder / who / f"{name}.parquet", ids, labels, features)


class App:
    """A user's app folder (FEDFORGET_HOME) with its own package name, so two tests never share sys.modules."""

    def __init__(self, folder: Path, package: str) -> None:
        self.folder, self.package = folder, package

    def config(self, **changes: object) -> dict[str, object]:
        import tomllib

        from flwr.common.config import flatten_dict

        data = tomllib.loads((self.folder / "pyproject.toml").read_text(encoding="utf-8"))
        return {**flatten_dict(data["tool"]["flwr"]["app"]["config"]), **changes}

    def run(self, store: Path, action: str = "train", **changes: object) -> Store:
        import importlib

        server_app = importlib.import_module(f"{self.package}.server_app").app
        client_app = importlib.import_module(f"{self.package}.client_app").app
        run_in_process(self.config(store=str(store), action=action, **changes), NODES, server_app=server_app,
                       client_app=client_app)
        return Store.open(store)

    def trained(self, store: Path, **changes: object) -> Store:
        hand_over(store, KEY)
        return self.run(store, **changes)


@pytest.fixture
def make_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., App]:
    def make(fmt: str = "csv", simulation_data: str = "data/node-{partition}") -> App:
        package = f"columns_app_{tmp_path.name.replace('-', '_')}"
        folder = tmp_path / "app"
        (folder / package).mkdir(parents=True)
        (folder / "pyproject.toml").write_text(app_pyproject(package.replace("_", "-"), f"{package}.server_app:app",
                                                             f"{package}.client_app:app",
                                                             CONFIG.format(package=package)))
        (folder / package / "__init__.py").write_text("")
        (folder / package / "task.py").write_text(TASK.format(simulation_data=simulation_data))
        (folder / package / "server_app.py").write_text(SERVER_APP)
        (folder / package / "client_app.py").write_text("from fedforget.client import app\n\n__all__ = ['app']\n")
        write_data(folder, "data", fmt)
        monkeypatch.setenv("FEDFORGET_HOME", str(folder))
        monkeypatch.syspath_prepend(str(folder))
        return App(folder, package)

    return make


def reference_through(app: App, keep_forgotten: bool = False, **changes: object) -> Callable:
    """``verify``'s reference, made here: the app trained from scratch under the store's key (with the run-config
    ``changes`` its training had), each node holding what the ledger forgot from it as deleted
    (``keep_forgotten``: the negative control, nothing deleted)."""
    def reference(store: Store, workdir: Path, forgotten: dict[int, list[int]]) -> tuple[Store, set]:
        scratch = workdir / "reference"
        hand_over(scratch, store_record_key(store.manifest()))
        for partition, samples in forgotten.items():
            if not keep_forgotten:
                add_tombstones(scratch / "clients" / str(partition), f"local:node-{partition}", samples)
        return app.run(scratch, **changes), set()

    return reference


def test_a_csv_column_per_feature_trains_and_a_forget_and_retrain_through_the_app_is_exact(make_app, tmp_path):
    app = make_app("csv")
    store = app.trained(tmp_path / "store")
    manifest = store.manifest()
    assert manifest["nodes"] == {str(p): {"name": f"node-{p}", "records": "local"} for p in range(NODES)}
    assert manifest["app"]["dir"] == str(app.folder) and manifest["task"] == f"{app.package}.task:TASK"
    assert store.metrics()[-1]["accuracy"] > 0.8  # the server's test.csv, read a column per feature
    trained = served_sha(store)

    result = CliRunner().invoke(cli, ["forget", "--store", str(store.root), "--record", ":".join(RECORD)])
    assert result.exit_code == 0, result.output
    retrained = served_sha(app.run(store.root, action="retrain"))
    assert retrained != trained

    report = verify_store(Store.open(store.root), reference=reference_through(app))
    assert report["exact"] is True, report["reason"]
    assert report["served"] == report["served_equal"] == 1 and report["outputs"]["equal"] is True
    control = verify_store(Store.open(store.root), reference=reference_through(app, keep_forgotten=True))
    assert control["exact"] is False and control["served_equal"] < control["served"], control

    reference = tmp_path / "by-hand"  # the same comparison, by hand: node-1 holds the record as deleted
    hand_over(reference, KEY)
    add_tombstones(reference / "clients" / "1", f"local:{RECORD[0]}", [local_sample_id(*RECORD, KEY)])
    assert served_sha(app.run(reference)) == retrained
    served_predictions(store.root)


def served_predictions(store: Path) -> None:
    """predict takes a record's 30 numbers, in the task's column order, and nothing else."""
    from fastapi.testclient import TestClient

    from fedforget.service.app import create_app
    from fedforget.service.tokens import create_token

    _, labels, features = draw_records()["server"]
    token = create_token(store, "predict", ["predict"])[0]
    with TestClient(create_app(store)) as client:
        auth = {"Authorization": f"Bearer {token}"}
        reply = client.post("/v1/predict", json={"inputs": features[:10].tolist()}, headers=auth)
        assert reply.status_code == 200, reply.text
        assert sum(p == y for p, y in zip(reply.json()["predictions"], labels[:10].tolist(), strict=True)) >= 8
        short = client.post("/v1/predict", json={"inputs": [features[0, :29].tolist()]}, headers=auth)
        assert short.status_code in (400, 422) and "takes 30" in short.text, short.text


def test_parquet_files_train_the_bytes_the_csv_files_train(make_app, tmp_path):
    app = make_app("parquet")
    from_parquet = served_sha(app.trained(tmp_path / "parquet"))
    write_data(app.folder, "csv-data", "csv")
    from_csv = served_sha(app.trained(tmp_path / "csv", **{"node-data": "csv-data/node-{partition}",
                                                           "test-data": "csv-data/server"}))
    assert from_parquet == from_csv


def test_the_run_configs_node_data_is_read_instead_of_the_tasks_simulation_data(make_app, tmp_path):
    app = make_app("csv", simulation_data="nowhere/node-{partition}")
    with pytest.raises(ConfigError, match=r"node node-0 .partition 0. refused the run: .*nowhere/node-0 does not "
                       "exist") as info:
        app.trained(tmp_path / "refused")
    assert "\n" not in str(info.value) and not (tmp_path / "refused" / "manifest.json").exists()
    store = app.trained(tmp_path / "store", **{"node-data": "data/node-{partition}"})
    assert store.manifest()["config"]["node-data"] == "data/node-{partition}"
    assert store.manifest()["nodes"]["2"] == {"name": "node-2", "records": "local"}
    result = CliRunner().invoke(cli, ["forget", "--store", str(store.root), "--record", ":".join(RECORD)])
    assert result.exit_code == 0, result.output
    with pytest.raises(ConfigError, match="nowhere/node-0 does not exist"):  # without the key: the task's, refused
        app.run(store.root, action="retrain")
    retrained = app.run(store.root, action="retrain", **{"node-data": "data/node-{partition}"})
    report = verify_store(retrained, reference=reference_through(app, **{"node-data": "data/node-{partition}"}))
    assert report["exact"] is True, report["reason"]


def test_a_bad_csv_is_refused_in_one_line_naming_file_column_and_row_and_nothing_is_trained(make_app, tmp_path):
    app = make_app("csv")
    path = app.folder / "data" / "node-2" / "train.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    cells = lines[5].split(",")
    cells[2 + 17] = "n/a"  # f17 of the fifth record
    lines[5] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        app.trained(tmp_path / "store")
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    assert "row 5: column 'f17' holds 'n/a', which is not a number" in message, message
    assert not (tmp_path / "store" / "manifest.json").exists()
