"""A fedforget method as a Flower strategy: built from typed parameters, started on a Grid like Flower's
``FedAvg(...).start(grid=grid, ...)``, returning Flower's :class:`~flwr.serverapp.strategy.Result`.

A method trains into a store (the ledger of what each artifact saw, its artifacts, its serving plan), so its
``start`` is a whole run of ``action`` (train, retrain or propagate): the driver
(:mod:`fedforget.federation.driver`) registers the nodes and opens the store, then calls this class's own
methods — :meth:`MethodStrategy.needs`, :meth:`~MethodStrategy.check`, :meth:`~MethodStrategy.train` or
:meth:`~MethodStrategy.retrain`, :meth:`~MethodStrategy.evaluate_served` — which a method's subclass, in its own
folder, writes. Its rounds are run by the one round
engine (:mod:`fedforget.federation.round_engine`), which is handed this strategy and calls its
``configure_train``/``aggregate_train`` once per round: a subclass may override them as it would Flower's, and a
retrain or ``verify`` through the app that trained the store runs the same overrides, so what they change is
replayed exactly. ``Result.arrays`` is what the store serves once the run ends.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from flwr.supercore import log

from fedforget.core import known_methods
from fedforget.core.config import (
    METHOD_GROUP,
    TABLES,
    TASK_GROUP,
    ConfigError,
    RunConfig,
    is_user_task,
    parse_run_config,
    rename_flat_keys,
)
from fedforget.core.config_keys import ConfigTable
from fedforget.core.method import Method
from fedforget.federation.built import Built
from fedforget.federation.metrics_rows import (
    SERVER_METRICS,
    TRAIN_METRICS,
    federated_metrics,
    is_training_round,
    picked,
)
from fedforget.federation.refusal import refusals, refusals_logged
from fedforget.federation.run_action import RunLockRefused, remove_unwritten_store, run_action
from fedforget.federation.served_arrays import served_arrays
from fedforget.federation.strategy_hooks import default_hook, overridden
from fedforget.store.store import Store, StoreError, resolve_store_path

if TYPE_CHECKING:
    from fedforget.federation.federated_evaluation import EvaluationInProgress
    from fedforget.federation.registration import Federation
    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger

HOOKS = ("configure_train", "aggregate_train")


@dataclass
class RoundInProgress:
    """What the default hooks return for the round the engine is running: the method's own messages, then
    its means (as one record) and the round's metrics."""

    messages: list[Message]
    arrays: ArrayRecord | None = None
    metrics: MetricRecord = field(default_factory=MetricRecord)


class _Declaration:
    """A strategy class's ``method``: the declaration of the method its ``variant`` runs, from the methods this
    process was assembled with (the declaration names the class among its ``strategies``; the class does not
    import its declaration back, so the two stay one-way)."""

    def __get__(self, instance: object, owner: type) -> Method:
        return known_methods.by_variant()[owner.variant]


def _tables_for(variant: str, task: str) -> tuple[type[ConfigTable], ...]:
    groups = (METHOD_GROUP.get(variant), TASK_GROUP.get(task))
    return (RunConfig, *(TABLES[g] for g in groups if g))


def parameter_keys(variant: str, task: str) -> dict[str, str]:
    """Python parameter name → run-config key, for the common keys and the variant's (and task's) group.
    ``method`` and ``action`` are the class and ``start``'s; ``reference`` is ``fedforget verify``'s own."""
    out = {}
    for table in _tables_for(variant, task):
        for f in table.options():
            if f.name not in {"method", "action", "tables", "reference"}:
                out[f.name] = table.key(f.name)
    return out


class MethodStrategy(Strategy):
    """One fedforget method variant as a Flower :class:`~flwr.serverapp.strategy.Strategy`.

    Parameters are the run config's keys as Python names (``rounds_per_phase`` for ``chains.rounds-per-phase``,
    ``dirichlet_alpha`` for ``dirichlet-alpha``), checked at construction exactly as ``flwr run`` checks
    them: a bad value raises :class:`~fedforget.core.config.ConfigError` with the key's name. Keys left out take
    the method's and task's defaults, so ``FedSGT(task=..., store=...)`` alone learns a good model.
    """

    #: the run config's ``method=`` value this class runs
    variant: ClassVar[str]
    #: the declaration of the method that runs it (handed down to the run: its driver, forget message, purge)
    method: ClassVar[Method] = _Declaration()  # type: ignore[assignment]
    #: the run-config key ``start(num_rounds=...)`` sets (None: the method sizes its own rounds)
    rounds_key: ClassVar[str | None] = "num-rounds"
    #: why ``start(initial_arrays=...)`` is refused: the method does not start from one model (None: it does,
    #: and its run starts from the arrays handed, :class:`~fedforget.federation.run_setup.ServerRun`'s
    #: ``initial_state``)
    no_initial_arrays: ClassVar[str | None] = "its modules each start from weights seeded by `seed`"
    #: it reads rows of the server's test set while it trains (shapes, planning), so a server without one
    #: (a user task's, with ``evaluate-on-nodes`` and no ``test-data``) is refused
    needs_server_test_rows: ClassVar[bool] = False

    def __init__(self, **parameters: object) -> None:
        task = str(parameters.get("task", RunConfig.__dataclass_fields__["task"].default))
        names = parameter_keys(self.variant, task)
        unknown = sorted(set(parameters) - set(names))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unknown parameter(s) {', '.join(unknown)}; "
                            f"it takes {', '.join(sorted(names))}")
        self._raw: dict[str, object] = {"method": self.variant, **{names[k]: v for k, v in parameters.items()}}
        self.config = parse_run_config(self._raw)

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, object]) -> MethodStrategy:
        """The strategy a Flower run config (``context.run_config``, dotted keys) stands for: what fedforget's
        own ServerApp builds. Its ``method`` must be this class's variant."""
        with refusals_logged():
            raw = rename_flat_keys(run_config, warn=False)  # the ServerApp has already said so
            if raw.get("method", cls.variant) != cls.variant:
                raise ConfigError(f"run-config method={raw['method']!r} is not {cls.__name__}'s {cls.variant!r}")
            strategy = cls.__new__(cls)
            strategy._raw = {**raw, "method": cls.variant}
            strategy.config = parse_run_config(strategy._raw)
        return strategy

    def __init_subclass__(cls, **kwargs: object) -> None:
        """``help(FedSGT)`` and IDEs show the typed keys the variant reads (on its default task)."""
        super().__init_subclass__(**kwargs)
        if not cls.round_hooks and any(overridden(cls, hook) for hook in HOOKS):
            raise TypeError(f"{cls.__name__}'s rounds are not FedAvg rounds (split learning exchanges activations "
                            "and feedback): start() calls no configure_train/aggregate_train to override")
        if getattr(cls, "variant", None):
            cls.__signature__ = _signature(cls.variant)  # type: ignore[attr-defined]

    # -- what start() runs: the driver calls these, the method's subclass writes them ----------
    def needs(self) -> tuple[str, ...]:
        """What this method's planning asks each node for at registration, beyond its sample ids and slices
        (``labels``, ``class-counts``; :mod:`fedforget.federation.control_messages`). The docs list it per method."""
        return ()

    def check(self, cfg: RunConfig, federation: Federation, num_classes: int) -> None:
        """Refuse a run this federation cannot do, before the store exists (raises ConfigError)."""

    def train_step_refusal(self) -> str | None:
        """Why this strategy, as built, cannot train with a task's own train step (``Task(train_step=...)``); None:
        it can. The declaration's reason; a strategy whose configuration adds a term to the loss (which a step,
        computing its own loss, would hide) says so here."""
        return self.method.refuses_train_step

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built:
        """Load the sample index and the plan into the fresh ledger, then train everything (``action=train``)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it trains: write its train()")

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """Rebuild what is not in ``reusable`` (valid, intact artifacts), recording it with ``watermark``
        (``action=retrain``). The nodes have already dropped every sample forgotten up to ``watermark``."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it retrains: write its retrain()")

    def evaluate_served(self, run: ServerRun, ledger: Ledger) -> dict[str, float]:
        """The served model's test accuracy and loss, on the server's test set."""
        from fedforget.federation.serving_eval import evaluate_serving

        return evaluate_serving(run, ledger)

    def first_served(self, run: ServerRun, ledger: Ledger, serving: dict[str, Any]) -> None:
        """After training, what the method keeps of the first model it serves."""

    def finished(self, run: ServerRun, built: Built) -> None:
        """Once the run is recorded and served: delete what the rebuilt artifacts replaced."""

    # -- Flower's Strategy --------------------------------------------------------------------
    def summary(self) -> None:
        """Log the resolved run config (every key, defaults resolved for the method and task)."""
        log(INFO, "\t├── %s (method=%s, task=%s, store=%s)", type(self).__name__, self.variant, self.config.task,
            self.config.store)
        for key, value in sorted(self.config.to_dict().items()):
            log(INFO, "\t│\t%s = %s", key, value)

    #: whether the method's rounds are FedAvg rounds that pass through configure_train/aggregate_train
    round_hooks: ClassVar[bool] = True

    #: the round the engine is running (None outside one)
    _round: RoundInProgress | None = None

    @default_hook
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """The round's messages, as the method's round builds them (the engine calls this once per round).
        ``arrays`` holds the round's models: a one-model method's under its tensor names, several as
        ``<group>:<tensor>``. An override may change the messages but returns one per node of the round, to
        the same nodes in the same order, as the failure rule redoes each by its partition."""
        return list(self._in_round("configure_train").messages)

    @default_hook
    def aggregate_train(self, server_round: int, replies: Iterable[Message]):  # noqa: ANN201
        """The round's models (the method's partition-order means) and its metrics; called by the engine once
        per round with the valid replies. What an override returns is what the round goes on from."""
        current = self._in_round("aggregate_train")
        return current.arrays, current.metrics

    def _in_round(self, hook: str) -> RoundInProgress:
        """The round a default hook answers for, or a clear error outside one."""
        if self._round is None:
            raise RuntimeError(f"{type(self).__name__}.{hook} is called by start(), once per round; call start()")
        return self._round

    #: the evaluation of what is served the driver is running (None outside one)
    _evaluation: EvaluationInProgress | None = None

    @default_hook
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """The nodes' evaluation of what is served (run config ``evaluate-on-nodes``): one ``evaluate.served``
        message per node, in partition order, each carrying the served artifacts' tensors and the serving plan
        (:mod:`fedforget.federation.federated_evaluation`). Called by ``start()`` once the run is served, with
        ``server_round`` the run's last round; an override is handed what is served as ``arrays`` (as
        ``Result.arrays`` holds it) and may drop or change messages."""
        if self._evaluation is None:
            raise RuntimeError(f"{type(self).__name__}.configure_evaluate is called by start() once the run is "
                               "served (run config evaluate-on-nodes=true); call start()")
        return list(self._evaluation.messages)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Flower's FedAvg semantics: the nodes' accuracy and loss weighted by their test records
        (``num-examples``), summed in partition order, with the records counted and the ``nodes`` that held
        some; None when none did. What an override returns is what the store records (``federated-<key>``)."""
        from fedforget.federation.federated_evaluation import weighted_evaluation

        return weighted_evaluation(replies)

    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
              timeout: float | None = None, train_config: ConfigRecord | None = None,
              evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
              *, action: str = "train") -> Result:
        """Run ``action`` (``train``, ``retrain`` or ``propagate``) into the store; return what it serves.

        ``initial_arrays``: the model a method that starts from one model starts from (the trainable state
        under its tensor names, as ``Result.arrays`` holds it), instead of the one seeded by ``seed``; training
        records them in the store, and a retrain or ``fedforget verify`` starts from the recorded ones (handed
        again, they must be the same). A method that does not start from one model (:attr:`no_initial_arrays`)
        refuses them. ``num_rounds`` sets the rounds key of the method (:attr:`rounds_key`), ``timeout`` the
        round timeout. ``train_config`` and ``evaluate_config`` must be empty: the method's messages carry
        their own. ``evaluate_fn`` is called once, on what is served.
        """
        with refusals_logged():
            return self._start(grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config,
                               evaluate_fn, action)

    def _start(self, grid: Grid, initial_arrays: ArrayRecord | None, num_rounds: int | None, timeout: float | None,
               train_config: ConfigRecord | None, evaluate_config: ConfigRecord | None,
               evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None, action: str) -> Result:
        from fedforget.federation.starting_model import arrays_of

        given = arrays_of(initial_arrays)
        if given is not None and self.no_initial_arrays:
            raise ConfigError(f"{type(self).__name__} does not start from one model: {self.no_initial_arrays}; "
                              "pass no initial_arrays")
        for name, record in (("train_config", train_config), ("evaluate_config", evaluate_config)):
            if record is not None and len(record):
                raise ConfigError(f"{type(self).__name__}'s messages carry their own config; pass no {name} "
                                  "(set the method's parameters instead)")
        cfg = self.run_config(action=action, num_rounds=num_rounds, timeout=timeout)
        if is_user_task(cfg.task):  # the app's own task: a wrong reference is refused before the store is touched
            from fedforget.tasks.registry import get_task
            from fedforget.tasks.task_functions import check_task_functions
            from fedforget.tasks.trained_parameters import check_method_trains

            check_method_trains(self.method, cfg, get_task(cfg.task).trains)
            # its loss, its train step, its metric
            check_task_functions(self.method, self.variant, get_task(cfg.task), self.train_step_refusal())
        log(INFO, "Starting %s strategy (%s):", type(self).__name__, action)
        self.summary()
        store_root = resolve_store_path(cfg.store)
        rows_before = _metrics_rows(store_root) if action != "train" else 0
        fresh = action == "train" and not store_root.exists()
        try:
            run_action(grid, cfg, self, given)
        except refusals() as exc:
            if fresh and not isinstance(exc, RunLockRefused):  # refused before it trained: take back the directory
                remove_unwritten_store(store_root)  # its lock made (a lock refused is another run's)
            raise
        if action == "propagate":
            return Result()
        return served_result(Store.open(store_root), rows_before, evaluate_fn)

    def for_run(self, **keys: object) -> MethodStrategy:
        """This strategy with keys a coordinator run sets itself (``store``, ``reference``: run-config names) as the
        run holds them; its parameters, its class and what it was built with stay (a shallow copy)."""
        twin = copy.copy(self)
        twin._raw = {**self._raw, **keys}
        twin.config = parse_run_config(twin._raw)
        return twin

    def run_config(self, action: str = "train", num_rounds: int | None = None,
                   timeout: float | None = None) -> RunConfig:
        """The parsed run config one ``start`` runs."""
        raw = {**self._raw, "action": action}
        if num_rounds is not None:
            if self.rounds_key is None:
                raise ConfigError(f"{type(self).__name__} sizes its own rounds; set its rounds parameters "
                                  "instead of num_rounds")
            raw[self.rounds_key] = num_rounds
        if timeout is not None:
            raw["round-timeout"] = float(timeout)
        return parse_run_config(raw)


def _signature(variant: str) -> inspect.Signature:
    defaults = RunConfig(method=variant).to_dict()
    params = []
    for name, key in parameter_keys(variant, RunConfig.__dataclass_fields__["task"].default).items():
        table = next(t for t in _tables_for(variant, "") if name in {f.name for f in t.options()})
        kind = next(f.type for f in table.options() if f.name == name)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(key),
                                        annotation=kind))
    return inspect.Signature(params)


def served_result(store: Store, rows_before: int,
                  evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None) -> Result:
    """Flower's Result of the run that appended ``metrics.jsonl`` rows after ``rows_before``: the served
    arrays, each training round's metrics (numbered in the order the method ran them), the server's evaluation
    of each round's model where the method measures it (a round-0 row before the first round: the seeded model)
    and of what is served under the last round's number, and the nodes' evaluation of what is served
    (``evaluate-on-nodes``) under that number too."""
    from fedforget.tasks.task_functions import metric_names

    rows = store.metrics()[rows_before:]
    result = Result(arrays=served_arrays(store))
    server_metrics = (*SERVER_METRICS, *metric_names(store.manifest()))  # and the task's own metric's values
    number = 0
    for row in rows:
        if row.get("final"):
            continue
        if is_training_round(row):
            number += 1
            result.train_metrics_clientapp[number] = MetricRecord(picked(row, TRAIN_METRICS))
        evaluated = picked(row, server_metrics)
        if evaluated and (is_training_round(row) or (number == 0 and row.get("round") == 0)):
            result.evaluate_metrics_serverapp[number] = MetricRecord(evaluated)
    final = next((r for r in reversed(rows) if r.get("final")), None)
    last = number
    if final is not None:
        evaluated = picked(final, server_metrics)
        if evaluated:
            result.evaluate_metrics_serverapp[last] = MetricRecord(evaluated)
        federated = federated_metrics(final)
        if federated:
            result.evaluate_metrics_clientapp[last] = MetricRecord(federated)
    if evaluate_fn is not None:
        extra = evaluate_fn(last, result.arrays)
        if extra is not None:
            merged = dict(result.evaluate_metrics_serverapp.get(last, MetricRecord()))
            merged.update(extra)
            result.evaluate_metrics_serverapp[last] = MetricRecord(merged)
    return result


def _metrics_rows(root: Path) -> int:
    """How many metrics rows the store holds before a run (0 if it is no store: the run says why)."""
    try:
        return len(Store.open(root).metrics())
    except StoreError:
        return 0

