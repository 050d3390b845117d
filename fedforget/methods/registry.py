"""Every method, one line each: the packages under :mod:`fedforget.methods`, each declaring its
:class:`~fedforget.core.method.Method` in its ``__init__``.

The answer to "where is method X?" is ``fedforget/methods/X/``. Declarations hold dotted names, never
imported code: the ClientApp reads this module in every fresh per-message process, so importing it costs
nothing beyond the standard library. Adding a method is a folder with its declaration and one line in
:data:`METHOD_PACKAGES`. Floors below this one (core, store, federation) read it through
:mod:`fedforget.core.method`'s look-ups, which find it by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from fedforget.core.method import Method, entry_for_plan, method_entry, resolve, store_method
from fedforget.federation.message_types import FORGET, QUERY

METHOD_PACKAGES: tuple[str, ...] = ("fedavg", "chains", "hosfl", "fedshard", "safe", "replay")

#: Handlers every node serves whatever the method: registration (and finding a node mid-run) and sample deletion.
SHARED_HANDLERS: Mapping[str, str] = {
    QUERY: "fedforget.federation.node_records:register",
    FORGET: "fedforget.federation.forget_client:forget_samples",
}

FAMILIES: tuple[Method, ...] = tuple(importlib.import_module(f"fedforget.methods.{name}").METHOD
                                     for name in METHOD_PACKAGES)
BY_VARIANT: dict[str, Method] = {v: m for m in FAMILIES for v in m.variants}

__all__ = ["BY_VARIANT", "FAMILIES", "METHOD_PACKAGES", "SHARED_HANDLERS", "Method", "client_handlers",
           "entry_for_plan", "get_method", "method_entry", "resolve", "store_method"]


def get_method(name: str) -> Callable[..., None]:
    """The server driver of ``method=name``, imported now: ``driver(grid, cfg)``."""
    return resolve(method_entry(name).driver)


def client_handlers() -> dict[str, str]:
    """Message type → handler, over the shared handlers and every entry; one handler per type."""
    out = dict(SHARED_HANDLERS)
    for method in FAMILIES:
        for kind, target in method.handlers.items():
            if out.setdefault(kind, target) != target:
                raise ValueError(f"message type {kind!r} has two handlers: {out[kind]} and {target}")
    return out
