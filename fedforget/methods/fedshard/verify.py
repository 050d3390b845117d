"""What ``fedforget verify`` needs of a FedShard store: its scratch run replays the stored tree. The tree's
merges and rounds were planned from update angles the leaver influenced, so "from scratch" means "on the
same plan" (FedShard's guarantee)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedforget.core.config import RunConfig
from fedforget.store import Store


def prepare_scratch(store: Store, cfg: RunConfig, scratch_root: Path, workdir: Path,
                    config: dict[str, Any]) -> set[int]:
    plan = store.manifest().get("plan") or {}
    if plan.get("kind") == "fedshard":
        plan_file = workdir / "plan.json"
        plan_file.write_text(json.dumps(plan), encoding="utf-8")
        config["fedshard.plan-file"] = str(plan_file)
    return set()
