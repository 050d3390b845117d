"""Harmonic numbers: the expected deletions a uniform request stream takes to hit every one of n units
(coupon collecting), which chains and SAFE both count with."""

from __future__ import annotations

import math


def harmonic(n: int) -> float:
    """H_n = Σ_{i=1}^n 1/i (H_0 = 0)."""
    if n < 0:
        raise ValueError(f"harmonic number needs n >= 0, got {n}")
    return math.fsum(1.0 / i for i in range(1, n + 1))
