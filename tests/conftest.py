"""Shared test set-up: offline hubs, one machine-wide backbone cache."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FEDFORGET_CACHE", str(Path(__file__).resolve().parent.parent / ".cache"))
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")

from hypothesis import settings  # noqa: E402

# Every app and the coordinator import the methods' registry, which hands their declarations to the run config's
# parser and the store's ledger (fedforget.core.known_methods); tests that start from core do the same.
import fedforget.methods.registry  # noqa: E402,F401

# Property tests check behaviour, not speed: on a loaded 2-core machine one example can pass 200 ms.
settings.register_profile("fedforget", deadline=None)
settings.load_profile("fedforget")

#: the end-to-end tier's measured durations (each test's setup + call), which order the tier longest first
E2E_DURATIONS = Path(__file__).resolve().parent.parent / "docs" / "results" / "e2e_durations.json"
#: what a test not yet measured is taken to last: placed among the long ones rather than last
UNMEASURED_SECONDS = 300.0


def _measured_seconds() -> dict[str, float]:
    import json

    try:
        rows = json.loads(E2E_DURATIONS.read_text(encoding="utf-8")).get("durations", [])
    except (OSError, ValueError):
        return {}
    seconds: dict[str, float] = {}
    for row in rows:
        seconds[row["test"]] = seconds.get(row["test"], 0.0) + float(row["seconds"])
    return seconds


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001
    """The end-to-end tests run longest first (by their last measured durations; a module's tests stay
    together in their order when they share fixtures, as the compose tests do): each of the tier's workers takes
    the next test when it is free, so the last to finish is a short one rather than a long one started late."""
    seconds = _measured_seconds()

    def e2e(item) -> bool:  # noqa: ANN001
        return item.get_closest_marker("e2e") is not None

    def module_kept_together(item) -> bool:  # noqa: ANN001
        return bool(getattr(item.module, "RUN_TOGETHER", False))

    def key(item) -> tuple[float, str, int]:  # noqa: ANN001
        if module_kept_together(item):  # the whole module's time, so it keeps its place and its order
            mine = [i for i in items if i.module is item.module]
            total = sum(seconds.get(i.nodeid, UNMEASURED_SECONDS) for i in mine)
            return (-total, item.module.__name__, mine.index(item))
        return (-seconds.get(item.nodeid, UNMEASURED_SECONDS), item.nodeid, 0)

    ordered = sorted((i for i in items if e2e(i)), key=key)
    items[:] = [i for i in items if not e2e(i)] + ordered
