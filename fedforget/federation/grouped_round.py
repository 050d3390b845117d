"""One round of grouped FedAvg, written once: what every method that trains several models at once in rounds
of local steps (chain positions, FedShard's shards, SAFE's cliques) does each round.

It is shaped like Flower's ``Strategy``: :meth:`GroupedRound.configure_train` says which node gets which
message, :meth:`GroupedRound.aggregate_train` turns the replies into each group's new state, and
:meth:`GroupedRound.run` is one round between the two. A method says only what is its own (the messages,
how a reply splits into contributions, the server's own contribution, its metrics); the rest is here:

- **The failure rule.** The messages go through :func:`~fedforget.federation.failover.exchange_redo_or_exclude`
  (redo a lost node's message where its partition comes back, one more try for a raising or rejected one,
  then exclude the partition), each reply checked by its own message's check.
- **The mean.** Each group's contributions (a reply's examples and tensors; zero examples abstain) are
  averaged by :func:`~fedforget.core.weighted_mean.weighted_mean` in ascending order (the partition; the
  server's own contribution last) at the method's precision (:attr:`GroupedRound.accumulate`). A group no
  one contributed to keeps the state it started the round with.
- **The strategy's hooks.** A round passes through the running strategy's ``configure_train`` and
  ``aggregate_train`` where a subclass overrides them (:mod:`fedforget.federation.round_hooks`).
- **The metrics row.** Client-rounds, bytes down and up, the examples and mean loss of the contributions,
  seconds and the action, plus the method's own fields (:meth:`GroupedRound.row_fields`), appended to the
  store's ``metrics.jsonl``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
from flwr.app import Message
from flwr.serverapp import Grid

from fedforget.core.weighted_mean import weighted_mean
from fedforget.federation.failover import exchange_redo_or_exclude
from fedforget.federation.messaging import payload_bytes
from fedforget.federation.round_hooks import aggregate_through_strategy, configure_through_strategy, pack, unpack

Arrays = dict[str, np.ndarray]
#: why a reply cannot be used, or None
Check = Callable[[Message], "str | None"]
#: where the server's own contribution is summed: after every partition's
SERVER_ORDER = float("inf")


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


class GroupedRound(ABC):
    """A method's round over several groups (models) at once; subclass it with the method's messages."""

    #: the precision of the mean (float32: Flower's arithmetic; float64: summed wide, rounded once)
    accumulate: ClassVar[type[np.floating]] = np.float32

    def __init__(self, grid: Grid, nodes: dict[int, int], timeout: float, store: Any | None = None,
                 action: str = "train") -> None:
        self.grid, self.nodes, self.timeout, self.store, self.action = grid, nodes, timeout, store, action

    # -- the method's hooks ------------------------------------------------------------------
    @abstractmethod
    def configure_train(self, server_round: int, states: Mapping[str, Arrays]) -> list[Send]:
        """The round's messages: which node trains what, from which state."""

    @abstractmethod
    def contributions(self, send: Send, reply: Message) -> list[Contribution]:
        """What a valid reply adds to the groups' means."""

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

    # -- the round -----------------------------------------------------------------------------
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
        return RoundResult(means, weights, terms, list(replies), row=row)

    def run(self, server_round: int, states: Mapping[str, Arrays]) -> RoundResult:
        """One round: configure, exchange under the failure rule, aggregate, write the metrics row."""
        sends = self.configure_train(server_round, states)
        messages = configure_through_strategy(server_round, [s.message for s in sends], lambda: pack(states),
                                              self.grid)
        sends = [s if s.message is m else replace(s, message=m) for s, m in zip(sends, messages, strict=True)]
        started = time.monotonic()
        replies, excluded, bytes_down = self.exchange(sends)
        result = self.aggregate_train(server_round, states, sends, replies)
        result.excluded = excluded
        made = aggregate_through_strategy(server_round, [r for r in replies if r is not None],
                                          lambda: pack(result.states), result.row)
        if made is not None:
            result.states = unpack(made, result.states)
        result.row = {**self.row_fields(server_round, sends), **result.row, "bytes-down": bytes_down,
                      "seconds": time.monotonic() - started, "action": self.action}
        if self.store is not None:
            self.store.append_metrics(result.row)
        return result
