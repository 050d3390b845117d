"""What a method declares about itself: one :class:`Method` in its package's ``__init__``, and how shared
code finds the declarations.

This module sits on the lowest floor (``docs/architecture.md``) so that every floor can read a declaration;
the registry that lists them (:mod:`fedforget.methods.registry`) sits on the methods' floor, above core,
store and federation, which reach it through :func:`families` and the look-ups below: by its dotted name,
at call time, never by an import statement.

Every field names code as a ``"module:function"`` string, never an imported object: the ClientApp reads
the declarations in every fresh per-message process, so they must cost nothing beyond the standard
library. Shared machinery calls a method only through these hooks (:func:`resolve`), the way Flower's
``Strategy.start`` calls a strategy's ``configure_*``/``aggregate_*``; it never imports a method.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Value = int | float

#: The registry of methods, named rather than imported: it sits on the methods' floor, above the floors that
#: read it (importing it imports every method's declaration, each standard-library only).
REGISTRY = "fedforget.methods.registry"


@dataclass(frozen=True)
class Defaults:
    """What a method's auto keys (run-config keys left at 0, :data:`fedforget.core.defaults.AUTO_KEYS`)
    take: ``variants`` per ``method=`` value, ``pairs`` per (``method=`` value, task) where the pair needs
    its own. ``core/defaults.py`` reads them after the user's value (pair first, then variant) and before
    the task's and the fallback."""

    variants: Mapping[str, Mapping[str, Value]] = field(default_factory=dict)
    pairs: Mapping[tuple[str, str], Mapping[str, Value]] = field(default_factory=dict)


@dataclass(frozen=True)
class HeldSamples:
    """Samples a method's server holds itself: in no partition, never forgotten, drawn again by a scratch run."""

    key: str  # the manifest key listing their ids
    name: str  # what a one-line message calls them
    report: str  # their key in ``fedforget verify --json``


@dataclass(frozen=True)
class Method:
    """One method family: what it runs on the server and the nodes, what it serves, and its coordinator extras."""

    name: str  # its package: fedforget.methods.<name>
    variants: tuple[str, ...]  # the run config's ``method=`` values this package runs
    driver: str  # "module:function(grid, cfg)" that the ServerApp runs on the Grid
    handlers: Mapping[str, str]  # message type → "module:function(msg, context)" on the ClientApp
    serving: str  # "module:function": the stored serving plan → class probabilities
    serving_rules: Mapping[str, str]  # plan kind → pure "module:function(plan_json, valid)" → serving plan
    forget_message: str  # the message type that makes a node delete forgotten samples
    #: "module:Class": its typed run-config keys, a :class:`~fedforget.core.config_keys.ConfigTable` whose
    #: ``group`` names its table ``[tool.flwr.app.config.<group>]`` (None: it reads the common keys only)
    config: str | None
    planning: tuple[str, ...] = ()  # its pure modules: no torch, no flwr
    #: "function(plan, result)" → what ``fedforget forget`` reports beyond the shared fields
    forget_detail: str | None = None
    #: "function(store, samples)": refuse ids this method never forgets (raises LedgerUsageError)
    forget_check: str | None = None
    #: "function(db, request)" → artifacts it invalidates beyond lineage, inside the forget transaction
    ledger_rules: tuple[str, ...] = ()
    #: "function(plan)" → every artifact id its plan can produce (None: not known), for ``store.check``
    plan_artifacts: str | None = None
    #: "function(view)" → its keys in ``fedforget status --json`` (empty values for other methods' stores)
    status: str | None = None
    #: "function(status, console)": its lines in ``fedforget status``
    print_status: str | None = None
    #: "function(cfg)": what ``fedforget run`` checks before submitting, which may load the task's data
    submit_check: str | None = None
    #: "function(store, cfg, scratch_root, workdir, config)" → partitions it cannot reproduce: readies
    #: ``fedforget verify``'s from-scratch run (edits ``config``, places what its nodes need)
    prepare_scratch: str | None = None
    #: "function(ledger)" → (artifacts carrying forgotten samples under DP, DP artifact → its partitions)
    dp_exposure: str | None = None
    #: globs of the per-client files it derives from raw samples (recomputed on demand), which purge deletes
    feature_caches: tuple[str, ...] = ()
    #: "function(app)": adds its own commands to the ``fedforget`` CLI
    commands: str | None = None
    #: "module:NAME" of its :class:`Defaults` in a planning module (None: the task's and the fallback's)
    defaults: str | None = None
    #: "function(cfg, partitions)" in a planning module → the bytes its run holds, by part (``model``,
    #: ``modules``, ``plan``, ``lineage``, ``orders``; ``fedforget.core.run_footprint``). None: the shared
    #: LoRA-model estimate of a method that stores its final model (``run_footprint.FINAL_MODULES``)
    footprint: str | None = None
    #: variant → the run-config keys its footprint grows with, in the order a memory refusal names them
    #: (a variant not listed: ``run_footprint.LORA_SIZE_KEYS``)
    size_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: it can train the head alone on the frozen backbone (``head-only=true``, a linear probe)
    head_only: bool = False
    #: regex of a progress line its ServerApp logs (groups: done, total) → the label ``fedforget run``'s bar shows
    progress: Mapping[str, str] = field(default_factory=dict)
    #: crash points (``fedforget.store.crash``) its retrain passes once per artifact, which the fault campaigns hit
    crash_points: tuple[str, ...] = ()
    #: the samples its server holds itself (None: every sample lies in a partition)
    held_samples: HeldSamples | None = None

    @property
    def package(self) -> str:
        return f"fedforget.methods.{self.name}"

    def hooks(self) -> tuple[str, ...]:
        """Every "module:function" it names, each once."""
        named = [self.driver, *self.handlers.values(), self.serving, *self.serving_rules.values(),
                 *(h for h in (self.forget_detail, self.forget_check, self.plan_artifacts, self.status,
                               self.print_status, self.submit_check, self.prepare_scratch,
                               self.dp_exposure, self.commands, self.footprint) if h),
                 *self.ledger_rules]
        return tuple(dict.fromkeys(named))


def resolve(target: str) -> Callable[..., Any]:
    """Import ``"module:function"`` and return the function."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def families() -> tuple[Method, ...]:
    """Every method's declaration, in registry order."""
    return importlib.import_module(REGISTRY).FAMILIES


def by_variant() -> Mapping[str, Method]:
    """``method=`` value → the declaration that runs it, in registry order."""
    return importlib.import_module(REGISTRY).BY_VARIANT


def method_entry(name: str) -> Method:
    """The entry that runs ``method=name``."""
    try:
        return by_variant()[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(by_variant()))}") from None


def entry_for_plan(kind: str | None) -> Method | None:
    """The first entry writing serving plans of ``kind``."""
    return next((m for m in families() if kind in m.serving_rules), None) if kind is not None else None


def store_method(manifest: Mapping[str, Any]) -> Method | None:
    """The entry that wrote a store (None for a manifest naming no known method)."""
    return by_variant().get(str(manifest.get("method")))


def held_samples() -> tuple[HeldSamples, ...]:
    """What every method's server holds itself, each once (a manifest holds at most its own method's)."""
    return tuple(dict.fromkeys(m.held_samples for m in families() if m.held_samples))
