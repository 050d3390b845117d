"""``POST /v1/predict``: the served model's answer, from the serving plan the ledger holds right now.

The plan id is a sha256 over the serving plan and the sha256 of every served artifact, so it changes
with every forget that changes what is served (and with a retrain that rebuilds an artifact). The
loaded artifacts are cached under that id; a request that finds another id in the ledger drops the
cache and loads the new plan, so nothing purged stays in memory past the first answer from the new
plan. Serving goes through :func:`fedforget.federation.serve.serving_probabilities`, as
``evaluate`` and ``verify`` do; a task with its own prediction (``Task(prediction=...)``) turns those
probabilities into its outputs (:func:`task_outputs`) as its metric's evaluation does.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedforget.federation.serve import ServingError
from fedforget.store import Store, StoreError

#: Serving assembles models on the task's one cached network (``chain_model``), so the service runs one
#: forward pass at a time, predictions and status's accuracy evaluation alike.
SERVE_LOCK = threading.Lock()


def plan_id(serving: dict[str, Any], artifacts: list[dict[str, Any]]) -> str:
    """sha256 over the serving plan JSON and the served artifacts' sha256s (canonical JSON)."""
    served = set(serving.get("artifacts", []))
    shas = {a["artifact"]: a["sha256"] for a in artifacts if a["artifact"] in served}
    body = json.dumps({"serving": serving, "sha256": shas}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def current_plan(store: Store) -> tuple[str, dict[str, Any] | None, dict[str, Any], list[dict[str, Any]]]:
    """(plan id, plan, serving, artifacts), read from one snapshot of the ledger."""
    ledger = store.ledger()
    try:
        with ledger.snapshot():
            plan, serving, artifacts = ledger.plan(), ledger.serving(), ledger.artifacts()
    finally:
        ledger.close()
    return plan_id(serving, artifacts), plan, serving, artifacts


class _ArrayMemo:
    """The store, with each artifact's arrays read once (by sha256) for as long as one plan is served."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._arrays: dict[str, dict[str, np.ndarray]] = {}

    def get_arrays(self, sha256: str) -> dict[str, np.ndarray]:
        if sha256 not in self._arrays:
            self._arrays[sha256] = self._store.get_arrays(sha256)
        return self._arrays[sha256]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class PredictionError(ValueError):
    """The task's own prediction failed on these inputs, or returned what is not one output per input."""


def task_outputs(cfg: Any, probabilities: np.ndarray) -> list[Any] | None:  # noqa: ANN401 - a RunConfig
    """The task's own prediction for each input, as JSON values (None for a task without one)."""
    from fedforget.tasks.task_functions import function_name, prediction_outputs, task_prediction

    prediction = task_prediction(cfg)
    if prediction is None:
        return None
    try:
        return prediction_outputs(prediction, probabilities).tolist()
    except Exception as exc:  # noqa: BLE001 - whatever the app's prediction raises is one line for the caller
        why = str(exc) if isinstance(exc, ValueError) else f"{function_name(prediction)} raised " \
            f"{type(exc).__name__}: {exc}"
        raise PredictionError(" ".join(why.split())[:300]) from None


@dataclass
class ServedModel:
    plan_id: str
    plan: dict[str, Any]
    serving: dict[str, Any]
    artifacts: list[dict[str, Any]]
    store: _ArrayMemo


class ModelCache:
    """The served model of the current plan id; replaced (the old one dropped) when the id changes."""

    def __init__(self, store: Store) -> None:
        from fedforget.tasks.server_data import load_server_test
        from fedforget.unlearning.evaluate import stored_config

        self.store = store
        self.cfg = stored_config(store)
        test = load_server_test(self.cfg)
        self.num_classes = test.num_classes
        first = test.examples.inputs
        self.example_shape = tuple(first[0].shape[1:]) if len(first) == 1 and first[0].is_floating_point() else None
        self._model: ServedModel | None = None
        self._lock = threading.Lock()
        self.loads = 0

    def current(self) -> ServedModel:
        """The model of the plan the ledger serves now; :class:`ServingError` when nothing is served."""
        pid, plan, serving, artifacts = current_plan(self.store)
        if not plan or not serving.get("available"):
            raise ServingError("nothing is served: no valid model is left (run `fedforget retrain`)")
        with self._lock:
            if self._model is None or self._model.plan_id != pid:
                self._model = ServedModel(pid, plan, serving, artifacts, _ArrayMemo(self.store))
                self.loads += 1
            return self._model

    def predict(self, inputs: tuple[Any, ...]) -> tuple[str, np.ndarray]:
        """(plan id, class probabilities); a plan that moves on mid-answer (its files purged) is read again."""
        from fedforget.federation.serve import serving_probabilities

        for attempt in range(2):
            model = self.current()
            try:
                with SERVE_LOCK:
                    probs = serving_probabilities(self.cfg, self.num_classes, model.store, model.plan, model.serving,
                                                  model.artifacts, inputs)
                return model.plan_id, probs
            except (StoreError, OSError, KeyError):
                if attempt:
                    raise
        raise AssertionError("unreachable")
