"""The one round engine: what every method whose training is rounds of local steps (fedavg, replay, the chains,
FedShard, SAFE) does each round, written once and handed the strategy whose ``start`` runs it.

It is Flower's ``Strategy.start`` loop for one round: :meth:`Round.run` builds the method's messages, calls the
strategy's ``configure_train``, exchanges them under the failure rule, averages the replies, calls the
strategy's ``aggregate_train`` and goes on from what it returns. A method subclasses :class:`Round` with what is
its own (the messages, how a reply splits into contributions, the server's own contribution, what ends its
round); the rest is here:

- **The strategy's hooks.** The engine calls ``strategy.configure_train(server_round, arrays, config, grid)``
  and ``strategy.aggregate_train(server_round, replies)`` directly, once per round. ``arrays`` holds the
  round's models (a one-model method's under its tensor names, several as ``<group>:<tensor>``), packed only
  for a subclass that overrides the hook: the defaults return the method's own messages and means. An
  override of ``configure_train`` returns one message per node of the round, to the same nodes in the same
  order; what an override of ``aggregate_train`` returns is what the round goes on from.
- **The failure rule** (one for every method): the messages go through
  :func:`~fedforget.federation.failover.exchange_redo_or_exclude` (redo a lost node's message where its
  partition comes back, one more try for a raising or rejected one, then exclude the partition), each reply
  checked by its own message's check. A method that cannot build anything without every partition
  (:attr:`Round.needs_every_partition`: fedavg's and replay's one global model) stops with
  :class:`~fedforget.federation.failover.PartitionsExcluded` before it aggregates.
- **The mean.** Each group's contributions (a reply's examples and tensors; zero examples abstain) are
  averaged by :func:`~fedforget.core.weighted_mean.weighted_mean` in ascending order (the partition; the
  server's own contribution last) at the method's precision (:attr:`Round.accumulate`). A group no one
  contributed to keeps the state it started the round with.
- **The metrics row.** Client-rounds, bytes down and up, the examples and mean loss of the contributions,
  seconds and the action, plus the method's own fields (:meth:`Round.row_fields`), appended to the store's
  ``metrics.jsonl`` (:meth:`Round.finish`; a method with its own row writes that instead).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from fedforget.core.weighted_mean import weighted_mean
from fedforget.federation.failover import PartitionsExcluded, exchange_redo_or_exclude
from fedforget.federation.messaging import payload_bytes
from fedforget.federation.method_strategy import RoundInProgress, overridden

Arrays = dict[str, np.ndarray]
#: why a reply cannot be used, or None
Check = Callable[[Message], "str | None"]
#: where the server's own contribution is summed: after every partition's
SERVER_ORDER = float("inf")
#: the separator of a group's name and its tensor's in a record of several models (as in ``Result.arrays``)
SEP = ":"


@dataclass(frozen=True)
class Send:
    """One node's message of a round: the partition whose data answers it, how its reply is checked, and the
    group it trains (None: one message trains several, and its reply says which)."""

    partition: int
    message: Message
    check: Check
    group: str | None = None


@dataclass(frozen=True)
class Contribution:
    """One term of a group's mean: its place in the sum, the examples it trained on (0 abstains), its tensors
    and its training loss."""

    group: str
    order: float
    weight: int
    arrays: Mapping[str, np.ndarray]
    loss: float = 0.0


@dataclass
class RoundResult:
    """What one round produced."""

    states: dict[str, Arrays]  # every group's state after the round (its start where no one contributed)
    weights: dict[str, int]  # examples behind each mean, for the groups someone contributed to
    contributions: list[Contribution]  # the terms averaged, partition order within each group
    replies: list[Message | None] = field(default_factory=list)  # in send order; None: partition excluded
    excluded: set[int] = field(default_factory=set)  # partitions lost for good in this round
    row: dict[str, Any] = field(default_factory=dict)  # the metrics row written
    metrics: dict[str, Any] = field(default_factory=dict)  # what aggregate_train receives as the round's metrics


def group_means(starts: Mapping[str, Arrays], contributions: Sequence[Contribution],
                accumulate: type[np.floating] = np.float32) -> tuple[dict[str, Arrays], dict[str, int]]:
    """Each group's weighted mean of its contributions with examples, in ascending order, at ``accumulate``;
    a group with none keeps its start. Returns the states and the examples behind each mean."""
    terms: dict[str, list[Contribution]] = {}
    for c in contributions:
        if c.weight > 0:
            terms.setdefault(c.group, []).append(c)
    states, weights = {}, {}
    for group, start in starts.items():
        mine = terms.get(group)
        if not mine:
            states[group] = start
            continue
        mean = weighted_mean([c.arrays for c in mine], [c.weight for c in mine], accumulate=accumulate,
                             keys=[c.order for c in mine])
        states[group] = {k: np.ascontiguousarray(v) for k, v in mean.items()}
        weights[group] = sum(c.weight for c in mine)
    return states, weights


def pack(states: Mapping[str, Mapping[str, np.ndarray]], one_model: bool = False) -> ArrayRecord:
    """A round's models as one record: ``<group>:<tensor>`` (even one group: the keys never depend on how many
    groups a round has), or a one-model method's under its tensor names."""
    if one_model:
        (state,) = states.values()
        return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
    return ArrayRecord({f"{g}{SEP}{k}": Array(np.ascontiguousarray(v))
                        for g, state in states.items() for k, v in state.items()})


def unpack(record: ArrayRecord, like: Mapping[str, Mapping[str, np.ndarray]],
           one_model: bool = False) -> dict[str, Arrays]:
    """The inverse of :func:`pack`, held to ``like`` (the round's models): every group's tensors, each of its
    shape and dtype, nothing else (one model's tensors are rounded back to its dtypes, as a server step in
    float64 is)."""
    out: dict[str, Arrays] = {g: {} for g in like}
    for key, value in record.items():
        group, _, name = key.rpartition(SEP)
        if one_model:
            group, name = next(iter(like)), key
        if group not in out:
            raise ValueError(f"aggregate_train returned tensor {key!r} of no group of this round")
        out[group][name] = value.numpy()
        if one_model and name in like[group]:
            out[group][name] = np.ascontiguousarray(out[group][name], dtype=np.asarray(like[group][name]).dtype)
    for group, state in like.items():
        got = out[group]
        wrong = sorted(set(state) ^ set(got)) or [k for k in state if (got[k].shape, got[k].dtype) !=
                                                  (np.shape(state[k]), np.asarray(state[k]).dtype)]
        if wrong:
            raise ValueError(f"aggregate_train returned group {group!r} without the round's tensor {wrong[0]!r} "
                             "as it was (name, shape, dtype); return every group's tensors")
    return out


class Round(ABC):
    """One round of a method over its groups (models); subclass it with the method's messages.

    ``run`` is the :class:`~fedforget.federation.run_setup.ServerRun` whose strategy's hooks the round calls
    (``run.strategy``; None: no hooks, the method's own round)."""

    #: the precision of the mean (float32: Flower's arithmetic; float64: summed wide, rounded once)
    accumulate: ClassVar[type[np.floating]] = np.float32
    #: one model, shown to the hooks under its own tensor names (fedavg, replay)
    one_model: ClassVar[bool] = False
    #: whether a partition lost for good stops the run's training (the one global model needs every partition)
    needs_every_partition: ClassVar[bool] = False

    def __init__(self, grid: Grid, run: Any) -> None:
        self.grid, self.nodes, self.timeout = grid, run.nodes, run.cfg.round_timeout
        self.store, self.action, self.strategy = run.store, run.cfg.action, run.strategy

    # -- the method's hooks ------------------------------------------------------------------
    @abstractmethod
    def configure_train(self, server_round: int, states: Mapping[str, Arrays]) -> list[Send]:
        """The round's messages: which node trains what, from which state."""

    def contributions(self, send: Send, reply: Message) -> list[Contribution]:
        """What a valid reply adds to the groups' means."""
        raise NotImplementedError

    def server_contributions(self, server_round: int, states: Mapping[str, Arrays]) -> list[Contribution]:
        """The server's own terms (summed after every partition's); none by default."""
        return []

    def row_fields(self, server_round: int, sends: Sequence[Send]) -> dict[str, Any]:
        """The method's own fields of the round's metrics row."""
        return {}

    def exchange(self, sends: Sequence[Send]) -> tuple[list[Message | None], set[int], int]:
        """Send under the failure rule; the valid replies in send order (None: excluded), the partitions
        excluded, and the tensor bytes sent down."""
        replies, lost = exchange_redo_or_exclude(
            self.grid, self.nodes, [s.message for s in sends], [s.partition for s in sends], self.timeout,
            lambda reply, i: sends[i].check(reply))
        return replies, lost, sum(payload_bytes(s.message.content) for s in sends)

    def aggregate_train(self, server_round: int, states: Mapping[str, Arrays], sends: Sequence[Send],
                        replies: Sequence[Message | None]) -> RoundResult:
        """Each group's mean over the valid replies' contributions and the server's, in order."""
        terms = [c for s, r in zip(sends, replies, strict=True) if r is not None for c in self.contributions(s, r)]
        clients = [c for c in terms if c.weight > 0]
        terms += self.server_contributions(server_round, states)
        means, weights = group_means(states, terms, self.accumulate)
        row = {"round": server_round, "client-rounds": len(sends),
               "bytes-up": sum(payload_bytes(r.content) for r in replies if r is not None),
               "train-examples": sum(c.weight for c in clients),
               "train-loss": float(np.mean([c.loss for c in clients])) if clients else 0.0}
        return RoundResult(means, weights, terms, list(replies), row=row, metrics=row)

    def finish(self, server_round: int, result: RoundResult, sends: Sequence[Send], bytes_down: int,
               seconds: float) -> None:
        """Write the round's metrics row (the method's fields, the round's, bytes down, seconds, action)."""
        result.row = {**self.row_fields(server_round, sends), **result.row, "bytes-down": bytes_down,
                      "seconds": seconds, "action": self.action}
        if self.store is not None:
            self.store.append_metrics(result.row)

    # -- the round -----------------------------------------------------------------------------
    def run(self, server_round: int, states: Mapping[str, Arrays]) -> RoundResult:
        """One round: the method's messages through the strategy's ``configure_train``, the exchange under the
        failure rule, the method's means through the strategy's ``aggregate_train``, the metrics row."""
        sends = self._configured(server_round, states, self.configure_train(server_round, states))
        started = time.monotonic()
        replies, excluded, bytes_down = self.exchange(sends)
        trained = {s.partition for s in sends}
        if self.needs_every_partition and excluded & trained:
            raise PartitionsExcluded(excluded & trained)
        result = self.aggregate_train(server_round, states, sends, replies)
        result.excluded = excluded
        result.states = self._aggregated(server_round, [r for r in replies if r is not None], result)
        self.finish(server_round, result, sends, bytes_down, time.monotonic() - started)
        return result

    def _configured(self, server_round: int, states: Mapping[str, Arrays], sends: list[Send]) -> list[Send]:
        strategy = self.strategy
        if strategy is None:
            return sends
        arrays = pack(states, self.one_model) if overridden(strategy, "configure_train") else ArrayRecord()
        messages = [s.message for s in sends]
        strategy._round = RoundInProgress(list(messages))
        try:
            made = list(strategy.configure_train(server_round, arrays, ConfigRecord(), self.grid))
        finally:
            strategy._round = None
        wanted = [m.metadata.dst_node_id for m in messages]
        if [m.metadata.dst_node_id for m in made] != wanted:
            raise ValueError(f"{type(strategy).__name__}.configure_train returned messages for nodes "
                             f"{[m.metadata.dst_node_id for m in made]}, not the round's {wanted}: return one "
                             "message per node of the round, in order")
        return [s if s.message is m else replace(s, message=m) for s, m in zip(sends, made, strict=True)]

    def _aggregated(self, server_round: int, replies: list[Message], result: RoundResult) -> dict[str, Arrays]:
        strategy = self.strategy
        if strategy is None:
            return result.states
        hooked = overridden(strategy, "aggregate_train")
        numbers = {k: v for k, v in result.metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        strategy._round = RoundInProgress([], pack(result.states, self.one_model) if hooked else None,
                                          MetricRecord(numbers))
        try:
            made, _ = strategy.aggregate_train(server_round, replies)
        finally:
            strategy._round = None
        if not hooked:
            return result.states
        if made is None:
            raise ValueError(f"{type(strategy).__name__}.aggregate_train returned no arrays; return the round's models")
        return unpack(made, result.states, self.one_model)
