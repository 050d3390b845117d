"""Two coordinators forgetting at once on one store: SQLite transactions serialise them, nothing is
lost, every request gets its own id, and the store passes its invariants."""

from __future__ import annotations

import json
import subprocess
import sys

from fedforget.store import Store
from fedforget.store.check import check_store

from .helpers import train_in_process


def test_two_coordinators_forgetting_at_once_are_serialised_and_lose_nothing(tmp_path):
    store = train_in_process(tmp_path / "s", 3, method="fedsgt", **{"chains.groups": 2, "chains.budget": 2},
                             **{"slices-per-client": 2, "local-epochs": 1})
    ids = sorted(i for part in store.manifest()["partitions"].values() for s in part for i in s)
    mine, theirs = ids[0:120:2], ids[1:120:2]
    overlap = ids[200:210]  # both name these: one of them records each, the other sees a no-op
    procs = [subprocess.Popen([sys.executable, "-m", "fedforget.faults", "forget-many", str(store.root),
                               "--samples", ",".join(map(str, chunk + overlap))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for chunk in (mine, theirs)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    recorded = [r for out, _ in outs for r in json.loads(out)["requests"] if r is not None]
    assert len(recorded) == len(set(recorded)) == len(mine) + len(theirs) + len(overlap)
    ledger = Store.open(store.root).ledger()
    try:
        forgotten = {r[0] for r in ledger.db.execute("SELECT sample FROM forgotten")}
        assert ledger.last_request() == len(recorded)
    finally:
        ledger.close()
    assert forgotten == set(mine) | set(theirs) | set(overlap)
    assert check_store(Store.open(store.root)).ok
