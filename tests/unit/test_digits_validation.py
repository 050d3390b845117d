"""digits-mlp-val tunes without the test split: its clients' rows and its validation rows are a fixed,
disjoint cut of digits' training split, and none of them is a test row."""

from __future__ import annotations

import numpy as np

from fedforget.core.config import RunConfig
from fedforget.tasks.digits_validation import VALIDATION_SHARE, validation_rows
from fedforget.tasks.registry import get_task
from fedforget.tasks.vision_data import digits_arrays


def test_validation_rows_are_a_fixed_disjoint_cut_of_the_training_rows():
    train, val = validation_rows(1437)
    assert len(val) == round(1437 * VALIDATION_SHARE) and len(train) + len(val) == 1437
    assert not set(train.tolist()) & set(val.tolist())
    again_train, again_val = validation_rows(1437)
    assert np.array_equal(train, again_train) and np.array_equal(val, again_val)


def test_the_task_holds_only_training_rows_and_validates_on_held_out_ones():
    data = get_task("digits-mlp-val").load_data(RunConfig(method="hosfl", task="digits-mlp-val"))
    xtr, _, xte, _ = digits_arrays()
    client_rows, val_rows = data.train.ids.numpy(), data.test.ids.numpy()
    assert not set(client_rows.tolist()) & set(val_rows.tolist())
    assert np.array_equal(data.test.inputs[0].numpy(), xtr[val_rows])  # validation comes from training rows
    assert len(val_rows) != len(xte)  # not the 360-row test split
