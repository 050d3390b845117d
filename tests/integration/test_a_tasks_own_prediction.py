"""A user task with its own prediction (the top two classes from the logits) and a metric of those outputs, run in
process through the whole-mlp example's ServerApp and ClientApp: the prediction trains nothing (the served bytes
are those of the example's task without it), the metric reads its outputs wherever what is served is evaluated
(the server's test set, the nodes' own test records, ``fedforget evaluate``), the manifest names it, and the forget
service's ``predict`` answers its outputs beside the probabilities, while a task without one answers as before."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.unlearning.cli import app as cli
from fedforget.unlearning.user_app import declared_config

from .helpers import example_home, served_tensors
from .test_example_whole_mlp_app import served_probabilities

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "whole-mlp"
NODES = 3
KEY = "5c" * 32
MODULE = "own_prediction_task"
#: the user's task module: the example's task, answering its two likeliest classes and scored on them
TASK_MODULE = '''
import dataclasses

from whole_mlp.task import TASK


def top2(logits):
    return logits.topk(2, dim=1).indices


def top2_recall(outputs, labels):
    return {"top2-recall": float((outputs == labels[:, None]).any(1).mean())}


TOP2 = dataclasses.replace(TASK, prediction=top2, metric=top2_recall)
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    example_home(EXAMPLE, tmp_path, monkeypatch)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{MODULE}.py").write_text(TASK_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    return tmp_path


def train(store: Path, task: str) -> Store:
    from whole_mlp.client_app import app as client_app
    from whole_mlp.server_app import app as server_app

    hand_over(store, KEY)
    run_in_process({**declared_config(EXAMPLE), "task": task, "store": str(store)}, NODES, server_app=server_app,
                   client_app=client_app)
    return Store.open(store)



def server_records() -> tuple[list[list[float]], np.ndarray]:
    from whole_mlp.task import COLUMNS

    with (EXAMPLE / "data" / "server" / "test.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [[float(r[c]) for c in COLUMNS] for r in rows], np.array([int(r["label"]) for r in rows])


def top2_of(probabilities: np.ndarray) -> np.ndarray:
    """The task's prediction computed here: the two likeliest classes of the served probabilities."""
    return torch.from_numpy(np.log(probabilities)).topk(2, dim=1).indices.numpy()


def predict(store: Store, inputs: list[list[float]]) -> dict:
    from fastapi.testclient import TestClient

    from fedforget.service.app import create_app
    from fedforget.service.tokens import create_token

    token = create_token(store.root, "predict", ["predict"])[0]
    with TestClient(create_app(store.root)) as client:
        reply = client.post("/v1/predict", json={"inputs": inputs}, headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_tasks_prediction_is_what_its_metric_reads_and_what_the_service_answers_and_trains_nothing(home):
    plain, own = train(home / "plain", "whole_mlp.task:TASK"), train(home / "own", f"{MODULE}:TOP2")
    served = served_tensors(own)
    assert served.keys() == served_tensors(plain).keys()
    assert all(np.array_equal(served[k], served_tensors(plain)[k]) for k in served)  # it trains nothing
    assert own.manifest()["task-functions"] == {
        "loss": "whole_mlp.task:smoothed_cross_entropy", "metric": f"{MODULE}:top2_recall",
        "metric-names": ["top2-recall"], "prediction": f"{MODULE}:top2"}

    inputs, labels = server_records()
    probabilities = served_probabilities(own)
    recall = float((top2_of(probabilities) == labels[:, None]).any(1).mean())
    final = next(r for r in reversed(own.metrics()) if r.get("final"))
    assert final["top2-recall"] == pytest.approx(recall, abs=1e-12) and "macro-f1" not in final
    assert final["accuracy"] == next(r for r in reversed(plain.metrics()) if r.get("final"))["accuracy"]
    assert 0.8 < final["federated-top2-recall"] <= 1.0 and final["federated-nodes"] == NODES  # the nodes' alike
    evaluated = CliRunner().invoke(cli, ["evaluate", "--store", str(own.root), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.output)["top2-recall"] == final["top2-recall"]

    answer = predict(own, inputs[:8])
    assert answer["outputs"] == top2_of(np.array(answer["probabilities"])).tolist()
    assert answer["outputs"] == top2_of(probabilities[:8]).tolist()
    assert [row[0] for row in answer["outputs"]] == answer["predictions"]  # the likeliest first: the argmax
    before = predict(plain, inputs[:8])  # a task without a prediction answers as it always did
    assert sorted(before) == ["plan_id", "predictions", "probabilities", "task"]
    assert before["probabilities"] == answer["probabilities"]
