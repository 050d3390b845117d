"""A request applied while a retrain runs erases what that retrain rebuilds from its data: each such artifact
is recorded stale with its purge in the same transaction, and its bytes are gone when the retrain ends, so
``purge --check`` is clean with no copy left. The request lands deterministically between the retrain's
start (its watermark fixed) and its ``record_artifact`` calls, through the driver's named point
``retrain:forget-sent`` (a test-only hook: served bytes do not change)."""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from fedforget.federation import driver
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.purge import TRAINING_VALUES
from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request

from .helpers import artifact_rows, copy_store, train_in_process

NODES = 3
FEDSGT = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 1, "local-epochs": 1,
          "train-size": 300, "test-size": 100}
runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("during") / "store", NODES, **FEDSGT).root


@pytest.fixture
def store(trained, tmp_path) -> Store:
    """A private copy with one request waiting for a retrain."""
    copy = copy_store(trained, tmp_path)
    forget_request(copy, samples=[copy.manifest()["partitions"]["1"][0][0]])
    return copy


def _forget_during_retrain(store: Store, monkeypatch, sample: int) -> list:  # noqa: ANN001
    """Apply a request for ``sample`` when the retrain passes ``retrain:forget-sent`` (its watermark is fixed,
    nothing is rebuilt yet); returns the list the request's result lands in."""
    applied: list = []
    real = driver.crash_point

    def hook(name: str) -> None:
        if name == "retrain:forget-sent" and not applied:
            applied.append(forget_request(store, samples=[sample]))
        real(name)

    monkeypatch.setattr(driver, "crash_point", hook)
    return applied


def _retrain(store: Store) -> None:
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, NODES)


def _stale(store: Store, watermark: int) -> dict[str, str]:
    """Artifacts the retrain with ``watermark`` rebuilt and recorded invalid: id → sha256."""
    return {a: r["sha256"] for a, r in artifact_rows(store).items() if r["watermark"] == watermark and not r["valid"]}


def _contents(store: Store) -> set[str]:
    """The sha256 of every file under the store but its SQLite files."""
    skip = {"ledger.sqlite", "ledger.sqlite-journal", "service.db"}
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in store.root.rglob("*")
            if p.is_file() and not p.is_symlink() and p.name not in skip}


def _training_rows(store: Store) -> int:
    """metrics.jsonl rows that hold values computed on the clients' training samples."""
    return sum(any(k in row for k in TRAINING_VALUES) for row in store.metrics())


def _check(store: Store):  # noqa: ANN202
    return runner.invoke(app, ["purge", "--store", str(store.root), "--check", "--json"])


def test_artifacts_rebuilt_from_data_forgotten_during_the_retrain_are_purged_when_it_ends(store, monkeypatch):
    sample = store.manifest()["partitions"]["2"][0][0]
    applied = _forget_during_retrain(store, monkeypatch, sample)
    _retrain(store)
    assert applied and applied[0].request == 2  # the request landed inside the retrain
    stale = _stale(store, watermark=1)
    assert stale, "the retrain rebuilt nothing from the request's data: the hook landed too late"
    ledger = store.ledger()
    try:
        rows = {(a, s): (r, done) for a, s, r, done in ledger.db.execute(
            "SELECT artifact, sha256, request, done FROM purged")}
        assert ledger.retrained_watermark() == 1 and ledger.last_request() == 2
    finally:
        ledger.close()
    for artifact, sha in stale.items():
        assert rows[(artifact, sha)] == (2, 1)  # purged by the request that made it stale, and done
        assert not store.artifact_path(sha).exists()
    assert not set(stale.values()) & _contents(store)  # no copy under any name (module caches included)
    check = _check(store)
    assert check.exit_code == 0 and json.loads(check.stdout)["clean"], check.stdout
    assert check_store(store).ok  # purged on purpose, not corrupt
    assert _training_rows(store) == 0  # the retrain's losses were computed on the forgotten sample too
    monkeypatch.undo()
    lines = len(store.metrics())
    _retrain(store)  # the next retrain rebuilds them without either request's data
    assert not _stale(store, watermark=2) and _check(store).exit_code == 0
    assert _training_rows(store) > 0 and len(store.metrics()) > lines  # its own losses saw no forgotten data


def test_without_the_end_of_run_purge_the_check_reports_the_stale_rebuilt_files_and_purge_deletes_them(
        store, monkeypatch):
    """Negative control: the check does see the stale bytes a retrain leaves behind."""
    applied = _forget_during_retrain(store, monkeypatch, store.manifest()["partitions"]["2"][0][0])
    monkeypatch.setattr(driver, "finish_pending_purges", lambda *_: None)
    _retrain(store)
    stale = _stale(store, watermark=1)
    assert applied and stale
    assert all(store.artifact_path(sha).exists() for sha in stale.values())
    check = _check(store)
    report = json.loads(check.stdout)
    assert check.exit_code == 1 and not report["clean"]
    assert set(report["pending"]) == set(stale) and report["training-rows"] > 0
    assert {f"artifacts/{sha}.safetensors" for sha in stale.values()} <= set(report["files"])
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 0
    assert not any(store.artifact_path(sha).exists() for sha in stale.values())
    assert _check(store).exit_code == 0
