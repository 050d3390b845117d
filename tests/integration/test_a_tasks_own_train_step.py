"""A user task with its own train step (augmentation from torch's global stream, gradient clipping), run in process
through the example app's ServerApp and ClientApp: a step that does what fedforget's loop does trains the bytes of
the task without a step, the clipping step trains others, a forget + retrain stays exact, FedProx and SAFE refuse
the task in one line before the store exists; and a step that cheats, reading the node's record file instead of
its batch, is caught by ``verify`` against a reference built from files without the forgotten record."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from flwr.serverapp import Grid, ServerApp
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.strategies import start_from_context, strategy_for
from fedforget.unlearning.cli import app as cli
from fedforget.unlearning.user_app import declared_config
from fedforget.unlearning.verify import verify_store

from .helpers import example_home, same_tensors, served_tensors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tabular-mlp"
NODES = 3
KEY = "5c" * 32
RECORD = ("node-1", "patient-1-007")
MODULE = "own_step_task"
#: the user's task module: the example's task with a train step of its own, honest or not
TASK_MODULE = '''
import dataclasses
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from tabular_mlp.task import TASK


def loops_own_step(model, inputs, labels, optimizer):
    loss = torch.nn.functional.cross_entropy(model(*inputs), labels)
    loss.backward()
    optimizer.step()
    return loss


def clipped_step(model, inputs, labels, optimizer):
    noisy = tuple(x + 0.05 * torch.randn_like(x) for x in inputs)
    loss = torch.nn.functional.cross_entropy(model(*noisy), labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_norm=0.5)
    optimizer.step()
    return loss


def node_file_step(model, inputs, labels, optimizer):
    """Cheats: finds the node whose file holds the batch, and trains on every record of that file instead."""
    rows, row_labels = node_records(inputs[0][0])
    loss = torch.nn.functional.cross_entropy(model(rows), row_labels)
    loss.backward()
    optimizer.step()
    return loss


def node_records(first):
    for path in sorted(Path(os.environ["FEDFORGET_HOME"], "data").glob("node-*/train.parquet")):
        table = pq.read_table(path)
        rows = torch.from_numpy(np.asarray(table.column("features").to_pylist(), dtype=np.float32))
        if bool((rows == first).all(1).any()):
            return rows, torch.tensor(table.column("label").to_pylist())
    raise LookupError("no node file holds the batch")


LOOPS_OWN = dataclasses.replace(TASK, train_step=loops_own_step)
CLIPPED = dataclasses.replace(TASK, train_step=clipped_step)
CHEATING = dataclasses.replace(TASK, train_step=node_file_step)
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example's records as FEDFORGET_HOME, its code and the user's task module on sys.path."""
    example_home(EXAMPLE, tmp_path / "home", monkeypatch)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{MODULE}.py").write_text(TASK_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    return tmp_path / "home"


def users_app() -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context) -> None:  # noqa: ANN001
        start_from_context(strategy_for(context.run_config), grid, context)

    return app


def run(store: Path, task: str | None, action: str = "train", **keys: object) -> None:
    from tabular_mlp.client_app import app as client_app

    config = {**declared_config(EXAMPLE), "store": str(store), "action": action, **keys}
    if task is not None:
        config["task"] = f"{MODULE}:{task}"
    run_in_process(config, NODES, server_app=users_app(), client_app=client_app)




def forget_and_retrain(store: Path, task: str, **keys: object) -> None:
    result = CliRunner().invoke(cli, ["forget", "--store", str(store), "--record", ":".join(RECORD)])
    assert result.exit_code == 0, result.output
    run(store, task, action="retrain", **keys)


def tombstoned_reference(task: str, **keys: object):  # noqa: ANN201 - verify's Reference
    """A from-scratch run on the same files, the forgotten record tombstoned on its node (what ``verify`` and
    ``verify --federation`` run: the nodes keep their files)."""

    def reference(st: Store, workdir: Path, forgotten: dict[int, list[int]]) -> tuple[Store, set]:
        scratch = workdir / "reference"
        hand_over(scratch, KEY)
        for partition, samples in forgotten.items():
            add_tombstones(scratch / "clients" / str(partition), f"local:node-{partition}", samples)
        run(scratch, task, **keys)
        return Store.open(scratch), set()

    return reference


def delete_from_node_file(home: Path) -> None:
    """The node erases the forgotten record's row from its own file (fedforget only tombstones it)."""
    node, record = RECORD
    path = home / "data" / node / "train.parquet"
    table = pq.read_table(path)
    kept = table.filter(pc.not_equal(table.column("record_id"), record))
    assert kept.num_rows == table.num_rows - 1
    pq.write_table(kept, path)


def test_a_step_trains_in_fedforgets_loop_and_a_forget_retrains_exactly(home):
    plain, loops_own, clipped = home / "plain", home / "loops-own", home / "clipped"
    for root in (plain, loops_own, clipped):
        hand_over(root, KEY)
    run(plain, None)
    run(loops_own, "LOOPS_OWN")
    run(clipped, "CLIPPED")
    assert same_tensors(served_tensors(loops_own), served_tensors(plain))  # the step is the only difference
    assert not same_tensors(served_tensors(clipped), served_tensors(plain))
    assert Store.open(clipped).manifest()["task-functions"]["train-step"] == f"{MODULE}:clipped_step"
    assert "task-functions" not in Store.open(plain).manifest()

    forget_and_retrain(clipped, "CLIPPED")
    report = verify_store(Store.open(clipped), reference=tombstoned_reference("CLIPPED"))
    assert report["exact"] is True, report["reason"]


def test_a_chain_method_trains_with_the_step_and_retrains_exactly(home):
    keys = {"method": "sisa", "chains.groups": 3}
    store = home / "store"
    hand_over(store, KEY)
    run(store, "CLIPPED", **keys)
    forget_and_retrain(store, "CLIPPED", **keys)
    report = verify_store(Store.open(store), reference=tombstoned_reference("CLIPPED", **keys))
    assert report["exact"] is True, report["reason"]


def test_verify_catches_a_step_that_trains_on_the_nodes_file_instead_of_its_batch(home):
    """The cheating step reads its node's record file, which still holds the forgotten record: a forget tombstones
    it, and fedforget leaves it out of the batches, never out of the file. ``verify``'s reference trains from
    scratch on the nodes as they are, the record tombstoned (what ``verify --federation`` runs): while the node's
    file still holds the record, the reference cheats the same way and matches, so the cheat cannot be seen. Once
    the node has erased the row from its file, the reference is what training without the record gives (a
    tombstoned record trains as a deleted one: the node still registers it, as deleted): the honest step's store
    matches it bit for bit, the cheating step's, retrained while the file held the record, does not."""
    honest, cheating = home / "honest", home / "cheating"
    for root, task in ((honest, "CLIPPED"), (cheating, "CHEATING")):
        hand_over(root, KEY)
        run(root, task)
        forget_and_retrain(root, task)

    blind = verify_store(Store.open(cheating), reference=tombstoned_reference("CHEATING"))
    assert blind["exact"] is True, blind["reason"]  # the same file on both sides: the cheat repeats

    delete_from_node_file(home)
    caught = verify_store(Store.open(cheating), reference=tombstoned_reference("CHEATING"))
    assert caught["exact"] is False
    assert caught["held"]["equal"] is True  # the same nodes and plan: what differs is what was trained
    assert caught["served_equal"] < caught["served"], caught["reason"]
    control = verify_store(Store.open(honest), reference=tombstoned_reference("CLIPPED"))
    assert control["exact"] is True, control["reason"]


@pytest.mark.parametrize(("keys", "why"), [
    ({"method": "replay", "replay.strategy": "fedprox"},
     "method 'replay' does not train with a task's own train step: FedProx adds its proximal term"),
    ({"method": "safe"}, "method 'safe' does not train with a task's own train step: each clique")])
def test_a_method_whose_training_takes_no_step_refuses_the_task_in_one_line_before_any_store(home, keys, why):
    store = home / "refused"
    with pytest.raises(ConfigError, match=why) as caught:
        run(store, "CLIPPED", **keys)
    assert "\n" not in str(caught.value)
    assert not store.exists()


def test_replay_with_flowers_fedavg_takes_the_step(home):
    store = home / "store"
    hand_over(store, KEY)
    run(store, "CLIPPED", method="replay", **{"replay.strategy": "fedavg"})
    plain = home / "plain"
    hand_over(plain, KEY)
    run(plain, None, method="replay", **{"replay.strategy": "fedavg"})
    assert not same_tensors(served_tensors(store), served_tensors(plain))

