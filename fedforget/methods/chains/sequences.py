"""Group orders for sequence-sharded training: S3T's cyclic rotation and BMS (FedSGT §2.2, S3T §3 A3).

An order is a permutation of the groups ``0..L-1``. Position ``i`` of an order is trained on the cumulative
data of its first ``i+1`` groups, so a deletion in the group at position ``k`` leaves a prefix of length ``k``.
Diverse orders (no group twice at the same position) keep many distinct groups at the top, which is what
makes the deletion rate grow with the budget.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

import numpy as np

Order = tuple[int, ...]

#: Draws per wanted sample (plus 1000) before the conditional sampler fills the rest deterministically.
_ATTEMPTS_PER_SAMPLE = 100


def _check_size(groups: int, budget: int) -> None:
    if groups < 1:
        raise ValueError(f"the number of groups must be >= 1, got {groups}")
    if budget < 1:
        raise ValueError(f"the budget (number of sequences) must be >= 1, got {budget}")
    limit = math.factorial(groups)
    if budget > limit:
        raise ValueError(
            f"budget {budget} exceeds the {limit} distinct orders of {groups} groups (L!); "
            f"use a budget <= {limit} or more groups"
        )


def _check_prior(prior: Sequence[float], groups: int) -> list[float]:
    """Return the prior as floats, or raise a ValueError that says how to fix it."""
    try:
        p = [float(x) for x in prior]
    except (TypeError, ValueError):
        raise ValueError(f"the deletion prior must be a sequence of numbers, got {prior!r}") from None
    if len(p) != groups:
        raise ValueError(
            f"the deletion prior has {len(p)} entries but there are {groups} groups; give one probability per group"
        )
    for i, x in enumerate(p):
        if not math.isfinite(x) or x < 0:
            raise ValueError(f"deletion prior entry {i} is {x}; every entry must be a finite number >= 0")
    total = math.fsum(p)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"the deletion prior must sum to 1 (it sums to {total:.9g}); divide it by its sum first")
    return p


def _rotate_right(order: Order, k: int) -> Order:
    k %= len(order)
    return order[len(order) - k :] + order[: len(order) - k]


def _rotations(order: Order) -> list[Order]:
    """All right-rotations, rotation 0 first: (0,1,2) -> (0,1,2), (2,0,1), (1,2,0)."""
    return [_rotate_right(order, k) for k in range(len(order))]


def cyclic_sequences(groups: int, budget: int) -> list[Order]:
    """S3T's iterative cyclic rotation, ported from the reference ``get_cyclic`` (S3T A3b).

    For ``B <= L`` the first ``B`` right-rotations of the identity, so the tops are ``B`` distinct groups.
    For ``B > L`` a permutation tree: at depth ``n`` every parent keeps its first ``n`` groups and contributes
    the first ``B // |parents|`` rotations of the rest; if the depth is not complete, ``B % |parents|`` parents,
    visited with stride ``|parents| // L`` round-robin, contribute one more rotation and the level is sorted.
    """
    _check_size(groups, budget)
    level = _rotations(tuple(range(groups)))[:budget]
    depth = 1
    complete = groups  # size of a fully expanded level: L, L(L-1), L(L-1)(L-2), ...
    while len(level) < budget:
        complete *= groups - depth
        parents = level
        per_parent = budget // len(parents)
        children = [p[:depth] + tail for p in parents for tail in _rotations(p[depth:])[:per_parent]]
        if len(children) < complete:
            stride = len(parents) // groups
            extra: list[Order] = []
            start = offset = 0
            for _ in range(budget % len(parents)):
                if start >= len(parents):
                    offset += 1
                    start = offset
                p = parents[start]
                extra.append(p[:depth] + _rotations(p[depth:])[per_parent])
                start += stride
            if extra:
                children = sorted(children + extra)
        level = children
        depth += 1
    if len(level) != budget or len(set(level)) != budget:  # never seen for L <= 7; guard the port anyway
        raise RuntimeError(f"cyclic_sequences({groups}, {budget}) built {len(set(level))} distinct orders")
    return level


def sequence_score(sequence: Sequence[int], prior: Sequence[float], t: int = 100) -> float:
    """The paper's score Σ_i i·(1 − P_i)^t with P_i = Σ_{j<=i} p_{π_j} (S3T Eq. 24, reference ``get_score``).

    Higher is better: low-probability groups early. It is *not* the expected surviving prefix after ``t``
    deletions (see :func:`expected_prefix_score`); kept because BMS is defined with it. Works on partial orders.
    """
    total, cum = 0.0, 0.0
    for i, g in enumerate(sequence, start=1):
        cum += float(prior[g])
        total += i * max(0.0, 1.0 - cum) ** t
    return total


def expected_prefix_score(sequence: Sequence[int], prior: Sequence[float], t: int = 100) -> float:
    """The exact expected surviving prefix after ``t`` independent deletions: Σ_i (1 − P_i)^t."""
    total, cum = 0.0, 0.0
    for g in sequence:
        cum += float(prior[g])
        total += max(0.0, 1.0 - cum) ** t
    return total


def _bms_latin_square(prior: list[float], t: int) -> list[Order]:
    """S3T Algorithm 2: every group starts one order; each level is a max-weight perfect matching."""
    groups = len(prior)
    orders = [[g] for g in range(groups)]
    for _ in range(groups - 1):
        weight = np.full((groups, groups), -np.inf)
        for i, order in enumerate(orders):
            used = set(order)
            for j in range(groups):
                if j not in used:
                    weight[i, j] = sequence_score([*order, j], prior, t)
        from scipy.optimize import linear_sum_assignment  # only BMS needs it; keep the forget path light

        rows, cols = linear_sum_assignment(weight, maximize=True)
        for i, j in zip(rows, cols, strict=True):
            orders[int(i)].append(int(j))
    return [tuple(o) for o in orders]


def _sample_order(weights: list[float], rng: random.Random) -> Order:
    """One order, each next group drawn ∝ its weight among the unused ones (uniform if they all weigh 0)."""
    remaining = list(range(len(weights)))
    order: list[int] = []
    while remaining:
        w = [weights[g] for g in remaining]
        pick = rng.choices(remaining, w)[0] if sum(w) > 0 else rng.choice(remaining)
        order.append(pick)
        remaining.remove(pick)
    return tuple(order)


def _conditional_samples(prior: list[float], count: int, taken: set[Order], rng: random.Random) -> list[Order]:
    """S3T App. B.2 conditional sampling: groups ∝ (1 − p_j), duplicates rejected.

    Rejection can stall when few orders are left or some weights are 0; after ``100·count + 1000`` draws the
    rest is filled with the lexicographically first unused orders, so the call always ends.
    """
    weights = [1.0 - p for p in prior]
    out: list[Order] = []
    for _ in range(_ATTEMPTS_PER_SAMPLE * count + 1000):
        if len(out) == count:
            return out
        order = _sample_order(weights, rng)
        if order not in taken:
            taken.add(order)
            out.append(order)
    for order in itertools.permutations(range(len(prior))):
        if len(out) == count:
            break
        if order not in taken:
            taken.add(order)
            out.append(order)
    return out


def bms_sequences(groups: int, budget: int, prior: Sequence[float], t: int = 100, seed: int = 0) -> list[Order]:
    """Bipartite-matching selection for a known deletion prior (S3T A3d, A3e; §8 item 12).

    ``B <= L``: the ``B`` highest-scoring orders of the BMS Latin square, best first (ties: lower top group).
    ``B > L``: all ``L`` BMS orders, then ``B − L`` distinct conditional samples drawn with ``random.Random(seed)``.
    """
    _check_size(groups, budget)
    p = _check_prior(prior, groups)
    square = _bms_latin_square(p, t)
    ranked = sorted(square, key=lambda o: -sequence_score(o, p, t))  # sort is stable: ties keep top-group order
    if budget <= groups:
        return ranked[:budget]
    return ranked + _conditional_samples(p, budget - groups, set(ranked), random.Random(seed))


def sorted_cyclic_sequences(groups: int, budget: int, prior: Sequence[float]) -> list[Order]:
    """S3T's "sorted cyclic" baseline (App. C.3): relabel groups by ascending prior, then cyclic rotation."""
    p = _check_prior(prior, groups)
    by_prior = sorted(range(groups), key=lambda g: (p[g], g))
    return [tuple(by_prior[i] for i in order) for order in cyclic_sequences(groups, budget)]


def select_sequences(
    groups: int, budget: int, prior: Sequence[float] | None = None, t: int = 100, seed: int = 0
) -> list[Order]:
    """The orders to train: cyclic rotation for an unknown (uniform) prior, BMS for a known one."""
    if prior is None:
        return cyclic_sequences(groups, budget)
    return bms_sequences(groups, budget, prior, t=t, seed=seed)


def mean_pairwise_hamming(sequences: Sequence[Sequence[int]]) -> float:
    """S3T's diversity metric: positions that differ, averaged over ordered pairs (``L`` for a Latin rectangle)."""
    n = len(sequences)
    if n < 2:
        return 0.0
    total = sum(sum(a != b for a, b in zip(x, y, strict=True)) for x, y in itertools.combinations(sequences, 2))
    return 2 * total / (n * (n - 1))
