"""A user task's own loss, train step and metric (``Task(loss=..., train_step=..., metric=...)``): who takes them,
how a metric's values are checked, and what the store records of them.

The loss replaces cross-entropy in ``train_supervised`` on the nodes of a method whose declaration says it takes
one (:attr:`~fedforget.core.method.Method.refuses_task_loss` is None); any other method refuses the task before
the store exists. A train step replaces the loop's forward, backward and optimizer step per batch the same way
(:attr:`~fedforget.core.method.Method.refuses_train_step`, or the strategy's own refusal where its configuration
adds a term to the loss that a step would hide). The metric reads the served class probabilities only, so every
method reports it, beside accuracy and loss, wherever what is served is evaluated; the server and each node run
the task's own code, never code carried in a message. Shipped tasks have none: their runs take the code path they
always took.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fedforget.core.config import ConfigError, is_user_task

if TYPE_CHECKING:
    import numpy as np

    from fedforget.core.config import RunConfig
    from fedforget.core.method import Method
    from fedforget.tasks.base import TaskSpec

Metric = Callable[[Any, Any], Any]
#: what a metric may call its values: lower-case words joined by ``-`` or ``_`` (a metrics row's key)
METRIC_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
#: the names fedforget's own evaluation already reports, and the prefixes of its other rows' keys
RESERVED = frozenset({"accuracy", "loss", "num-examples", "examples", "nodes", "partition-id"})
RESERVED_PREFIXES = ("federated-", "received-", "train-")
#: the manifest's record of a user task's own functions
MANIFEST_KEY = "task-functions"


def _spec(cfg: RunConfig) -> TaskSpec | None:
    if not is_user_task(cfg.task):
        return None
    from fedforget.tasks.registry import get_task

    return get_task(cfg.task)


def task_loss(cfg: RunConfig) -> Callable[[Any, Any], Any] | None:
    """The run's task's own loss (None: cross-entropy)."""
    spec = _spec(cfg)
    return None if spec is None else spec.loss


def task_train_step(cfg: RunConfig) -> Callable[..., Any] | None:
    """The run's task's own train step (None: the loop's own forward, backward and optimizer step)."""
    spec = _spec(cfg)
    return None if spec is None else spec.train_step


def task_metric(cfg: RunConfig) -> Metric | None:
    """The run's task's own metric (None: accuracy and loss only)."""
    spec = _spec(cfg)
    return None if spec is None else spec.metric


def function_name(fn: object) -> str:
    """``module:qualname`` of a task's function, as the manifest records it."""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def metric_values(metric: Metric, probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """What ``metric`` reports on these probabilities and labels, checked: a dict of finite numbers under names a
    metrics row can hold, none of fedforget's own (raises ValueError with one line naming the metric)."""
    out = metric(probabilities, labels)
    where = f"the task's metric {function_name(metric)}"
    if not isinstance(out, Mapping) or not out:
        raise ValueError(f"{where} returned {type(out).__name__}, not a dict of name -> number")
    values: dict[str, float] = {}
    for name, value in out.items():
        if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
            raise ValueError(f"{where} names a value {name!r}: use lower-case letters, digits, '-' or '_' "
                             "(at most 40, starting with a letter)")
        if name in RESERVED or name.startswith(RESERVED_PREFIXES):
            raise ValueError(f"{where} names a value {name!r}, which fedforget reports itself; rename it")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where} returned {name!r}={value!r}, not a number") from None
        if isinstance(value, bool) or not math.isfinite(number):
            raise ValueError(f"{where} returned {name!r}={value!r}, not a finite number")
        values[name] = number
    return values


def probe_metric(spec: TaskSpec) -> list[str]:
    """The names the task's metric reports, from one call on uniform probabilities over each class once: a metric
    that fails, or reports something a metrics row cannot hold, is refused before the store exists."""
    if spec.metric is None:
        return []
    import numpy as np

    classes = max(spec.num_classes, 2)
    if spec.targets is not None:  # a sequence task: probabilities per position, targets with a position ignored
        from fedforget.tasks.base import IGNORE

        probabilities, labels = np.full((2, 3, classes), 1.0 / classes), np.array([[0, 1, IGNORE], [1, 0, IGNORE]])
    else:
        probabilities, labels = np.full((classes, classes), 1.0 / classes), np.arange(classes)
    try:
        return sorted(metric_values(spec.metric, probabilities, labels))
    except Exception as exc:  # noqa: BLE001 - whatever the user's metric raises is one line for them
        line = " ".join(str(exc).split())[:300] if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"Task(metric=...) of task {spec.name!r} fails on uniform probabilities: {line}; it "
                          "takes (probabilities, labels) numpy arrays and returns {name: number} "
                          "(docs/your-app.md)") from None


def refuse_task_loss(method: Method, variant: str, spec: TaskSpec) -> None:
    """Refuse a task with its own loss for a method whose declaration says its training does not take one."""
    if spec.loss is not None and method.refuses_task_loss is not None:
        raise ConfigError(f"method {variant!r} does not train with a task's own loss: {method.refuses_task_loss}; "
                          "drop Task(loss=...) or use a method that takes it (docs/strategies.md)")
    if (spec.targets is not None or not spec.head) and method.refuses_task_loss is not None:
        raise ConfigError(f"method {variant!r} does not train a model whose output is the task's logits (a sequence "
                          f"task, or Task(head=False)): {method.refuses_task_loss}; use a method that trains it "
                          "(docs/strategies.md)")


def refuse_train_step(variant: str, spec: TaskSpec, refusal: str | None) -> None:
    """Refuse a task with its own train step for a method (or a strategy's configuration) whose training does not
    take one: ``refusal`` says why, the line names the methods that do."""
    if spec.train_step is None or refusal is None:
        return
    from fedforget.core.known_methods import families

    takers = [v for m in families() if m.refuses_train_step is None for v in m.variants if v != variant]
    raise ConfigError(f"method {variant!r} does not train with a task's own train step: {refusal}; drop "
                      f"Task(train_step=...) or use a method that takes it ({', '.join(takers)}; docs/strategies.md)")


def check_task_functions(method: Method, variant: str, spec: TaskSpec,
                         train_step_refusal: str | None = None) -> list[str]:
    """What ``start`` checks of a user task's functions before the store is touched; the metric's names.
    ``train_step_refusal``: the strategy's reason to refuse a train step (its declaration's, or its own where its
    configuration adds a term to the loss)."""
    refuse_task_loss(method, variant, spec)
    refuse_train_step(variant, spec, train_step_refusal)
    return probe_metric(spec)


def manifest_entry(spec: TaskSpec) -> dict[str, Any]:
    """``{MANIFEST_KEY: ...}`` for a task with a loss, a train step, a metric or targets: their names and the metric's
    value names (which Flower's Result and ``status`` pick), ``train-step`` and ``targets`` only for a task with
    one; empty for any other task, whose manifest stays as it was."""
    if spec.loss is None and spec.metric is None and spec.train_step is None and spec.targets is None:
        return {}
    entry: dict[str, Any] = {"loss": None if spec.loss is None else function_name(spec.loss),
                             "metric": None if spec.metric is None else function_name(spec.metric),
                             "metric-names": probe_metric(spec)}
    if spec.train_step is not None:
        entry["train-step"] = function_name(spec.train_step)
    if spec.targets is not None:  # what a sequence task trains towards: recorded only where there is one
        entry["targets"] = function_name(spec.targets)
    return {MANIFEST_KEY: entry}


def retrain_entry(manifest: Mapping[str, Any], spec: TaskSpec) -> dict[str, Any] | None:
    """A retrain whose task trains with another loss or train step than the store's training is refused: what it
    rebuilt would not be what a from-scratch run of the recorded task builds. A metric may change (it trains
    nothing): the manifest's entry to record then, None when it stands."""
    recorded = manifest.get(MANIFEST_KEY) or {}
    now = manifest_entry(spec).get(MANIFEST_KEY) or {"loss": None, "metric": None, "metric-names": []}
    for name, field_name in (("loss", "loss"), ("train-step", "train_step"), ("targets", "targets")):
        if recorded.get(name) != now.get(name):
            raise ConfigError(f"the store was trained with Task({field_name}={recorded.get(name)}) and the app's task "
                              f"now has {field_name}={now.get(name)}; retrain with the {field_name.replace('_', ' ')} "
                              "the store recorded")
    unchanged = recorded == now or (not recorded and now["metric"] is None)
    return None if unchanged else {MANIFEST_KEY: now}


def metric_names(manifest: Mapping[str, Any]) -> list[str]:
    """The names of the task's metric values a store's runs record (none for a task without a metric)."""
    entry = manifest.get(MANIFEST_KEY)
    names = entry.get("metric-names") if isinstance(entry, Mapping) else None
    return [str(n) for n in names] if isinstance(names, list) else []
