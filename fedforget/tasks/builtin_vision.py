"""``digits-mlp`` and ``fmnist-cnn``: small vision tasks on backbones we pretrain on MNIST."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from torch import nn

from fedforget.core.config import RunConfig
from fedforget.tasks.base import TaskData
from fedforget.tasks.pretrained import DigitsMLP, SmallCNN, load_pretrained, pretrained_sha256
from fedforget.tasks.user_task import Task
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


def _digits_mlp() -> nn.Module:
    return load_pretrained("digits-mlp")


def _digits_mlp_sha256(module: nn.Module) -> str:
    return pretrained_sha256("digits-mlp")


def digits_task(name: str, data: Callable[[RunConfig], TaskData], encode: Callable[[np.ndarray], np.ndarray],
                train_ids: Callable[[RunConfig], np.ndarray]) -> Task:
    """A task of digits' pixels (or a fixed transform of them) on the MLP fedforget pretrains on MNIST (8x8)."""
    return Task(name, backbone=_digits_mlp, feature_dim=DigitsMLP.feature_dim, lora_targets=["fc1", "fc2"],
                num_classes=10, input_column="pixels", encode=encode,
                source="MLP pretrained on MNIST (8x8) by fedforget", data=data, train_ids=train_ids,
                weights_sha256=_digits_mlp_sha256, project_trained=True)


FMNIST_CNN_TRAIN = 12000


def _fmnist_data(cfg: RunConfig) -> TaskData:
    return fashion_mnist_data(cfg, default_train=FMNIST_CNN_TRAIN, default_test=2000)


def _fmnist_cnn() -> nn.Module:
    return load_pretrained("fmnist-cnn")


def _fmnist_cnn_sha256(module: nn.Module) -> str:
    return pretrained_sha256("fmnist-cnn")


def scale_raw_digits(raw: np.ndarray) -> np.ndarray:
    """Digits as stored (0..16, 8x8 or 64 values each) -> the 64 model inputs in [0, 1]."""
    return scale_digits(raw.reshape(len(raw), 64))


def _scale_raw_fmnist(raw: np.ndarray) -> np.ndarray:
    return normalise_fmnist(raw.reshape(len(raw), 28, 28))


DIGITS_MLP = digits_task("digits-mlp", _digits_data, scale_raw_digits, digits_train_ids)
FMNIST_CNN = Task("fmnist-cnn", backbone=_fmnist_cnn, feature_dim=SmallCNN.feature_dim,
                  lora_targets=["conv1", "conv2", "fc1"], num_classes=10, input_column="pixels",
                  encode=_scale_raw_fmnist, source="CNN pretrained on MNIST by fedforget", data=_fmnist_data,
                  train_ids=fmnist_train_ids(FMNIST_CNN_TRAIN), weights_sha256=_fmnist_cnn_sha256,
                  project_trained=True)
