"""Pure bookkeeping of HO-SFL: per-round seeds and samples, the (seed, v̄) history, traffic ledger.

No torch, no flwr: the server strategy and the clients both use these, and unit tests check them.

Replay timestamps (Algorithm 3's off-by-one): a client's *version* is the number of
history entries applied to its θ_c. Updates are **lazy**: round t's (seeds, v̄) is only appended to
the history; a client applies it when it next takes part, at the start of that round's forward
phase. So a client in round t first replays entries ``version .. t-1`` and is then at version t,
exactly "Return t" of Algorithm 3, and no round is ever applied twice.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fedforget.core.seeds import derive_seed


@dataclass(frozen=True)
class SplitProtocol:
    """How one split variant's clients and server step, in one value its Strategy class names
    (``HOSFL.protocol``): the server's rounds and the clients' handlers ask it, none compares variant names."""

    #: the run config's ``method`` value: it names the variant's artifact, seeds and messages
    name: str
    #: clients step θ_c by zeroth order on P seeded directions and replay the server's (seeds, v̄) history, so
    #: θ_c never travels and the history is stored next to the model (HO-SFL); ``hosfl.zo-params`` and
    #: ``hosfl.client-momentum`` shape that step
    replays_history: bool = False
    #: clients send f_c at θ_c ± μu for the round's one shared seed, and both sides step by SPSA: the server
    #: keeps no optimizer (ZO-SFL)
    spsa: bool = False

    @property
    def local_steps(self) -> bool:
        """Clients take first-order local steps from λ, ``local-epochs`` passes a round (SFL)."""
        return not (self.replays_history or self.spsa)


HOSFL_PROTOCOL = SplitProtocol("hosfl", replays_history=True)
SFL_PROTOCOL = SplitProtocol("sfl")
ZO_SFL_PROTOCOL = SplitProtocol("zo-sfl", spsa=True)
#: the run config names the variant (``method=``); this is where that name becomes its protocol
SPLIT_PROTOCOLS: dict[str, SplitProtocol] = {v.name: v for v in (HOSFL_PROTOCOL, SFL_PROTOCOL, ZO_SFL_PROTOCOL)}


def split_protocol(method: str) -> SplitProtocol:
    """The protocol of the split variant ``method`` (a ValueError names the variants for any other)."""
    try:
        return SPLIT_PROTOCOLS[method]
    except KeyError:
        raise ValueError(f"unknown split method {method!r}; choose one of {', '.join(SPLIT_PROTOCOLS)}") from None


DIRECTIONS = ("up", "down")
#: Traffic kinds: cut-layer activations (+ labels, masks) up; feedback (λ, or a ZO loss scalar) down;
#: model aggregation (seeds, v̄ history, v scalars, or client models); control (round numbers, ids).
KINDS = ("activations", "feedback", "aggregation", "control")


def round_seeds(seed: int, method: str, server_round: int, perturbations: int) -> list[int]:
    """The P direction seeds of one round (63-bit, unique per (run seed, method, round, p))."""
    return [derive_seed(seed, method, "zo-direction", server_round, p) for p in range(perturbations)]


def sample_round(partitions: Iterable[int], k: int, seed: int, method: str, server_round: int) -> list[int]:
    """S_t: ``k`` partitions drawn without replacement with a seed per round, sorted."""
    ordered = sorted(partitions)
    if k >= len(ordered):
        return ordered
    return sorted(random.Random(derive_seed(seed, method, "sample", server_round)).sample(ordered, k))


def batch_seed(seed: int, method: str, server_round: int, partition: int) -> int:
    """The seed of the mini-batch a client draws in a round (the same in both phases of the round)."""
    return derive_seed(seed, method, "batch", server_round, partition)


def local_steps(num_examples: int, batch_size: int, epochs: int) -> int:
    """Mini-batches in ``epochs`` passes over a client's examples (SFL's local work in one round)."""
    return max(1, epochs * -(-num_examples // batch_size))


def local_batch_indices(num_examples: int, batch_size: int, seed: int, method: str, server_round: int,
                        partition: int, step: int = 0) -> list[int]:
    """The rows of a client's ``step``-th mini-batch of a round: epoch e = step // batches-per-epoch is a
    fresh shuffle (seeded by (run seed, method, round, partition, e)), batch b its b-th chunk.

    Both phases of a round (and of an SFL local step) redraw the same rows from these numbers alone.
    """
    if num_examples <= 0:
        return []
    per_epoch = -(-num_examples // batch_size)
    epoch, b = divmod(step, per_epoch)
    order = list(range(num_examples))
    random.Random(derive_seed(batch_seed(seed, method, server_round, partition), "epoch", epoch)).shuffle(order)
    return order[b * batch_size : (b + 1) * batch_size]


@dataclass
class History:
    """The server's buffer of broadcast tuples: entry τ = (seeds^τ, v̄^τ) of round τ."""

    seeds: list[list[int]] = field(default_factory=list)
    vbar: list[list[float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seeds)

    def append(self, seeds: Sequence[int], vbar: Sequence[float]) -> None:
        if len(seeds) != len(vbar):
            raise ValueError("one v̄ per seed")
        self.seeds.append([int(s) for s in seeds])
        self.vbar.append([float(v) for v in vbar])

    def since(self, version: int) -> list[tuple[list[int], list[float]]]:
        """Entries ``version .. len-1``: what a client at ``version`` must replay."""
        if not 0 <= version <= len(self):
            raise ValueError(f"version {version} outside 0..{len(self)}")
        return list(zip(self.seeds[version:], self.vbar[version:], strict=True))


def entries_to_apply(client_version: int, history_from: int, num_entries: int) -> range:
    """Which of the delivered entries (rounds ``history_from .. history_from+num_entries-1``) a client
    at ``client_version`` still has to apply; entries it already applied are skipped.

    Raises if the client is older than the first delivered entry (its state was lost): it cannot
    catch up from this message alone.
    """
    if client_version < history_from:
        raise ValueError(f"client state is at version {client_version} but the server sent history from "
                         f"{history_from}: the node lost its state dir")
    end = history_from + num_entries
    if client_version > end:
        raise ValueError(f"client state is at version {client_version}, ahead of the server ({end})")
    return range(client_version - history_from, num_entries)


class TrafficLedger:
    """Payload bytes by direction and kind, per round and in total."""

    def __init__(self) -> None:
        self.total: dict[str, dict[str, int]] = {d: dict.fromkeys(KINDS, 0) for d in DIRECTIONS}
        self.round: dict[str, dict[str, int]] = {d: dict.fromkeys(KINDS, 0) for d in DIRECTIONS}
        self.wire_total = dict.fromkeys(DIRECTIONS, 0)
        self.wire_round = dict.fromkeys(DIRECTIONS, 0)

    def add(self, direction: str, kind: str, nbytes: int) -> None:
        if direction not in DIRECTIONS or kind not in KINDS:
            raise ValueError(f"unknown traffic {direction}/{kind}")
        self.round[direction][kind] += int(nbytes)
        self.total[direction][kind] += int(nbytes)

    def add_wire(self, direction: str, nbytes: int) -> None:
        self.wire_round[direction] += int(nbytes)
        self.wire_total[direction] += int(nbytes)

    def close_round(self) -> dict[str, object]:
        """This round's bytes (for metrics.jsonl), then start the next round at zero."""
        row = {"bytes": {d: dict(k) for d, k in self.round.items()}, "wire-bytes": dict(self.wire_round)}
        self.round = {d: dict.fromkeys(KINDS, 0) for d in DIRECTIONS}
        self.wire_round = dict.fromkeys(DIRECTIONS, 0)
        return row


def summarize_traffic(rows: Sequence[dict[str, object]]) -> dict[str, object]:
    """Totals and per-(client, round) means of the ``bytes`` of metrics rows written by the ledger."""
    total = {d: dict.fromkeys(KINDS, 0) for d in DIRECTIONS}
    client_rounds = 0
    for row in rows:
        b = row.get("bytes")
        if not isinstance(b, dict):
            continue
        client_rounds += len(row.get("forward-ok", []))  # type: ignore[arg-type]
        for d in DIRECTIONS:
            for k in KINDS:
                total[d][k] += int(b.get(d, {}).get(k, 0))
    per_client_round = {d: {k: (v / client_rounds if client_rounds else 0.0) for k, v in kinds.items()}
                        for d, kinds in total.items()}
    return {"total": total, "per-client-round": per_client_round, "client-rounds": client_rounds}
