"""The forget service's raw pixel inputs become exactly what the task's loader feeds the model: the
same scaling code, so a raw image and its test-split row give the same prediction bit for bit."""

from __future__ import annotations

import numpy as np
import torch

from fedforget.service.inputs import model_inputs
from fedforget.tasks.vision_data import fashion_mnist_raw, normalise_fmnist, scale_digits


def test_raw_digits_are_scaled_as_the_loader_scales_them() -> None:
    from sklearn.datasets import load_digits

    raw = load_digits().data[:5]
    (got,) = model_inputs("digits-mlp", (64,), raw.tolist(), raw=True)
    assert torch.equal(got, torch.from_numpy(scale_digits(raw)))


def test_raw_fashion_mnist_pixels_are_normalised_as_the_loader_normalises_them() -> None:
    raw = fashion_mnist_raw()[2][:5]
    (got,) = model_inputs("fmnist-cnn", (1, 28, 28), raw.tolist(), raw=True)
    expected = torch.from_numpy(np.ascontiguousarray(normalise_fmnist(raw)))
    assert got.shape == expected.shape and torch.equal(got, expected)


def test_inputs_in_the_models_scale_pass_unchanged() -> None:
    rows = scale_digits(np.arange(128).reshape(2, 64) % 17)
    (got,) = model_inputs("digits-mlp", (64,), rows.tolist())
    assert torch.equal(got, torch.from_numpy(rows))
