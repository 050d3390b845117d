"""Where a one-model run's starting model comes from: the seeded start, or the initial arrays its ``start`` was
handed, or those its store recorded.

Handed arrays must be the model's trainable state under its tensor names (the LoRA + head tensors a run's
``Result.arrays`` holds), with the seeded start's shapes and dtypes: anything else is refused in one line naming
the first wrong tensor, before the store is written. A fresh run records them in its store
(:mod:`fedforget.store.initial_arrays`); a retrain starts from what was recorded, and refuses other arrays; a
``verify --federation`` reference run (its store inside the store it verifies), and an in-process ``fedforget
verify`` reference run of a user's app (its scratch store named by :func:`reference_of`), start from the verified
store's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import ArrayRecord

from fedforget.core.config import ConfigError, RunConfig
from fedforget.federation.client_site import VERIFY_SCRATCH
from fedforget.store.initial_arrays import recorded_initial_arrays, recorded_sha
from fedforget.store.store import Store, StoreError, resolve_store_path

if TYPE_CHECKING:
    import torch

Arrays = dict[str, np.ndarray]

#: what every refusal of handed arrays tells the caller to pass instead
WHAT_TO_PASS = "pass the model's trainable state under its tensor names (the LoRA + head tensors Result.arrays holds)"


def arrays_of(record: object) -> Arrays | None:
    """``start``'s ``initial_arrays`` as named numpy arrays (None when none, or an empty record, was given)."""
    if record is None:
        return None
    if not isinstance(record, ArrayRecord):
        raise ConfigError(f"initial_arrays must be a flwr ArrayRecord, got {type(record).__name__}")
    if not len(record):
        return None
    return {name: np.ascontiguousarray(array.numpy()) for name, array in record.items()}


def checked_against_seeded(arrays: Mapping[str, np.ndarray], seeded: Mapping[str, torch.Tensor]) -> Arrays:
    """``arrays`` in the seeded start's order, refused (one line naming the first wrong tensor) unless they hold
    exactly its tensors with their shapes and dtypes."""
    for name, tensor in seeded.items():
        want = tensor.detach().cpu().numpy()
        if name not in arrays:
            raise ConfigError(f"initial_arrays lack {name!r}, a tensor of the model's trainable state; {WHAT_TO_PASS}")
        got = arrays[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ConfigError(f"initial_arrays {name!r} is {got.dtype}{list(got.shape)}, the model's is "
                              f"{want.dtype}{list(want.shape)}; {WHAT_TO_PASS}")
    extra = sorted(set(arrays) - set(seeded))
    if extra:
        raise ConfigError(f"initial_arrays {extra[0]!r} is not a tensor of the model's trainable state; "
                          f"{WHAT_TO_PASS}")
    return {name: np.ascontiguousarray(arrays[name]) for name in seeded}


def same_arrays(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    """Bit for bit the same tensors under the same names."""
    return set(a) == set(b) and all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
                                    and a[k].tobytes() == b[k].tobytes() for k in a)


def _matching(given: Arrays | None, store: Store, seeded: Mapping[str, torch.Tensor], which: str) -> Arrays | None:
    """The arrays ``store`` recorded (None: it was trained from the seed), refusing handed ones that differ."""
    recorded = recorded_initial_arrays(store)
    if recorded is None:
        if given is not None:
            raise ConfigError(f"{which} was trained from the seeded start, not from initial arrays; pass no "
                              "initial_arrays")
        return None
    if given is not None and not same_arrays(given, recorded):
        raise ConfigError(f"initial_arrays differ from those {which} was trained from (sha256 "
                          f"{str(recorded_sha(store.manifest()))[:16]}…, recorded in its manifest); pass none: the "
                          "run starts from the recorded ones")
    return checked_against_seeded(recorded, seeded)


#: an in-process reference run's scratch store → the store it verifies (while that run lasts)
_IN_PROCESS: dict[Path, Path] = {}


@contextmanager
def reference_of(verified: Path, scratch: Path) -> Iterator[None]:
    """While it lasts, a reference run (``reference=true``) into ``scratch`` is one of the store at ``verified``:
    it starts from that store's recorded initial arrays, as a ``verify --federation`` reference does."""
    key = scratch.resolve()
    _IN_PROCESS[key] = verified.resolve()
    try:
        yield
    finally:
        _IN_PROCESS.pop(key, None)


def verified_store(cfg: RunConfig) -> Store | None:
    """The store a reference run verifies (``verify --federation``'s scratch store lies inside it; an in-process
    one is named by :func:`reference_of`), else None."""
    if not cfg.reference:
        return None
    root = resolve_store_path(cfg.store)
    verified = _IN_PROCESS.get(root.resolve()) or (root.parent.parent if root.parent.name == VERIFY_SCRATCH else None)
    if verified is None:
        return None
    try:
        return Store.open(verified)
    except StoreError:
        return None


def training_start(cfg: RunConfig, given: Arrays | None, seeded: Mapping[str, torch.Tensor]) -> Arrays | None:
    """What a fresh training run starts from instead of the seeded start (None: the seeded start): the arrays
    handed to ``start``, checked; for a reference run of a store (:func:`verified_store`), that store's."""
    verified = verified_store(cfg)
    if verified is not None:
        return _matching(given, verified, seeded, "the store being verified")
    return checked_against_seeded(given, seeded) if given is not None else None


def retrain_start(store: Store, given: Arrays | None, seeded: Mapping[str, torch.Tensor]) -> Arrays | None:
    """What a retrain starts from instead of the seeded start (None: the seeded start): the recorded arrays."""
    return _matching(given, store, seeded, "the store")
