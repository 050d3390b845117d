"""What is served after a forget request, for any stored plan: the plan's kind picks its method's rule.

Pure, so the ledger can call it inside a forget request's transaction. Each method declares the rule of
each plan kind it writes (``serving_rules``), read from the declarations the registry hands in
(:mod:`fedforget.core.known_methods`);
``single`` (one artifact, served or not) is the rule of every method that serves one model, and
``split`` is the same rule for one split model (a kind of its own because it is served by another
function).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from fedforget.core import known_methods


def single_serving(artifact: str, valid: Collection[str], kind: str = "single") -> dict[str, Any]:
    """The plan of a method with one artifact (fedavg, a split model, the retrain baseline): it or nothing."""
    served = [artifact] if artifact in set(valid) else []
    return {"kind": kind, "available": bool(served), "artifacts": served, "deletions-left": 0.0}


def single_from_json(plan_json: dict[str, Any], valid: Collection[str]) -> dict[str, Any]:
    return single_serving(str(plan_json["artifact"]), valid, str(plan_json.get("kind", "single")))


def compute_serving(plan_json: dict[str, Any], valid: Collection[str]) -> dict[str, Any]:
    """The serving plan of ``plan_json`` given the ``valid`` artifacts."""
    kind = plan_json.get("kind")
    entry = known_methods.for_plan(kind)
    if entry is None:
        raise ValueError(f"unknown plan kind {kind!r}")
    return entry.serving_rules[kind](plan_json, valid)
