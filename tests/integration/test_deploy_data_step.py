"""The deployments' data step (deploy/data.sh, `make deploy-data`): one directory per SuperNode holding only
that node's records, the server's directory holding only the test split, written once and kept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]


def data_step(out: Path, nodes: int) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "deploy" / "data.sh"), str(out), str(nodes)], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "FEDFORGET_DATA_ARGS": "--train-size 120 --test-size 40"})


def test_each_node_gets_its_own_records_and_the_server_only_the_test_split(tmp_path):
    out = tmp_path / "data"
    done = data_step(out, 3)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["node-0", "node-1", "node-2", "server"]
    held = [set(pq.read_table(out / f"node-{p}" / "train.parquet").column("record_id").to_pylist()) for p in range(3)]
    assert all(held) and not (held[0] & held[1] or held[0] & held[2] or held[1] & held[2])
    assert sorted(f.name for f in (out / "server").iterdir()) == ["test.parquet"]
    assert all(os.stat(out / f"node-{p}" / "train.parquet").st_mode & 0o004 for p in range(3))  # uid 49999 reads it
    stamp = (out / "node-0" / "train.parquet").stat().st_mtime_ns
    again = data_step(out, 3)  # kept: a deployment restarted keeps its nodes' data
    assert again.returncode == 0 and "kept" in again.stdout
    assert (out / "node-0" / "train.parquet").stat().st_mtime_ns == stamp
    fewer = data_step(out, 2)  # another node count is another split (node-2 would be stale)
    assert fewer.returncode == 0 and sorted(p.name for p in out.iterdir()) == ["node-0", "node-1", "server"]
