"""run-config ``test-data``: the server evaluates on a directory's ``test`` records, rows numbered 0..n-1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedforget.core.config import RunConfig
from fedforget.tasks import server_data
from fedforget.tasks.base import Examples
from fedforget.tasks.registry import get_task
from fedforget.tasks.server_data import ServerTestError, load_server_test


def write_test_csv(folder: Path, labels: list[int]) -> Path:
    """A ``test.csv`` of digits-mlp records (64 pixel values each) with these labels."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [f"r{i},{y},\"{' '.join(str((i + j) % 17) for j in range(64))}\"" for i, y in enumerate(labels)]
    (folder / "test.csv").write_text("record_id,label,pixels\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> None:
    """test-data set: the test-only copy must never be written."""

    def refuse(cfg: RunConfig) -> None:
        raise AssertionError("test-data set, yet the test-only copy was written")

    monkeypatch.setattr(server_data, "_run_writer", refuse)


def test_test_data_records_are_the_server_test_set_numbered_by_row(tmp_path: Path, records: None) -> None:
    cfg = RunConfig(task="digits-mlp").with_keys({"test-data": str(write_test_csv(tmp_path / "server", [4, 0, 2]))})
    test = load_server_test(cfg)
    assert test.examples.ids.tolist() == [0, 1, 2] and test.examples.labels.tolist() == [4, 0, 2]
    spec = get_task("digits-mlp")
    first = spec.scale_raw(np.asarray([[(0 + j) % 17 for j in range(64)]], dtype=np.float64))
    assert torch.equal(test.examples.inputs[0][0], torch.from_numpy(np.asarray(first))[0])  # the file's order
    assert test.num_classes == spec.num_classes == 10
    assert test.source == f"test-data {tmp_path / 'server'}"


def test_a_relative_test_data_path_is_relative_to_fedforget_home(tmp_path: Path, records: None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write_test_csv(tmp_path / "server", [1, 2])
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path))
    monkeypatch.chdir("/")
    test = load_server_test(RunConfig(task="digits-mlp").with_keys({"test-data": "server"}))
    assert test.source == f"test-data {tmp_path / 'server'}"


@pytest.mark.parametrize("make", ["absent", "file"])
def test_a_test_data_path_that_is_no_directory_is_refused_in_one_line(tmp_path: Path, records: None,
                                                                       make: str) -> None:
    path = tmp_path / "x"
    if make == "file":
        path.write_text("label,record_id\n")
    with pytest.raises(ServerTestError) as err:
        load_server_test(RunConfig(task="digits-mlp").with_keys({"test-data": str(path)}))
    assert "\n" not in str(err.value) and "'test-data'" in str(err.value)


@pytest.mark.parametrize(("content", "says"), [
    ("record_id,pixels\nr1,\"1 2\"\n", "label"),  # a column missing
    ("record_id,label,pixels\nr1,10,\"" + " ".join(["1"] * 64) + "\"\n", "label"),  # outside the classes
    ("record_id,label,pixels\nr1,1,\"1 2 3\"\n", "64"),  # not the task's pixel count
    ("record_id,label,pixels\n", "no"),  # no records
])
def test_records_the_reader_refuses_are_refused_in_one_line(tmp_path: Path, records: None, content: str,
                                                             says: str) -> None:
    (tmp_path / "test.csv").write_text(content, encoding="utf-8")
    with pytest.raises(ServerTestError) as err:
        load_server_test(RunConfig(task="digits-mlp").with_keys({"test-data": str(tmp_path)}))
    assert str(err.value).startswith("run-config 'test-data'") and "\n" not in str(err.value)
    assert says in str(err.value)


def test_safe_token_caches_of_test_data_are_named_by_their_rows() -> None:
    from fedforget.methods.safe.serve import _tokens_kind
    from fedforget.tasks.server_data import ServerTest

    def test(x: torch.Tensor) -> ServerTest:
        return ServerTest(Examples((x,), torch.zeros(2, dtype=torch.int64), torch.arange(2)), 10, "")

    plain, given = RunConfig(task="digits-mlp"), RunConfig(task="digits-mlp").with_keys({"test-data": "/d"})
    a, b = test(torch.zeros(2, 3)), test(torch.ones(2, 3))
    assert _tokens_kind(plain, a) == "test-digits-mlp"  # the shipped split keeps its cache (and served bytes)
    assert _tokens_kind(given, a) != _tokens_kind(given, b) and _tokens_kind(given, a).startswith("test-data-")
    assert _tokens_kind(given, a) == _tokens_kind(given, test(torch.zeros(2, 3)))
