"""What a run's rows in the store's ``metrics.jsonl`` mean to Flower's :class:`~flwr.serverapp.strategy.Result`:
which rows are training rounds (numbered in the order the method ran them), which carry the server's
evaluation, and how the nodes' evaluation of what is served sits in the final row (``federated-*``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: metrics.jsonl values a training row reports per round, as Flower's aggregated train MetricRecord
TRAIN_METRICS = ("train-loss", "train-examples", "bytes-down", "bytes-up", "client-rounds")
#: the server's evaluation in a row, as Flower's ServerApp-side evaluate MetricRecord
SERVER_METRICS = ("accuracy", "loss")
#: the final row's prefix of the nodes' evaluation of what is served
FEDERATED = "federated-"
#: the nodes' aggregated ``num-examples`` (Flower's weighting key) is the row's ``federated-examples``
_ROW_NAMES = {"num-examples": "examples"}


def is_training_round(row: Mapping[str, Any]) -> bool:
    return not row.get("final") and "train-loss" in row


def training_rounds(rows: Sequence[Mapping[str, Any]]) -> int:
    """How many training rounds ``rows`` hold (the last round's number)."""
    return sum(1 for r in rows if is_training_round(r))


def number(value: object) -> int | float | None:
    """A finite metric value as Flower's MetricRecord holds it (None: not a number, or not finite)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return value
    return float(value) if math.isfinite(value) else None


def picked(row: Mapping[str, Any], keys: Sequence[str]) -> dict[str, int | float]:
    """The finite numbers ``row`` holds under ``keys``."""
    out = {k: number(row.get(k)) for k in keys}
    return {k: v for k, v in out.items() if v is not None}


def federated_fields(metrics: Mapping[str, Any]) -> dict[str, int | float]:
    """The final row's fields of the nodes' aggregated evaluation (``accuracy`` → ``federated-accuracy``)."""
    out = {f"{FEDERATED}{_ROW_NAMES.get(k, k)}": number(v) for k, v in metrics.items()}
    return {k: v for k, v in out.items() if v is not None}


def federated_metrics(row: Mapping[str, Any]) -> dict[str, int | float]:
    """The nodes' aggregated evaluation a final row holds, under the aggregate's own keys."""
    names = {v: k for k, v in _ROW_NAMES.items()}
    out = {names.get(k[len(FEDERATED):], k[len(FEDERATED):]): number(v) for k, v in row.items()
           if k.startswith(FEDERATED)}
    return {k: v for k, v in out.items() if v is not None}
