"""A forget applied (through the CLI, on the ledger) while a replay retrain runs: the rounds the retrain records
afterwards from the newly forgotten data are recorded stale and purged when it ends, nothing the new request
invalidated is served, ``purge --check`` and the store check are clean, and the next retrain rebuilds the
rounds so that ``fedforget verify`` is exact. The request lands deterministically after the retrain restored
its resume round (or just before it reads it), by wrapping ``replay.server.restore``. Negative controls: a
run that skips the end-of-run purge, and a replay that records its rounds as if the new request were applied
on the nodes, are both caught."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fedforget.federation import driver
from fedforget.inprocess import run_in_process
from fedforget.methods.replay import server
from fedforget.methods.replay.plan import round_artifact
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.ledger import Ledger
from fedforget.unlearning.cli import app

from ...helpers import (
    artifact_rows,
    copy_store,
    file_digests,
    retrain_in_process,
    served_ids,
    stale_artifacts,
    training_rows,
)

NODES = 3
ROUNDS = 4
BASE = {"task": "digits-mlp", "lr": 0.02, "local-epochs": 1, "train-size": 300, "test-size": 100,
        "slices-per-client": 1, "method": "replay", "num-rounds": ROUNDS, "fraction-train": 0.34,
        "replay.strategy": "fedadam"}
runner = CliRunner()


def _first_rounds(store: Store) -> dict[int, int]:
    """partition → the first round that trained it."""
    first: dict[int, int] = {}
    for row in store.metrics():
        for p in row.get("trained", []):
            first.setdefault(int(p), int(row["round"]))
    return first


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay-during") / "store"
    run_in_process({**BASE, "store": str(path)}, NODES)
    store = Store.open(path)
    first = _first_rounds(store)
    assert len(set(first.values())) >= 2 and max(first.values()) > 1, first  # something to roll back to
    return path


def _forget(store: Store, sample: int) -> dict:
    result = runner.invoke(app, ["forget", "--store", str(store.root), "--sample", str(sample), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _sample(store: Store, partition: int, index: int) -> int:
    return int(store.manifest()["partitions"][str(partition)][0][index])


@pytest.fixture
def store(trained, tmp_path) -> Store:
    """A private copy with one request (the partition first trained latest) waiting for a retrain."""
    copy = copy_store(trained, tmp_path)
    first = _first_rounds(copy)
    late = max(first, key=lambda p: (first[p], p))
    _forget(copy, _sample(copy, late, 0))
    return copy


def _late(store: Store) -> int:
    first = _first_rounds(store)
    return max(first, key=lambda p: (first[p], p))


def _early(store: Store) -> int:
    """The partition round 1 trained: every round's lineage holds it."""
    return min(_first_rounds(store).items(), key=lambda kv: (kv[1], kv[0]))[0]


def _forget_during(store: Store, monkeypatch, sample: int, before_restore: bool = False) -> list:  # noqa: ANN001
    """Apply a request for ``sample`` once the retrain has restored its resume round (or just before it reads
    it); returns the list the request's CLI result and the resume round land in."""
    applied: list = []
    real = server.restore

    def restore(run, ledger, strategy, resume, initial):  # noqa: ANN001, ANN202
        if before_restore and not applied:
            applied.append((_forget(store, sample), resume))
        restored = real(run, ledger, strategy, resume, initial)
        if not applied:
            applied.append((_forget(store, sample), resume))
        return restored

    monkeypatch.setattr(server, "restore", restore)
    return applied


def _purge_check(store: Store) -> dict:
    check = runner.invoke(app, ["purge", "--store", str(store.root), "--check", "--json"])
    report = json.loads(check.stdout)
    assert (check.exit_code == 0) == report["clean"], check.stdout
    return report


def _purged(store: Store) -> dict[tuple[str, str], tuple[int, int]]:
    ledger = store.ledger()
    try:
        rows = ledger.db.execute("SELECT artifact, sha256, request, done FROM purged")
        return {(a, s): (r, d) for a, s, r, d in rows}
    finally:
        ledger.close()


def _verify(store: Store) -> dict:
    return json.loads(runner.invoke(app, ["verify", "--store", str(store.root), "--json"]).stdout)


def _consistent_then_rebuilt_exactly(store: Store, monkeypatch) -> None:  # noqa: ANN001
    """What the interrupted run left is clean; the next retrain rebuilds what is missing, exactly."""
    rows = artifact_rows(store)
    assert not set(served_ids(store)) & {a for a, r in rows.items() if not r["valid"]}
    assert _purge_check(store)["clean"]
    assert check_store(store).ok
    monkeypatch.undo()
    retrain_in_process(store, NODES)
    rows = artifact_rows(store)
    assert all(r["valid"] for r in rows.values()), {a for a, r in rows.items() if not r["valid"]}
    assert served_ids(store) == [round_artifact(ROUNDS)]
    assert _purge_check(store)["clean"] and training_rows(store) > 0
    report = _verify(store)
    assert report["exact"] is True, report


def test_rounds_replayed_from_data_forgotten_during_the_replay_are_purged_when_it_ends(store, monkeypatch):
    applied = _forget_during(store, monkeypatch, _sample(store, _late(store), 1))
    retrain_in_process(store, NODES)
    (result, resume), = applied
    assert result["request"] == 2 and resume >= 1  # landed inside the retrain, after a restore
    stale = stale_artifacts(store, watermark=1)
    assert round_artifact(ROUNDS) in stale  # the replay rebuilt the served round from the new request's data
    purged = _purged(store)
    for artifact, sha in stale.items():
        assert purged[(artifact, sha)] == (2, 1)  # purged by the request that made it stale, and done
        assert not store.artifact_path(sha).exists()
    assert not set(stale.values()) & file_digests(store)
    assert all(r["valid"] for a, r in artifact_rows(store).items() if int(a.rsplit("-", 1)[1]) <= resume)
    assert training_rows(store) == 0  # the replayed rounds' losses were computed on the forgotten sample
    _consistent_then_rebuilt_exactly(store, monkeypatch)


def test_a_request_that_forgets_the_restored_round_leaves_the_replay_nothing_valid_and_the_next_one_exact(
        store, monkeypatch):
    """The request reaches the round the replay resumed from: its bytes are purged while the replay runs on the
    copy it holds, and every round it records is stale."""
    applied = _forget_during(store, monkeypatch, _sample(store, _early(store), 0))
    retrain_in_process(store, NODES)
    (result, resume), = applied
    assert round_artifact(resume) in result["invalidated"]
    rows = artifact_rows(store)
    assert not any(r["valid"] for r in rows.values())
    assert not served_ids(store)
    assert not {r["sha256"] for r in rows.values()} & file_digests(store)
    _consistent_then_rebuilt_exactly(store, monkeypatch)


def test_a_request_that_purges_the_resume_round_before_the_replay_reads_it_leaves_the_rounds_unbuilt(
        store, monkeypatch):
    """The request lands after the retrain chose where to resume and before it read that round."""
    applied = _forget_during(store, monkeypatch, _sample(store, _early(store), 0), before_restore=True)
    retrain_in_process(store, NODES)
    (result, resume), = applied
    assert round_artifact(resume) in result["invalidated"]
    ledger = store.ledger()
    try:
        unbuilt = ledger.get_meta("unbuilt")["artifacts"]
        assert ledger.retrained_watermark() == 1
    finally:
        ledger.close()
    assert set(unbuilt) >= {round_artifact(r) for r in range(resume + 1, ROUNDS + 1)}
    assert not stale_artifacts(store, watermark=1)  # nothing was built from the data it forgot
    _consistent_then_rebuilt_exactly(store, monkeypatch)


def test_without_the_end_of_run_purge_the_check_reports_the_stale_replayed_rounds(store, monkeypatch):
    """Negative control: the check does see the stale bytes a replay leaves behind."""
    applied = _forget_during(store, monkeypatch, _sample(store, _late(store), 1))
    monkeypatch.setattr(driver, "finish_pending_purges", lambda *_: None)
    retrain_in_process(store, NODES)
    stale = stale_artifacts(store, watermark=1)
    assert applied and stale and all(store.artifact_path(sha).exists() for sha in stale.values())
    report = _purge_check(store)
    assert not report["clean"] and set(report["pending"]) == set(stale) and report["training-rows"] > 0


def test_a_replay_that_records_its_rounds_as_if_the_new_request_were_applied_is_not_exact(store, monkeypatch):
    """Negative control: were the rounds replayed from the newly forgotten data recorded valid, the served model
    would be built from it, and ``verify`` says so."""
    applied = _forget_during(store, monkeypatch, _sample(store, _late(store), 1))
    real = Ledger.record_artifact

    def record(self, artifact, sha256, kind, lineage, watermark, meta=None):  # noqa: ANN001, ANN202
        return real(self, artifact, sha256, kind, lineage, self.last_request(), meta)

    monkeypatch.setattr(Ledger, "record_artifact", record)
    retrain_in_process(store, NODES)
    assert applied and served_ids(store) == [round_artifact(ROUNDS)]
    monkeypatch.undo()
    report = _verify(store)
    assert report["exact"] is False, report
