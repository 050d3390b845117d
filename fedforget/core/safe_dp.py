"""SAFE-DP's request budget (paper §8 / App. D, digest §3.4): how many forget requests a DP-trained
neighbourhood absorbs before its adapter must be retrained (pure)."""

from __future__ import annotations

import math


def group_privacy(k: int, epsilon: float, delta: float) -> tuple[float, float]:
    """(α, β) after ``k`` requests by group privacy: ``α = kε``, ``β = (e^{kε} − 1)/(e^ε − 1)·δ``."""
    if k == 0:
        return 0.0, 0.0
    return k * epsilon, math.expm1(k * epsilon) / math.expm1(epsilon) * delta


def request_budget(epsilon: float, delta: float, alpha_b: float, beta_b: float) -> int:
    """k = ⌊min(α_b/ε, log(β_b(e^ε − 1)/δ + 1)/ε)⌋: the largest k with ``kε ≤ α_b`` and ``β(k) ≤ β_b``.

    The closed form is exact (not only the paper's δ ≪ β_b approximation); the final loop only guards
    the floor against floating-point rounding at an integer boundary.
    """
    if epsilon <= 0 or not 0 < delta < 1 or alpha_b <= 0 or not 0 < beta_b <= 1:
        raise ValueError(f"SAFE-DP needs ε > 0, 0 < δ < 1, α_b > 0 and 0 < β_b ≤ 1; got ε={epsilon}, δ={delta}, "
                         f"α_b={alpha_b}, β_b={beta_b}")
    k = math.floor(min(alpha_b / epsilon, math.log(beta_b * math.expm1(epsilon) / delta + 1.0) / epsilon) + 1e-9)
    while k > 0 and not _within(k, epsilon, delta, alpha_b, beta_b):
        k -= 1
    while _within(k + 1, epsilon, delta, alpha_b, beta_b):
        k += 1
    return k


def _within(k: int, epsilon: float, delta: float, alpha_b: float, beta_b: float) -> bool:
    alpha, beta = group_privacy(k, epsilon, delta)
    return alpha <= alpha_b * (1 + 1e-12) and beta <= beta_b * (1 + 1e-12)


def over_budget(requests: int, k: int) -> bool:
    """A DP neighbourhood hit by more than ``k`` requests must retrain (the (k+1)-th overflows)."""
    return requests > k
