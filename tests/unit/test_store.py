import stat

import numpy as np
import pytest

from fedforget.store import Store, StoreError


def test_created_store_opens_and_is_owner_only(tmp_path):
    Store.create(tmp_path / "s", {"task": "t"})
    assert Store.open(tmp_path / "s").manifest()["task"] == "t"
    assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o700


def test_a_path_that_is_not_a_store_is_reported(tmp_path):
    with pytest.raises(StoreError, match="no such directory"):
        Store.open(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="no manifest.json"):
        Store.open(tmp_path / "empty")
    (tmp_path / "empty" / "manifest.json").write_text("{not json")
    with pytest.raises(StoreError, match="not valid JSON"):
        Store.open(tmp_path / "empty")


def test_equal_arrays_give_the_same_content_address(tmp_path):
    store = Store.create(tmp_path / "s", {})
    arrays = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.ones(3, np.float32)}
    sha1 = store.put_arrays(arrays, {"x": "1", "y": "2", "z": "3"})
    sha2 = store.put_arrays(dict(reversed(list(arrays.items()))), {"z": "3", "y": "2", "x": "1"})
    assert sha1 == sha2
    assert store.put_arrays({**arrays, "a": np.zeros(3, np.float32)}) != sha1
    loaded = store.get_arrays(sha1)
    assert all(np.array_equal(loaded[k], arrays[k]) for k in arrays)


def test_a_corrupted_artifact_is_never_loaded(tmp_path):
    store = Store.create(tmp_path / "s", {})
    sha = store.put_arrays({"w": np.ones(4, np.float32)})
    path = store.artifact_path(sha)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert not store.verify_artifact(sha)
    with pytest.raises(StoreError, match="corrupt"):
        store.get_arrays(sha)


def test_metrics_survive_a_torn_last_line(tmp_path):
    store = Store.create(tmp_path / "s", {})
    store.append_metrics({"round": 1, "accuracy": 0.5})
    with open(store.root / "metrics.jsonl", "a") as fh:
        fh.write('{"round": 2, "acc')
    assert store.metrics() == [{"round": 1, "accuracy": 0.5}]


def test_relative_store_paths_resolve_against_fedforget_home(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path))
    store = Store.create("runs/x", {})
    assert store.root == tmp_path / "runs" / "x"
    assert (tmp_path / "runs" / "x" / "manifest.json").is_file()
