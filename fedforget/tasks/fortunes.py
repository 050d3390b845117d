"""``fortunes-minilm``: which of Debian's 40 ``fortunes`` categories a quote comes from, on all-MiniLM-L6-v2.

A many-class text task that installs offline (Debian package ``fortunes``, ~14,000 quotes; `make setup`
installs it like Fashion-MNIST), where SAFE's class grouping (``fine``) matters. The label is the
category file a quote is in (sorted names); the split is a fixed 80/20 seeded by the task name, so a
sample's id names the same quote in every run. Backbone, LoRA targets and tokenisation are rt-minilm's.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from fedforget.core.config import RunConfig
from fedforget.tasks.assets import AssetMissing
from fedforget.tasks.base import Examples, TaskData
from fedforget.tasks.text import fixed_split, minilm_path, on_minilm, split_train_ids, tokenize
from fedforget.tasks.vision_data import take_subset

FORTUNES_DEFAULT_DIR = "/usr/share/games/fortunes"
MAX_LENGTH = 64


def fortunes_dir() -> Path:
    """Debian's ``fortunes`` files; ``FEDFORGET_FORTUNES_DIR`` overrides the location."""
    root = Path(os.environ.get("FEDFORGET_FORTUNES_DIR", FORTUNES_DEFAULT_DIR))
    if not any(root.glob("*.dat")):
        raise AssetMissing(f"fortunes not found in {root}; run `make setup` (apt package fortunes) "
                           "or set FEDFORGET_FORTUNES_DIR")
    return root


@lru_cache(maxsize=1)
def fortune_rows() -> tuple[tuple[str, ...], np.ndarray, tuple[str, ...]]:
    """Every non-empty quote in category order, its label, and the category names (sorted)."""
    root = fortunes_dir()
    categories = tuple(sorted(p.stem for p in root.glob("*.dat") if (root / p.stem).is_file()))
    texts, labels = [], []
    for k, name in enumerate(categories):
        raw = (root / name).read_text(encoding="utf-8", errors="replace")
        for quote in raw.split("\n%\n"):
            quote = " ".join(quote.replace("%", " ").split())
            if quote:
                texts.append(quote)
                labels.append(k)
    return tuple(texts), np.asarray(labels, dtype=np.int64), categories


def _examples(texts: tuple[str, ...], labels: np.ndarray, split_rows: np.ndarray, rows: np.ndarray) -> Examples:
    file_rows = split_rows[rows]
    ids, mask = tokenize([texts[i] for i in file_rows], str(minilm_path()), MAX_LENGTH)
    return Examples((ids, mask), torch.from_numpy(labels[file_rows]), torch.from_numpy(rows.astype(np.int64)))


def _data(cfg: RunConfig) -> TaskData:
    texts, labels, categories = fortune_rows()
    train_rows, test_rows = fixed_split(len(labels), "fortunes-minilm")
    return TaskData(
        train=_examples(texts, labels, train_rows,
                        take_subset(len(train_rows), cfg.train_size or 4000, "fortunes-minilm-train")),
        test=_examples(texts, labels, test_rows,
                       take_subset(len(test_rows), cfg.test_size or 1000, "fortunes-minilm-test")),
        num_classes=len(categories),
    )


def _encode(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    return tokenize(texts, str(minilm_path()), MAX_LENGTH)


#: Rows of the training part of :func:`fixed_split` over the fortunes (15,217 rows): ids are positions there.
FORTUNES_TRAIN_ROWS = 12174

#: Its classes are the category files found (``num_classes=0``: read from the data).
FORTUNES_MINILM = on_minilm("fortunes-minilm", num_classes=0, encode=_encode, data=_data, default_train_size=4000,
                            default_test_size=1000,
                            train_ids=split_train_ids(FORTUNES_TRAIN_ROWS, 4000, "fortunes-minilm-train"))
