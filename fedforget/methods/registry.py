"""Every method, registered once: the packages under :mod:`fedforget.methods`, each declaring its
:class:`~fedforget.core.method.Method` in its ``__init__``, and the look-ups over them.

The answer to "where is method X?" is ``fedforget/methods/X/``. Importing this module imports every
declaration, each costing the standard library only (its hooks import their code when called): the
ClientApp reads it in every fresh per-message process. Adding a method is a folder with its declaration
and one line here, the import of its ``METHOD``: :data:`FAMILIES` is every declaration this module imports,
in the order of those lines. Importing it also hands the declarations
to the run config's parser and the store's ledger (:mod:`fedforget.core.known_methods`), which read every
method at once; everything else gets the one declaration it needs passed down by whoever knows the method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fedforget.core import known_methods
from fedforget.core.method import HeldSamples, Method
from fedforget.federation.message_types import EVALUATE_SERVED, FORGET, QUERY

# -- the registration: one line per method (read through globals() below, hence no other use) -------------
from fedforget.methods.chains import METHOD as CHAINS  # noqa: F401
from fedforget.methods.fedavg import METHOD as FEDAVG  # noqa: F401
from fedforget.methods.fedshard import METHOD as FEDSHARD  # noqa: F401
from fedforget.methods.hosfl import METHOD as HOSFL  # noqa: F401
from fedforget.methods.replay import METHOD as REPLAY  # noqa: F401
from fedforget.methods.safe import METHOD as SAFE  # noqa: F401

if TYPE_CHECKING:
    from flwr.app import Context, Message

#: Every method's declaration imported above, in the order of the registration's lines (the look-ups' order).
FAMILIES: tuple[Method, ...] = tuple(value for value in dict(globals()).values() if isinstance(value, Method))
METHOD_PACKAGES: tuple[str, ...] = tuple(m.name for m in FAMILIES)
BY_VARIANT: dict[str, Method] = {v: m for m in FAMILIES for v in m.variants}

known_methods.install(FAMILIES)


def register(msg: Message, context: Context) -> Message:
    """A node describes its partition (discovery, and finding a node mid-run)."""
    from fedforget.federation.node_records import register as describe

    return describe(msg, context)


def forget_samples(msg: Message, context: Context) -> Message:
    """A node deletes forgotten samples for good."""
    from fedforget.federation.forget_client import forget_samples as delete

    return delete(msg, context)


def evaluate_served(msg: Message, context: Context) -> Message:
    """A node evaluates what is served on its own test records (the method's ``serving`` hook computes it)."""
    from fedforget.federation.node_evaluation import evaluate_served as evaluate

    return evaluate(msg, context)


#: Handlers every node serves whatever the method: registration (and finding a node mid-run), sample deletion and
#: the evaluation of what is served.
SHARED_HANDLERS: Mapping[str, Callable[..., Any]] = {QUERY: register, FORGET: forget_samples,
                                                     EVALUATE_SERVED: evaluate_served}

__all__ = ["BY_VARIANT", "FAMILIES", "METHOD_PACKAGES", "SHARED_HANDLERS", "Method", "client_handlers",
           "entry_for_plan", "held_samples", "method_entry", "store_method"]


def method_entry(name: str) -> Method:
    """The declaration that runs ``method=name``."""
    try:
        return BY_VARIANT[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(BY_VARIANT))}") from None


def entry_for_plan(kind: str | None) -> Method | None:
    """The first declaration writing serving plans of ``kind``."""
    return known_methods.for_plan(kind)


def store_method(manifest: Mapping[str, Any]) -> Method | None:
    """The declaration of the method that wrote a store (None for a manifest naming no known method)."""
    return BY_VARIANT.get(str(manifest.get("method")))


def held_samples() -> tuple[HeldSamples, ...]:
    """What every method's server holds itself, each once (a manifest holds at most its own method's)."""
    return tuple(dict.fromkeys(m.held_samples for m in FAMILIES if m.held_samples))


def client_handlers() -> dict[str, Callable[..., Any]]:
    """Message type → handler, over the shared handlers and every entry; one handler per type."""
    out = dict(SHARED_HANDLERS)
    for method in FAMILIES:
        for kind, target in method.handlers.items():
            if out.setdefault(kind, target) != target:
                raise ValueError(f"message type {kind!r} has two handlers: {out[kind].__qualname__} and "
                                 f"{target.__qualname__}")
    return out
