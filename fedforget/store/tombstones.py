"""A client's forgotten samples, kept in its state dir so every later run on that node skips them.

Keyed by data set (sample ids are indices into one data set's train split), written atomically,
only ever growing: deleting data for good is the point.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from fedforget.store.atomic import atomic_write_json
from fedforget.store.secret_files import mkdir_private

TOMBSTONES = "tombstones.json"


def _read(path: Path) -> dict[str, list[int]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a tombstone file; move it away and re-run `fedforget retrain`")
    return {str(k): [int(i) for i in v] for k, v in data.items()}


def load_tombstones(state_dir: Path, dataset: str) -> set[int]:
    """The sample ids of ``dataset`` this node has deleted."""
    return set(_read(Path(state_dir) / TOMBSTONES).get(dataset, []))


def add_tombstones(state_dir: Path, dataset: str, ids: Iterable[int]) -> int:
    """Record ``ids`` as deleted (idempotent); return how many were new."""
    path = Path(state_dir) / TOMBSTONES
    data = _read(path)
    known = set(data.get(dataset, []))
    new = {int(i) for i in ids} - known
    if new:
        data[dataset] = sorted(known | new)
        mkdir_private(Path(state_dir))
        atomic_write_json(path, data)
    return len(new)
