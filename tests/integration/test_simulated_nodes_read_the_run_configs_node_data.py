"""Simulated nodes of a shipped task read their own records from the run config's ``node-data`` (here the
directories ``fedforget data split`` writes): they train exactly what nodes naming the same directories as their
``data-dir`` train, byte for byte; without the key they train on their share of the public set."""

from __future__ import annotations

from typer.testing import CliRunner

from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.unlearning.cli import app

from .helpers import served_sha

NODES = 3
CONFIG = {"task": "digits-mlp", "method": "fedavg", "num-rounds": 2, "local-epochs": 1, "lr": 0.02}
KEY = "3e" * 32


def test_node_data_trains_what_the_same_directories_as_data_dir_train(tmp_path):
    split = tmp_path / "split"
    result = CliRunner().invoke(app, ["data", "split", "--task", "digits-mlp", "--nodes", str(NODES), "--out",
                                      str(split), "--train-size", "300"])
    assert result.exit_code == 0, result.output
    base = {**CONFIG, "test-data": str(split / "server")}
    hand_over(tmp_path / "by-key", KEY)
    run_in_process({**base, "store": str(tmp_path / "by-key"), "node-data": str(split / "node-{partition}")}, NODES)
    hand_over(tmp_path / "by-node", KEY)
    run_in_process({**base, "store": str(tmp_path / "by-node")}, NODES,
                   node_configs=[{"data-dir": str(split / f"node-{p}")} for p in range(NODES)])
    by_key, by_node = Store.open(tmp_path / "by-key"), Store.open(tmp_path / "by-node")
    assert by_key.manifest()["nodes"] == {str(p): {"name": f"node-{p}", "records": "local"} for p in range(NODES)}
    assert by_key.manifest()["partitions"] == by_node.manifest()["partitions"]
    assert served_sha(by_key) == served_sha(by_node)

    run_in_process({**base, "store": str(tmp_path / "public")}, NODES)
    assert Store.open(tmp_path / "public").manifest()["nodes"]["0"]["records"] == "public"
