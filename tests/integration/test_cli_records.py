"""Records as their owners know them on the command line: `forget --record NODE:RECORD_ID` forgets exactly
that record's sample and keeps the record in the request's spec, `samples --node` and `locate --record` find
them; for a node of its own data the coordinator names the node, never a raw record id it does not keep.
A record the store does not hold is one line, exit 2, the store unchanged byte for byte; a `nodes` table
training never writes is a broken store (exit 1)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from fedforget.core.record_ids import local_sample_id
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.record_commitments import commitment

from .helpers import invoke, train_in_process

CLINIC = "clinic-a"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("records") / "store"
    train_in_process(path, 3, **{"train-size": 300, "num-rounds": 1, "slices-per-client": 2})
    return path


@pytest.fixture
def store(trained, tmp_path):
    dst = tmp_path / "store"
    shutil.copytree(trained, dst)
    return dst


def as_local_node(path, partition: int, name: str) -> dict[str, int]:  # noqa: ANN001
    """Make ``partition`` of a trained, untouched store a node of its own data, consistently: its samples get
    the sample ids of records ``rec-<old id>``, in the manifest (re-pinned) and in the ledger's index, through
    the ledger's own set-up calls; returns record id → sample id."""
    store = Store.open(path)
    manifest = store.manifest()
    records = {f"rec-{i}": local_sample_id(name, f"rec-{i}") for s in manifest["partitions"][str(partition)]
               for i in s}
    partitions = {p: [sorted(local_sample_id(name, f"rec-{i}") for i in s) if int(p) == partition else s
                      for s in slices] for p, slices in manifest["partitions"].items()}
    nodes = {p: {"name": name if int(p) == partition else f"node-{p}",
                 "records": "local" if int(p) == partition else "public"} for p in partitions}
    ledger = store.ledger()
    try:
        meta = {k: ledger.get_meta(k) for k in ("accuracy", "unbuilt")}
        plan, artifacts = ledger.plan(), ledger.artifacts()
        lineage = {a["artifact"]: ledger.lineage(a["artifact"]) for a in artifacts}
        assert ledger.clear_unless_requested()
        ledger.load_samples({int(p): s for p, s in partitions.items()})
        ledger.set_plan(plan)
        for key, value in meta.items():
            if value is not None:
                ledger.set_meta(key, value)
        for a in artifacts:
            ledger.record_artifact(a["artifact"], a["sha256"], a["kind"], lineage[a["artifact"]], a["watermark"],
                                   a["meta"])
        ledger.refresh_serving()
    finally:
        ledger.close()
    store.update_manifest(partitions=partitions, nodes=nodes)
    assert check_store(Store.open(path)).ok, check_store(Store.open(path)).problems
    return records


def run(*args: str) -> tuple[int, str, str]:
    return invoke(list(args))


def snapshot(path) -> dict[str, str]:  # noqa: ANN001
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def specs(path) -> list[dict]:  # noqa: ANN001
    ledger = Store.open(path).ledger()
    try:
        return [spec for _, spec in ledger.request_specs()]
    finally:
        ledger.close()


def test_an_old_stores_record_is_its_row_and_forget_records_what_was_asked(store):
    sid = Store.open(store).manifest()["partitions"]["1"][0][0]
    code, out, err = run("forget", "--store", str(store), "--record", f"node-1:{sid}", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["records"] == {f"node-1:{sid}": sid} and data["new-samples"] == 1 and data["units"] == ["1:0"]
    opening = data["record-openings"]
    assert [o["record"] for o in opening] == [f"node-1:{sid}"]
    assert opening[0]["commitment"] == commitment(opening[0]["key"], f"node-1:{sid}")
    # the spec (and so the log) keeps the record's keyed commitment, never its name
    assert specs(store) == [{"samples": [sid], "slices": [], "clients": [], "records": [opening[0]["commitment"]]}]
    where = json.loads(run("locate", "--store", str(store), "--record", f"node-1:{sid}", "--json")[1])
    assert (where["node"], where["record"], where["sample"], where["forgotten"], where["request"]) == (
        "node-1", f"node-1:{sid}", sid, True, 1)
    again = json.loads(run("forget", "--store", str(store), "--sample", str(sid), "--json")[1])
    assert again["no-op"]  # the record is that sample: forgotten once


def test_a_sample_request_keeps_its_spec_without_a_records_key(store):
    sid = Store.open(store).manifest()["partitions"]["0"][0][0]
    assert run("forget", "--store", str(store), "--sample", str(sid))[0] == 0
    assert specs(store) == [{"samples": [sid], "slices": [], "clients": []}]


def test_a_local_nodes_records_are_forgotten_by_their_own_ids(store):
    records = as_local_node(store, 1, CLINIC)
    rid = sorted(records)[0]
    code, out, err = run("forget", "--store", str(store), "--record", f"{CLINIC}:{rid}", "--record",
                         f"{CLINIC}:{rid}", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["records"] == {f"{CLINIC}:{rid}": records[rid]} and data["new-samples"] == 1
    assert specs(store)[0]["samples"] == [records[rid]]
    assert specs(store)[0]["records"] == [o["commitment"] for o in data["record-openings"]]
    assert [o["record"] for o in data["record-openings"]] == [f"{CLINIC}:{rid}"]
    assert check_store(Store.open(store)).ok


def test_samples_and_locate_name_a_local_node_but_never_a_record_id_it_does_not_keep(store):
    records = as_local_node(store, 1, CLINIC)
    rid, sid = sorted(records.items())[0]
    by_node = json.loads(run("samples", "--store", str(store), "--node", CLINIC, "--json")[1])
    by_client = json.loads(run("samples", "--store", str(store), "--client", "1", "--json")[1])
    assert by_node == by_client and by_node["node"] == CLINIC and by_node["records"] == "local"
    assert sorted(i for s in by_node["slices"] for i in s["samples"]) == sorted(records.values())
    text = run("samples", "--store", str(store), "--node", CLINIC)[1]
    assert f"node {CLINIC} (client 1)" in text and "known only to the node" in text and "rec-" not in text
    by_sample = json.loads(run("locate", "--store", str(store), "--sample", str(sid), "--json")[1])
    assert (by_sample["node"], by_sample["record"], by_sample["records"]) == (CLINIC, None, "local")
    by_record = json.loads(run("locate", "--store", str(store), "--record", f"{CLINIC}:{rid}", "--json")[1])
    assert by_record == {**by_sample, "record": f"{CLINIC}:{rid}"}
    line = run("locate", "--store", str(store), "--sample", str(sid))[1]
    assert f"known only to node {CLINIC}" in line and rid not in line
    public = json.loads(run("locate", "--store", str(store), "--sample",
                            str(Store.open(store).manifest()["partitions"]["0"][0][0]), "--json")[1])
    assert public["node"] == "node-0" and public["record"] == f"node-0:{public['sample']}"


@pytest.mark.parametrize(("args", "needle"), [
    (["forget", "--record", "node-1:999999"], "unknown record 'node-1:999999'"),
    (["forget", "--record", "node-7:1"], "unknown node 'node-7'"),
    (["forget", "--record", "node-1"], "is not NODE:RECORD_ID"),
    (["forget", "--record", "node-1:01"], "without leading zeros"),
    (["forget", "--record", "nöde:1"], "node name"),
    (["forget", "--record", "node-1:a\tb"], "control"),
    (["samples", "--node", "node-9"], "unknown node 'node-9'"),
    (["samples", "--node", "node-1", "--client", "1"], "name one client"),
    (["samples"], "name one client"),
    (["locate", "--record", "node-0:x"], "without leading zeros"),
    (["locate"], "name one sample"),
    (["locate", "--sample", "1", "--record", "node-0:1"], "name one sample"),
])
def test_a_record_the_store_does_not_hold_is_one_line_exit_2_and_changes_nothing(store, args, needle):
    before = snapshot(store)
    code, _, err = run(args[0], "--store", str(store), *args[1:])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert snapshot(store) == before


def test_another_nodes_row_is_refused_not_forgotten_where_it_lies(store):
    """A negative control for the partition check: the row exists, in node-0, so forgetting it as node-1's
    would forget the wrong owner's record."""
    sid = Store.open(store).manifest()["partitions"]["0"][0][0]
    before = snapshot(store)
    code, _, err = run("forget", "--store", str(store), "--record", f"node-1:{sid}")
    assert code == 2 and "not in node node-1's training data" in err
    assert snapshot(store) == before
    assert run("forget", "--store", str(store), "--record", f"node-0:{sid}")[0] == 0


def test_a_nodes_table_training_never_writes_is_a_broken_store(store):
    sid = Store.open(store).manifest()["partitions"]["0"][0][0]
    Store.open(store).update_manifest(nodes={"0": {"name": "node-0", "records": "public"}})
    before = snapshot(store)
    for args in (["forget", "--record", f"node-0:{sid}"], ["status"], ["locate", "--sample", str(sid)]):
        code, _, err = run(args[0], "--store", str(store), *args[1:])
        assert code == 1 and "partition 1 has no node" in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(store) == before


def files_and_times(path) -> dict[str, tuple[str, int]]:  # noqa: ANN001
    """Every file under the store (ledger.sqlite, service.db, receipts/, artifacts/, ...): its sha256 and mtime."""
    return {str(p.relative_to(path)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*")) if p.is_file()}


def in_process_runs(monkeypatch, nodes: int = 3) -> None:  # noqa: ANN001
    """`retrain` and `forget --propagate` submit their Flower run in process (the store's own nodes)."""
    from flwr.common.config import parse_config_args

    from fedforget.inprocess import run_in_process
    from fedforget.unlearning import retrain

    def flwr_run(federation, run_config, store_dir, console, app=None):  # noqa: ANN001, ANN202, ARG001
        run_in_process({**parse_config_args([run_config]), "store": store_dir}, nodes)
        return 0, Path(store_dir) / "flwr-run.log"

    monkeypatch.setattr(retrain, "flwr_run", flwr_run)


def test_the_retrain_that_completes_a_request_scrubs_its_names_and_a_no_op_then_writes_nothing(store, tmp_path,
                                                                                            monkeypatch):
    from fedforget.unlearning.receipt import KEY_ENV, SECRETS_ENV

    monkeypatch.setenv(SECRETS_ENV, str(tmp_path / "secrets"))
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "coordinator.pem"))
    in_process_runs(monkeypatch)
    root = str(store)
    sid = Store.open(store).manifest()["partitions"]["1"][0][0]
    assert run("forget", "--store", root, "--record", f"node-1:{sid}")[0] == 0
    assert run("forget", "--store", root, "--client", "2")[0] == 0
    assert run("receipt", "1", "--store", root, "--no-verify")[0] == 0
    receipt = store / "receipts" / "request-1.json"
    assert f"node-1:{sid}" in receipt.read_text()  # the control: issued before the request completed
    code, out, err = run("retrain", "--store", root)
    assert code == 0, err
    assert "scrubbed the record names of request(s) #1 (complete" in out and "receipt(s) #1 carried them" in out
    assert f"`fedforget receipt 1 --store {root}` issues it again without them" in out, out
    assert not receipt.exists()
    assert run("receipt", "1", "--store", root, "--no-verify")[0] == 0  # issued again, without the names
    assert f"node-1:{sid}" not in receipt.read_text()
    before = files_and_times(store)
    no_ops = [["forget", "--record", f"node-1:{sid}"], ["forget", "--sample", str(sid)], ["forget", "--client", "2"],
              ["status"], ["status", "--json"], ["verify"], ["purge"], ["purge", "--check"], ["evaluate"],
              ["samples", "--client", "1"], ["locate", "--record", f"node-1:{sid}"], ["log", "verify"],
              ["receipt", "--check", str(receipt)]]
    for args in no_ops:
        code, out, err = run(args[0], "--store", root, *args[1:]) if args[0] != "log" else \
            run("log", "verify", "--store", root)
        assert code == 0, (args, out, err)
        assert files_and_times(store) == before, args
    assert "nothing changed" in run("forget", "--store", root, "--record", f"node-1:{sid}")[1]


def test_the_propagation_that_completes_a_request_scrubs_its_names_and_says_so(store, tmp_path, monkeypatch):
    """Retrained while its node was away, the request completes when `forget --propagate` reaches the node."""
    from fedforget.unlearning.receipt import KEY_ENV, SECRETS_ENV

    monkeypatch.setenv(SECRETS_ENV, str(tmp_path / "secrets"))
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "coordinator.pem"))
    in_process_runs(monkeypatch)
    sid = Store.open(store).manifest()["partitions"]["1"][0][0]
    assert run("forget", "--store", str(store), "--record", f"node-1:{sid}")[0] == 0
    ledger = Store.open(store).ledger()
    try:
        ledger.finish_retrain(1, [])  # the retrain's record, its node-1 acknowledgement still pending
    finally:
        ledger.close()
    code, out, err = run("forget", "--store", str(store), "--propagate")
    assert code == 0, err
    assert "propagated: every request reached the nodes that hold its samples" in out
    assert "scrubbed the record names of request(s) #1 (complete" in out and "receipts/" not in out  # none issued
    db = sqlite3.connect(store / "ledger.sqlite")
    try:
        assert db.execute("SELECT COUNT(*) FROM record_names").fetchone()[0] == 0
    finally:
        db.close()
