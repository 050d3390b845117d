"""``fedforget verify``: train from scratch on the remaining data and compare served artifacts bit for bit.

The scratch run is the same method, config, seed and plan (groups, sequences, clusters are drawn
from the seed and the original partition plan, DESIGN §1), executed by the real ServerApp and
ClientApp objects on an in-process Grid whose clients hold tombstones for every forgotten sample.
Artifacts are content-addressed, so equal sha256 means equal bytes of every tensor. FedShard's
scratch run replays the stored tree (``plan-file``): its merges and rounds were planned from update
angles the leaver influenced, so "from scratch" means "on the same plan" (digest §1, G17).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from fedforget.store import Store


def verify_store(store: Store, include_all: bool = False, workdir: Path | None = None) -> dict[str, Any]:
    from fedforget.inprocess import run_in_process
    from fedforget.store.tombstones import add_tombstones
    from fedforget.strategies.client_work import dataset_key
    from fedforget.unlearning.evaluate import stored_config

    cfg = stored_config(store)
    manifest = store.manifest()
    ledger = store.ledger()
    try:
        forgotten = ledger.forgotten_by_partition()
        artifacts = ledger.artifacts()
        serving = ledger.serving()
        from fedforget.store.safe_budget import dp_exposed_to_forgotten  # SAFE-DP (issue 6)

        dp_covered = dp_exposed_to_forgotten(ledger)
    finally:
        ledger.close()
    served = set(serving.get("artifacts", []))
    with tempfile.TemporaryDirectory(prefix="fedforget-verify-", dir=workdir) as tmp:
        scratch_root = Path(tmp) / "scratch"
        for partition, ids in forgotten.items():
            add_tombstones(scratch_root / "clients" / str(partition), dataset_key(cfg), ids)
        config = {**cfg.to_dict(), "store": str(scratch_root), "action": "train"}
        if (manifest.get("plan") or {}).get("kind") == "fedshard":  # same plan: FedShard's guarantee (G17)
            plan_file = Path(tmp) / "plan.json"
            plan_file.write_text(json.dumps(manifest["plan"]), encoding="utf-8")
            config["plan-file"] = str(plan_file)
        run_in_process(config, int(manifest["num-partitions"]))
        scratch = Store.open(scratch_root)
        other = scratch.ledger()
        try:
            scratch_shas = {a["artifact"]: a["sha256"] for a in other.artifacts()}
        finally:
            other.close()
    compared = []
    for a in artifacts:
        if not include_all and a["artifact"] not in served:
            continue
        theirs = scratch_shas.get(a["artifact"])
        compared.append({"artifact": a["artifact"], "served": a["artifact"] in served, "valid": a["valid"],
                         "sha256": a["sha256"], "scratch_sha256": theirs, "equal": theirs == a["sha256"],
                         "dp_covered": a["artifact"] in dp_covered})
    served_rows = [c for c in compared if c["served"] and not c["dp_covered"]]
    return {
        "exact": bool(served_rows) and all(c["equal"] for c in served_rows),
        "served": len(served_rows),
        "served_equal": sum(c["equal"] for c in served_rows),
        "forgotten_samples": sum(len(v) for v in forgotten.values()),
        "dp_covered": sorted(c["artifact"] for c in compared if c["served"] and c["dp_covered"]),
        "compared": compared,
        "reason": None if served_rows else "nothing is served; run `fedforget retrain` first",
    }
