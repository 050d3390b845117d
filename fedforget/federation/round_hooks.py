"""A strategy's ``configure_train``/``aggregate_train`` as real hooks of the rounds its ``start`` runs.

Flower calls a strategy's hooks once per round from ``Strategy.start``. A fedforget method's ``start`` runs a
whole action into the store, but its rounds are still rounds (one Flower round of FedAvg; one grouped round of
every chain position, shard or clique due), and each one passes through the strategy that started it:

- ``configure_train(server_round, arrays, config, grid)`` receives the round's models (a one-model method's
  under its tensor names; a grouped round's under ``<group>:<tensor>``) and returns the round's messages.
  The default returns the method's own; an override may change them (add config entries, say) but must
  return one message per node of the round, to the same nodes in the same order, as the failure rule
  redoes each by its partition.
- ``aggregate_train(server_round, replies)`` receives the valid replies and returns the round's models and
  metrics. The default returns the method's partition-order means; what an override returns is what the
  round goes on from.

The hooks are called only when a strategy subclass overrides them (the default path packs nothing), and a
retrain or ``verify`` through the app that trained the store runs the same overrides, so what they change
is replayed exactly. A strategy whose rounds are not FedAvg rounds (split learning) refuses an override.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

Arrays = dict[str, np.ndarray]
HOOKS = ("configure_train", "aggregate_train")
#: the separator of a group's name and its tensor's in a record of several models (as in ``Result.arrays``)
SEP = ":"

_RUNNING: ContextVar[Any | None] = ContextVar("fedforget_running_strategy", default=None)


@dataclass
class RoundInProgress:
    """What the default hooks return for the round being run."""

    messages: list[Message]
    arrays: ArrayRecord | None = None
    metrics: MetricRecord = field(default_factory=MetricRecord)


@contextmanager
def running(strategy: object) -> Iterator[None]:
    """Route the rounds run inside this block through ``strategy``'s hooks."""
    token = _RUNNING.set(strategy)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def default_hook(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a strategy's own hook: a round calls the strategy only where a subclass replaced it."""
    function.__fedforget_default_hook__ = True  # type: ignore[attr-defined]
    return function


def overridden(strategy: object, hook: str) -> bool:
    """Whether ``strategy`` (or the class given) replaces its default ``hook`` with its own."""
    function = getattr(strategy if isinstance(strategy, type) else type(strategy), hook, None)
    return function is not None and not getattr(function, "__fedforget_default_hook__", False)


def _hooked(hook: str) -> Any | None:
    strategy = _RUNNING.get()
    return strategy if strategy is not None and overridden(strategy, hook) else None


def pack(states: Mapping[str, Mapping[str, np.ndarray]]) -> ArrayRecord:
    """A grouped round's models as one record, ``<group>:<tensor>`` (even one group: the keys never depend on
    how many groups a round has)."""
    return ArrayRecord({f"{g}{SEP}{k}": Array(np.ascontiguousarray(v))
                        for g, state in states.items() for k, v in state.items()})


def unpack(record: ArrayRecord, like: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Arrays]:
    """The inverse of :func:`pack`, held to ``like`` (the round's models): every group's tensors, each of its
    shape and dtype, nothing else."""
    out: dict[str, Arrays] = {g: {} for g in like}
    for key, value in record.items():
        group, _, name = key.rpartition(SEP)
        if group not in out:
            raise ValueError(f"aggregate_train returned tensor {key!r} of no group of this round")
        out[group][name] = value.numpy()
    for group, state in like.items():
        got = out[group]
        wrong = sorted(set(state) ^ set(got)) or [k for k in state if (got[k].shape, got[k].dtype) !=
                                                  (np.shape(state[k]), np.asarray(state[k]).dtype)]
        if wrong:
            raise ValueError(f"aggregate_train returned group {group!r} without the round's tensor {wrong[0]!r} "
                             "as it was (name, shape, dtype); return every group's tensors")
    return out


#: the round's models, or what packs them when a hook asks (the default path packs nothing)
Models = ArrayRecord | Callable[[], ArrayRecord]


def _models(models: Models) -> ArrayRecord:
    return models if isinstance(models, ArrayRecord) else models()


def configure_through_strategy(server_round: int, messages: list[Message], states: Models,
                               grid: Grid) -> list[Message]:
    """The round's messages as the running strategy's ``configure_train`` returns them (unchanged when it
    does not override it)."""
    strategy = _hooked("configure_train")
    if strategy is None:
        return messages
    strategy._round = RoundInProgress(list(messages))
    made = list(strategy.configure_train(server_round, _models(states), ConfigRecord(), grid))
    wanted = [m.metadata.dst_node_id for m in messages]
    if [m.metadata.dst_node_id for m in made] != wanted:
        raise ValueError(f"{type(strategy).__name__}.configure_train returned messages for nodes "
                         f"{[m.metadata.dst_node_id for m in made]}, not the round's {wanted}: return one message "
                         "per node of the round, in order")
    return made


def aggregate_through_strategy(server_round: int, replies: Sequence[Message], arrays: Models,
                               metrics: Mapping[str, Any]) -> ArrayRecord | None:
    """What the running strategy's ``aggregate_train`` makes of the round (None: it does not override it)."""
    strategy = _hooked("aggregate_train")
    if strategy is None:
        return None
    numbers = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    strategy._round = RoundInProgress([], _models(arrays), MetricRecord(numbers))
    made, _ = strategy.aggregate_train(server_round, list(replies))
    if made is None:
        raise ValueError(f"{type(strategy).__name__}.aggregate_train returned no arrays; return the round's models")
    return made


def in_round(strategy: object, hook: str) -> RoundInProgress:
    """The round a default hook answers for, or a clear error outside one."""
    current = getattr(strategy, "_round", None)
    if current is None or _RUNNING.get() is not strategy:
        raise RuntimeError(f"{type(strategy).__name__}.{hook} is called by start(), once per round; call start()")
    return current
