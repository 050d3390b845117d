"""The one evaluate message every method shares: what the store serves, sent to a node to evaluate on its own
test records, and the node's answer.

- ``evaluate.served``: :class:`EvaluateServed` (``config``: the serving plan, the serving choice and the served
  artifacts' ledger entries as JSON, the class count and the server round; one ArrayRecord per served artifact
  under ``artifact:<sha256>``, its tensors under their own names), answered by :class:`EvaluateResult`
  (``metrics``: the partition, accuracy, loss and how many test records it evaluated, 0: it abstains; and its
  task's own metric values under their names).

The node hands the plan to the method's declared ``serving`` hook with :class:`ServedArrays` in place of the store
(the hooks read a store's ``get_arrays`` only), so it computes the class probabilities the server would. Kept to
flwr + numpy: the server's side builds it without the node's stack, the node's imports torch when it evaluates.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedforget.federation.control_messages import PARTITION_KEY, MalformedMessage

CONFIG, METRICS = "config", "metrics"
PLAN_KEY, SERVING_KEY, ARTIFACTS_KEY = "plan", "serving", "artifacts"
NUM_CLASSES_KEY, ROUND_KEY = "num-classes", "server-round"
ARTIFACT_PREFIX = "artifact:"
#: The ledger fields of an artifact the serving hooks read.
ARTIFACT_FIELDS = ("artifact", "sha256", "kind", "meta")


class ServedArrays:
    """The served artifacts' tensors by sha256: what a serving hook reads of a store (``get_arrays``), on a node
    that holds no store. ``root`` is the node's state directory (a hook that caches derived files there)."""

    def __init__(self, arrays: Mapping[str, Mapping[str, np.ndarray]], root: Path | None = None) -> None:
        self._arrays = {sha: dict(tensors) for sha, tensors in arrays.items()}
        self.root = root

    def get_arrays(self, sha256: str) -> dict[str, np.ndarray]:
        try:
            return dict(self._arrays[sha256])
        except KeyError:
            raise MalformedMessage(f"the evaluate message carries no artifact {sha256[:12]}") from None


@dataclass(frozen=True)
class EvaluateServed:
    """``evaluate.served``: evaluate what is served (its plan, serving choice, artifacts and their tensors)."""

    plan: dict[str, Any]
    serving: dict[str, Any]
    artifacts: tuple[dict[str, Any], ...]
    tensors: Mapping[str, Mapping[str, np.ndarray]]  # sha256 → tensor name → values
    num_classes: int
    server_round: int

    def to_record(self) -> RecordDict:
        config = ConfigRecord({PLAN_KEY: json.dumps(self.plan, sort_keys=True),
                               SERVING_KEY: json.dumps(self.serving, sort_keys=True),
                               ARTIFACTS_KEY: json.dumps(list(self.artifacts), sort_keys=True),
                               NUM_CLASSES_KEY: self.num_classes, ROUND_KEY: self.server_round})
        content = RecordDict({CONFIG: config})
        for sha, tensors in self.tensors.items():
            content[f"{ARTIFACT_PREFIX}{sha}"] = ArrayRecord(
                {k: Array(np.ascontiguousarray(v)) for k, v in tensors.items()})
        return content

    @classmethod
    def from_record(cls, content: RecordDict) -> EvaluateServed:
        config = content[CONFIG] if CONFIG in content else None
        if not isinstance(config, ConfigRecord):
            raise MalformedMessage(f"no ConfigRecord {CONFIG!r}")
        try:
            plan, serving = json.loads(str(config[PLAN_KEY])), json.loads(str(config[SERVING_KEY]))
            artifacts = json.loads(str(config[ARTIFACTS_KEY]))
            num_classes, server_round = config[NUM_CLASSES_KEY], config[ROUND_KEY]
        except (KeyError, ValueError) as exc:
            raise MalformedMessage(f"malformed evaluate config ({exc})") from None
        if not (isinstance(plan, dict) and isinstance(serving, dict) and isinstance(artifacts, list)
                and all(isinstance(a, dict) and isinstance(a.get("sha256"), str) for a in artifacts)):
            raise MalformedMessage("the evaluate config's plan, serving or artifacts are not what a store holds")
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (num_classes, server_round)):
            raise MalformedMessage(f"{NUM_CLASSES_KEY} and {ROUND_KEY} are integers")
        tensors = {name[len(ARTIFACT_PREFIX):]: {k: v.numpy() for k, v in record.items()}
                   for name, record in content.array_records.items() if name.startswith(ARTIFACT_PREFIX)}
        return cls(plan, serving, tuple(artifacts), tensors, int(num_classes), int(server_round))

    def store(self, root: Path | None = None) -> ServedArrays:
        return ServedArrays(self.tensors, root)


def served_entries(serving: Mapping[str, Any], artifacts: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The ledger entries of the artifacts ``serving`` serves, cut to what the serving hooks read."""
    served = set(serving.get("artifacts") or [])
    return tuple({k: a[k] for k in ARTIFACT_FIELDS} for a in artifacts if a["artifact"] in served)


#: the keys of a node's answer besides its task's own metric values
RESULT_KEYS = (PARTITION_KEY, "accuracy", "loss", "num-examples")


@dataclass(frozen=True)
class EvaluateResult:
    """A node's answer: its accuracy and loss on ``examples`` test records (0: it holds none and abstains), and
    the values of its task's own metric (``Task(metric=...)``), by name."""

    partition: int
    accuracy: float
    loss: float
    examples: int
    metrics: Mapping[str, float] = field(default_factory=dict)

    def to_record(self) -> RecordDict:
        return RecordDict({METRICS: MetricRecord({PARTITION_KEY: self.partition, "accuracy": self.accuracy,
                                                  "loss": self.loss, "num-examples": self.examples,
                                                  **dict(self.metrics)})})

    @classmethod
    def from_record(cls, content: RecordDict) -> EvaluateResult:
        metrics = content[METRICS] if METRICS in content else None
        if not isinstance(metrics, MetricRecord):
            raise MalformedMessage(f"no MetricRecord {METRICS!r}")
        try:
            return cls(int(metrics[PARTITION_KEY]), float(metrics["accuracy"]), float(metrics["loss"]),
                       int(metrics["num-examples"]),
                       {str(k): float(v) for k, v in metrics.items() if k not in RESULT_KEYS})  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            raise MalformedMessage("malformed evaluate metrics") from None
