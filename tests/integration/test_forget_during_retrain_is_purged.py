"""A request applied while a retrain runs erases what that retrain rebuilds from its data: each such artifact
is recorded stale with its purge in the same transaction, and its bytes are gone when the retrain ends, so
``purge --check`` is clean with no copy left. The request lands deterministically between the retrain's
start (its watermark fixed) and its ``record_artifact`` calls, through the driver's named point
``retrain:forget-sent`` (a test-only hook: served bytes do not change)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from fedforget.core.slicing import UnitId
from fedforget.federation import driver
from fedforget.methods.chains import server as chains_server
from fedforget.methods.chains.shipping import ModuleShipping
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.store import StoreError
from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request

from .helpers import (
    artifact_rows,
    copy_store,
    file_digests,
    lineage,
    retrain_in_process,
    stale_artifacts,
    train_in_process,
    training_rows,
)

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


def _check(store: Store):  # noqa: ANN202
    return runner.invoke(app, ["purge", "--store", str(store.root), "--check", "--json"])


def test_artifacts_rebuilt_from_data_forgotten_during_the_retrain_are_purged_when_it_ends(store, monkeypatch):
    sample = store.manifest()["partitions"]["2"][0][0]
    applied = _forget_during_retrain(store, monkeypatch, sample)
    retrain_in_process(store, NODES)
    assert applied and applied[0].request == 2  # the request landed inside the retrain
    stale = stale_artifacts(store, watermark=1)
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
    assert not set(stale.values()) & file_digests(store)  # no copy under any name (module caches included)
    check = _check(store)
    assert check.exit_code == 0 and json.loads(check.stdout)["clean"], check.stdout
    assert check_store(store).ok  # purged on purpose, not corrupt
    assert training_rows(store) == 0  # the retrain's losses were computed on the forgotten sample too
    monkeypatch.undo()
    lines = len(store.metrics())
    retrain_in_process(store, NODES)  # the next retrain rebuilds them without either request's data
    assert not stale_artifacts(store, watermark=2) and _check(store).exit_code == 0
    assert training_rows(store) > 0 and len(store.metrics()) > lines  # its own losses saw no forgotten data


def test_without_the_end_of_run_purge_the_check_reports_the_stale_rebuilt_files_and_purge_deletes_them(
        store, monkeypatch):
    """Negative control: the check does see the stale bytes a retrain leaves behind."""
    applied = _forget_during_retrain(store, monkeypatch, store.manifest()["partitions"]["2"][0][0])
    monkeypatch.setattr(driver, "finish_pending_purges", lambda *_: None)
    retrain_in_process(store, NODES)
    stale = stale_artifacts(store, watermark=1)
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


def _unforgotten_sample(store: Store, units: list[str]) -> int:
    """A sample of one of ``units`` that no request has forgotten (the fixture's request took partition 1's
    first sample)."""
    taken = store.manifest()["partitions"]["1"][0][0]
    for unit in units:
        u = UnitId.parse(unit)
        for sample in store.manifest()["partitions"][str(u.partition)][u.slice]:
            if sample != taken:
                return int(sample)
    raise AssertionError(f"no sample left in {units}")


def _position(artifact: str) -> int:
    return int(artifact.rsplit("/p", 1)[1])


def _chain_length(store: Store, artifact: str) -> int:
    chain = artifact.rsplit("/p", 1)[0]
    return max(_position(a) for a in artifact_rows(store) if a.startswith(chain + "/p"))


def _forget_what_the_retrain_just_built(store: Store, monkeypatch) -> list:  # noqa: ANN001
    """At the first module the retrain records that a later position of its chain builds on, apply a request
    for a sample in its lineage: the request invalidates it and its purge deletes the file while the retrain
    still has to send it to the next position's nodes."""
    applied: list = []
    real = chains_server.crash_point

    def hook(name: str) -> None:
        if name == "chains:position-recorded" and not applied:
            rebuilt = [a for a, r in artifact_rows(store).items() if r["watermark"] == 1 and r["valid"]
                       and _position(a) < _chain_length(store, a)]
            if rebuilt:
                sample = _unforgotten_sample(store, lineage(store, rebuilt[0]))
                applied.append((rebuilt[0], forget_request(store, samples=[sample])))
        real(name)

    monkeypatch.setattr(chains_server, "crash_point", hook)
    return applied


def test_a_request_that_purges_a_module_the_retrain_just_built_leaves_the_retrain_to_finish(store, monkeypatch):
    applied = _forget_what_the_retrain_just_built(store, monkeypatch)
    retrain_in_process(store, NODES)
    assert applied, "the retrain recorded no module a later position builds on"
    module, result = applied[0]
    assert result.request == 2 and module in result.invalidated
    stale = stale_artifacts(store, watermark=1)
    assert module in stale and len(stale) > 1  # the module and what the retrain built on it after its purge
    assert not set(stale.values()) & file_digests(store)
    check = _check(store)
    assert check.exit_code == 0 and json.loads(check.stdout)["clean"], check.stdout
    assert check_store(store).ok
    monkeypatch.undo()
    retrain_in_process(store, NODES)
    assert not stale_artifacts(store, watermark=2) and _check(store).exit_code == 0


def test_without_holding_the_modules_it_built_the_retrain_fails_on_the_purged_file(store, monkeypatch):
    """Negative control: the request above really deletes a file the retrain still sends."""
    applied = _forget_what_the_retrain_just_built(store, monkeypatch)
    monkeypatch.setattr(ModuleShipping, "module_bytes",
                        lambda self, sha: np.frombuffer(self.store.artifact_bytes(sha), dtype=np.uint8))
    with pytest.raises(StoreError, match="is missing from"):
        retrain_in_process(store, NODES)
    assert applied


def test_a_request_that_purges_a_reusable_prefix_before_the_retrain_reads_it_leaves_that_chain_unbuilt(
        store, monkeypatch):
    """The request lands after the retrain chose what to rebuild and before it read the valid prefixes."""
    applied: list = []
    real_train = chains_server.ChainTrainer.train

    def train(self, start: dict[str, int]) -> None:  # noqa: ANN001
        if self.watermark == 1 and not applied:
            key = next(k for k, position in sorted(start.items()) if position >= 2)
            prefix = self.plan.artifact_id(next(c for c in self.plan.chains() if c.key == key), 1)
            applied.append((key, start[key], forget_request(store, samples=[
                _unforgotten_sample(store, lineage(store, prefix))])))
        real_train(self, start)

    monkeypatch.setattr(chains_server.ChainTrainer, "train", train)
    retrain_in_process(store, NODES)
    key, position, result = applied[0]
    assert result.request == 2
    ledger = store.ledger()
    try:
        unbuilt = ledger.get_meta("unbuilt")["artifacts"]
        assert ledger.retrained_watermark() == 1
    finally:
        ledger.close()
    assert f"fedsgt/{key}/p{position}" in unbuilt
    check = _check(store)
    assert check.exit_code == 0 and json.loads(check.stdout)["clean"], check.stdout
    assert check_store(store).ok
    monkeypatch.undo()
    retrain_in_process(store, NODES)  # rebuilds the chain left unbuilt, without either request's data
    rows = artifact_rows(store)
    assert rows[f"fedsgt/{key}/p{position}"]["valid"] and rows[f"fedsgt/{key}/p{position}"]["watermark"] == 2
