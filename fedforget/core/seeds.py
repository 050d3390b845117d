"""Seeds derived from tuples, so no draw depends on a global stream."""

from __future__ import annotations

import hashlib

SEED_BITS = 63


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from a tuple such as (run seed, method, artifact, round, partition, purpose).

    The tuple is rendered with ``repr`` so ``1`` and ``"1"`` give different seeds; the result fits
    both ``torch.Generator.manual_seed`` and ``numpy.random.default_rng``.
    """
    text = "\x1f".join(repr(p) for p in parts).encode("utf-8")
    digest = hashlib.sha256(text).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)


def derive_seed32(*parts: object) -> int:
    """A 32-bit seed, for APIs (such as flwr-datasets partitioners) that need one."""
    return derive_seed(*parts) & 0xFFFFFFFF
