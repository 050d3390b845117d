"""What the forget requests remove, resolved against the manifest's plan alone.

The ledger's sample index (``samples``, ``units``, ``forgotten``) is derived from the manifest at training
time and is what ``forget`` looks ids up in; anything that checks the index, or that must not trust it
(``fedforget verify``'s from-scratch reference), resolves the requests here instead: the fingerprinted
manifest (``partitions``, pinned by the ledger's ``manifest-identity``; ``cells``, where a method splits each
pinned partition by class) and each request's recorded ``spec`` (samples, slices ``P:S``, clients).

Pure: numpy only, no torch, no Flower, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from fedforget.core import known_methods


class PlanError(ValueError):
    """The manifest's plan, or a request's spec against it, is not what a training run or ``forget`` writes."""


@dataclass(frozen=True)
class SamplePlan:
    """Each unit's partition and sorted sample ids, as the manifest records them (units in name order)."""

    names: tuple[str, ...]
    partition_of: tuple[int, ...]
    ids: tuple[np.ndarray, ...]
    partitions: frozenset[int]
    #: the server-held samples a method declares (:class:`~fedforget.core.method.HeldSamples`): in no partition,
    #: never forgotten; what a message calls them
    held: frozenset[int]
    held_name: str = "server-held samples"

    @cached_property
    def index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    @cached_property
    def _global(self) -> tuple[np.ndarray, np.ndarray]:
        """(every sample id, sorted; the index of its unit), for look-ups by id."""
        if not self.ids:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        ids = np.concatenate(self.ids)
        units = np.repeat(np.arange(len(self.ids), dtype=np.int64), [len(a) for a in self.ids])
        order = np.argsort(ids, kind="stable")
        ids, units = ids[order], units[order]
        twice = np.flatnonzero(ids[1:] == ids[:-1])
        if len(twice):
            raise PlanError(f"sample {int(ids[twice[0]])} lies in two of the manifest's units")
        return ids, units

    @property
    def sorted_ids(self) -> np.ndarray:
        return self._global[0]

    @property
    def unit_codes(self) -> np.ndarray:
        return self._global[1]

    def locate(self, samples: np.ndarray) -> np.ndarray:
        """Each sample's position in :attr:`sorted_ids`, or -1 for an id in no unit."""
        ids = self.sorted_ids
        pos = np.searchsorted(ids, samples)
        found = pos < len(ids)
        found[found] = ids[pos[found]] == samples[found]
        return np.where(found, pos, -1)

    def unit_of(self, sample: int) -> str | None:
        pos = int(self.locate(np.asarray([sample], dtype=np.int64))[0])
        return None if pos < 0 else self.names[int(self.unit_codes[pos])]

    def size(self) -> int:
        return int(sum(len(a) for a in self.ids))


def _ids(value: Any, where: str) -> np.ndarray:  # noqa: ANN401 - a parsed JSON value
    """A unit's ids as a sorted int64 array (JSON integers only: a float, a string or a nested list is refused)."""
    if not isinstance(value, list):
        raise PlanError(f"{where} is not a list of sample ids")
    if not value:
        return np.zeros(0, np.int64)
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError):
        raise PlanError(f"{where} is not a list of sample ids") from None
    if arr.ndim != 1 or arr.dtype.kind != "i" or int(arr.min()) < 0:
        raise PlanError(f"{where} is not a list of sample ids")
    arr = arr.astype(np.int64, copy=False)
    return arr if bool(np.all(arr[1:] > arr[:-1])) else np.sort(arr)


def _partition(key: Any) -> int:  # noqa: ANN401
    try:
        p = int(key)
    except (TypeError, ValueError):
        raise PlanError(f"partition {str(key)[:40]!r} is not a partition number") from None
    if p < 0 or str(p) != str(key):
        raise PlanError(f"partition {str(key)[:40]!r} is not a partition number")
    return p


def partition_ids(manifest: Mapping[str, Any], partition: int) -> np.ndarray:
    """Every sample id of ``partition`` in the manifest's plan, sorted (empty for a partition it does not hold):
    one partition's look-up, without building the whole plan's index."""
    parts = manifest.get("partitions")
    if not isinstance(parts, dict):
        raise PlanError("the manifest's partitions are not a table")
    slices = parts.get(str(partition), [])
    if not isinstance(slices, list):
        raise PlanError(f"partition {partition}'s slices are not a list")
    arrays = [_ids(ids, f"slice {partition}:{s}") for s, ids in enumerate(slices)]
    return np.sort(np.concatenate(arrays)) if arrays else np.zeros(0, np.int64)


def sample_plan(manifest: Mapping[str, Any]) -> SamplePlan | None:
    """The manifest's units: ``partitions[P][S]`` is unit ``P:S``; a store with cells has its class cells
    (``cells[P][C]`` is unit ``P:C``), which must split each partition exactly. None before training wrote
    a plan."""
    parts = manifest.get("partitions")
    if parts is None:
        return None
    if not isinstance(parts, dict):
        raise PlanError("the manifest's partitions are not a table")
    units: dict[str, tuple[int, np.ndarray]] = {}
    for key, slices in parts.items():
        p = _partition(key)
        if not isinstance(slices, list):
            raise PlanError(f"partition {p}'s slices are not a list")
        units.update({f"{p}:{s}": (p, _ids(ids, f"slice {p}:{s}")) for s, ids in enumerate(slices)})
    cells = manifest.get("cells")
    if cells is not None:
        members: dict[int, list[np.ndarray]] = {_partition(k): [] for k in parts}
        for p, arr in units.values():
            members[p].append(arr)
        units = _cell_units(cells, {p: np.sort(np.concatenate(a)) if a else np.zeros(0, np.int64)
                                    for p, a in members.items()})
    names = tuple(sorted(units))
    held: list[int] = []
    held_name = "server-held samples"
    for declared in dict.fromkeys(m.held_samples for m in known_methods.families() if m.held_samples):
        ids = manifest.get(declared.key) or []
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            raise PlanError(f"the manifest's {declared.key} are not a list of sample ids")
        if ids:
            held, held_name = held + ids, f"server-held {declared.name}"
    return SamplePlan(names, tuple(units[n][0] for n in names), tuple(units[n][1] for n in names),
                      frozenset(_partition(k) for k in parts), frozenset(held), held_name)


def _cell_units(cells: Any, members: dict[int, np.ndarray]) -> dict[str, tuple[int, np.ndarray]]:  # noqa: ANN401
    """The manifest's cells, each partition's cells holding exactly that (fingerprinted) partition's samples."""
    if not isinstance(cells, dict):
        raise PlanError("the manifest's cells are not a table")
    units: dict[str, tuple[int, np.ndarray]] = {}
    for key, row in cells.items():
        p = _partition(key)
        if p not in members or not isinstance(row, dict):
            raise PlanError(f"the manifest's cells name partition {p}, which its partitions do not hold")
        arrays = {str(_partition(c)): _ids(ids, f"cell {p}:{c}") for c, ids in row.items()}
        held = np.sort(np.concatenate(list(arrays.values()))) if arrays else np.zeros(0, np.int64)
        if not np.array_equal(held, members[p]):
            raise PlanError(f"the manifest's cells of partition {p} do not hold exactly its samples")
        units.update({f"{p}:{c}": (p, a) for c, a in arrays.items()})
    missing = sorted(set(members) - {_partition(k) for k in cells} - {p for p, a in members.items() if not len(a)})
    if missing:
        raise PlanError(f"the manifest's cells leave out partition {missing[0]}")
    return units


@dataclass(frozen=True)
class Forgotten:
    """Every forgotten sample (sorted), the first request that forgot it, and its unit's index in the plan."""

    samples: np.ndarray
    requests: np.ndarray
    units: np.ndarray

    def by_partition(self, plan: SamplePlan) -> dict[int, list[int]]:
        """Partition → its forgotten sample ids, sorted (what a scratch run's clients tombstone)."""
        out: dict[int, list[int]] = {}
        parts = np.asarray(plan.partition_of, dtype=np.int64)[self.units] if len(self.units) else self.units
        for p in np.unique(parts).tolist():
            out[int(p)] = self.samples[parts == p].tolist()
        return out


def _spec_list(spec: Mapping[str, Any], key: str, rid: int) -> list[Any]:
    value = spec.get(key) or []
    if not isinstance(value, list):
        raise PlanError(f"request {rid}'s {key} are not a list")
    return value


def _named_units(plan: SamplePlan, spec: Mapping[str, Any], rid: int) -> list[int]:
    """The units a request names whole: its slices ``P:S`` and every unit of its clients."""
    out: set[int] = set()
    for name in _spec_list(spec, "slices", rid):
        text = str(name)
        head, _, tail = text.partition(":")
        if text in plan.index:
            out.add(plan.index[text])
        elif not (tail.isdigit() and head.isdigit() and int(head) in plan.partitions):
            raise PlanError(f"request {rid} names slice {text[:40]!r}, which the manifest's plan does not have")
        # else an empty slice or cell: it holds no sample
    for client in _spec_list(spec, "clients", rid):
        if type(client) is not int or client not in plan.partitions:
            raise PlanError(f"request {rid} names client {str(client)[:40]}, which the manifest's plan does not have")
        out.update(i for i, p in enumerate(plan.partition_of) if p == client)
    return sorted(out)


def resolve_requests(plan: SamplePlan, specs: Iterable[tuple[int, Any]]) -> Forgotten:
    """What ``forget`` removes for each ``(request id, spec)``, in id order: the samples it names and every
    sample of the slices and clients it names, each forgotten by the first request that names it.

    Raises :class:`PlanError` for a spec naming a sample, slice or client outside the plan (a server-held
    id included: it is never forgotten)."""
    specs = list(specs)
    if not specs:  # nothing forgotten: no look-up table to build
        empty = np.zeros(0, np.int64)
        return Forgotten(empty, empty, empty)
    ids = plan.sorted_ids
    first = np.zeros(len(ids), dtype=np.int64)
    last = 0
    for rid, spec in specs:
        if type(rid) is not int or rid <= last:
            raise PlanError(f"request id {str(rid)[:40]} is out of order")
        last = rid
        if not isinstance(spec, Mapping):
            raise PlanError(f"request {rid}'s spec is not a table")
        named = _spec_list(spec, "samples", rid)
        if not all(type(s) is int and 0 <= s < 2**63 for s in named):
            raise PlanError(f"request {rid} names a sample id that is not a non-negative integer")
        pos = plan.locate(np.asarray(named, dtype=np.int64)) if named else np.zeros(0, np.int64)
        if bool(np.any(pos < 0)):
            bad = int(np.asarray(named, dtype=np.int64)[pos < 0][0])
            where = f"the {plan.held_name} (never forgotten)" if bad in plan.held else "no partition"
            raise PlanError(f"request {rid} names sample {bad}, which lies in {where} of the manifest's plan")
        whole = [np.searchsorted(ids, plan.ids[u]) for u in _named_units(plan, spec, rid)]
        hit = np.concatenate([pos, *whole]) if whole else pos
        hit = hit[first[hit] == 0]
        first[hit] = rid
    done = np.flatnonzero(first)
    return Forgotten(ids[done], first[done], plan.unit_codes[done])
