"""What is served after a forget request, for any stored plan: the plan's kind picks its method's rule.

Pure, so the ledger can call it inside a forget request's transaction. Each method's rule lives in its
own planning module and is imported when a plan of its kind is read; ``single`` (one artifact, served
or not) is the rule of every method that serves one model, and ``split`` is the same rule for one split
model (a kind of its own because it is served by another function).
"""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import Any

#: plan kind → "module:function(plan_json, valid)" returning the serving plan.
SERVING_RULES: dict[str, str] = {
    "single": "fedforget.core.serving_plans:single_from_json",
    "split": "fedforget.core.serving_plans:single_from_json",
    "chains": "fedforget.core.chains:serving_from_json",
    "fedshard": "fedforget.core.fedshard:fedshard_serving",
    "safe": "fedforget.core.safe_graph:safe_serving",
}


def single_serving(artifact: str, valid: Collection[str], kind: str = "single") -> dict[str, Any]:
    """The plan of a method with one artifact (fedavg, a split model, the retrain baseline): it or nothing."""
    served = [artifact] if artifact in set(valid) else []
    return {"kind": kind, "available": bool(served), "artifacts": served, "deletions-left": 0.0}


def single_from_json(plan_json: dict[str, Any], valid: Collection[str]) -> dict[str, Any]:
    return single_serving(str(plan_json["artifact"]), valid, str(plan_json.get("kind", "single")))


def compute_serving(plan_json: dict[str, Any], valid: Collection[str]) -> dict[str, Any]:
    """The serving plan of ``plan_json`` given the ``valid`` artifacts."""
    kind = plan_json.get("kind")
    if kind not in SERVING_RULES:
        raise ValueError(f"unknown plan kind {kind!r}")
    module, _, name = SERVING_RULES[kind].partition(":")
    return getattr(importlib.import_module(module), name)(plan_json, valid)
