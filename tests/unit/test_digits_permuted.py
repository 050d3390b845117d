"""digits-mlp-perm(-val): one fixed pixel permutation on every split, and the tuning split reads only
training rows, its validation rows disjoint from its clients' rows."""

from __future__ import annotations

import numpy as np

from fedforget.core.config import RunConfig
from fedforget.tasks.digits_permuted import pixel_permutation
from fedforget.tasks.digits_validation import validation_rows
from fedforget.tasks.registry import get_task
from fedforget.tasks.vision_data import digits_arrays


def _load(task: str):  # noqa: ANN202
    return get_task(task).load_data(RunConfig(method="hosfl", task=task))


def test_the_permutation_is_fixed_and_moves_pixels():
    perm = pixel_permutation()
    assert sorted(perm.tolist()) == list(range(64)) and np.array_equal(perm, pixel_permutation())
    assert (perm != np.arange(64)).sum() > 48


def test_the_same_permutation_is_applied_to_train_validation_and_test():
    perm = pixel_permutation()
    xtr, _, xte, _ = digits_arrays()
    test_task, val_task = _load("digits-mlp-perm"), _load("digits-mlp-perm-val")
    for examples, source in ((test_task.train, xtr), (test_task.test, xte), (val_task.train, xtr),
                             (val_task.test, xtr)):
        rows = examples.ids.numpy()
        assert np.array_equal(examples.inputs[0].numpy(), source[rows][:, perm])


def test_the_validation_rows_are_training_rows_disjoint_from_the_clients_rows():
    data = _load("digits-mlp-perm-val")
    client_rows, val_rows = data.train.ids.numpy(), data.test.ids.numpy()
    assert not set(client_rows.tolist()) & set(val_rows.tolist())
    train, val = validation_rows(1437)  # the same cut as digits-mlp-val
    assert np.array_equal(client_rows, train) and np.array_equal(val_rows, val)
    assert len(client_rows) + len(val_rows) == 1437  # training rows only; the 360 test rows are never read
