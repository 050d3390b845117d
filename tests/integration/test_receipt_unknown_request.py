"""`fedforget receipt 99` on a store without request 99: one line, exit 2, before any key or training."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fedforget.unlearning import receipt as receipt_module
from fedforget.unlearning import verify as verify_module
from fedforget.unlearning.cli import app

from .helpers import train_in_process


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("receipt99") / "store", 2, **{"num-rounds": 1,
                                                                                   "train-size": 300})


def no_work(*_args, **_kwargs):  # noqa: ANN002, ANN003
    raise AssertionError("work was done before the request number was checked")


def test_receipt_of_an_unknown_request_exits_2_with_one_line_before_any_work(trained, monkeypatch):
    monkeypatch.setattr(verify_module, "verify_store", no_work)
    monkeypatch.setattr(receipt_module, "load_or_create_key", no_work)
    result = CliRunner().invoke(app, ["receipt", "99", "--store", str(trained.root)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown request 99" in lines[0] and "no forget requests" in lines[0]
    assert not (trained.root / "receipts").exists()
