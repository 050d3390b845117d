import itertools
import json
import math

import pytest

from fedforget.methods.chains.sequences import cyclic_sequences
from fedforget.methods.chains.serving import active_prefix
from fedforget.methods.chains.theory import (
    THEORY_METHODS,
    cyclic_span,
    deletion_rate_closed_form,
    deletion_rate_report,
    deletion_rate_std,
    expected_cyclic_span,
    expected_remaining_fraction,
    fedcio_remaining_fraction,
    harmonic,
    printed_cyclic_span,
    simulate_deletion_rate,
    simulate_remaining_fraction,
    survival_probability,
)


def test_harmonic_numbers():
    assert harmonic(0) == 0.0
    assert harmonic(1) == 1.0
    assert harmonic(4) == pytest.approx(25 / 12)
    with pytest.raises(ValueError):
        harmonic(-1)


def test_closed_forms_match_the_digests():
    assert deletion_rate_closed_form("fedsgt", 10, 10) == pytest.approx(29.2897, abs=1e-4)
    fedsgt = [round(deletion_rate_closed_form("fedsgt", 10, b), 2) for b in (1, 2, 4, 5, 8, 10, 20)]
    assert fedsgt == [10.0, 15.0, 20.83, 22.83, 27.18, 29.29, 29.29]
    assert deletion_rate_closed_form("fedcio", 10, 10, clusters=5) == pytest.approx(11.4167, abs=1e-4)
    s3t = [round(deletion_rate_closed_form("s3t", 6, b, shards=5), 2) for b in range(1, 7)]
    assert s3t == [68.50, 87.87, 99.55, 107.93, 114.48, 119.85]
    assert deletion_rate_closed_form("sisa", 4, 1, shards=5) == pytest.approx(45.67, abs=5e-3)
    assert deletion_rate_closed_form("s3t", 4, 4, shards=5) == pytest.approx(71.95, abs=5e-3)
    assert deletion_rate_closed_form("s3t", 32, 8, shards=5) == pytest.approx(684.57, abs=5e-3)
    # SISA with one slice per shard is FedCIO; S3T with B = 1 is SISA; S3T with m = 1 is FedSGT.
    assert deletion_rate_closed_form("sisa", 1, 1, shards=5) == deletion_rate_closed_form("fedcio", 1, 1, clusters=5)
    assert deletion_rate_closed_form("s3t", 6, 1, shards=5) == deletion_rate_closed_form("sisa", 6, 9, shards=5)
    assert deletion_rate_closed_form("s3t", 7, 3) == deletion_rate_closed_form("fedsgt", 7, 3)


def test_closed_form_std_matches_the_s3t_digest():
    assert deletion_rate_std("s3t", 6, 1, shards=5) == pytest.approx(35.34, abs=5e-3)
    assert deletion_rate_std("s3t", 32, 8, shards=5) == pytest.approx(201.97, abs=5e-3)


def test_bad_method_and_sizes_are_rejected():
    with pytest.raises(ValueError, match="fedsgt"):
        deletion_rate_closed_form("fedavg", 4, 4)
    with pytest.raises(ValueError, match="shards"):
        simulate_deletion_rate("s3t", 4, 4, shards=0)
    with pytest.raises(ValueError, match="L!"):
        simulate_deletion_rate("fedsgt", 3, 7)


# Trials chosen so that 2 % of δ is at least 4 standard errors (per-run std from the variance formula).
MC_CASES = [
    ("fedsgt", dict(groups=10, budget=10), 6000),
    ("fedsgt", dict(groups=10, budget=4), 11500),
    ("s3t", dict(groups=6, budget=3, shards=5), 5500),
    ("sisa", dict(groups=4, budget=1, shards=5), 10500),
    ("fedcio", dict(groups=1, budget=1, clusters=5), 8000),
]


@pytest.mark.parametrize(("method", "sizes", "trials"), MC_CASES)
def test_monte_carlo_deletion_rate_within_two_percent(method, sizes, trials):
    closed = deletion_rate_closed_form(method, **sizes)
    assert 0.02 * closed >= 4 * deletion_rate_std(method, **sizes) / math.sqrt(trials)
    mc = simulate_deletion_rate(method, **sizes, trials=trials, seed=7)
    assert mc["mean"] == pytest.approx(closed, rel=0.02)
    assert abs(mc["mean"] - closed) <= 4 * mc["stderr"]


def test_simulation_is_seeded_and_reports_the_median():
    a = simulate_deletion_rate("fedsgt", 10, 10, trials=3000, seed=1)
    assert a == simulate_deletion_rate("fedsgt", 10, 10, trials=3000, seed=1)
    assert a != simulate_deletion_rate("fedsgt", 10, 10, trials=3000, seed=2)
    assert 26 <= a["median"] <= 28  # digest: median failure at request 27 for L = B = 10
    assert simulate_deletion_rate("fedcio", 1, 1, clusters=5, trials=3000)["median"] == 10


def test_budget_beyond_groups_adds_no_deletion_rate():
    # B > L orders come from the permutation tree but have the same L tops.
    a = simulate_deletion_rate("fedsgt", 5, 5, trials=2000, seed=3)
    b = simulate_deletion_rate("fedsgt", 5, 13, trials=2000, seed=3)
    assert a == b


def test_report_is_json_able_and_consistent():
    report = deletion_rate_report("s3t", 4, 4, shards=2, trials=2000, seed=0)
    json.dumps(report)
    keys = "method groups budget shards clusters trials closed_form monte_carlo stderr relative_error".split()
    assert set(keys) <= set(report)
    assert report["closed_form"] == deletion_rate_closed_form("s3t", 4, 4, shards=2)
    assert report["relative_error"] == pytest.approx(abs(report["monte_carlo"] / report["closed_form"] - 1))
    assert report["closed_form_served"] == report["closed_form"] - 1
    assert set(THEORY_METHODS) == {"fedsgt", "s3t", "sisa", "fedcio"}


def test_cyclic_span_identity_over_every_hit_set():
    # Longest active prefix over B = L cyclic orders = L − U; the printed max−min span is one smaller.
    for L in range(1, 8):
        orders = cyclic_sequences(L, L)
        for size in range(1, L + 1):
            for hits in itertools.combinations(range(L), size):
                best = max(active_prefix(o, set(hits)) for o in orders)
                assert best == L - cyclic_span(hits, L)
                assert printed_cyclic_span(hits, L) == cyclic_span(hits, L) - 1
    assert cyclic_span([1, 3], 6) == 3 and cyclic_span([1, 5], 6) == 3  # FedSGT Fig. 3
    assert cyclic_span([], 6) == 0


def test_expected_remaining_fraction_matches_the_digest_tables():
    assert expected_cyclic_span(10, 2) == pytest.approx(3.5)
    assert expected_cyclic_span(10, 10) == pytest.approx(8.0321, abs=1e-4)
    assert expected_remaining_fraction(10, 2) == pytest.approx(0.65)
    assert expected_remaining_fraction(10, 10) == pytest.approx(0.1968, abs=1e-4)
    assert expected_remaining_fraction(10, 30) == pytest.approx(0.0383, abs=1e-4)
    l6 = [round(expected_remaining_fraction(6, r), 4) for r in (1, 2, 3, 4, 5, 6, 8, 10)]
    assert l6 == [0.8333, 0.5833, 0.4491, 0.3588, 0.2964, 0.2512, 0.1866, 0.1387]
    assert expected_remaining_fraction(10, 0) == 1.0
    assert expected_remaining_fraction(1, 3) == 0.0


@pytest.mark.parametrize("r", [2, 10])
def test_monte_carlo_remaining_fraction_within_one_hundredth(r):
    mc = simulate_remaining_fraction(10, r, trials=6000, seed=5)
    assert mc == pytest.approx(expected_remaining_fraction(10, r), abs=0.01)


def test_fedcio_remaining_fraction_and_budget_curve():
    assert fedcio_remaining_fraction(5, 10) == pytest.approx(0.1074, abs=1e-4)
    assert fedcio_remaining_fraction(5, 0) == 1.0
    # FedSGT Fig. 4 reconstruction: B = 5 retains less than B = L at r = 5 (0.280 vs 0.360).
    assert simulate_remaining_fraction(10, 5, trials=4000, seed=2, budget=5) == pytest.approx(0.280, abs=0.01)


def test_survival_probability_matches_the_fedsgt_table():
    assert survival_probability(10, 10, 20) == pytest.approx(0.785, abs=5e-4)
    assert survival_probability(10, 5, 20) == pytest.approx(0.5004, abs=1e-4)
    assert survival_probability(10, 1, 10) == pytest.approx(0.3487, abs=1e-4)
    assert survival_probability(1, 1, 10, shards=5) == pytest.approx(0.4775, abs=1e-4)  # FedCIO c = 5
    assert survival_probability(10, 10, 0) == 1.0
    assert survival_probability(10, 10, 5) == 1.0  # fewer requests than tops
    # Summing survival over r gives the expected failure time: δ = Σ_{r>=0} P(alive after r).
    delta = sum(survival_probability(6, 3, r) for r in range(400))
    assert delta == pytest.approx(deletion_rate_closed_form("fedsgt", 6, 3), rel=1e-9)
