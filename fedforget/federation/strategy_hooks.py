"""Which of a strategy's Flower hooks a subclass replaced: the driver hands a replaced hook the models (or what is
served) as Flower's ArrayRecord, and a default one what it already holds (packing them would only cost time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def default_hook(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a strategy's own hook: the engine packs the round's models for a hook only where a subclass
    replaced it (the defaults read the round in progress, so packing them would only cost time)."""
    function.__fedforget_default_hook__ = True  # type: ignore[attr-defined]
    return function


def overridden(strategy: object, hook: str) -> bool:
    """Whether ``strategy`` (or the class given) replaces its default ``hook`` with its own."""
    function = getattr(strategy if isinstance(strategy, type) else type(strategy), hook, None)
    return function is not None and not getattr(function, "__fedforget_default_hook__", False)
