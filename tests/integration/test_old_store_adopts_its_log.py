"""A store written before the ledger's log adopts one on its first command that can write: a genesis entry over
its state, said once on stderr; raw record names in its old requests move out of the specs (and never enter
the log) into the table forgetting scrubs; from then on an edit is refused like on any new store."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.record_commitments import commitment

from .helpers import as_written_before_the_log, invoke, train_in_process


@pytest.fixture(scope="module")
def old_store(tmp_path_factory):
    """A store with one forget request that named a record, rewritten as stores were before the log."""
    root = tmp_path_factory.mktemp("old")
    path = root / "store"
    train_in_process(path, 3, **{"train-size": 300, "num-rounds": 1, "slices-per-client": 2})
    sid = Store.open(path).manifest()["partitions"]["1"][0][0]
    code, _, err = invoke(["forget", "--store", str(path), "--record", f"node-1:{sid}"])
    assert code == 0, err
    as_written_before_the_log(path)
    with sqlite3.connect(path / "ledger.sqlite") as db:
        spec = json.loads(db.execute("SELECT spec FROM requests WHERE id=1").fetchone()[0])
        spec["records"] = [f"node-1:{sid}"]  # old stores kept the raw name in the spec
        db.execute("UPDATE requests SET spec=? WHERE id=1", (json.dumps(spec),))
    return path, f"node-1:{sid}"


@pytest.fixture
def store(old_store, tmp_path):
    path, record = old_store
    shutil.copytree(path, tmp_path / "store")
    return tmp_path / "store", record


def log_text(path) -> str:  # noqa: ANN001
    with sqlite3.connect(path / "ledger.sqlite") as db:
        return "\n".join(r[0] for r in db.execute("SELECT entry FROM log ORDER BY seq"))


def test_the_first_command_adopts_a_log_says_so_once_and_moves_raw_names_out_of_it(store):
    path, record = store
    assert check_store(Store.open(path)).ok  # an old store opens clean
    code, out, err = invoke(["status", "--store", str(path), "--json"])
    assert code == 0, err
    assert "had no log" in err and len(err.strip().splitlines()) == 1
    log = json.loads(out)["log"]
    assert log["adopted"] and log["entries"] == 2 and log["unsigned"] == 0
    assert record not in log_text(path)  # the log holds the commitment, never the name
    with sqlite3.connect(path / "ledger.sqlite") as db:
        spec = json.loads(db.execute("SELECT spec FROM requests WHERE id=1").fetchone()[0])
        (name, key), = db.execute("SELECT record, key FROM record_names WHERE request=1").fetchall()
    assert name == record and spec["records"] == [commitment(key, record)]
    again = invoke(["status", "--store", str(path)])
    assert again[0] == 0 and "had no log" not in again[2]


def test_after_adoption_an_edit_is_refused(store):
    path, _ = store
    assert invoke(["status", "--store", str(path)])[0] == 0
    with sqlite3.connect(path / "ledger.sqlite") as db:
        db.execute("DELETE FROM lineage WHERE (unit, artifact) = (SELECT unit, artifact FROM lineage LIMIT 1)")
    code, out, err = invoke(["forget", "--store", str(path), "--sample", "0"])
    assert code == 1 and "lineage" in err and len(err.strip().splitlines()) == 1, err
