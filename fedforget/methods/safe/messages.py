"""SAFE's messages as typed classes: what a node trains (``train.safe``), what it answers, and which cells'
prototype sums it computes (``query.safeproto``). Everything rides in ConfigRecord scalars and lists of
scalars: a list of lists is flattened with a length per entry (−1: none)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flwr.app import ConfigRecord

PlanKeys = Mapping[str, int | str]  # the node's view of the cell plan: mode, coarse, fine (and group)


def _flatten(rows: Sequence[Sequence[int] | None]) -> tuple[list[int], list[int]]:
    return [int(v) for row in rows for v in (row or ())], [-1 if row is None else len(row) for row in rows]


def _unflatten(flat: Sequence[int], counts: Sequence[int], what: str) -> list[tuple[int, ...] | None]:
    if sum(max(int(c), 0) for c in counts) != len(flat):
        raise ValueError(f"a SAFE message's {what} do not add up")
    out: list[tuple[int, ...] | None] = []
    at = 0
    for c in counts:
        out.append(None if c < 0 else tuple(int(v) for v in flat[at:at + c]))
        at += max(int(c), 0)
    return out


@dataclass(frozen=True)
class CliqueWork:
    """One adapter a node trains this round: its classes, the node's cells it reads, and for a DP adapter
    the whole clique's classes (the node sizes σ for them together)."""

    adapter: str
    classes: tuple[int, ...]
    cells: tuple[int, ...]
    dp: bool = False
    clique: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TrainCliques:
    """``train.safe``: one FedAvg round of every adapter named, each on its own cells only."""

    server_round: int
    work: tuple[CliqueWork, ...]
    plan: PlanKeys

    def to_config(self) -> ConfigRecord:
        classes, class_counts = _flatten([w.classes for w in self.work])
        cells, cell_counts = _flatten([w.cells for w in self.work])
        clique, clique_counts = _flatten([w.clique for w in self.work])
        return ConfigRecord({
            "server-round": self.server_round, "adapters": [w.adapter for w in self.work],
            "dp": [w.dp for w in self.work], "classes": classes, "class-counts": class_counts,
            "cells": cells, "cell-counts": cell_counts, "clique": clique, "clique-counts": clique_counts,
            **dict(self.plan),
        })

    @classmethod
    def from_config(cls, config: ConfigRecord) -> TrainCliques:
        adapters = [str(a) for a in config["adapters"]]
        dp = [bool(d) for d in config["dp"]]
        classes = _unflatten(config["classes"], config["class-counts"], "classes")
        cells = _unflatten(config["cells"], config["cell-counts"], "cells")
        clique = _unflatten(config["clique"], config["clique-counts"], "cliques")
        if not len(adapters) == len(dp) == len(classes) == len(cells) == len(clique):
            raise ValueError("a SAFE message's adapters and their fields do not match")
        work = tuple(CliqueWork(a, k or (), c or (), d, q)
                     for a, d, k, c, q in zip(adapters, dp, classes, cells, clique, strict=True))
        return cls(int(config["server-round"]), work, plan_keys(config))


def plan_keys(config: ConfigRecord) -> dict[str, int | str]:
    keys: dict[str, int | str] = {"mode": str(config["mode"]), "coarse": int(config["coarse"]),
                                  "fine": int(config["fine"])}
    if "group" in config:
        keys["group"] = int(config["group"])
    return keys


@dataclass(frozen=True)
class CliqueResults:
    """A node's answer to ``train.safe``: per adapter the examples it trained on, in adapter order, and the
    mean loss of each adapter it trained (an adapter with no examples here has none)."""

    counts: Mapping[str, int]
    losses: Mapping[str, float]

    def to_config(self) -> ConfigRecord:
        trained = sorted(self.losses)
        return ConfigRecord({"count-adapters": sorted(self.counts),
                             "counts": [int(self.counts[a]) for a in sorted(self.counts)],
                             "loss-adapters": trained, "losses": [float(self.losses[a]) for a in trained]})

    @classmethod
    def from_config(cls, config: ConfigRecord) -> CliqueResults:
        names, counts = [str(a) for a in config["count-adapters"]], [int(n) for n in config["counts"]]
        trained, losses = [str(a) for a in config["loss-adapters"]], [float(v) for v in config["losses"]]
        if len(names) != len(counts) or len(trained) != len(losses):
            raise ValueError("a SAFE reply's adapters and values do not match")
        return cls(dict(zip(names, counts, strict=True)), dict(zip(trained, losses, strict=True)))


@dataclass(frozen=True)
class PrototypeQuery:
    """``query.safeproto``: the float64 sum of normalised pooled features and the count of each cell."""

    cells: tuple[int, ...]
    dim: int
    plan: PlanKeys

    def to_config(self) -> ConfigRecord:
        return ConfigRecord({"cells": list(self.cells), "dim": self.dim, **dict(self.plan)})

    @classmethod
    def from_config(cls, config: ConfigRecord) -> PrototypeQuery:
        return cls(tuple(int(c) for c in config["cells"]), int(config["dim"]), plan_keys(config))
