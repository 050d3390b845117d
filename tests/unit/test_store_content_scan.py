"""The store walk behind ``purge --check`` goes by content: every regular file is hashed whatever its name or
folder; links are never followed (one out of the store is reported), fifos never opened, the store's SQLite
files never opened."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from fedforget.store import content_scan
from fedforget.store.content_scan import CHUNK, SQLITE_FILES, file_sha256, scan_store


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    (root / "clients" / "1" / "deep").mkdir(parents=True)
    (root / "artifacts").mkdir()
    (root / "artifacts" / "renamed.bin").write_bytes(b"purged bytes")
    (root / "clients" / "1" / "deep" / "x").write_bytes(b"other")
    return root


def test_every_regular_file_is_hashed_by_its_bytes_in_every_folder(store):
    scan = scan_store(store)
    assert scan.hashed == {"artifacts/renamed.bin": _sha(b"purged bytes"), "clients/1/deep/x": _sha(b"other")}
    assert (scan.outside_links, scan.special, scan.unreadable) == ([], [], [])


def test_a_file_larger_than_a_chunk_hashes_like_its_whole_bytes(tmp_path):
    data = os.urandom(2 * CHUNK + 17)
    (tmp_path / "big").write_bytes(data)
    assert file_sha256(tmp_path / "big") == _sha(data)


def test_a_link_out_of_the_store_is_reported_and_never_followed(store, tmp_path):
    outside = tmp_path / "outside-fifo"
    os.mkfifo(outside)  # following the link and opening it would block the walk
    (store / "clients" / "1" / "cache.safetensors").symlink_to(outside)
    (store / "clients" / "2").symlink_to(tmp_path, target_is_directory=True)
    scan = scan_store(store)
    assert scan.outside_links == [f"clients/1/cache.safetensors -> {outside}", f"clients/2 -> {tmp_path}"]
    assert set(scan.hashed) == {"artifacts/renamed.bin", "clients/1/deep/x"}


def test_a_link_inside_the_store_is_skipped_and_its_target_hashed_where_it_is(store):
    (store / "alias").symlink_to(store / "artifacts" / "renamed.bin")
    (store / "clients" / "up").symlink_to("../artifacts")
    scan = scan_store(store)
    assert scan.outside_links == [] and set(scan.hashed) == {"artifacts/renamed.bin", "clients/1/deep/x"}


def test_a_fifo_in_the_store_is_reported_and_never_opened(store):
    os.mkfifo(store / "clients" / "1" / "pipe")
    scan = scan_store(store)
    assert scan.special == ["clients/1/pipe"] and "clients/1/pipe" not in scan.hashed


def test_the_store_sqlite_files_are_never_opened_but_a_same_named_file_elsewhere_is_hashed(store, monkeypatch):
    for name in SQLITE_FILES:
        (store / name).write_bytes(b"purged bytes")
    (store / "clients" / "1" / "ledger.sqlite").write_bytes(b"purged bytes")
    opened: list[str] = []
    real_open = os.open

    def spy(path, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(content_scan.os, "open", spy)
    scan = scan_store(store)
    assert opened and not [p for p in opened if Path(p).parent == store and Path(p).name in SQLITE_FILES]
    assert not set(scan.hashed) & SQLITE_FILES
    assert scan.hashed["clients/1/ledger.sqlite"] == _sha(b"purged bytes")
