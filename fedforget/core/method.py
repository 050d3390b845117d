"""What a method declares about itself: one :class:`Method` in its package's ``__init__``.

This module sits on the lowest floor (``docs/architecture.md``) so that every floor can name the type;
the declarations themselves live on the methods' floor, where :mod:`fedforget.methods.registry` imports
them. Whoever knows which method it runs (a strategy, the ServerApp, the coordinator reading a store)
hands its declaration, or the hook it needs from it, down to shared code as an object; shared code never
imports a method.

Every hook is a plain function. A method whose hook needs heavy code (torch, a server loop) defers that
import inside the function it declares: the ClientApp reads every declaration in each fresh per-message
process, so importing a declaration costs the standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

    from fedforget.core.config_keys import ConfigTable

Value = int | float
Hook = Callable[..., Any]


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
    handlers: Mapping[str, Hook]  # message type → handler(msg, context) on the ClientApp
    serving: Hook  # the stored serving plan → class probabilities
    serving_rules: Mapping[str, Hook]  # plan kind → pure rule(plan_json, valid) → serving plan
    forget_message: str  # the message type that makes a node delete forgotten samples
    #: its typed run-config keys, a :class:`~fedforget.core.config_keys.ConfigTable` whose ``group`` names
    #: its table ``[tool.flwr.app.config.<group>]`` (None: it reads the common keys only)
    config: type[ConfigTable] | None
    planning: tuple[str, ...] = ()  # its pure modules: no torch, no flwr
    #: forget_detail(plan, result) → what ``fedforget forget`` reports beyond the shared fields
    forget_detail: Hook | None = None
    #: forget_check(store, samples): refuse ids this method never forgets (raises LedgerUsageError)
    forget_check: Hook | None = None
    #: rule(db, request) → artifacts it invalidates beyond lineage, inside the forget transaction
    ledger_rules: tuple[Hook, ...] = ()
    #: plan_artifacts(plan) → every artifact id its plan can produce (None: not known), for ``store.check``
    plan_artifacts: Hook | None = None
    #: status(view) → its keys in ``fedforget status --json`` (empty values for other methods' stores)
    status: Hook | None = None
    #: print_status(status, console): its lines in ``fedforget status``
    print_status: Hook | None = None
    #: submit_check(cfg): what ``fedforget run`` checks before submitting, which may load the task's data
    submit_check: Hook | None = None
    #: prepare_scratch(store, cfg, scratch_root, workdir, config) → partitions it cannot reproduce: readies
    #: ``fedforget verify``'s from-scratch run (edits ``config``, places what its nodes need)
    prepare_scratch: Hook | None = None
    #: dp_exposure(ledger) → (artifacts carrying forgotten samples under DP, DP artifact → its partitions)
    dp_exposure: Hook | None = None
    #: globs of the per-client files it derives from raw samples (recomputed on demand), which purge deletes
    feature_caches: tuple[str, ...] = ()
    #: copy_holders(db) → partition → the newest request whose purged artifacts its node may still hold a
    #: copy of (None: its nodes keep no artifact), for ``fedforget purge`` and ``forget --propagate``
    copy_holders: Callable[[sqlite3.Connection], dict[int, int]] | None = None
    #: add_commands(app): adds its own commands to the ``fedforget`` CLI
    commands: Hook | None = None
    #: the auto-key values it declares (None: the task's and the fallback's)
    defaults: Defaults | None = None
    #: footprint(cfg, partitions), pure → the bytes its run holds, by part (``model``, ``modules``, ``plan``,
    #: ``lineage``, ``orders``; ``fedforget.core.run_footprint``). None: the shared LoRA-model estimate of
    #: a method that stores its final model (``run_footprint.FINAL_MODULES``)
    footprint: Hook | None = None
    #: variant → the run-config keys its footprint grows with, in the order a memory refusal names them
    #: (a variant not listed: ``run_footprint.LORA_SIZE_KEYS``)
    size_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: it can train the head alone on the frozen backbone (``head-only=true``, a linear probe)
    head_only: bool = False
    #: why it cannot train the user's own model as the whole model (``Task(train='all')`` or a list of parameter
    #: prefixes; :mod:`fedforget.tasks.trained_parameters`), refused in one line; None: it exchanges one model's
    #: trainable state per round, whatever that model is, so it trains it
    no_whole_model: str | None = "it trains LoRA adapters and fedforget's head"
    #: variant → its own ``no_whole_model`` where it differs from its family's (None: that variant trains it)
    whole_model_variants: Mapping[str, str | None] = field(default_factory=dict)
    #: why it refuses a task's own loss (``Task(loss=...)``): the one line a run of such a task is refused with.
    #: None: its nodes train by ``train_supervised``, which takes the loss in place of cross-entropy. A method
    #: refuses it until it declares otherwise (a task's metric, which only reads what is served, every method takes)
    refuses_task_loss: str | None = "it does not declare that its training takes a task's own loss"
    #: why it refuses a task's own train step (``Task(train_step=...)``): the one line a run of such a task is
    #: refused with. None: its nodes train by ``train_supervised``, which calls the step once per batch in place of
    #: its own forward, backward and optimizer step. A method refuses it until it declares otherwise
    refuses_train_step: str | None = "it does not declare that its training takes a task's own train step"
    #: regex of a progress line its ServerApp logs (groups: done, total) → the label ``fedforget run``'s bar shows
    progress: Mapping[str, str] = field(default_factory=dict)
    #: crash points (``fedforget.store.crash``) its retrain passes once per artifact, which the fault campaigns hit
    crash_points: tuple[str, ...] = ()
    #: the samples its server holds itself (None: every sample lies in a partition)
    held_samples: HeldSamples | None = None
    #: strategies() → its Flower strategy classes, one per variant in ``variants``' order (``fedforget.strategies``
    #: lists them): a function, so that reading the declaration imports no strategy (nor flwr's server side)
    strategies: Callable[[], tuple[type, ...]] | None = None

    @property
    def package(self) -> str:
        return f"fedforget.methods.{self.name}"

    def whole_model_refusal(self, variant: str) -> str | None:
        """Why ``method=variant`` cannot train the user's own model as the whole model; None: it can."""
        return self.whole_model_variants.get(variant, self.no_whole_model)

    def hooks(self) -> tuple[Hook, ...]:
        """Every function it declares, each once."""
        named = [*self.handlers.values(), self.serving, *self.serving_rules.values(),
                 *(h for h in (self.forget_detail, self.forget_check, self.plan_artifacts, self.status,
                               self.print_status, self.submit_check, self.prepare_scratch, self.dp_exposure,
                               self.copy_holders, self.commands, self.footprint) if h),
                 *self.ledger_rules]
        return tuple(dict.fromkeys(named))
