"""SAFE-DP's request budget (paper §8 / App. D): how many forget requests a DP-trained
neighbourhood absorbs before its adapter must be retrained, how a node's clique samples its DP
negatives and composes their privacy loss, and the node-secret seeds of the DP randomness (pure)."""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Sequence
from dataclasses import dataclass


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


SECRET_BYTES = 32


def secret_seed(secret: bytes, *context: object) -> int:
    """A 63-bit generator seed from HMAC-SHA256(node secret, context): the same node and context give
    the same seed (a retrain replays its noise); without the secret the seed cannot be derived."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a node secret is {SECRET_BYTES} bytes, got {len(secret)}")
    message = "\x1f".join(str(c) for c in context).encode("utf-8")
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


@dataclass(frozen=True)
class CliqueSampling:
    """How one node's DP adapters of one clique sample their negatives, and what the accountant counts.

    Every adapter of the clique on the node draws each of its negatives into each DP step independently
    with probability ``sample_rate`` (Poisson sampling, as the RDP accountant assumes) for
    ``adapter_steps`` steps over the run. A sample of class y is a negative in the ``peers`` adapters of
    the clique's other classes, so its privacy loss composes over ``composed_steps`` = peers ×
    adapter_steps subsampled Gaussian steps at that one rate: σ is sized for that total.
    """

    sample_rate: float
    steps_per_epoch: int
    adapter_steps: int
    peers: int

    @property
    def composed_steps(self) -> int:
        return self.peers * self.adapter_steps


def clique_sampling(class_counts: Sequence[int], batch: int, rounds: int, epochs: int) -> CliqueSampling | None:
    """The clique's sampling plan on one node from its count of every class of the clique (zeros
    included), or None when no adapter has a negative there.

    q is the smallest power of two ≥ batch / (smallest non-empty negative set), so every adapter's
    expected DP batch is at least ``batch`` and one accountant search serves many cliques; an epoch is
    1/q steps (one expected pass over the smallest negative set).
    """
    total = sum(class_counts)
    negatives = [total - c for c in class_counts if total - c > 0]
    peers = len(class_counts) - 1
    if not negatives or peers < 1:
        return None
    rate = min(1.0, 2.0 ** math.ceil(math.log2(batch / min(negatives))))
    per_epoch = round(1.0 / rate)
    return CliqueSampling(rate, per_epoch, rounds * epochs * per_epoch, peers)
