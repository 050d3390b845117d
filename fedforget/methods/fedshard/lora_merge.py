"""Merging LoRA models trained apart: average what the factors compute, not the factors (pure numpy).

A LoRA layer adds ``B·A`` to a frozen weight. Models that started from one init and trained apart for
several rounds have different factor bases, and ``mean(B)·mean(A)`` is not ``mean(B·A)``: averaging the
factors can cancel what each child learned. The product merge forms the weighted mean of the children's
``B·A`` exactly and re-factorises it at the same rank by a truncated SVD, which keeps the best rank-r
approximation (Eckart–Young). Everything that is not a LoRA factor (the head) is averaged as usual.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from fedforget.core.weighted_mean import weighted_mean

Arrays = dict[str, np.ndarray]
MERGES = ("factors", "product")


def _pairs(keys: Sequence[str]) -> list[tuple[str, str]]:
    return [(k, k.replace("lora_A", "lora_B")) for k in sorted(keys) if "lora_A" in k
            and k.replace("lora_A", "lora_B") in keys]


def _product_pair(a_list: Sequence[np.ndarray], b_list: Sequence[np.ndarray], w: np.ndarray,
                  fallback_a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rank = a_list[0].shape[0]
    out_dim = b_list[0].shape[0]
    delta = sum(wk * (b.reshape(out_dim, rank).astype(np.float64) @ a.reshape(rank, -1).astype(np.float64))
                for wk, a, b in zip(w, a_list, b_list, strict=True))
    u, s, vt = np.linalg.svd(delta, full_matrices=False)
    u, s, vt = u[:, :rank], s[:rank], vt[:rank]
    root = np.sqrt(s)
    new_b = u * root
    new_a = root[:, None] * vt
    # A direction the mean does not use keeps the averaged A row with a zero B column: B·A is unchanged,
    # and the factor can still learn (an all-zero A and B pair would get no gradient at all).
    dead = s <= s.max(initial=0.0) * 1e-6 if s.size and s.max() > 0 else np.ones(rank, dtype=bool)
    new_a[dead] = fallback_a.reshape(rank, -1)[dead]
    new_b[:, dead] = 0.0
    return (new_a.reshape(a_list[0].shape).astype(np.float32), new_b.reshape(b_list[0].shape).astype(np.float32))


def merge_lora(states: Sequence[Arrays], weights: Sequence[float], rule: str = "product") -> Arrays:
    """Merge child models with ``weights`` (example counts): ``factors`` averages every tensor,
    ``product`` averages each LoRA layer's ``B·A`` and re-factorises it at the same rank."""
    if rule not in MERGES:
        raise ValueError(f"unknown LoRA merge {rule!r}; choose one of {', '.join(MERGES)}")
    mean = {k: np.ascontiguousarray(v) for k, v in weighted_mean(states, weights).items()}  # in the order given
    if rule == "factors" or len(states) == 1:
        return mean
    w = np.asarray(weights, dtype=np.float64) / float(sum(weights))
    with threadpool_limits(1):  # one LAPACK thread: the same bits in every process that merges
        for key_a, key_b in _pairs(list(states[0])):
            mean[key_a], mean[key_b] = _product_pair([s[key_a] for s in states], [s[key_b] for s in states], w,
                                                     mean[key_a])
            mean[key_a], mean[key_b] = np.ascontiguousarray(mean[key_a]), np.ascontiguousarray(mean[key_b])
    return mean
