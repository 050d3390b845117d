"""``digits-mlp-val``: a validation task for tuning the split methods without looking at the test split.

The same offline data and backbone as ``digits-mlp``, but only its **training** split (1,437 images):
a fixed, seeded 4:1 cut of those rows into a training part (1,150) the clients hold and a validation
part (287) the server evaluates on. ``benchmarks/hosfl_learns.py`` picks every step size on this task
and then runs the chosen settings on ``digits-mlp`` (all 1,437 training rows, evaluated on the 360 test
rows), so no choice is made on the test split. Sample ids are row numbers of the digits training split.
"""

from __future__ import annotations

import numpy as np

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.tasks.base import TaskData
from fedforget.tasks.builtin_vision import digits_task, scale_raw_digits
from fedforget.tasks.vision_data import DIGITS_TRAIN_ROWS, digits_arrays, make_examples

#: Share of the training split held out for validation.
VALIDATION_SHARE = 0.2


def validation_rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows) of an n-row training split: fixed, disjoint, sorted."""
    order = np.random.default_rng(derive_seed("hosfl-validation", n)).permutation(n)
    n_val = int(round(n * VALIDATION_SHARE))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def _digits_val_data(cfg: RunConfig) -> TaskData:
    xtr, ytr, _, _ = digits_arrays()
    train, val = validation_rows(len(ytr))
    return TaskData(train=make_examples(xtr, ytr, train), test=make_examples(xtr, ytr, val), num_classes=10)


def validation_train_ids(cfg: RunConfig) -> np.ndarray:
    """The ids of the rows the clients hold (:func:`validation_rows`' train part of digits' training split)."""
    return validation_rows(DIGITS_TRAIN_ROWS)[0]


DIGITS_MLP_VAL = digits_task("digits-mlp-val", _digits_val_data, scale_raw_digits, validation_train_ids)
