"""The forget service's raw pixel inputs become exactly what the task's loader feeds the model: the
same scaling code, so a raw image and its test-split row give the same prediction bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedforget.service.inputs import InputError, model_inputs
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


def test_raw_digits_for_the_permuted_task_become_its_own_test_rows() -> None:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from fedforget.core.config import parse_run_config
    from fedforget.tasks.registry import get_task

    d = load_digits()
    _, raw_test, _, _ = train_test_split(d.data, d.target, test_size=0.2, random_state=0, stratify=d.target)
    (got,) = model_inputs("digits-mlp-perm", (64,), raw_test[:5].reshape(5, 8, 8).tolist(), raw=True)
    cfg = parse_run_config({"method": "fedavg", "task": "digits-mlp-perm"})
    (expected,) = get_task("digits-mlp-perm").load_data(cfg).test.by_ids(range(5)).inputs
    assert torch.equal(got, expected)
    (plain,) = model_inputs("digits-mlp", (64,), raw_test[:5].tolist(), raw=True)
    assert not torch.equal(got, plain)  # negative control: the un-permuted task reads other pixels


def test_a_task_without_raw_or_text_inputs_names_the_tasks_that_have_them() -> None:
    with pytest.raises(InputError, match="raw: task fmnist-effnet takes inputs in the model's scale only"):
        model_inputs("fmnist-effnet", (3, 4, 4), [[0.0] * 48], raw=True)
    with pytest.raises(InputError, match=r"strings for fortunes-minilm, rt-minilm, rt-smollm, rt-smollm-val\)"):
        model_inputs("hf", None, ["a text"])


def test_a_text_with_a_lone_surrogate_is_refused_before_the_tokenizer() -> None:
    from fedforget.tasks.registry import TASKS

    text_task = next(name for name, task in TASKS.items() if task.spec.encode_text is not None)
    with pytest.raises(InputError, match=r"inputs\[1\]: not valid Unicode"):
        model_inputs(text_task, None, ["fine", "bad \ud800"])


def test_pixels_must_be_json_numbers_within_float32() -> None:
    for bad in ([True] + [0.0] * 63, ["1"] + [0.0] * 63, [1e308] + [0.0] * 63, [float("nan")] + [0.0] * 63):
        with pytest.raises(InputError, match=r"inputs\[0\]"):
            model_inputs("digits-mlp", (64,), [bad])
    (ok,) = model_inputs("digits-mlp", (64,), [[3e38] + [0.0] * 63])  # negative control: float32's own range
    assert ok.dtype == torch.float32 and torch.isfinite(ok).all()
