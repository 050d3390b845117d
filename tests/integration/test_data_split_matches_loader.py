"""``fedforget data split`` writes node data that a node reads back as exactly the rows today's loader and
partition plan give that partition (bit for bit), and a server test file that is exactly the test split."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from fedforget.core.config import RunConfig, parse_run_config
from fedforget.core.record_ids import local_sample_id
from fedforget.inprocess import default_run_config
from fedforget.tasks.assets import AssetMissing
from fedforget.tasks.base import Examples
from fedforget.tasks.local_records import (
    LocalRecords,
    encode_rows,
    read_file_rows,
    read_local_records,
    task_num_classes,
)
from fedforget.tasks.node_split import SplitMismatch, check_reproduces, raw_rows, write_split
from fedforget.tasks.registry import load_task_data, partition_plan

from .helpers import invoke


def config(task: str, **keys: object) -> RunConfig:
    return parse_run_config({**default_run_config(), "task": task, **keys}, warn=False)


def same_rows(records: LocalRecords, pool: Examples, node: str) -> bool:
    """Row k of ``records`` is the pool's row of global id = record id k, bit for bit; ids are the node's."""
    global_ids = [int(r) for r in records.record_ids]
    ref = pool.by_ids(global_ids)
    return (records.examples.ids.tolist() == [local_sample_id(node, r) for r in records.record_ids]
            and len(records.examples.inputs) == len(ref.inputs)
            and all(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
                    for a, b in zip(records.examples.inputs, ref.inputs, strict=True))
            and torch.equal(records.examples.labels, ref.labels))


def check_split(cfg: RunConfig, nodes: int, out: Path) -> None:
    written = write_split(cfg, nodes, out)
    data, plan, num_classes = load_task_data(cfg), partition_plan(cfg, nodes), task_num_classes(cfg)
    assert sum(written.nodes.values()) == len(data.train)
    for p in range(nodes):
        node = f"node-{p}"
        records = read_local_records(out / node, cfg, node, num_classes)
        assert sorted(int(r) for r in records.record_ids) == plan.partition_ids(p)
        assert same_rows(records, data.train, node), (cfg.task, p)
    test = read_local_records(out / "server", cfg, "server", num_classes, split="test")
    assert sorted(int(r) for r in test.record_ids) == sorted(data.test.ids.tolist())
    assert same_rows(test, data.test, "server")
    # the file's own row order is the test split's, which a server reading rows 0..n-1 relies on
    order = pq.read_table(out / "server" / "test.parquet", columns=["record_id"]).column(0).to_pylist()
    assert order == [str(i) for i in data.test.ids.tolist()] and written.test_records == len(data.test)
    in_order = read_file_rows(out / "server", cfg, "server", num_classes, split="test")
    assert in_order.record_ids == order and torch.equal(torch.from_numpy(in_order.labels), data.test.labels)
    assert all(torch.equal(a, b) for a, b in zip(encode_rows(in_order, cfg, "server"), data.test.inputs, strict=True))
    assert not (out / "server" / "train.parquet").exists()


@pytest.mark.parametrize("task, keys", [
    ("digits-mlp", {}),
    ("digits-mlp", {"partitioner": "iid", "seed": 7, "train-size": 900, "test-size": 200}),
    ("digits-mlp-val", {}),
    ("digits-mlp-perm", {"partitioner": "dirichlet", "dirichlet-alpha": 0.3}),
    ("digits-mlp-perm-val", {"partitioner": "iid"}),
])
def test_digits_splits_read_back_as_the_loaders_partition_rows(tmp_path, task, keys):
    check_split(config(task, **keys), 4, tmp_path / "out")


@pytest.mark.parametrize("task, keys", [("fmnist-cnn", {"train-size": 1500, "test-size": 300}),
                                        ("rt-minilm", {"train-size": 600, "test-size": 150}),
                                        ("fortunes-minilm", {"train-size": 400, "test-size": 100}),
                                        ("rt-smollm", {"train-size": 300, "test-size": 100}),
                                        ("rt-smollm-val", {"train-size": 300})])
def test_shipped_tasks_with_assets_split_bit_for_bit(tmp_path, task, keys):
    try:
        cfg = config(task, **keys)
        load_task_data(cfg)
    except AssetMissing as exc:
        pytest.skip(str(exc))
    check_split(cfg, 3, tmp_path / "out")


def test_the_row_comparison_sees_a_row_out_of_place(tmp_path):
    """Negative control: the same node data compared against a neighbour's rows is not the same."""
    cfg = config("digits-mlp")
    write_split(cfg, 2, tmp_path / "out")
    records = read_local_records(tmp_path / "out" / "node-0", cfg, "node-0", 10)
    pool = load_task_data(cfg).train
    assert same_rows(records, pool, "node-0")
    shifted = LocalRecords(records.record_ids[1:] + records.record_ids[:1], records.examples, records.digests)
    assert not same_rows(shifted, pool, "node-0")
    assert not same_rows(records, pool, "node-1")


def test_the_split_refuses_raw_rows_that_do_not_rebuild_the_loaders_inputs():
    cfg = config("digits-mlp")
    train, _ = raw_rows(cfg)
    data = load_task_data(cfg).train
    altered = train[data.ids.numpy()].copy()
    altered[0, 0] += 1
    with pytest.raises(SplitMismatch, match="bit for bit"):
        check_reproduces(cfg, altered, data, "train")


def test_cli_split_prints_what_it_wrote_and_json_names_each_node(tmp_path):
    code, out, err = invoke(["data", "split", "--task", "digits-mlp", "--nodes", "3", "--out", str(tmp_path / "a")])
    assert code == 0, err
    assert "node-2/train.parquet" in out and "server/test.parquet" in out and "360 records" in out
    code, out, err = invoke(["data", "split", "--task", "digits-mlp", "--nodes", "3", "--out", str(tmp_path / "b"),
                             "--json"])
    info = json.loads(out)
    assert code == 0 and set(info["nodes"]) == {"node-0", "node-1", "node-2"}
    assert sum(n["records"] for n in info["nodes"].values()) == 1437 and info["server"]["test_records"] == 360
    same = [(tmp_path / d / "node-1" / "train.parquet").read_bytes() for d in ("a", "b")]
    assert same[0] == same[1]  # the split is deterministic


@pytest.mark.parametrize("args, words", [
    (["--task", "nope"], "nope"),
    (["--task", "fmnist-effnet"], "cannot be split into node data"),
    (["--task", "digits-mlp", "--partitioner", "shuffle"], "shuffle"),
    (["--task", "digits-mlp", "--alpha", "-1"], "dirichlet-alpha"),
    (["--task", "digits-mlp", "--nodes", "0"], "--nodes"),
    (["--task", "digits-mlp", "--nodes", "1000"], "cannot fill 1000 partitions"),
])
def test_cli_split_refuses_bad_input_with_one_line_and_writes_nothing(tmp_path, args, words):
    argv = ["data", "split", "--out", str(tmp_path / "out"), *args]
    if "--nodes" not in args:
        argv += ["--nodes", "2"]
    code, out, err = invoke(argv)
    assert code == 2, (out, err)
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_cli_split_refuses_an_out_dir_that_holds_files_and_leaves_it_as_it_was(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    code, _, err = invoke(["data", "split", "--task", "digits-mlp", "--nodes", "2", "--out", str(tmp_path / "out")])
    assert code == 2 and "not an empty directory" in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging directory left behind
    (tmp_path / "empty").mkdir()
    code, _, err = invoke(["data", "split", "--task", "digits-mlp", "--nodes", "2", "--out", str(tmp_path / "empty")])
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == ["node-0", "node-1", "server"]
