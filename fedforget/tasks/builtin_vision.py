"""``digits-mlp`` and ``fmnist-cnn``: small vision tasks on backbones we pretrain on MNIST."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedforget.core.config import RunConfig
from fedforget.tasks.base import Backbone, TaskData, TaskSpec
from fedforget.tasks.pretrained import load_pretrained
from fedforget.tasks.vision_data import (
    DIGITS_TRAIN_ROWS,
    FMNIST_TRAIN_ROWS,
    digits_arrays,
    fashion_mnist_data,
    make_examples,
    normalise_fmnist,
    scale_digits,
    take_subset,
)


def _digits_data(cfg: RunConfig) -> TaskData:
    return digits_task_data(cfg, digits_arrays())


def digits_task_data(cfg: RunConfig, arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> TaskData:
    """digits' rows (or a fixed transform of their pixels) as a task's data: the same subsets, the same ids."""
    xtr, ytr, xte, yte = arrays
    return TaskData(
        train=make_examples(xtr, ytr, take_subset(len(ytr), cfg.train_size, "digits-train")),
        test=make_examples(xte, yte, take_subset(len(yte), cfg.test_size, "digits-test")),
        num_classes=10,
    )


def digits_train_ids(cfg: RunConfig) -> np.ndarray:
    """The ids of digits' training rows a run uses (as :func:`digits_task_data` numbers them)."""
    return take_subset(DIGITS_TRAIN_ROWS, cfg.train_size, "digits-train")


def fmnist_train_ids(default_train: int) -> Callable[[RunConfig], np.ndarray]:
    """The ids of Fashion-MNIST's training rows a run uses (as ``fashion_mnist_data`` numbers them)."""
    return lambda cfg: take_subset(FMNIST_TRAIN_ROWS, cfg.train_size or default_train, "fmnist-train")


def _digits_backbone(cfg: RunConfig, seed: int) -> Backbone:
    module, sha = load_pretrained("digits-mlp")
    return Backbone(module, module.feature_dim, ["fc1", "fc2"], sha, "MLP pretrained on MNIST (8x8) by fedforget",
                    project_trained=True)


FMNIST_CNN_TRAIN = 12000


def _fmnist_data(cfg: RunConfig) -> TaskData:
    return fashion_mnist_data(cfg, default_train=FMNIST_CNN_TRAIN, default_test=2000)


def _fmnist_cnn_backbone(cfg: RunConfig, seed: int) -> Backbone:
    module, sha = load_pretrained("fmnist-cnn")
    return Backbone(module, module.feature_dim, ["conv1", "conv2", "fc1"], sha, "CNN pretrained on MNIST by fedforget",
                    project_trained=True)


def scale_raw_digits(raw: np.ndarray) -> np.ndarray:
    """Digits as stored (0..16, 8x8 or 64 values each) -> the 64 model inputs in [0, 1]."""
    return scale_digits(raw.reshape(len(raw), 64))


def _scale_raw_fmnist(raw: np.ndarray) -> np.ndarray:
    return normalise_fmnist(raw.reshape(len(raw), 28, 28))


DIGITS_MLP = TaskSpec("digits-mlp", _digits_data, _digits_backbone, scale_raw=scale_raw_digits, num_classes=10,
                      train_ids=digits_train_ids)
FMNIST_CNN = TaskSpec("fmnist-cnn", _fmnist_data, _fmnist_cnn_backbone, scale_raw=_scale_raw_fmnist, num_classes=10,
                      train_ids=fmnist_train_ids(FMNIST_CNN_TRAIN))
