"""Crash injection for the crash-safety tests: die like ``kill -9`` at a named point.

``FEDFORGET_CRASH_POINT=name`` dies at the first pass through ``name``; ``name@N`` at the N-th pass
(N-th artifact written, N-th position recorded, ...). Unset in production, where it costs one
environment look-up per call.
"""

from __future__ import annotations

import os

CRASH_ENV = "FEDFORGET_CRASH_POINT"
CRASH_EXIT = 137  # what a shell reports for SIGKILL
_passes: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Exit at once (no cleanup, no flush, no rollback) if the injection variable names this pass."""
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    point, _, nth = wanted.partition("@")
    if point != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] >= int(nth or 1):
        os._exit(CRASH_EXIT)
