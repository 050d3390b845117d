"""`purge --check` proves by content that no purged bytes are left: the bytes of a purged artifact under any
other name, in any folder (a client's state dir included), are found and deleted by `purge`; a symlink out of
the store and a fifo in it cannot be hashed, so they are refused (reported, never followed or opened) and the
store is not clean while they are there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedforget.store import Store
from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request

from .helpers import artifact_shas, copy_store, train_in_process

NODES = 3
FEDAVG = {"method": "fedavg", "num-rounds": 1, "train-size": 150, "test-size": 100, "partitioner": "iid"}
runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return train_in_process(tmp_path_factory.mktemp("content") / "store", NODES, **FEDAVG).root


@pytest.fixture
def purged(trained, tmp_path) -> tuple[Store, bytes]:
    """A store whose one artifact was purged by a request, and the bytes that were purged."""
    store = copy_store(trained, tmp_path)
    sha = next(iter(artifact_shas(store).values()))
    data = store.artifact_path(sha).read_bytes()
    result = forget_request(store, samples=[store.manifest()["partitions"]["1"][0][0]])
    assert result.invalidated and not store.artifact_path(sha).exists()
    check = _check(store)
    assert check.exit_code == 0 and json.loads(check.stdout)["hashed-files"] > 0, check.stdout  # clean before
    return store, data


def _check(store: Store, *extra: str):  # noqa: ANN202
    return runner.invoke(app, ["purge", "--store", str(store.root), "--check", "--json", *extra])


@pytest.mark.parametrize("where", ["artifacts/renamed.bin", "clients/1/cache/model.bin", "backup.safetensors",
                                   "clients/7/.hidden"])
def test_the_purged_bytes_under_another_name_are_found_and_purge_deletes_them(purged, where):
    store, data = purged
    copy = store.root / where
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(data)
    check = _check(store)
    report = json.loads(check.stdout)
    assert check.exit_code == 1 and not report["clean"] and report["files"] == [where]
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 0
    assert not copy.exists() and _check(store).exit_code == 0


def test_other_bytes_under_any_name_are_no_finding(purged):
    """Negative control: the check compares content, it does not flag every file it hashes."""
    store, data = purged
    (store.root / "clients" / "1").mkdir(parents=True, exist_ok=True)
    (store.root / "clients" / "1" / "model.bin").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert _check(store).exit_code == 0


def test_a_symlink_to_the_purged_bytes_outside_the_store_is_refused_and_never_followed(purged, tmp_path):
    store, data = purged
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(data)
    link = store.root / "clients" / "1" / "model.safetensors"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    check = _check(store)
    report = json.loads(check.stdout)
    assert check.exit_code == 1 and not report["clean"] and report["files"] == []
    assert report["outside-links"] == [f"clients/1/model.safetensors -> {outside}"]
    text = runner.invoke(app, ["purge", "--store", str(store.root), "--check"])
    refused = [line for line in text.stdout.splitlines() if "refused" in line]
    assert text.exit_code == 1 and len(refused) == 1 and "clients/1/model.safetensors" in refused[0]
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 1  # it cannot prove it either
    assert outside.read_bytes() == data and link.is_symlink()  # neither followed nor deleted
    link.unlink()
    assert _check(store).exit_code == 0


def test_a_fifo_in_the_store_is_reported_without_being_opened(purged):
    store, _ = purged
    fifo = store.root / "clients" / "1" / "pipe"
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)  # opening it to read would block until a writer comes: the check would hang
    check = _check(store)
    report = json.loads(check.stdout)
    assert check.exit_code == 1 and not report["clean"] and report["special-files"] == ["clients/1/pipe"]
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 1
    fifo.unlink()
    assert _check(store).exit_code == 0
