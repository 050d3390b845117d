"""Does a store agree with itself? The invariants a crash, a corrupt disk or a concurrent writer must
never break, checked from the files alone (used by ``fedforget status`` and the crash campaigns).

- every request is whole: each sample it names is forgotten by it or an earlier request, and its
  recorded sample count matches its ``forgotten`` rows (applied, never half);
- no valid artifact has seen data forgotten after it was trained (its watermark);
- every served artifact is valid and its bytes match its sha256;
- every artifact the ledger records is an artifact of the plan, stored on disk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fedforget.store.ledger import Ledger
from fedforget.store.store import ARTIFACTS, Store


@dataclass
class StoreCheck:
    problems: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    leftover_temp_files: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems, "corrupt": self.corrupt,
                "leftover-temp-files": self.leftover_temp_files}


def corrupt_artifacts(store: Store, ledger: Ledger) -> set[str]:
    """Recorded artifacts whose file is missing or whose bytes no longer match their sha256 (a purged
    artifact's file is gone on purpose: it is not corrupt)."""
    from fedforget.store.purge import purged_artifacts

    gone = purged_artifacts(ledger.db)
    return {a["artifact"] for a in ledger.artifacts() if a["artifact"] not in gone and
            not store.verify_artifact(a["sha256"])}


def check_store(store: Store) -> StoreCheck:
    out = StoreCheck()
    ledger = store.ledger()
    try:
        db = ledger.db
        out.corrupt = sorted(corrupt_artifacts(store, ledger))
        for rid, spec, count in db.execute("SELECT id, spec, samples FROM requests ORDER BY id"):
            rows = db.execute("SELECT COUNT(*) FROM forgotten WHERE request=?", (rid,)).fetchone()[0]
            if rows != count:
                out.problems.append(f"request {rid} is half applied: {rows} forgotten rows, {count} recorded")
            named = json.loads(spec).get("samples", [])
            for sample in named:
                hit = db.execute("SELECT request FROM forgotten WHERE sample=?", (sample,)).fetchone()
                if hit is None or hit[0] > rid:
                    out.problems.append(f"request {rid} names sample {sample}, which is not forgotten")
                    break
        stale = db.execute(
            "SELECT DISTINCT a.artifact FROM artifacts a JOIN lineage l ON l.artifact = a.artifact "
            "JOIN forgotten f ON f.unit = l.unit WHERE a.valid = 1 AND f.request > a.watermark").fetchall()
        out.problems += [f"artifact {a} is valid but saw forgotten data" for (a,) in stale]
        valid = ledger.valid_artifacts()
        served = set(ledger.serving().get("artifacts", []))
        out.problems += [f"served artifact {a} is not valid" for a in sorted(served - valid)]
        out.problems += [f"served artifact {a} is corrupt or missing" for a in sorted(served & set(out.corrupt))]
        plan = ledger.plan()
        if plan is not None:
            known = _plan_artifacts(plan)
            if known is not None:
                recorded = {a["artifact"] for a in ledger.artifacts()}
                out.problems += [f"artifact {a} is not in the plan" for a in sorted(recorded - known)]
    finally:
        ledger.close()
    out.leftover_temp_files = sum(1 for _ in (store.root / ARTIFACTS).glob(".*.tmp"))
    return out


def _plan_artifacts(plan: dict[str, Any]) -> set[str] | None:
    """Every artifact id a chains plan can produce (None for other plan kinds)."""
    if plan.get("kind") != "chains":
        return None
    from fedforget.core.chains import ChainPlan

    try:
        chains = ChainPlan.from_json(plan)
    except (KeyError, TypeError, ValueError):
        return None
    return {chains.artifact_id(c, p) for c in chains.chains() for p in range(1, chains.phases(c) + 1)}
