"""The method declarations this process was assembled with, handed in by whoever assembled it.

Some shared code reads every method at once, whatever the store or run: the run config's parser (each
method's table of keys, its variants, its defaults and memory estimate), and a store's ledger (each
method's invalidation rules, and the serving rule of a stored plan's kind). Core and store cannot import
the methods (they sit above them), so the methods' registry hands its declarations in here when it is
imported (:mod:`fedforget.methods.registry`, which every app and the coordinator import); reading before
that raises, naming what to import. Code that knows which method it serves passes that declaration down
instead (docs/decisions/layout.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fedforget.core.method import Method

_FAMILIES: list[tuple[Method, ...]] = []
_LISTENERS: list[Callable[[tuple[Method, ...]], None]] = []


class NoMethodsInstalled(RuntimeError):
    """Shared code asked for the methods before any were handed in."""


def install(families: tuple[Method, ...]) -> None:
    """Hand in every method's declaration (in registry order); the parser's tables follow."""
    _FAMILIES[:] = [tuple(families)]
    for listener in _LISTENERS:
        listener(tuple(families))


def on_install(listener: Callable[[tuple[Method, ...]], None]) -> None:
    """Call ``listener`` with the declarations when they are handed in (now, if they already are)."""
    _LISTENERS.append(listener)
    if _FAMILIES:
        listener(_FAMILIES[0])


def families() -> tuple[Method, ...]:
    """Every method's declaration, in registry order."""
    if not _FAMILIES:
        raise NoMethodsInstalled("no method declarations were handed in: import fedforget.methods.registry first "
                                 "(every fedforget app and the coordinator do)")
    return _FAMILIES[0]


def by_variant() -> Mapping[str, Method]:
    """``method=`` value → the declaration that runs it."""
    return {v: m for m in families() for v in m.variants}


def for_plan(kind: object) -> Method | None:
    """The declaration whose method writes serving plans of ``kind`` (None: no method does)."""
    return next((m for m in families() if kind in m.serving_rules), None) if kind is not None else None
