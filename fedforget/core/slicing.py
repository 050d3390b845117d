"""Partitions → slices → data units, each sample with a stable global id."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, order=True)
class UnitId:
    """A client's slice: the smallest piece of data a method trains on as a whole."""

    partition: int
    slice: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.slice}"

    @classmethod
    def parse(cls, text: str) -> UnitId:
        """Parse ``"3:1"`` (digits 0-9 only, see :mod:`fedforget.core.ids`); raise ValueError with the expected
        form otherwise."""
        from fedforget.core.ids import QUOTED_CHARS, parse_id

        try:
            p, s = text.split(":")
            return cls(parse_id(p), parse_id(s))
        except ValueError:
            shown = repr(text[:QUOTED_CHARS]) + ("…" if len(text) > QUOTED_CHARS else "")
            raise ValueError(f"not a slice id: {shown} (expected PARTITION:SLICE in the digits 0-9, e.g. 3:1)") \
                from None


def split_into_slices(sample_ids: Sequence[int], num_slices: int, seed: int) -> list[list[int]]:
    """Shuffle a partition's ids with ``seed`` and cut them into ``num_slices`` near-equal slices.

    Slice sizes differ by at most one; each slice is returned sorted so its content does not depend
    on the shuffle order inside it. A partition smaller than ``num_slices`` leaves empty slices.
    """
    if num_slices < 1:
        raise ValueError(f"slices-per-client must be >= 1, got {num_slices}")
    ids = sorted(int(i) for i in sample_ids)
    if len(set(ids)) != len(ids):
        raise ValueError("sample ids within a partition must be unique")
    random.Random(seed).shuffle(ids)
    return [sorted(part) for part in array_split(ids, num_slices)]


def array_split(items: Sequence[T], parts: int) -> list[list[T]]:
    """Cut ``items`` into ``parts`` runs in order; the first ``len % parts`` runs get one item more."""
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for g in range(parts):
        size = base + (1 if g < extra else 0)
        out.append(list(items[start : start + size]))
        start += size
    return out


def sample_to_unit(slices_by_partition: dict[int, list[list[int]]]) -> dict[int, UnitId]:
    """The inverse map sample id → unit; raises if a sample sits in two units."""
    out: dict[int, UnitId] = {}
    for partition, slices in slices_by_partition.items():
        for s, ids in enumerate(slices):
            for sid in ids:
                if sid in out:
                    raise ValueError(f"sample {sid} is in both {out[sid]} and {partition}:{s}")
                out[sid] = UnitId(partition, s)
    return out


def iid_shares(sample_ids: Sequence[int], num_shares: int, seed: int) -> list[list[int]]:
    """Shuffle ids with ``seed`` and deal them into ``num_shares`` near-equal sorted shares."""
    return split_into_slices(sample_ids, num_shares, seed)
