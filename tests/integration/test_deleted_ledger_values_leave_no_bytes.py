"""What a purge deletes from the ledger is gone from the file too: SQLite zeroes deleted rows
(``secure_delete``) instead of leaving them in free pages, on every connection to ``ledger.sqlite`` and
``service.db``. The file is read only after every connection to it is closed. Debian's SQLite is built with
secure_delete on by default, others are not: every connection here starts with it off, as in those builds."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from fedforget.service.requests_db import RequestsDB
from fedforget.store.ledger import Ledger
from fedforget.store.purge import AUDIT_KEY
from fedforget.unlearning.cli import app

from .helpers import train_in_process

FEDAVG = {"method": "fedavg", "num-rounds": 1, "train-size": 150, "test-size": 100, "partitioner": "iid"}
MARKER = "forgotten_mean_loss"
VALUE = 0.000123456789
LOSSES = [round(0.5 + i / 1000, 6) for i in range(1000)]  # a per-sample list: the row spans overflow pages
runner = CliRunner()


@pytest.fixture(autouse=True)
def default_off(monkeypatch):  # noqa: ANN201
    """A SQLite built without SECURE_DELETE: each new connection starts with it off."""
    real = sqlite3.connect

    def connect(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        db = real(*args, **kwargs)
        db.execute("PRAGMA secure_delete=OFF")
        return db

    monkeypatch.setattr(sqlite3, "connect", connect)


def _legacy_measurement(store_root: Path, request: int) -> None:
    """What a store written before the ledger kept only the audit's decision holds: its measurements."""
    ledger = Ledger(store_root / "ledger.sqlite", create=False)
    try:
        ledger.set_meta(AUDIT_KEY, {"request": request, "forgotten": 50, "held_out": 100, "verdict": None,
                                    "result": {"loss_threshold_ci95": [0.8, 0.95], "losses": LOSSES, MARKER: VALUE}})
    finally:
        ledger.close()


def _holds(path: Path) -> bool:
    data = path.read_bytes()
    return MARKER.encode() in data or repr(VALUE).encode() in data


def test_the_audit_measurements_a_purge_rewrites_leave_no_bytes_in_the_ledger_file(tmp_path):
    store = train_in_process(tmp_path / "store", 3, **FEDAVG)
    sample = store.manifest()["partitions"]["1"][0][0]
    forget = runner.invoke(app, ["forget", "--store", str(store.root), "--sample", str(sample), "--audit-before"])
    assert forget.exit_code == 0, forget.stdout
    _legacy_measurement(store.root, 1)
    ledger_file = store.root / "ledger.sqlite"
    assert _holds(ledger_file)
    control = tmp_path / "control.sqlite"
    shutil.copyfile(ledger_file, control)
    assert runner.invoke(app, ["purge", "--store", str(store.root)]).exit_code == 0
    assert not _holds(ledger_file)  # every connection is closed: the CLI's own ones included
    # negative control: the same rewrite without secure_delete leaves the old value in the file's free space
    db = sqlite3.connect(control, isolation_level=None)
    db.execute("UPDATE meta SET value='{}' WHERE key=?", (AUDIT_KEY,))
    db.close()
    assert _holds(control)


def test_every_connection_to_the_ledger_and_the_service_db_zeroes_deleted_rows(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    service = RequestsDB(SimpleNamespace(root=tmp_path))._connect()
    try:
        assert ledger.db.execute("PRAGMA secure_delete").fetchone()[0] == 1
        assert service.execute("PRAGMA secure_delete").fetchone()[0] == 1
    finally:
        ledger.close()
        service.close()
