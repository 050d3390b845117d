"""A store whose nodes hold their own records: in-process verify refuses (it cannot read them) and points at
`--federation`; a reference run (run-config reference=true) checks the nodes' records as a retrain does and
leaves what they registered for training untouched, so the store's next retrain still checks against it."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.core.record_ids import local_sample_id, store_record_key
from fedforget.federation.node_records import REGISTERED
from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.unlearning.cli import app

NODES = 2
CONFIG = {"task": "digits-mlp", "method": "fedsgt", "num-rounds": 1, "slices-per-client": 2, "chains.groups": 2,
          "chains.budget": 2, "local-epochs": 1}


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("nodes")
    data = root / "data"
    result = CliRunner().invoke(app, ["data", "split", "--task", "digits-mlp", "--nodes", str(NODES), "--out",
                                      str(data), "--train-size", "200"])
    assert result.exit_code == 0, result.output
    run(root / "s", data, root / "state")
    return root / "s", data, root / "state"


def reference(store: Path, ref: Path, data: Path, state: Path) -> None:
    """A reference run of ``store`` (as ``verify --federation`` starts one: handed the store's record key)."""
    hand_over(ref, store_record_key(Store.open(store).manifest()))
    run(ref, data, state, reference=True)


def run(store: Path, data: Path, state: Path, **extra: object) -> None:
    run_in_process({**CONFIG, "store": str(store), "test-data": str(data / "server"), **extra}, NODES,
                   node_configs=[{"data-dir": str(data / f"node-{p}"), "node-name": f"node-{p}",
                                  "state-dir": str(state / f"node{p}")} for p in range(NODES)])


def test_in_process_verify_refuses_a_store_whose_nodes_hold_their_own_records(deployed):
    store, _, _ = deployed
    before = tree_bytes(store)
    for command in (["verify", "--store", str(store)], ["receipt", "1", "--store", str(store)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        if command[0] == "verify":
            assert "node-0, node-1 hold their own records" in result.output
            assert "--federation" in result.output
    assert tree_bytes(store) == before


def test_a_reference_run_keeps_what_the_nodes_registered_for_training(deployed, tmp_path):
    store, data, state = deployed
    registered = [(state / f"node{p}" / REGISTERED) for p in range(NODES)]
    inodes = [p.stat().st_ino for p in registered]
    contents = [p.read_bytes() for p in registered]
    reference(store, tmp_path / "ref", data, state)
    assert [p.stat().st_ino for p in registered] == inodes  # not rewritten
    assert [p.read_bytes() for p in registered] == contents
    other = tmp_path / "train"  # negative control: a plain training run re-registers (a new file)
    shutil.copytree(state, tmp_path / "state2")
    copied = tmp_path / "state2" / "node0" / REGISTERED
    inode = copied.stat().st_ino
    run(other, data, tmp_path / "state2")
    assert copied.stat().st_ino != inode


def test_a_reference_run_refuses_edited_records_and_keeps_the_registration(deployed, tmp_path):
    store, data, state = deployed
    edited = tmp_path / "data"
    shutil.copytree(data, edited)
    path = edited / "node-1" / "train.parquet"
    table = pq.read_table(path).to_pandas()
    table.loc[0, "label"] = (int(table.loc[0, "label"]) + 1) % 10  # a record edited behind the store's back
    table.to_parquet(path, index=False)
    kept = (state / "node1" / REGISTERED).read_bytes()
    with pytest.raises(ConfigError, match="node-1.s records changed since training: 1 edited"):
        reference(store, tmp_path / "ref", edited, state)
    assert (state / "node1" / REGISTERED).read_bytes() == kept


def test_a_node_refuses_a_reference_that_keys_its_records_with_another_stores_key(deployed, tmp_path):
    """The nodes registered their records under the store's key: a run handed another key (or none) would
    number them otherwise, and each node refuses it before anything is trained or written."""
    _, data, state = deployed
    kept = [(state / f"node{p}" / REGISTERED).read_bytes() for p in range(NODES)]
    for key in ("0f" * 32, None):
        hand_over(tmp_path / str(key), key)
        with pytest.raises(ConfigError, match="registered its records for another store"):
            run(tmp_path / str(key), data, state, reference=True)
        assert not (tmp_path / str(key) / "manifest.json").exists()
    assert [(state / f"node{p}" / REGISTERED).read_bytes() for p in range(NODES)] == kept


def test_verify_and_receipt_through_the_nodes_once_the_request_reached_them(deployed, tmp_path, monkeypatch):
    """`--federation` end to end with the Flower run played in process by the same nodes (their state dirs):
    refused while the forget has not reached node-1, exact after the retrain delivered it, and the receipt
    names the federation its reference was trained through; NOT exact once a node dropped a record the store never
forgot (negative control: the reference is trained by the nodes, on what they hold)."""
    import json

    from flwr.common.config import parse_config_args

    from fedforget.unlearning import retrain, verify_federation

    source, data, state = deployed
    store, nodes = tmp_path / "s", tmp_path / "state"
    shutil.copytree(source, store)
    shutil.copytree(state, nodes)

    def flwr_run(federation, run_config, store_dir, console, app=None):  # noqa: ANN001, ANN202
        assert federation == "fake" and app is None  # a store of fedforget's own app: its app is submitted
        config = parse_config_args([run_config])
        assert config["action"] == "train" and config["reference"] is True
        run(Path(store_dir), data, nodes, **{k: v for k, v in config.items() if k not in ("test-data",)})
        return 0, Path(store_dir) / "flwr-run.log"

    monkeypatch.setattr(verify_federation, "flwr_run", flwr_run)
    record = pq.read_table(data / "node-1" / "train.parquet").column("record_id").to_pylist()[3]
    cli = CliRunner()
    assert cli.invoke(app, ["forget", "--store", str(store), "--record", f"node-1:{record}"]).exit_code == 0
    pending = cli.invoke(app, ["verify", "--store", str(store), "--federation", "fake"])
    assert pending.exit_code == 2 and "#1 (partition(s) 1) have not reached the nodes" in pending.output

    def propagation(federation, run_config, store_dir, console, app=None):  # noqa: ANN001, ANN202
        config = parse_config_args([run_config])
        assert federation == "fake" and config["action"] == "propagate"
        run(Path(store_dir), data, nodes, **{k: v for k, v in config.items() if k not in ("test-data",)})
        return 0, Path(store_dir) / "flwr-run.log"

    monkeypatch.setattr(retrain, "flwr_run", propagation)
    suggested = shlex.split(re.search(r"run `(fedforget forget [^`]+)`", pending.output).group(1))
    propagated = cli.invoke(app, suggested[1:])  # the command as printed
    assert propagated.exit_code == 0, propagated.output
    assert "propagated: every request reached the nodes that hold its samples" in propagated.output
    assert not verify_federation.pending_requests(Store.open(store))
    run(store, data, nodes, action="retrain")
    registered = (nodes / "node1" / REGISTERED).stat().st_ino
    verdict = cli.invoke(app, ["verify", "--store", str(store), "--federation", "fake", "--json"])
    assert verdict.exit_code == 0, verdict.output
    report = json.loads(verdict.stdout)
    assert report["exact"] and report["held"]["equal"] and report["federation"] == "fake"
    assert not (store / verify_federation.SCRATCH).exists()
    assert (nodes / "node1" / REGISTERED).stat().st_ino == registered
    signed = cli.invoke(app, ["receipt", "1", "--store", str(store), "--federation", "fake", "--json"])
    assert signed.exit_code == 0, signed.output
    assert json.loads(signed.stdout)["verify"]["federation"] == "fake"

    # negative control: node 0 drops a record the store never forgot; the reference its nodes train differs
    other = pq.read_table(data / "node-0" / "train.parquet").column("record_id").to_pylist()[0]
    key = store_record_key(Store.open(store).manifest())
    add_tombstones(nodes / "node0", "local:node-0", [local_sample_id("node-0", str(other), key)])
    wrong = cli.invoke(app, ["verify", "--store", str(store), "--federation", "fake", "--json"])
    report = json.loads(wrong.stdout)
    assert not report["exact"] and "differ" in report["reason"], report["reason"]
