"""Forgetting erases: a forget request deletes the files of every artifact that saw the data and their
derived copies (client caches, feature caches), touches nothing else, keeps only id/sha256/time/request
as proof, survives a crash mid-purge, and scrubs a leaving client's angles and metrics rows."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fedforget.methods.fedshard.fairness import fairness_of_store
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.crash import CRASH_ENV
from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.status import store_status

from .helpers import artifact_shas, copy_store, train_in_process

FEDSGT = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2, "local-epochs": 1}
FEDSHARD = {"method": "fedshard", "fedshard.fanout": 2, "fedshard.rounds-min": 1, "fedshard.rounds-max": 1,
            "local-epochs": 1}
runner = CliRunner()


@pytest.fixture(scope="module")
def fedsgt_store(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("purge") / "store", 3, **FEDSGT).root


def _files(store: Store) -> dict[str, str]:
    """Every file of the store except the ledger, manifest and metrics, with the sha256 of its bytes."""
    skip = {"ledger.sqlite", "manifest.json", "metrics.jsonl", "ledger.sqlite-journal"}
    return {str(p.relative_to(store.root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.root.rglob("*")) if p.is_file() and p.name not in skip}


def _purge_check(store: Store):  # noqa: ANN202
    return runner.invoke(app, ["purge", "--store", str(store.root), "--check", "--json"])


def test_forget_deletes_exactly_the_invalidated_files_and_their_cached_copies_on_nodes(fedsgt_store, tmp_path):
    store = copy_store(fedsgt_store, tmp_path)
    shas = artifact_shas(store)
    sample = store.manifest()["partitions"]["1"][0][0]
    # a client-side copy named by sha256 (any cache), a feature cache of the partition, an unrelated file
    victim_sha = next(iter(shas.values()))
    (store.root / "clients" / "1").mkdir(parents=True, exist_ok=True)
    client_copy = store.root / "clients" / "1" / f"{victim_sha}.safetensors"
    features = store.root / "clients" / "1" / "safe-features-train-abc.safetensors"
    other_features = store.root / "clients" / "2" / "safe-features-train-def.safetensors"
    for path in (client_copy, features, other_features):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    before = _files(store)
    result = forget_request(store, samples=[sample])
    purged = {shas[a] for a in result.invalidated}
    assert purged and victim_sha in set(shas.values())
    after = _files(store)
    gone = set(before) - set(after)
    expected = {f"artifacts/{s}.safetensors" for s in purged} | {"clients/1/safe-features-train-abc.safetensors"}
    if victim_sha in purged:
        expected.add(f"clients/1/{victim_sha}.safetensors")
    module_caches = {f for f in before if "/module-cache/" in f and f.rsplit("/", 1)[1][:64] in purged}
    assert module_caches, "the nodes' FedSGT module caches hold no copy of an invalidated module"
    expected |= module_caches
    assert gone == expected
    assert {k: v for k, v in before.items() if k not in gone} == after  # nothing else touched
    assert sorted(result.purged["files"]) == sorted(f for f in gone if "safe-features" not in f)
    ledger = store.ledger()
    try:
        rows = ledger.db.execute("SELECT artifact, sha256, request, at, done FROM purged").fetchall()
    finally:
        ledger.close()
    assert {(a, s) for a, s, *_ in rows} == {(a, shas[a]) for a in result.invalidated}
    assert all(r == result.request and at > 0 and done == 1 for _, _, r, at, done in rows)
    check = _purge_check(store)
    assert check.exit_code == 0 and json.loads(check.stdout)["clean"]
    info = store_status(store, accuracy=False)
    assert info["corrupt"] == [] and {a["artifact_id"] for a in info["artifacts"] if a["purged"]} == set(
        result.invalidated)
    assert check_store(store).ok


def test_a_planted_copy_of_a_purged_artifact_is_found_by_purge_check(fedsgt_store, tmp_path):
    store = copy_store(fedsgt_store, tmp_path)
    shas = artifact_shas(store)
    result = forget_request(store, samples=[store.manifest()["partitions"]["0"][0][0]])
    stale = shas[result.invalidated[0]]
    planted = store.root / "clients" / "0" / f"{stale}.cache"
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_bytes(b"old module")
    check = _purge_check(store)
    assert check.exit_code == 1 and json.loads(check.stdout)["files"] == [f"clients/0/{stale}.cache"]
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 0
    assert not planted.exists() and _purge_check(store).exit_code == 0


def test_a_crash_mid_purge_leaves_the_request_applied_and_the_next_purge_finishes_it(fedsgt_store, tmp_path):
    store = copy_store(fedsgt_store, tmp_path)
    sample = store.manifest()["partitions"]["2"][0][0]
    code = ("import sys; from fedforget.store import Store; from fedforget.unlearning.forget import forget_request; "
            f"forget_request(Store.open(sys.argv[1]), samples=[{sample}])")
    proc = subprocess.run([sys.executable, "-c", code, str(store.root)], env={**os.environ, CRASH_ENV:
                          "purge:file-deleted@1"}, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 137, proc.stderr[-2000:]
    ledger = store.ledger()
    try:
        assert ledger.last_request() == 1  # applied, not half: the purge is pending
    finally:
        ledger.close()
    assert check_store(store).ok
    pending = json.loads(_purge_check(store).stdout)
    assert pending["pending"] and pending["files"] and not pending["clean"]
    again = forget_request(store, samples=[sample])  # the user's retry: a no-op that finishes the purge
    assert again.request is None and again.purged["files"]
    assert json.loads(_purge_check(store).stdout)["clean"]


def test_a_leaving_client_loses_its_angle_and_metrics_rows_and_fairness_still_reports(tmp_path):
    store = train_in_process(tmp_path / "store", 4, **FEDSHARD)
    store.append_metrics({"partition": 3, "train-loss": 0.1})
    store.append_metrics({"per-client": {"2": 1.0, "3": 2.0}})
    forget_request(store, clients=[3])
    ledger = store.ledger()
    try:
        angles = ledger.get_meta("client-angles")
        distances = ledger.get_meta("leaver-min-distances")
    finally:
        ledger.close()
    assert "3" not in angles and set(angles) == {"0", "1", "2"} and set(distances) == {"0", "1", "2", "3"}
    rows = store.metrics()
    assert not any(r.get("partition") == 3 for r in rows) and {"per-client": {"2": 1.0}} in rows
    from fedforget.inprocess import run_in_process

    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, 4)
    report = fairness_of_store(store)
    assert report["leavers"] == [3] and report["mp"] is not None and "me-note" in report
