"""``digits-mlp-perm`` and ``digits-mlp-perm-val``: digits under a fixed, seeded permutation of its 64 pixels.

A domain shift for HO-SFL's positive control. The backbone is ``digits-mlp``'s MLP pretrained on MNIST
(8x8), whose first layer fits un-permuted strokes; after a fixed permutation of the pixels its features
no longer fit, so a frozen client (a probe on those features) is weak and training the client's layers
matters. The data keep every bit of information (a permutation is invertible), so the task stays
learnable. The permutation is one fixed draw (``derive_seed("digits-pixel-permutation", 64)``),
independent of the run seed, and the same for every split:

- ``digits-mlp-perm``: digits' training split (1,437 rows) for the clients, its test split (360 rows) for
  evaluation, both permuted; like ``digits-mlp`` otherwise (``train-size`` / ``test-size`` subset them).
- ``digits-mlp-perm-val``: the same 4:1 cut of the training split as ``digits-mlp-val`` (1,150 client rows,
  287 validation rows), permuted; the test split is never read. Tuning happens here.

Sample ids are row numbers of digits' training (or test) split, as in ``digits-mlp``.
"""

from __future__ import annotations

import numpy as np

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.tasks.base import TaskData
from fedforget.tasks.builtin_vision import digits_task, digits_task_data, digits_train_ids, scale_raw_digits
from fedforget.tasks.digits_validation import validation_rows, validation_train_ids
from fedforget.tasks.vision_data import digits_arrays, make_examples

PIXELS = 64


def pixel_permutation() -> np.ndarray:
    """The fixed order the shifted task reads digits' 64 pixels in: ``shifted[:, i] = x[:, perm[i]]``."""
    return np.random.default_rng(derive_seed("digits-pixel-permutation", PIXELS)).permutation(PIXELS)


def permuted_digits_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """digits' fixed 80/20 split with the same pixel permutation applied to both sides."""
    xtr, ytr, xte, yte = digits_arrays()
    perm = pixel_permutation()
    return np.ascontiguousarray(xtr[:, perm]), ytr, np.ascontiguousarray(xte[:, perm]), yte


def _perm_data(cfg: RunConfig) -> TaskData:
    return digits_task_data(cfg, permuted_digits_arrays())


def _perm_val_data(cfg: RunConfig) -> TaskData:
    xtr, ytr, _, _ = permuted_digits_arrays()
    train, val = validation_rows(len(ytr))
    return TaskData(train=make_examples(xtr, ytr, train), test=make_examples(xtr, ytr, val), num_classes=10)


def _scale_raw_permuted(raw: np.ndarray) -> np.ndarray:
    """Digits as stored (un-permuted, 0..16) -> the task's inputs: scaled, then read in the permuted order."""
    return np.ascontiguousarray(scale_raw_digits(raw)[:, pixel_permutation()])


DIGITS_MLP_PERM = digits_task("digits-mlp-perm", _perm_data, _scale_raw_permuted, digits_train_ids)
DIGITS_MLP_PERM_VAL = digits_task("digits-mlp-perm-val", _perm_val_data, _scale_raw_permuted, validation_train_ids)
