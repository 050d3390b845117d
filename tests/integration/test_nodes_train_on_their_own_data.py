"""Nodes that bring their own records (data-dir): the server learns only ids, a record is forgotten by the
name its owner knows it by, a retrain is exact, and a node whose data changed behind forget's back is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.core.record_ids import local_sample_id, store_record_key
from fedforget.federation.node_data import REGISTERED
from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.unlearning.cli import app

from .served_bytes import served_shas

NODES = 3
CONFIG = {"task": "digits-mlp", "method": "fedsgt", "num-rounds": 2, "slices-per-client": 2, "chains.groups": 2,
          "chains.budget": 2,
          "local-epochs": 1}


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "split"
    result = CliRunner().invoke(app, ["data", "split", "--task", "digits-mlp", "--nodes", str(NODES), "--out",
                                      str(out), "--train-size", "300"])
    assert result.exit_code == 0, result.output
    return out


def names(p: int) -> str:
    return f"clinic-{p}"


def train(store: Path, data: Path, action: str = "train", test: Path | None = None) -> None:
    """``test``: the server's test set (a retrain passes the one the store was trained with)."""
    test = test or data / "server"
    run_in_process({**CONFIG, "store": str(store), "action": action, "test-data": str(test)}, NODES,
                   node_configs=[{"data-dir": str(data / f"node-{p}"), "node-name": names(p)} for p in range(NODES)])


def copy_data(split: Path, to: Path) -> Path:
    shutil.copytree(split, to)
    return to


def record_ids(data: Path, p: int) -> list[str]:
    return [str(r) for r in pq.read_table(data / f"node-{p}" / "train.parquet").column("record_id").to_pylist()]


def drop_record(data: Path, p: int, record: str) -> None:
    path = data / f"node-{p}" / "train.parquet"
    table = pq.read_table(path)
    keep = [i for i, r in enumerate(table.column("record_id").to_pylist()) if str(r) != record]
    pq.write_table(table.take(keep), path)


@pytest.fixture(scope="module")
def trained(split, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("own")
    data = copy_data(split, root / "data")
    train(root / "s", data)
    return root / "s", data


def test_the_manifest_names_each_node_and_holds_only_hashed_sample_ids(trained):
    store, data = trained
    manifest = Store.open(store).manifest()
    assert manifest["nodes"] == {str(p): {"name": names(p), "records": "local"} for p in range(NODES)}
    key = store_record_key(manifest)  # drawn for this store when training created it
    assert key is not None and manifest["record-ids"] == {"scheme": "hmac-sha256", "key": key}
    for p in range(NODES):
        held = sorted(i for s in manifest["partitions"][str(p)] for i in s)
        assert held == sorted(local_sample_id(names(p), r, key) for r in record_ids(data, p))
        assert not set(held) & {local_sample_id(names(p), r) for r in record_ids(data, p)}  # no unkeyed id


def test_forgetting_a_record_by_its_owners_id_then_retraining_equals_training_without_it(trained, tmp_path):
    store, data = trained
    work = tmp_path / "s"
    shutil.copytree(store, work)
    record = record_ids(data, 1)[7]
    result = CliRunner().invoke(app, ["forget", "--store", str(work), "--record", f"{names(1)}:{record}"])
    assert result.exit_code == 0, result.output
    drop_record(data_copy := copy_data(data, tmp_path / "data"), 1, record)  # the owner deletes the row too
    for p in range(NODES):  # each node keeps its state dir (the registration, tombstones) with the store
        assert (work / "clients" / str(p) / REGISTERED).is_file()
    train(work, data_copy, action="retrain", test=data / "server")

    key = store_record_key(Store.open(work).manifest())
    reference = tmp_path / "ref"  # from scratch on the remaining data, the slices drawn over the same records
    hand_over(reference, key)  # numbered under the store's key, as `verify --federation` hands it over
    add_tombstones(reference / "clients" / "1", f"local:{names(1)}", [local_sample_id(names(1), record, key)])
    train(reference, data_copy, test=data / "server")
    assert served_shas(work) == served_shas(reference)  # every served model

    kept = tmp_path / "kept"  # negative control: the record still trained on
    hand_over(kept, key)
    train(kept, data, test=data / "server")
    assert served_shas(kept) != served_shas(work)


def test_a_node_whose_records_changed_behind_forgets_back_refuses_the_retrain(trained, tmp_path):
    store, data = trained
    work = tmp_path / "s"
    shutil.copytree(store, work)
    edited = copy_data(data, tmp_path / "data")
    drop_record(edited, 2, record_ids(data, 2)[3])  # removed without a forget request
    before = (work / "ledger.sqlite").read_bytes()
    changed = f"node {names(2)} .partition 2. does not hold what trained this store: missing sample"
    with pytest.raises(ConfigError, match=changed):
        train(work, edited, action="retrain", test=data / "server")
    assert (work / "ledger.sqlite").read_bytes() == before


def test_two_nodes_with_one_name_refuse_the_run_and_write_no_store(split, tmp_path):
    with pytest.raises(ConfigError, match="both named 'same'"):
        run_in_process({**CONFIG, "store": str(tmp_path / "s"), "test-data": str(split / "server")}, NODES,
                       node_configs=[{"data-dir": str(split / f"node-{p}"), "node-name": "same"} for p in range(NODES)])
    assert not (tmp_path / "s").exists()


def test_a_node_with_an_unreadable_data_dir_is_named_in_the_refusal(split, tmp_path):
    configs = [{"data-dir": str(split / f"node-{p}")} for p in range(NODES)]
    configs[1] = {"data-dir": str(tmp_path / "missing")}
    with pytest.raises(ConfigError, match="node node-1 .partition 1. refused the run: .*does not exist"):
        run_in_process({**CONFIG, "store": str(tmp_path / "s"), "test-data": str(split / "server")}, NODES,
                       node_configs=configs)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("field", ["nodes", "class-counts"])
def test_an_edited_registration_in_the_manifest_is_refused_by_every_command(trained, tmp_path, field):
    import json

    store, _ = trained
    work = tmp_path / "s"
    shutil.copytree(store, work)
    manifest = json.loads((work / "manifest.json").read_text())
    if field == "nodes":
        manifest["nodes"]["1"]["name"] = "impostor"
    else:
        manifest["class-counts"] = {"0": [1] * 10}
    (work / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(app, ["status", "--store", str(work)])
    assert result.exit_code == 1 and "manifest.json was edited after training" in result.output
