"""A shipped task's public rows cut into nodes' own data directories (``fedforget data split``).

Each node's directory gets the rows of its partition as today's plan draws them (``partition_plan``), with
record id = the row's sample id written in digits, its label, and its inputs *as the data set stores them*
(digits' 0..16 pixels, Fashion-MNIST's 0..255 bytes, the raw snippet or quote), so that a node reading them
back (:mod:`fedforget.tasks.local_records`) rebuilds the loader's tensors with the task's own ``scale_raw``
or ``encode_text``. The server's directory gets the test split only.

The raw rows come from the same sources and the same fixed splits each loader uses (:data:`RAW_ROWS`), and
the written rows are checked before anything is written: their encoding must equal the loader's tensors bit
for bit, so a loader that changes how it reads its rows cannot make a split that silently differs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedforget.core.config import RunConfig
from fedforget.core.record_ids import default_node_name
from fedforget.tasks.base import Examples
from fedforget.tasks.local_records import LABEL, PIXELS, RECORD_ID, TEXT, input_column
from fedforget.tasks.registry import get_task, load_task_data, partition_plan

SERVER_DIR = "server"

#: One split's raw inputs indexed by sample id: pixels ``(rows, values)`` or texts.
RawRows = np.ndarray | tuple[str, ...]


class SplitUnavailable(ValueError):
    """The task's rows cannot be written as node data; the message says which tasks can."""


class SplitMismatch(RuntimeError):
    """The raw rows do not rebuild the loader's tensors: a defect in this module, never the user's input."""


def _digits_raw() -> tuple[np.ndarray, np.ndarray]:
    """digits' pixels as stored (0..16), cut by the loader's own stratified 80/20 split
    (:func:`fedforget.tasks.vision_data.digits_arrays`: the cut depends on the labels and seed only)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    y = d.target.astype(np.int64)
    train, test = train_test_split(np.arange(len(y)), test_size=0.2, random_state=0, stratify=y)
    return d.data[train], d.data[test]


def _digits(cfg: RunConfig) -> tuple[RawRows, RawRows]:
    return _digits_raw()


def _digits_validation(cfg: RunConfig) -> tuple[RawRows, RawRows]:
    train, _ = _digits_raw()
    return train, train  # the validation rows are rows of digits' training split


def _fmnist(cfg: RunConfig) -> tuple[RawRows, RawRows]:
    from fedforget.tasks.vision_data import fashion_mnist_raw

    xtr, _, xte, _ = fashion_mnist_raw()
    return xtr.reshape(len(xtr), -1), xte.reshape(len(xte), -1)


def _rotten_tomatoes(cfg: RunConfig) -> tuple[RawRows, RawRows]:
    from fedforget.tasks.text import fixed_split, rotten_tomatoes_rows

    texts, labels = rotten_tomatoes_rows()
    train, test = fixed_split(len(labels), "rt-minilm")
    return tuple(texts[i] for i in train), tuple(texts[i] for i in test)


def _rotten_tomatoes_validation(cfg: RunConfig) -> tuple[RawRows, RawRows]:
    train, _ = _rotten_tomatoes(cfg)
    return train, train


def _fortunes(cfg: RunConfig) -> tuple[RawRows, RawRows]:
    from fedforget.tasks.fortunes import fortune_rows
    from fedforget.tasks.text import fixed_split

    texts, labels, _ = fortune_rows()
    train, test = fixed_split(len(labels), "fortunes-minilm")
    return tuple(texts[i] for i in train), tuple(texts[i] for i in test)


#: Task → (train rows, test rows) as stored, each indexed by the loader's sample ids.
RAW_ROWS: dict[str, Callable[[RunConfig], tuple[RawRows, RawRows]]] = {
    "digits-mlp": _digits,
    "digits-mlp-perm": _digits,
    "digits-mlp-val": _digits_validation,
    "digits-mlp-perm-val": _digits_validation,
    "fmnist-cnn": _fmnist,
    "rt-minilm": _rotten_tomatoes,
    "rt-smollm": _rotten_tomatoes,
    "rt-smollm-val": _rotten_tomatoes_validation,
    "fortunes-minilm": _fortunes,
}


@dataclass(frozen=True)
class WrittenSplit:
    """What ``write_split`` wrote: each node's directory and record count, and the server's test rows."""

    out: Path
    nodes: dict[str, int]
    test_records: int


def raw_rows(cfg: RunConfig) -> tuple[RawRows, RawRows]:
    """The task's (train, test) rows as stored; SplitUnavailable for a task without a raw form here."""
    source = RAW_ROWS.get(cfg.task)
    if source is None:
        raise SplitUnavailable(f"task {cfg.task} cannot be split into node data; tasks that can: "
                               f"{', '.join(sorted(RAW_ROWS))}")
    return source(cfg)


def _take(rows: RawRows, ids: list[int]) -> RawRows:
    return rows[np.asarray(ids, dtype=np.int64)] if isinstance(rows, np.ndarray) else tuple(rows[i] for i in ids)


def check_reproduces(cfg: RunConfig, raw: RawRows, examples: Examples, what: str) -> None:
    """SplitMismatch unless ``raw`` encoded by the task's own code equals ``examples.inputs`` bit for bit."""
    spec = get_task(cfg.task)
    if isinstance(raw, np.ndarray):
        assert spec.scale_raw is not None
        built: tuple[torch.Tensor, ...] = (torch.from_numpy(np.ascontiguousarray(
            spec.scale_raw(raw.astype(np.float64)))),)
    else:
        assert spec.encode_text is not None
        built = tuple(spec.encode_text(list(raw)))
    same = len(built) == len(examples.inputs) and all(
        a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) for a, b in zip(built, examples.inputs,
                                                                                      strict=False))
    if not same:
        raise SplitMismatch(f"task {cfg.task}: the raw {what} rows do not rebuild the loader's inputs bit for bit; "
                            "this is a defect in fedforget.tasks.node_split, report it")


def _table(cfg: RunConfig, raw: RawRows, examples: Examples) -> Any:
    """record_id (sample id in digits), label and raw inputs, one row per example in the examples' order."""
    import pyarrow as pa

    columns: dict[str, Any] = {RECORD_ID: pa.array([str(int(i)) for i in examples.ids.tolist()], pa.string()),
                               LABEL: pa.array(examples.labels.numpy().astype(np.int64), pa.int64())}
    column = input_column(get_task(cfg.task))
    if column == TEXT:
        columns[TEXT] = pa.array(list(raw), pa.string())
    else:
        assert isinstance(raw, np.ndarray) and column == PIXELS
        values = raw.reshape(-1)
        exact = np.array_equal(values, np.round(values)) and (values.size == 0 or (values.min() >= 0
                                                                                  and values.max() <= 255))
        flat = pa.array(values.astype(np.uint8) if exact else values.astype(np.float64))
        offsets = pa.array(np.arange(len(raw) + 1, dtype=np.int64) * raw.shape[1], pa.int32())
        columns[PIXELS] = pa.ListArray.from_arrays(offsets, flat)
    return pa.table(columns)


def write_split(cfg: RunConfig, num_nodes: int, out: Path) -> WrittenSplit:
    """Write ``out/node-<p>/train.parquet`` for each partition and ``out/server/test.parquet``.

    Everything is built and checked in a fresh directory beside ``out`` and moved into place at the end, so
    ``out`` is either absent (or empty) as before or complete. ``out`` must be absent or an empty directory.
    """
    import pyarrow.parquet as pq

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty directory; name a new one")
    train_raw, test_raw = raw_rows(cfg)
    data = load_task_data(cfg)
    plan = partition_plan(cfg, num_nodes)
    check_reproduces(cfg, _take(train_raw, data.train.ids.tolist()), data.train, "train")
    check_reproduces(cfg, _take(test_raw, data.test.ids.tolist()), data.test, "test")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        counts = {}
        for p in range(num_nodes):
            ids = plan.partition_ids(p)
            examples = data.train.by_ids(ids)
            name = default_node_name(p)
            (staging / name).mkdir()
            pq.write_table(_table(cfg, _take(train_raw, ids), examples), staging / name / "train.parquet")
            counts[name] = len(ids)
        (staging / SERVER_DIR).mkdir()
        test_ids = data.test.ids.tolist()
        pq.write_table(_table(cfg, _take(test_raw, test_ids), data.test), staging / SERVER_DIR / "test.parquet")
        os.chmod(staging, 0o755)  # mkdtemp makes it owner-only; the data is not secret
        if out.is_dir():
            out.rmdir()
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return WrittenSplit(out, counts, len(test_ids))
