"""A user task's own loss, train step, metric and prediction (``Task(loss=..., train_step=..., metric=...,
prediction=...)``): who takes them, how a metric's values and a prediction's outputs are checked, and what the
store records of them.

The loss replaces cross-entropy in ``train_supervised`` on the nodes of a method whose declaration says it takes
one (:attr:`~fedforget.core.method.Method.refuses_task_loss` is None); any other method refuses the task before
the store exists. A train step replaces the loop's forward, backward and optimizer step per batch the same way
(:attr:`~fedforget.core.method.Method.refuses_train_step`, or the strategy's own refusal where its configuration
adds a term to the loss that a step would hide). The metric reads the served class probabilities only, so every
method reports it, beside accuracy and loss, wherever what is served is evaluated; the server and each node run
the task's own code, never code carried in a message. The prediction turns what is served into the task's own
output (a label by its own threshold, a value, the top k): the forget service's ``predict`` returns it, and the
metric reads it in place of the probabilities. It reads logits (:func:`served_logits`), computed from the served
probabilities, so every method's serving, one model or an ensemble, hands it the same kind of input. Shipped
tasks have none of these: their runs take the code path they always took.
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
Prediction = Callable[[Any], Any]
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


def task_prediction(cfg: RunConfig) -> Prediction | None:
    """The run's task's own prediction (None: the class probabilities are the output)."""
    spec = _spec(cfg)
    return None if spec is None else spec.prediction


def served_logits(probabilities: np.ndarray) -> Any:  # noqa: ANN401 - a torch tensor (torch is imported lazily)
    """The logits a task's prediction reads: the log of the served class probabilities, a float64 tensor.

    For one served model they are its own logits less their log-sum-exp per record, so the argmax, the top k and
    the softmax are the model's; an ensemble mixes its members as probabilities, and these are the logits whose
    softmax is the mixture. A probability that underflowed to 0 reads as the log of the smallest normal float64
    (about -708), so every logit is finite.
    """
    import numpy as np
    import torch

    floor = np.finfo(np.float64).tiny
    return torch.from_numpy(np.log(np.maximum(np.asarray(probabilities, dtype=np.float64), floor)))


def prediction_outputs(prediction: Prediction, probabilities: np.ndarray) -> np.ndarray:
    """What ``prediction`` outputs for the records whose served class probabilities are ``probabilities``, checked:
    numbers (bool, int or finite float), one entry per record along the first axis (raises ValueError with one
    line naming the prediction)."""
    import numpy as np

    out = prediction(served_logits(probabilities))
    where = f"the task's prediction {function_name(prediction)}"
    if hasattr(out, "detach"):
        out = out.detach().cpu().numpy()
    try:
        outputs = np.asarray(out)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where} returned {type(out).__name__}, not an array: {exc}") from None
    if outputs.dtype.kind not in "biuf":
        raise ValueError(f"{where} returned {outputs.dtype} values; return numbers (an array of labels, values or "
                         "indices)")
    records = len(probabilities)
    if outputs.ndim == 0 or outputs.shape[0] != records:
        raise ValueError(f"{where} returned shape {tuple(outputs.shape)} for {records} records; return one output "
                         "per record along the first axis")
    if outputs.dtype.kind == "f" and not np.isfinite(outputs).all():
        raise ValueError(f"{where} returned a value that is not finite; return finite numbers")
    return outputs


def metric_input(probabilities: np.ndarray, prediction: Prediction | None) -> np.ndarray:
    """What a task's metric reads: the served class probabilities, or the outputs of the task's prediction."""
    return probabilities if prediction is None else prediction_outputs(prediction, probabilities)


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


def _uniform(spec: TaskSpec) -> np.ndarray:
    """Uniform class probabilities for as many records as the task has classes: what the probes call on."""
    import numpy as np

    classes = max(spec.num_classes, 2)
    return np.full((classes, classes), 1.0 / classes)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300] if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"


def probe_prediction(spec: TaskSpec) -> np.ndarray | None:
    """The task's prediction's outputs on uniform probabilities (None without one): a prediction that fails, or
    returns what is not one number or row of numbers per record, is refused before the store exists."""
    if spec.prediction is None:
        return None
    try:
        return prediction_outputs(spec.prediction, _uniform(spec))
    except Exception as exc:  # noqa: BLE001 - whatever the user's prediction raises is one line for them
        raise ConfigError(f"Task(prediction=...) of task {spec.name!r} fails on uniform logits: {_one_line(exc)}; "
                          "it takes the logits, a (records, classes) float64 torch tensor, and returns one output "
                          "per record (docs/your-app.md)") from None


def probe_metric(spec: TaskSpec) -> list[str]:
    """The names the task's metric reports, from one call on uniform probabilities over each class once (or its
    prediction's outputs on them): a metric that fails, or reports something a metrics row cannot hold, is refused
    before the store exists."""
    outputs = probe_prediction(spec)
    if spec.metric is None:
        return []
    import numpy as np

    takes = "(probabilities, labels)" if outputs is None else "(the prediction's outputs, labels)"
    if spec.targets is not None:  # a sequence task: probabilities per position, targets with a position ignored
        from fedforget.tasks.base import IGNORE

        classes = max(spec.num_classes, 2)
        read, labels = np.full((2, 3, classes), 1.0 / classes), np.array([[0, 1, IGNORE], [1, 0, IGNORE]])
    else:
        probabilities = _uniform(spec)
        read, labels = (probabilities if outputs is None else outputs), np.arange(len(probabilities))
    try:
        return sorted(metric_values(spec.metric, read, labels))
    except Exception as exc:  # noqa: BLE001 - whatever the user's metric raises is one line for them
        raise ConfigError(f"Task(metric=...) of task {spec.name!r} fails on uniform probabilities: {_one_line(exc)}; "
                          f"it takes {takes} numpy arrays and returns {{name: number}} "
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


#: the entry of a task with none of its own functions, as a retrain compares it
NO_FUNCTIONS = {"loss": None, "metric": None, "metric-names": []}


def manifest_entry(spec: TaskSpec) -> dict[str, Any]:
    """``{MANIFEST_KEY: ...}`` for a task with a loss, a train step, a metric, targets or a prediction: their names
    and the metric's value names (which Flower's Result and ``status`` pick), ``train-step``, ``targets`` and
    ``prediction`` only for a task with one; empty for any other task, whose manifest stays as it was."""
    if all(f is None for f in (spec.loss, spec.metric, spec.train_step, spec.targets, spec.prediction)):
        return {}
    entry: dict[str, Any] = {"loss": None if spec.loss is None else function_name(spec.loss),
                             "metric": None if spec.metric is None else function_name(spec.metric),
                             "metric-names": probe_metric(spec)}
    if spec.train_step is not None:
        entry["train-step"] = function_name(spec.train_step)
    if spec.targets is not None:  # what a sequence task trains towards: recorded only where there is one
        entry["targets"] = function_name(spec.targets)
    if spec.prediction is not None:
        entry["prediction"] = function_name(spec.prediction)
    return {MANIFEST_KEY: entry}


def retrain_entry(manifest: Mapping[str, Any], spec: TaskSpec) -> dict[str, Any] | None:
    """A retrain whose task trains with another loss, train step or targets than the store's training is refused:
    what it rebuilt would not be what a from-scratch run of the recorded task builds. A metric or a prediction may
    change (they train nothing): the manifest's entry to record then, None when it stands."""
    recorded = manifest.get(MANIFEST_KEY) or {}
    now = manifest_entry(spec).get(MANIFEST_KEY) or dict(NO_FUNCTIONS)
    for name, field_name in (("loss", "loss"), ("train-step", "train_step"), ("targets", "targets")):
        if recorded.get(name) != now.get(name):
            raise ConfigError(f"the store was trained with Task({field_name}={recorded.get(name)}) and the app's task "
                              f"now has {field_name}={now.get(name)}; retrain with the {field_name.replace('_', ' ')} "
                              "the store recorded")
    unchanged = recorded == now or (not recorded and now == NO_FUNCTIONS)
    return None if unchanged else {MANIFEST_KEY: now}


def metric_names(manifest: Mapping[str, Any]) -> list[str]:
    """The names of the task's metric values a store's runs record (none for a task without a metric)."""
    entry = manifest.get(MANIFEST_KEY)
    names = entry.get("metric-names") if isinstance(entry, Mapping) else None
    return [str(n) for n in names] if isinstance(names, list) else []
