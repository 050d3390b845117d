"""Secret files are created once, owner-only, in directories owner-only all the way down: racing first uses
(threads or processes) agree on one secret without an error, and a secret open to others is not used silently."""

from __future__ import annotations

import multiprocessing as mp
import os
import stat
import threading
from pathlib import Path

import pytest

from fedforget.methods.safe.dp import SECRET_BYTES
from fedforget.methods.safe.node_secret import node_secret, secret_path
from fedforget.store.secret_files import create_once, mkdir_private
from fedforget.store.store import Store
from fedforget.unlearning import receipt as rc

RACERS = 8


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _race_threads(work) -> list:  # noqa: ANN001
    barrier, results, errors = threading.Barrier(RACERS), [None] * RACERS, []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - every racer's failure is the finding
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def test_racing_threads_create_one_secret_and_every_racer_reads_it(tmp_path, umask_022):
    for attempt in range(20):
        path = tmp_path / f"a{attempt}" / "b" / "secret"
        got = _race_threads(lambda i, p=path: create_once(p, os.urandom(16) + bytes([i])))
        assert len(set(got)) == 1 and path.read_bytes() == got[0]
        assert sorted(p.name for p in path.parent.iterdir()) == ["secret"]  # no temp file left behind
        assert mode(path) == 0o600 and mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700


def _create_in_process(barrier, out, path: str) -> None:  # noqa: ANN001
    barrier.wait()
    try:
        out.put(create_once(Path(path), os.urandom(32)))
    except BaseException as exc:  # noqa: BLE001
        out.put(repr(exc))


def test_racing_processes_create_one_secret_without_file_exists_error(tmp_path, umask_022):
    ctx = mp.get_context("fork")
    for attempt in range(6):
        path = tmp_path / f"p{attempt}" / "deep" / "secret"
        barrier, out = ctx.Barrier(RACERS), ctx.Queue()
        procs = [ctx.Process(target=_create_in_process, args=(barrier, out, str(path))) for _ in range(RACERS)]
        for p in procs:
            p.start()
        got = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(60)
        assert len(set(got)) == 1 and got[0] == path.read_bytes(), got


def test_racing_first_uses_of_a_node_secret_agree_on_one_secret(tmp_path):
    for attempt in range(10):
        state = tmp_path / f"node{attempt}"
        got = _race_threads(lambda _i, s=state: node_secret(s))
        assert len(set(got)) == 1 and len(got[0]) == SECRET_BYTES


def test_a_node_secret_others_can_read_is_narrowed_to_owner_only(tmp_path):
    secret = node_secret(tmp_path / "node")
    path = secret_path(tmp_path / "node")
    path.chmod(0o644)
    assert node_secret(tmp_path / "node") == secret and mode(path) == 0o600


def test_a_create_once_loser_refuses_an_unusable_winner(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"short")
    with pytest.raises(FileExistsError):
        create_once(path, b"x" * 32, accept=lambda data: len(data) == 32)
    assert path.read_bytes() == b"short"


def test_mkdir_private_makes_every_directory_it_creates_owner_only_and_leaves_existing_parents(tmp_path, umask_022):
    tmp_path.chmod(0o755)
    leaf = mkdir_private(tmp_path / "x" / "y" / "z")
    assert [mode(p) for p in (tmp_path / "x", tmp_path / "x" / "y", leaf)] == [0o700] * 3
    assert mode(tmp_path) == 0o755
    _race_threads(lambda _i: mkdir_private(tmp_path / "r" / "s" / "t"))
    assert mode(tmp_path / "r") == 0o700 and mode(tmp_path / "r" / "s" / "t") == 0o700


def test_a_store_created_below_missing_folders_and_its_client_dirs_are_owner_only(tmp_path, umask_022):
    store = Store.create(tmp_path / "runs" / "deep" / "s", {"task": "digits-mlp"})
    client = store.client_dir(3)
    for path in (tmp_path / "runs", tmp_path / "runs" / "deep", store.root, client.parent, client):
        assert mode(path) == 0o700, path


def test_a_receipt_key_open_to_others_is_refused_naming_the_chmod(tmp_path, monkeypatch):
    monkeypatch.setenv(rc.KEY_ENV, str(tmp_path / "keys" / "k.pem"))
    rc.load_or_create_key()
    (tmp_path / "keys" / "k.pem").chmod(0o640)
    with pytest.raises(rc.ReceiptKeyError, match=r"mode 0640.*chmod 600"):
        rc.load_or_create_key()
    (tmp_path / "keys" / "k.pem").chmod(0o600)
    rc.load_or_create_key()
