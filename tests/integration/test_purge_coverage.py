"""`purge --check` covers every copy the coordinator knows of: deployed nodes whose state dir it cannot see
keep the purged modules they cached until they acknowledge (a node that owns no forgotten sample included),
and nothing computed on forgotten samples stays in the ledger (the audit's losses) or in metrics.jsonl (the
training values of the runs that saw them). A store without requests, and one whose purge is complete,
report clean."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedforget.client_app import app as client_app
from fedforget.federation import forget_client
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.module_cache import CACHE_DIR
from fedforget.store.purge import AUDIT_KEY, METRICS_MARK, TRAINING_VALUES
from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request

from .helpers import DIGITS, artifact_shas, copy_store, train_in_process

NODES = 3
FEDSGT = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2, "local-epochs": 1}
FEDAVG = {"method": "fedavg", "num-rounds": 2, "train-size": 150, "partitioner": "iid"}
runner = CliRunner()


def _deployed_nodes(nodes: Path):  # noqa: ANN202
    """The real ClientApp on nodes whose state dir is outside the store, as `--node-config state-dir=…` sets it
    on a deployed SuperNode: the coordinator cannot see their caches."""
    def deployed(msg, context):  # noqa: ANN001, ANN202
        context.node_config["state-dir"] = str(nodes / f"node{context.node_config['partition-id']}")
        return client_app(msg, context)
    return deployed


def _run(store: Store, nodes: Path, action: str) -> None:
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": action}, NODES,
                   client_app=_deployed_nodes(nodes))


def _cached_copies(nodes: Path, shas: set[str]) -> dict[int, set[str]]:
    """partition → the purged sha256s its node's module cache really holds."""
    held = {}
    for p in range(NODES):
        names = {f.stem for f in (nodes / f"node{p}" / CACHE_DIR).glob("*.safetensors")} & shas
        if names:
            held[p] = names
    return held


def _check(store: Store, *extra: str):  # noqa: ANN202
    return runner.invoke(app, ["purge", "--store", str(store.root), "--check", *extra])


def _metrics_lines(store: Store) -> list[str]:
    return (store.root / "metrics.jsonl").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("deployed")
    run_in_process({**DIGITS, **FEDSGT, "store": str(root / "store")}, NODES,
                   client_app=_deployed_nodes(root / "nodes"))
    return root / "store", root / "nodes"


@pytest.fixture(scope="module")
def fedavg_store(tmp_path_factory) -> Path:
    return train_in_process(tmp_path_factory.mktemp("fedavg") / "store", NODES, **FEDAVG).root


def test_purge_check_reports_deployed_nodes_module_caches_until_they_acknowledge_and_is_clean_after(deployed, tmp_path):
    store = copy_store(deployed[0], tmp_path)
    nodes = tmp_path / "nodes"
    shutil.copytree(deployed[1], nodes)
    assert not any((store.root / "clients").iterdir())  # the nodes' state dirs are out of the coordinator's sight
    shas = artifact_shas(store)
    result = forget_request(store, samples=[store.manifest()["partitions"]["1"][0][0]])
    purged = {shas[a] for a in result.invalidated}
    holders = _cached_copies(nodes, purged)
    assert set(holders) - {1}, "no node other than the owner cached a purged module"
    check = _check(store, "--json")
    assert check.exit_code == 1
    report = json.loads(check.stdout)
    assert not report["clean"] and report["files"] == [] and report["pending"] == []
    reported = {c["partition"] for c in report["client-copies"]}
    assert set(holders) <= reported  # every node that really holds a copy is named
    assert all(c["request"] == result.request for c in report["client-copies"])
    text = _check(store)
    assert text.exit_code == 1 and "may still hold copies of purged artifacts" in text.stdout
    assert "--propagate" in text.stdout
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 1  # purge cannot reach them
    _run(store, nodes, "propagate")  # what `forget --propagate` runs: owners and holders drop and acknowledge
    assert _cached_copies(nodes, purged) == {}
    after = _check(store, "--json")
    assert after.exit_code == 0 and json.loads(after.stdout)["clean"], after.stdout
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 0


def test_a_node_that_does_not_acknowledge_stays_reported_and_a_later_request_is_reported_again(deployed, tmp_path,
                                                                                                 monkeypatch):
    store = copy_store(deployed[0], tmp_path)
    nodes = tmp_path / "nodes"
    shutil.copytree(deployed[1], nodes)
    parts = store.manifest()["partitions"]
    shas = artifact_shas(store)
    first = forget_request(store, samples=[parts["1"][0][0]])
    offline = max(c["partition"] for c in json.loads(_check(store, "--json").stdout)["client-copies"])
    real = forget_client.forget_samples

    def offline_node(msg, context):  # noqa: ANN001, ANN202
        if int(context.node_config["partition-id"]) == offline:
            raise ConnectionError(f"node of partition {offline} is offline")
        return real(msg, context)

    monkeypatch.setattr(forget_client, "forget_samples", offline_node)
    _run(store, nodes, "propagate")
    check = _check(store, "--json")
    assert check.exit_code == 1
    assert json.loads(check.stdout)["client-copies"] == [{"partition": offline, "request": first.request}]
    held = _cached_copies(nodes, {shas[a] for a in first.invalidated})
    assert set(held) <= {offline}  # the others really dropped theirs
    monkeypatch.setattr(forget_client, "forget_samples", real)
    second = forget_request(store, samples=[parts["2"][0][0]])
    again = json.loads(_check(store, "--json").stdout)["client-copies"]
    assert offline in {c["partition"] for c in again}
    assert all(c["request"] == second.request for c in again if c["partition"] != offline)
    _run(store, nodes, "propagate")
    assert _check(store).exit_code == 0


def test_purge_removes_the_forgotten_samples_audit_losses_and_the_training_values_computed_with_them(
        fedavg_store, tmp_path):
    store = copy_store(fedavg_store, tmp_path)
    before = [json.loads(line) for line in _metrics_lines(store)]
    assert any("train-loss" in row for row in before)
    result = forget_request(store, clients=[1], audit_before=True)
    ledger = store.ledger()
    try:
        audit = ledger.get_meta(AUDIT_KEY)
    finally:
        ledger.close()
    assert set(audit) == {"request", "forgotten", "held_out", "verdict", "memorised"}
    assert audit["request"] == result.request and audit["memorised"] in (True, False)
    rows = [json.loads(line) for line in _metrics_lines(store)]
    assert len(rows) == len(before) and not any(k in row for row in rows for k in TRAINING_VALUES)
    assert [row.get("accuracy") for row in rows] == [row.get("accuracy") for row in before]  # the rest stays
    check = _check(store, "--json")
    assert check.exit_code == 0 and json.loads(check.stdout)["clean"], check.stdout
    report = json.loads(runner.invoke(app, ["audit", "--store", str(store.root), "--json"]).stdout)
    assert report["before"] == audit and "forgotten_mean_loss" not in json.dumps(report["before"])
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, NODES)
    retrained = [json.loads(line) for line in _metrics_lines(store)[len(before):]]
    assert any("train-loss" in row for row in retrained)  # computed without the forgotten client: kept
    after = _check(store, "--json")
    assert after.exit_code == 0, after.stdout
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 0  # a purge after the retrain
    assert [json.loads(line) for line in _metrics_lines(store)[len(before):]] == retrained  # keeps its values
    again = _check(store, "--json")
    assert again.exit_code == 0, again.stdout  # and the mark still covers only the rows that saw the data


def test_a_store_purged_before_redaction_existed_reports_its_leftovers_and_purge_removes_them(fedavg_store, tmp_path):
    store = copy_store(fedavg_store, tmp_path)
    metrics = (store.root / "metrics.jsonl").read_bytes()
    result = forget_request(store, clients=[2])
    (store.root / "metrics.jsonl").write_bytes(metrics)  # what a purge that kept training values left
    measured = {"loss_threshold_auc": 0.9, "loss_threshold_ci95": [0.8, 0.95], "forgotten_mean_loss": 0.001,
                "held_out_mean_loss": 1.3}
    ledger = store.ledger()
    try:
        with ledger.transaction() as db:
            db.execute("DELETE FROM meta WHERE key=?", (METRICS_MARK,))
        ledger.set_meta(AUDIT_KEY, {"request": result.request, "forgotten": 50, "held_out": 100, "verdict": None,
                                    "result": measured})
    finally:
        ledger.close()
    check = _check(store, "--json")
    report = json.loads(check.stdout)
    assert check.exit_code == 1 and report["training-rows"] > 0 and report["ledger-values"] == [AUDIT_KEY]
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 0
    assert json.loads(_check(store, "--json").stdout)["clean"]
    ledger = store.ledger()
    try:
        assert ledger.get_meta(AUDIT_KEY) == {"request": result.request, "forgotten": 50, "held_out": 100,
                                              "verdict": None, "memorised": True}
    finally:
        ledger.close()
    assert not any(k in json.loads(line) for line in _metrics_lines(store) for k in TRAINING_VALUES)


def test_a_store_without_forget_requests_is_clean_and_purge_keeps_its_metrics(fedavg_store, tmp_path):
    store = copy_store(fedavg_store, tmp_path)
    metrics = (store.root / "metrics.jsonl").read_bytes()
    check = _check(store, "--json")
    report = json.loads(check.stdout)
    assert check.exit_code == 0 and report == {
        "files": [], "pending": [], "feature-caches": [], "metrics-rows": 0, "training-rows": 0,
        "ledger-values": [], "client-copies": [], "hashed-files": report["hashed-files"], "outside-links": [],
        "special-files": [], "unreadable": [], "not-databases": [], "clean": True}
    assert report["hashed-files"] == sum(1 for p in store.root.rglob("*") if p.is_file()) - 1  # all but the ledger
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 0
    assert (store.root / "metrics.jsonl").read_bytes() == metrics
