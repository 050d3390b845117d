"""The one weighted mean of models (pure numpy): every method that averages client or child states
(FedAvg, the chains, FedShard's rounds and its merges, SAFE's cliques) calls :func:`weighted_mean`.

Floating point addition is not associative, so the mean is defined by its order and precision:

- **Order.** The terms are summed in ascending ``keys`` (the caller's sort key, e.g. the partition id),
  never in the order replies happen to arrive; without ``keys``, in the order given. The first term
  starts the sum (no zero is added first), so the sign of a −0.0 survives as it does in Flower's.
- **Precision.** ``accumulate=np.float32`` is Flower's ``aggregate_arrayrecords`` bit for bit: each
  weight is ``w_i / Σw`` in float64, rounded to the tensor's dtype, the products summed in that dtype.
  ``accumulate=np.float64`` is SAFE's: the tensor is widened to float64, the products summed in float64,
  the mean rounded back to the tensor's dtype once. Each method keeps the precision it was built with:
  another one would change its served bytes, and ``verify`` of an existing store would report a mismatch.

Integer tensors are averaged in float64 (as numpy multiplies an integer array by a float) and the mean
stays float64; a floating tensor's mean has its own dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Arrays = dict[str, np.ndarray]


def _accumulator(dtype: np.dtype, accumulate: np.dtype) -> np.dtype:
    if not np.issubdtype(dtype, np.floating):
        return np.dtype(np.float64)
    return np.promote_types(dtype, accumulate)


def weighted_mean(states: Sequence[Mapping[str, np.ndarray]], weights: Sequence[float], *,
                  accumulate: type[np.floating] = np.float32, keys: Sequence[Any] | None = None) -> Arrays:
    """``Σ_i (w_i / Σw) · states[i]`` of each named tensor, summed in ascending ``keys`` (distinct) or in the
    order given, accumulated in at least ``accumulate`` (float32: Flower's arithmetic; float64: SAFE's).
    Every state names the same tensors with the same shapes; the result keeps the first summed state's
    order of names."""
    if not states or len(states) != len(weights):
        raise ValueError(f"a weighted mean needs one weight per state (got {len(states)} states, "
                         f"{len(weights)} weights)")
    order = list(range(len(states)))
    if keys is not None:
        if len(keys) != len(states) or len(set(keys)) != len(keys):
            raise ValueError("a weighted mean's sort keys must be one distinct key per state")
        order.sort(key=lambda i: keys[i])
    total = sum(weights[i] for i in order)
    if not total > 0:
        raise ValueError(f"a weighted mean needs a positive total weight, not {total}")
    factors = [weights[i] / total for i in order]
    first = states[order[0]]
    acc_type = np.dtype(accumulate)
    out: Arrays = {}
    for name, value in first.items():
        value = np.asarray(value)
        dtype = _accumulator(value.dtype, acc_type)
        acc: np.ndarray | None = None
        for i, w in zip(order, factors, strict=True):
            state = states[i]
            if name not in state or len(state) != len(first):
                raise ValueError("every state of a weighted mean must name the same tensors")
            x = np.asarray(state[name])
            if x.shape != value.shape:
                raise ValueError(f"tensor {name!r}: shape {x.shape} where another state has {value.shape}")
            term = x.astype(dtype, copy=False) * dtype.type(w)
            if acc is None:
                acc = term
            else:
                acc += term
        result_type = value.dtype if np.issubdtype(value.dtype, np.floating) else dtype
        out[name] = np.asarray(acc.astype(result_type, copy=False), order="C")  # type: ignore[union-attr]
    return out
