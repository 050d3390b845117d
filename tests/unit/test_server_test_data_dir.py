"""run-config ``test-data``: the server evaluates on a directory's ``test`` records, rows numbered 0..n-1."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from fedforget.core.config import RunConfig
from fedforget.tasks import server_data
from fedforget.tasks.base import Examples
from fedforget.tasks.registry import get_task
from fedforget.tasks.server_data import ServerTestError, load_server_test


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The node data reader as the design names it, recording its calls (its own tests live with it)."""
    calls: list[tuple] = []

    def read_local_records(data_dir: Path, cfg: RunConfig, node: str, split: str = "train") -> object:
        calls.append((data_dir, node, split))
        labels = torch.tensor([4, 0, 2], dtype=torch.int64)
        examples = Examples((torch.rand(3, 64),), labels, torch.tensor([2**62, 17, 2**40], dtype=torch.int64))
        return types.SimpleNamespace(record_ids=["a", "b", "c"], examples=examples, digests={})

    module = types.ModuleType("fedforget.tasks.local_records")
    module.read_local_records = read_local_records  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fedforget.tasks.local_records", module)

    def refuse(cfg: RunConfig) -> None:
        raise AssertionError("test-data set, yet the test-only copy was written")

    monkeypatch.setattr(server_data, "_run_writer", refuse)
    return calls


def test_test_data_records_are_the_server_test_set_numbered_by_row(tmp_path: Path, records: list) -> None:
    cfg = RunConfig(task="digits-mlp").with_keys({"test-data": str(tmp_path)})
    test = load_server_test(cfg)
    assert records == [(tmp_path, "server", "test")]
    assert test.examples.ids.tolist() == [0, 1, 2] and test.examples.labels.tolist() == [4, 0, 2]
    assert test.num_classes == (getattr(get_task("digits-mlp"), "num_classes", 0) or 5)
    assert test.source == f"test-data {tmp_path}"


def test_a_relative_test_data_path_is_relative_to_fedforget_home(tmp_path: Path, records: list,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "server").mkdir()
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path))
    monkeypatch.chdir("/")
    load_server_test(RunConfig(task="digits-mlp").with_keys({"test-data": "server"}))
    assert records == [(tmp_path / "server", "server", "test")]


@pytest.mark.parametrize("make", ["absent", "file"])
def test_a_test_data_path_that_is_no_directory_is_refused_in_one_line(tmp_path: Path, records: list,
                                                                       make: str) -> None:
    path = tmp_path / "x"
    if make == "file":
        path.write_text("label,record_id\n")
    with pytest.raises(ServerTestError) as err:
        load_server_test(RunConfig(task="digits-mlp").with_keys({"test-data": str(path)}))
    assert "\n" not in str(err.value) and "'test-data'" in str(err.value) and records == []


def test_records_the_reader_refuses_are_refused_in_one_line(tmp_path: Path, records: list,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise ValueError("node 'server': test.csv has no column 'label'; add it")

    monkeypatch.setattr(sys.modules["fedforget.tasks.local_records"], "read_local_records", refuse)
    with pytest.raises(ServerTestError) as err:
        load_server_test(RunConfig(task="digits-mlp").with_keys({"test-data": str(tmp_path)}))
    assert str(err.value) == "run-config 'test-data': node 'server': test.csv has no column 'label'; add it"


def test_a_test_data_directory_without_test_records_is_refused_in_one_line(tmp_path: Path, records: list,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    empty = Examples((torch.zeros(0, 64),), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    monkeypatch.setattr(sys.modules["fedforget.tasks.local_records"], "read_local_records",
                        lambda *a, **k: types.SimpleNamespace(record_ids=[], examples=empty, digests={}))
    with pytest.raises(ServerTestError) as err:
        load_server_test(RunConfig(task="digits-mlp").with_keys({"test-data": str(tmp_path)}))
    assert "holds no test records" in str(err.value) and "\n" not in str(err.value)


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
