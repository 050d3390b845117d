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


@pytest.mark.parametrize("where", ["artifacts/.deadbeef.safetensors.tmp", "clients/1/hard-link"])
def test_a_hard_link_or_a_temporary_name_holding_the_purged_bytes_is_found(purged, tmp_path, where):
    store, data = purged
    outside = tmp_path / "kept.safetensors"
    outside.write_bytes(data)
    (store.root / where).parent.mkdir(parents=True, exist_ok=True)
    os.link(outside, store.root / where)  # one inode, two names: the one in the store is a regular file
    report = json.loads(_check(store).stdout)
    assert not report["clean"] and report["files"] == [where]


def test_the_purged_bytes_with_one_byte_appended_are_other_bytes(purged):
    store, data = purged
    (store.root / "backup.bin").write_bytes(data + b"\0")
    assert _check(store).exit_code == 0


@pytest.mark.timeout(120)
def test_a_symlink_loop_is_skipped_and_the_check_ends(purged):
    store, _ = purged
    (store.root / "clients" / "loop-a").symlink_to("loop-b")
    (store.root / "clients" / "loop-b").symlink_to("loop-a")
    (store.root / "clients" / "dot").symlink_to(".")
    assert _check(store).exit_code == 0


@pytest.mark.timeout(300)
def test_a_tree_deeper_than_a_path_can_name_is_reported_unreadable_not_clean(purged):
    store, data = purged
    fd = os.open(store.root, os.O_RDONLY)
    try:
        for _ in range(2100):  # 2 bytes a level: past PATH_MAX (4096) from the store's root
            os.mkdir("a", dir_fd=fd)
            deeper = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        hidden = os.open("model.bin", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.write(hidden, data)
        os.close(hidden)
    finally:
        os.close(fd)
    try:
        check = _check(store)
        assert check.exit_code == 1 and not json.loads(check.stdout)["clean"], check.stdout[:500]
    finally:
        _remove_deep(store.root / "a")


def _remove_deep(top: Path) -> None:
    """Remove a chain of single folders deeper than ``shutil.rmtree`` recurses (pytest's clean-up would fail)."""
    fds = [os.open(top, os.O_RDONLY)]
    while "a" in os.listdir(fds[-1]):
        fds.append(os.open("a", os.O_RDONLY, dir_fd=fds[-1]))
    for name in os.listdir(fds[-1]):
        os.unlink(name, dir_fd=fds[-1])
    for parent in reversed(fds[:-1]):
        os.close(fds.pop())
        os.rmdir("a", dir_fd=parent)
    os.close(fds.pop())
    os.rmdir(top)


def test_purged_bytes_under_a_database_name_are_not_taken_for_a_database(purged):
    """The SQLite files are checked through SQLite, not skipped: purged bytes named `service.db` are no database
    (reported, never opened by Python)."""
    store, data = purged
    (store.root / "service.db").write_bytes(data)
    report = json.loads(_check(store).stdout)
    assert not report["clean"] and [n.split(":")[0] for n in report["not-databases"]] == ["service.db"], report


def test_purged_bytes_under_a_wal_name_are_deleted_by_sqlite_itself(purged):
    """A store's ledger is in rollback-journal mode: SQLite deletes a WAL file beside it when it opens the ledger,
    so bytes planted as `ledger.sqlite-wal` are gone once any command has opened the store."""
    store, data = purged
    (store.root / "ledger.sqlite-wal").write_bytes(data)
    report = json.loads(_check(store).stdout)
    assert report["clean"] and not (store.root / "ledger.sqlite-wal").exists(), report


def test_a_sound_service_db_passes_the_sqlite_check(purged):
    import sqlite3

    store, _ = purged
    db = sqlite3.connect(store.root / "service.db")
    db.execute("CREATE TABLE t(x)")
    db.close()
    report = json.loads(_check(store).stdout)
    assert report["clean"] and report["not-databases"] == [], report
