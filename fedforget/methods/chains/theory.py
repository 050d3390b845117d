"""Deletion-rate and retained-data theory, with Monte-Carlo simulators of the same request model.

Request model (FedSGT §3.1, S3T Lemma 1 and A7): every deletion request hits one unit uniformly at random,
with replacement (the N ≫ r approximation). Under it the closed forms are exact, so the simulators, which
run the real planning code (:mod:`fedforget.methods.chains.sequences`,
:mod:`fedforget.methods.chains.serving`), must agree with them; that agreement is what the tests check.

The deletion rate δ counts requests until no shard has a sequence with an active module, *including* the
request that causes the failure (the papers' convention); ``δ − 1`` requests are served.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Collection
from fractions import Fraction
from math import comb, factorial
from typing import Any

from fedforget.core.harmonic import harmonic
from fedforget.methods.chains.plan import CHAIN_LAYOUTS, chain_layout
from fedforget.methods.chains.sequences import _ATTEMPTS_PER_SAMPLE, Order, cyclic_sequences
from fedforget.methods.chains.serving import active_prefix

THEORY_METHODS = tuple(CHAIN_LAYOUTS)
_MEMO_ENTRIES = 1 << 16
#: Group positions (groups × budget) the cyclic selection may build: about 3 s with its output.
ORDER_CELLS_MAX = 1_000_000
#: Steps :func:`bms_work` may count for one BMS selection: about 5 s on one loaded core (~1 µs a step).
BMS_WORK_MAX = 5_000_000


def _check_positive(**values: int) -> None:
    for name, v in values.items():
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")


def _units_and_targets(method: str, groups: int, budget: int, shards: int, clusters: int) -> tuple[int, int]:
    """(units a request picks from, units whose hit kills a top position): δ is the coupon-collector time.
    A shard's top positions are the first groups of its orders: ``min(L, B)`` of cyclic ones, one of one order."""
    layout = chain_layout(method)
    _check_positive(groups=groups, budget=budget, shards=shards, clusters=clusters)
    num_shards, per_shard, orders = layout.shape(groups, budget, shards, clusters)
    return num_shards * per_shard, num_shards * min(per_shard, orders)


def deletion_rate_closed_form(method: str, groups: int, budget: int, shards: int = 1, clusters: int = 5) -> float:
    """δ: fedsgt L·H_{min(L,B)}; s3t m·L·H_{m·min(B,L)}; sisa m·L·H_m; fedcio c·H_c.

    Arguments a method does not use are ignored (fedsgt has one shard; fedcio only has clusters).
    """
    n, k = _units_and_targets(method, groups, budget, shards, clusters)
    # Collecting k specific units of n: n/k + n/(k-1) + ... + n/1 = n·H_k.
    return n * harmonic(k)


def deletion_rate_std(method: str, groups: int, budget: int, shards: int = 1, clusters: int = 5) -> float:
    """Per-run standard deviation of the failure time: Var = Σ_{j=1}^{K} (1 − j/n)/(j/n)² (S3T §4 [ours])."""
    n, k = _units_and_targets(method, groups, budget, shards, clusters)
    return math.sqrt(math.fsum((1 - j / n) / (j / n) ** 2 for j in range(1, k + 1)))


def _system(method: str, groups: int, budget: int, shards: int, clusters: int) -> tuple[int, int, list[Order]]:
    """(shards, groups per shard, the orders every shard trains) as the methods lay them out."""
    _units_and_targets(method, groups, budget, shards, clusters)  # validation
    layout = chain_layout(method)
    num_shards, per_shard, _ = layout.shape(groups, budget, shards, clusters)
    return num_shards, per_shard, cyclic_sequences(groups, budget) if layout.ordered else [tuple(range(per_shard))]


def _alive_lookup(orders: list[Order], groups: int) -> Callable[[int], bool]:
    """mask of affected groups -> whether some order still has an active prefix; memoised per mask, in a
    memo of at most ``_MEMO_ENTRIES`` masks (cleared when full) so that memory stays flat for many groups."""
    cache: dict[int, bool] = {}

    def alive(mask: int) -> bool:
        hit = cache.get(mask)
        if hit is None:
            if len(cache) >= _MEMO_ENTRIES:
                cache.clear()
            affected = {g for g in range(groups) if mask >> g & 1}
            hit = cache[mask] = any(active_prefix(o, affected) >= 1 for o in orders)
        return hit

    return alive


def monte_carlo_work(method: str, groups: int, shards: int, clusters: int, trials: int) -> float:
    """Steps :func:`simulate_deletion_rate` takes, up to a constant: each trial draws ~``u·(ln u + 1)``
    requests over ``u`` units and re-checks a shard's prefixes (``O(groups)``) once per newly hit unit."""
    num_shards, per_shard, _ = chain_layout(method).shape(groups, 1, shards, clusters)
    units = num_shards * per_shard
    return float(trials) * units * (math.log(units) + 1.0 + per_shard)


def bms_work(groups: int, budget: int) -> float:
    """Steps :func:`~fedforget.methods.chains.sequences.bms_sequences` takes at worst, up to a constant: at level ``k``
    the Latin square scores ``L·(L − k)`` orders of ``k + 1`` groups (``L²(L − 1)(L + 4)/6`` in all, ~``L⁴/6``)
    and ranks the ``L`` orders; for ``B > L`` the conditional sampler may draw its whole attempt budget,
    ``100·(B − L) + 1000`` orders of ``L²`` steps each (a degenerate prior makes every draw a duplicate)."""
    latin = groups**2 * (groups - 1) * (groups + 4) / 6 + groups**2
    attempts = _ATTEMPTS_PER_SAMPLE * (budget - groups) + 1000 if budget > groups else 0
    return latin + attempts * groups**2 + groups * budget


def selection_refusal(groups: int, budget: int, with_prior: bool, names: tuple[str, str]) -> str | None:
    """None when selecting ``budget`` orders of ``groups`` answers within seconds; otherwise one line
    naming the bound and the largest value of ``names`` (the groups' and the budget's option) that is within it."""
    group_name, budget_name = names
    if not with_prior:
        if groups * budget <= ORDER_CELLS_MAX:
            return None
        return (f"{group_name} {groups} × {budget_name} {budget} is over the bound of {ORDER_CELLS_MAX:,} group "
                f"positions; use {budget_name} {max(1, ORDER_CELLS_MAX // groups)} or fewer")
    if bms_work(groups, budget) <= BMS_WORK_MAX:
        return None
    said = (f"selecting {budget} orders of {groups} groups with a prior (BMS) is over its bound "
            f"({bms_work(groups, budget):.3g} steps > {BMS_WORK_MAX:.3g}, about 5 s)")
    if bms_work(groups, 1) <= BMS_WORK_MAX:
        return f"{said}; use {budget_name} {_largest(lambda b: bms_work(groups, b), budget)} or fewer"
    return f"{said}; use {group_name} {_largest(lambda g: bms_work(g, 1), groups)} or fewer"


def _largest(work: Callable[[int], float], high: int) -> int:
    """The largest ``n`` in ``1..high`` with ``work(n) <= BMS_WORK_MAX`` (``work`` grows with ``n``; 1 fits)."""
    lo, hi = 1, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if work(mid) <= BMS_WORK_MAX else (lo, mid - 1)
    return lo


def _summary(values: list[float]) -> dict[str, float]:
    mean = math.fsum(values) / len(values)
    std = statistics.stdev(values, mean) if len(values) > 1 else 0.0
    return {"mean": mean, "stderr": std / math.sqrt(len(values)), "std": std, "median": statistics.median(values)}


def simulate_deletion_rate(
    method: str, groups: int, budget: int, shards: int = 1, clusters: int = 5, trials: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Monte-Carlo δ: requests until every shard has lost all its sequences' first modules, inclusive.

    Each request picks a unit (fedsgt: a group; s3t/sisa: a (shard, slice) pair; fedcio: a cluster) uniformly
    with replacement. A newly affected unit re-evaluates its shard's active prefixes with
    :func:`~fedforget.methods.chains.serving.active_prefix` (memoised per affected set). Returns mean, stderr, std,
    median and trials.
    """
    _check_positive(trials=trials)
    num_shards, per_shard, orders = _system(method, groups, budget, shards, clusters)
    alive = _alive_lookup(orders, per_shard)
    units = num_shards * per_shard
    draw = random.Random(seed).random
    counts: list[float] = []
    for _ in range(trials):
        masks = [0] * num_shards
        dead = [False] * num_shards
        remaining = num_shards
        requests = 0
        while remaining:
            requests += 1
            shard, group = divmod(int(draw() * units), per_shard)
            bit = 1 << group
            if dead[shard] or masks[shard] & bit:
                continue  # nothing left to deactivate: the request still counts
            masks[shard] |= bit
            if not alive(masks[shard]):
                dead[shard] = True
                remaining -= 1
        counts.append(requests)
    return {**_summary(counts), "trials": trials}


def deletion_rate_report(
    method: str, groups: int, budget: int, shards: int = 1, clusters: int = 5, trials: int = 20000, seed: int = 0
) -> dict[str, Any]:
    """Closed form against Monte Carlo, as a JSON-able dict (δ counts the failing request; ``*_served`` do not)."""
    closed = deletion_rate_closed_form(method, groups, budget, shards, clusters)
    mc = simulate_deletion_rate(method, groups, budget, shards, clusters, trials, seed)
    return {
        "method": method,
        "groups": groups,
        "budget": budget,
        "shards": shards,
        "clusters": clusters,
        "trials": trials,
        "seed": seed,
        "closed_form": closed,
        "closed_form_std": deletion_rate_std(method, groups, budget, shards, clusters),
        "monte_carlo": mc["mean"],
        "stderr": mc["stderr"],
        "median": mc["median"],
        "relative_error": abs(mc["mean"] - closed) / closed,
        "z_score": (mc["mean"] - closed) / mc["stderr"] if mc["stderr"] > 0 else 0.0,
        "closed_form_served": closed - 1,
        "monte_carlo_served": mc["mean"] - 1,
    }


# --- Retained data: the cyclic span (FedSGT §3.2, A.2) -------------------------------------------------------


def cyclic_span(hits: Collection[int], L: int) -> int:
    """U = L − (largest cyclic gap between hit groups) + 1: the shortest arc covering every hit (0 if none).

    With ``B = L`` cyclic orders the longest active prefix is ``L − U``.
    """
    z = sorted(set(hits))
    if not z:
        return 0
    gaps = [b - a for a, b in zip(z, z[1:], strict=False)] + [z[0] + L - z[-1]]
    return L - max(gaps) + 1


def printed_cyclic_span(hits: Collection[int], L: int) -> int:
    """The span as FedSGT A.2 prints it, min_j (max − min) of the shifted hits: one less than :func:`cyclic_span`."""
    z = set(hits)
    return min(max((x + j) % L for x in z) - min((x + j) % L for x in z) for j in range(L))


def _stirling2_row(r: int, kmax: int) -> list[int]:
    """S(r, k) for k = 0..kmax (Stirling numbers of the 2nd kind), iteratively so large r does not recurse."""
    row = [1] + [0] * kmax
    for _ in range(r):
        row = [0] + [k * row[k] + row[k - 1] for k in range(1, kmax + 1)]
    return row


def _max_gap_cdf(L: int, m: int, s: int) -> Fraction:
    """P(largest cyclic gap <= s | m distinct hit groups)."""
    ways = sum((-1) ** j * comb(m, j) * comb(L - 1 - j * s, m - 1) for j in range((L - m) // s + 1))
    return Fraction(ways, comb(L - 1, m - 1))


def expected_cyclic_span(L: int, r: int) -> float:
    """E[U] after ``r`` uniform hits on ``L`` groups, exact (uses the +1-corrected U; 0 when r = 0)."""
    _check_positive(L=L)
    if r < 0:
        raise ValueError(f"number of requests must be >= 0, got {r}")
    if r == 0:
        return 0.0
    stirling = _stirling2_row(r, L)
    total = Fraction(0)
    for m in range(1, min(r, L) + 1):
        p_m = Fraction(comb(L, m) * factorial(m) * stirling[m], L**r)
        total += p_m * (1 + sum(_max_gap_cdf(L, m, s) for s in range(1, L)))
    return float(total)


def expected_remaining_fraction(L: int, r: int) -> float:
    """E[R]/|D| = (L − E[U])/L: data behind LongSeq after ``r`` requests, ``B = L`` cyclic, equal groups."""
    return (L - expected_cyclic_span(L, r)) / L


def simulate_remaining_fraction(L: int, r: int, trials: int = 20000, seed: int = 0, budget: int | None = None) -> float:
    """Monte-Carlo E[R]/|D|: the longest active prefix over ``cyclic_sequences(L, budget or L)``, divided by L.

    With the default ``B = L`` that prefix is the longest clean cyclic run; other budgets reproduce FedSGT Fig. 4.
    """
    _check_positive(L=L, trials=trials)
    if r < 0:
        raise ValueError(f"number of requests must be >= 0, got {r}")
    orders = cyclic_sequences(L, L if budget is None else budget)
    rng = random.Random(seed)
    total = 0
    for _ in range(trials):
        hits = {rng.randrange(L) for _ in range(r)}
        total += max(active_prefix(o, hits) for o in orders)
    return total / (trials * L)


def fedcio_remaining_fraction(c: int, r: int) -> float:
    """FedCIO's E[R]/|D| = (1 − 1/c)^r: the expected share of clusters never hit."""
    _check_positive(c=c)
    return (1 - 1 / c) ** r


def survival_probability(L: int, B: int, r: int, shards: int = 1) -> float:
    """P(service still up after ``r`` requests): not all ``m·min(L,B)`` top units hit among ``m·L`` units.

    1 − Σ_j (−1)^j C(K, j)(1 − j/n)^r with n = m·L, K = m·min(L, B); FedCIO with c clusters is
    ``survival_probability(1, 1, r, shards=c)``. Exact rational arithmetic, so large K does not cancel badly.
    """
    _check_positive(L=L, B=B, shards=shards)
    if r < 0:
        raise ValueError(f"number of requests must be >= 0, got {r}")
    n, k = shards * L, shards * min(L, B)
    all_hit = sum((-1) ** j * comb(k, j) * Fraction(n - j, n) ** r for j in range(k + 1))
    return float(1 - all_hit)
