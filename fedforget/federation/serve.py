"""What is served: the stored serving plan turned into predictions (server, coordinator, audit).

The plan's ``kind`` picks its method's serving function from the registry. :func:`lora_probabilities`
serves LoRA + head models (or the user's own model, ``Task(train='all')``), each artifact one model: a single
artifact alone, several (flat shards) as the mean of their softmax probabilities.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fedforget.core.config import RunConfig
from fedforget.core.known_methods import for_plan
from fedforget.federation.module_stack import Module, assemble, split_state
from fedforget.federation.run_setup import DEFAULT_ADAPTER, build_model
from fedforget.store import Store
from fedforget.tasks.base import IGNORE
from fedforget.tasks.registry import get_task
from fedforget.tasks.trained_parameters import trains_whole_model
from fedforget.training.supervised import predict_logits

Tensors = dict[str, torch.Tensor]


class ServingError(RuntimeError):
    """Nothing valid is left to serve: a retrain is required."""


def load_tensors(store: Store, sha256: str) -> Tensors:
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in store.get_arrays(sha256).items()}


def class_probabilities(logits: torch.Tensor) -> np.ndarray:
    """Softmax over the classes (the last axis: a sequence task's logits are per position) in float64: every
    serving function turns logits into the probabilities it compares alike."""
    return torch.softmax(logits.double(), dim=-1).numpy()


def serving_probabilities(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                          serving: dict[str, Any], artifacts: list[dict[str, Any]],
                          inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """Class probabilities of the served ensemble on ``inputs``; raises :class:`ServingError` if none."""
    if not serving.get("available"):
        raise ServingError("no valid model is left to serve; run `fedforget retrain`")
    entry = for_plan(plan_json.get("kind"))
    serving_fn = entry.serving if entry is not None else lora_probabilities
    return serving_fn(cfg, num_classes, store, plan_json, serving, artifacts, inputs)


def lora_probabilities(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                       serving: dict[str, Any], artifacts: list[dict[str, Any]],
                       inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """One LoRA + head model per served artifact; several are averaged as probabilities."""
    shas = {a["artifact"]: a["sha256"] for a in artifacts}
    kinds = {a["kind"] for a in artifacts if a["artifact"] in serving["artifacts"]}
    if kinds - {"lora+head"}:
        raise ServingError(f"evaluate rebuilds LoRA + head models only, not {', '.join(sorted(kinds))}; "
                           "`fedforget status` shows the accuracy the run measured")
    probs = []
    for artifact in serving["artifacts"]:
        state = load_tensors(store, shas[artifact])
        if trains_whole_model(get_task(cfg.task).trains):  # the user's own model: its trained parameters, its output
            model = build_model(cfg, num_classes).model
            model.load_trainable_state(DEFAULT_ADAPTER, state)
        else:
            lora, head = split_state(state)
            model = assemble(cfg, num_classes, "continue", [Module("default", None, lora)], head)
        probs.append(class_probabilities(predict_logits(model, inputs)))
    return np.mean(np.stack(probs), axis=0)


def serving_accuracy(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                     serving: dict[str, Any], artifacts: list[dict[str, Any]], inputs: tuple[torch.Tensor, ...],
                     labels: torch.Tensor) -> dict[str, float]:
    from fedforget.tasks.task_functions import task_metric, task_prediction

    probs = serving_probabilities(cfg, num_classes, store, plan_json, serving, artifacts, inputs)
    return probability_metrics(probs, labels, task_metric(cfg), task_prediction(cfg))


def probability_metrics(probs: np.ndarray, labels: torch.Tensor,
                        metric: Callable[[np.ndarray, np.ndarray], Any] | None = None,
                        prediction: Callable[[torch.Tensor], Any] | None = None) -> dict[str, float]:
    """Accuracy and mean cross-entropy of class probabilities: the server's and each node's alike (a sequence
    task's over its target positions); with a task's own ``metric``, its values beside them
    (:func:`~fedforget.tasks.task_functions.metric_values`), on the outputs of the task's own ``prediction`` where
    it has one."""
    y = labels.numpy()
    if y.ndim > 1:
        kept = y != IGNORE
        per_target, hit_targets = probs[kept], y[kept]
        picked = np.clip(per_target[np.arange(len(hit_targets)), hit_targets], 1e-12, 1.0)
        out = {"accuracy": float((per_target.argmax(1) == hit_targets).mean()) if len(hit_targets) else 0.0,
               "loss": float(-np.log(picked).mean()) if len(hit_targets) else 0.0, "num-examples": int(len(y))}
    else:
        picked = np.clip(probs[np.arange(len(y)), y], 1e-12, 1.0)
        out = {"accuracy": float((probs.argmax(1) == y).mean()), "loss": float(-np.log(picked).mean()),
               "num-examples": int(len(y))}
    if metric is not None:
        from fedforget.tasks.task_functions import metric_input, metric_values

        out.update(metric_values(metric, metric_input(probs, prediction), y))
    return out
