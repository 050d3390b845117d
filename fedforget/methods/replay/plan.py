"""Replay's plan (pure: no torch, no flwr): one artifact per round, the last one served."""

from __future__ import annotations

from typing import Any

PLAN_KIND = "replay"


def round_artifact(server_round: int) -> str:
    """The global model after ``server_round``."""
    return f"replay/round-{server_round}"


def state_artifact(server_round: int) -> str:
    """The strategy's server state after ``server_round`` (momentum, moments): data-derived like the model."""
    return f"replay/state-{server_round}"


def replay_plan(num_rounds: int, stateful: bool) -> dict[str, Any]:
    """What the ledger keeps: the served artifact is the last round's model."""
    return {"kind": PLAN_KIND, "artifact": round_artifact(num_rounds), "rounds": num_rounds, "stateful": stateful}


def plan_artifacts(plan: dict[str, Any]) -> set[str]:
    """Every artifact a replay plan can hold."""
    rounds = int(plan.get("rounds", 0))
    out = {round_artifact(r) for r in range(1, rounds + 1)}
    if plan.get("stateful"):
        out |= {state_artifact(r) for r in range(1, rounds + 1)}
    return out


def resume_round(valid: set[str], num_rounds: int, stateful: bool) -> int:
    """The last round a retrain can resume from: its model (and state) valid, every round before it too
    (0: from the seeded start)."""
    done = 0
    for r in range(1, num_rounds + 1):
        if round_artifact(r) not in valid or (stateful and state_artifact(r) not in valid):
            break
        done = r
    return done
