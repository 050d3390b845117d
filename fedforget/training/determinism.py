"""One fixed torch set-up for every training and evaluation call, whatever process runs it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

#: Thread count for training: identical float reduction order on the server, in Ray actors and in
#: SuperNode processes is what makes the three runtimes agree bit for bit.
TRAIN_THREADS = 1


@contextlib.contextmanager
def deterministic_torch(threads: int = TRAIN_THREADS) -> Iterator[None]:
    """Deterministic kernels and a fixed thread count for the duration of the block."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    previous_threads = torch.get_num_threads()
    previous_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(previous_det)


def generator(seed: int) -> torch.Generator:
    """A CPU generator for one purpose (data order, sampling), never the global stream."""
    return torch.Generator().manual_seed(seed)
