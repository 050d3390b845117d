"""Backbones the project pretrains itself on MNIST, once per machine, cached by recipe hash.

No package ships weights for a small MNIST-family CNN/MLP that peft can wrap as we need, so we
train them here: deterministically (one thread, seeded, deterministic kernels), so every machine
that builds a backbone from the same recipe gets the same bytes, and the sha256 of those bytes is
recorded in each store's manifest.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from fedforget.core.seeds import derive_seed
from fedforget.tasks.assets import cache_dir
from fedforget.tasks.vision_data import FMNIST_MEAN, FMNIST_STD, mnist_arrays

RECIPE_VERSION = 1


class DigitsMLP(nn.Module):
    """8x8 digits → 64 features; LoRA targets ``fc1``, ``fc2``."""

    feature_dim = 64

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc2(torch.relu(self.fc1(x.flatten(1)))))


class SmallCNN(nn.Module):
    """28x28 grey images → 128 features; LoRA targets ``conv1``, ``conv2``, ``fc1``."""

    feature_dim = 128

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return torch.relu(self.fc1(x.flatten(1)))


@contextlib.contextmanager
def _one_thread_deterministic(seed: int) -> Iterator[None]:
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(was_deterministic)


def mnist_as_digits(x: np.ndarray) -> np.ndarray:
    """MNIST rows (784) rendered the way sklearn digits were made: 32x32 bitmap, 4x4 block counts."""
    bitmap = (x.reshape(-1, 28, 28) > 0.5).astype(np.float32)
    padded = np.pad(bitmap, ((0, 0), (2, 2), (2, 2)))
    return padded.reshape(-1, 8, 4, 8, 4).mean(axis=(2, 4)).reshape(-1, 64)


def mnist_as_fmnist_input(x: np.ndarray) -> np.ndarray:
    """MNIST rows normalised like our Fashion-MNIST input, shape (N, 1, 28, 28)."""
    return ((x.reshape(-1, 1, 28, 28) - FMNIST_MEAN) / FMNIST_STD).astype(np.float32)


RECIPES: dict[str, dict[str, object]] = {
    "digits-mlp": {"samples": 50000, "epochs": 2, "batch": 128, "lr": 1e-3},
    "fmnist-cnn": {"samples": 30000, "epochs": 1, "batch": 64, "lr": 1e-3},
}
_ARCH: dict[str, tuple[Callable[[], nn.Module], Callable[[np.ndarray], np.ndarray]]] = {
    "digits-mlp": (DigitsMLP, mnist_as_digits),
    "fmnist-cnn": (SmallCNN, mnist_as_fmnist_input),
}


def recipe_key(name: str) -> str:
    recipe = {"name": name, "version": RECIPE_VERSION, **RECIPES[name]}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _pretrain(name: str) -> dict[str, torch.Tensor]:
    make, prepare = _ARCH[name]
    recipe = RECIPES[name]
    x_all, y_all = mnist_arrays()
    n = int(recipe["samples"])
    x = torch.from_numpy(prepare(x_all[:n]))
    y = torch.from_numpy(y_all[:n])
    with _one_thread_deterministic(derive_seed("pretrain", name, RECIPE_VERSION)):
        body = make()
        head = nn.Linear(body.feature_dim, 10)
        params = list(body.parameters()) + list(head.parameters())
        opt = torch.optim.Adam(params, lr=float(recipe["lr"]))
        gen = torch.Generator().manual_seed(derive_seed("pretrain-order", name))
        batch = int(recipe["batch"])
        for _ in range(int(recipe["epochs"])):
            order = torch.randperm(n, generator=gen)
            for start in range(0, n, batch):
                idx = order[start : start + batch]
                loss = nn.functional.cross_entropy(head(body(x[idx])), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
    return {k: v.detach().contiguous() for k, v in body.state_dict().items()}


def pretrained_path(name: str) -> Path:
    """Train (once per machine, under a file lock) and return the cached safetensors file."""
    folder = cache_dir() / "backbones"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{recipe_key(name)}.safetensors"
    if path.is_file():
        return path
    with open(folder / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            state = _pretrain(name)
            tmp = path.with_suffix(".tmp")
            save_file(state, str(tmp), metadata={"recipe": recipe_key(name)})
            tmp.replace(path)
    return path


def load_pretrained(name: str) -> nn.Module:
    """The pretrained backbone module."""
    module = _ARCH[name][0]()
    module.load_state_dict(load_file(str(pretrained_path(name))))
    return module


def pretrained_sha256(name: str) -> str:
    """The sha256 of the pretrained backbone's weight file: what a store records for it."""
    return hashlib.sha256(pretrained_path(name).read_bytes()).hexdigest()
