"""An index whose entries no longer match its table (what a writer without SQLite's lock leaves behind) makes
every command refuse the store: the check runs SQLite's integrity_check, which compares each index with its
table, where quick_check does not look at index contents."""

from __future__ import annotations

import sqlite3

import pytest

from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.unlearning.cli import main

from .helpers import copy_store, train_in_process


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("index-corruption") / "store"
    train_in_process(root, 3, method="fedsgt", **{"chains.groups": 2, "chains.budget": 2})
    return root


def _skew_index(store: Store) -> None:
    """Point an index's definition at another column, so its stored entries no longer match the rows."""
    db = sqlite3.connect(store.root / "ledger.sqlite", isolation_level=None)
    try:
        db.execute("PRAGMA writable_schema=ON")
        db.execute("UPDATE sqlite_master SET sql = replace(sql, 'lineage(artifact)', 'lineage(unit)') "
                   "WHERE name = 'lineage_by_artifact'")
    finally:
        db.close()


def test_an_honest_store_passes_and_a_skewed_index_is_refused_by_every_command(trained, tmp_path, capsys):
    store = copy_store(trained, tmp_path)
    assert check_store(store).ok
    quick = sqlite3.connect(store.root / "ledger.sqlite")
    _skew_index(store)
    try:
        assert quick.execute("PRAGMA quick_check(lineage)").fetchone()[0] == "ok"  # what the check missed
    finally:
        quick.close()
    result = check_store(Store.open(store.root))
    assert any("integrity_check of lineage" in p for p in result.problems), result.problems
    for args in (["status"], ["forget", "--sample", "3"], ["purge", "--check"]):
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--store", str(store.root)])
        assert exit_.value.code == 1, args
    assert "is corrupt" in capsys.readouterr().err
