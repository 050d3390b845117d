"""Update angles (FedShard Eq. 1) and their sign, on flattened updates (numpy only).

``α_s = arccos(cos(Δθ_s, Δθ))`` is ≥ 0, but A1 needs negative, near-zero and positive angles. The
sign is the side of the residual direction ``Δθ_s/‖Δθ_s‖ − Δθ/‖Δθ‖`` along the residuals' first
principal direction, found through the N×N Gram matrix (so D, the number of parameters, never
enters an eigen-solve); the lowest-index shard with a non-zero component fixes the orientation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EPS = 1e-12


def update_angles(updates: np.ndarray, weights: Sequence[float] | None = None) -> np.ndarray:
    """Angle (radians) of each row of ``updates`` to their weighted mean."""
    rows = np.asarray(updates, dtype=np.float64)
    w = np.ones(len(rows)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        w = np.ones(len(rows))
    mean = (w[:, None] * rows).sum(0) / w.sum()
    norms = np.linalg.norm(rows, axis=1) * np.linalg.norm(mean) + EPS
    cos = np.clip(rows @ mean / norms, -1.0, 1.0)
    return np.arccos(cos)


def signed_update_angles(updates: np.ndarray, weights: Sequence[float] | None = None) -> np.ndarray:
    """:func:`update_angles` with the residual principal-direction sign (G2)."""
    rows = np.asarray(updates, dtype=np.float64)
    angles = update_angles(rows, weights)
    if len(rows) < 2:
        return angles
    w = np.ones(len(rows)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        w = np.ones(len(rows))
    mean = (w[:, None] * rows).sum(0) / w.sum()
    unit = rows / (np.linalg.norm(rows, axis=1, keepdims=True) + EPS)
    residual = unit - mean / (np.linalg.norm(mean) + EPS)
    gram = residual @ residual.T
    _, vectors = np.linalg.eigh(gram)
    v = vectors[:, -1]
    nonzero = np.flatnonzero(np.abs(v) > 1e-9)
    if len(nonzero) and v[nonzero[0]] < 0:
        v = -v
    signs = np.where(v < -1e-9, -1.0, 1.0)
    return signs * angles
