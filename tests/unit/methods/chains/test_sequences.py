import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedforget.methods.chains.sequences import (
    bms_sequences,
    cyclic_sequences,
    expected_prefix_score,
    mean_pairwise_hamming,
    select_sequences,
    sequence_score,
    sorted_cyclic_sequences,
)


def _digits(orders, base=0):
    return ["".join(str(g + base) for g in o) for o in orders]


def test_cyclic_first_budget_rotations_match_fedsgt_example_1():
    assert _digits(cyclic_sequences(6, 6)) == ["012345", "501234", "450123", "345012", "234501", "123450"]
    assert _digits(cyclic_sequences(6, 3)) == ["012345", "501234", "450123"]
    assert cyclic_sequences(1, 1) == [(0,)]


def test_cyclic_tree_reproduces_the_reference_get_cyclic_outputs():
    # Both digests agree once the s3t digest's 1-indexed 1234,1423,4123,4312,... is shifted to 0-indexed;
    # with B % |parents| == 0 the reference does not sort, so this is its exact order.
    assert _digits(cyclic_sequences(4, 8)) == ["0123", "0312", "3012", "3201", "2301", "2130", "1230", "1023"]
    assert _digits(cyclic_sequences(4, 8), base=1) == ["1234", "1423", "4123", "4312", "3412", "3241", "2341", "2134"]
    # With leftovers the reference sorts the level lexicographically.
    assert _digits(cyclic_sequences(4, 5), base=1) == ["1234", "1423", "2341", "3412", "4123"]
    assert _digits(cyclic_sequences(3, 4), base=1) == ["123", "132", "231", "312"]
    thirteen = _digits(cyclic_sequences(4, 13))
    assert thirteen == sorted(thirteen)
    assert [s for s in thirteen if s[0] == "0"] == ["0123", "0132", "0231", "0312"]
    assert [sum(s[0] == str(g) for s in thirteen) for g in range(4)] == [4, 3, 3, 3]


def test_cyclic_diversity_matches_the_reference_code_numbers():
    # S3T digest §9 item 8: average positional Hamming distance of code-cyclic orders, L = 5.
    expected = {5: 5.0, 6: 4.667, 10: 4.444, 20: 4.211, 60: 4.068, 120: 4.034}
    for budget, value in expected.items():
        assert mean_pairwise_hamming(cyclic_sequences(5, budget)) == pytest.approx(value, abs=5e-4)


def test_cyclic_always_gives_exactly_budget_distinct_permutations():
    for groups in range(1, 6):
        for budget in range(1, math.factorial(groups) + 1):
            orders = cyclic_sequences(groups, budget)
            assert len(orders) == budget == len(set(orders))
            assert all(sorted(o) == list(range(groups)) for o in orders)
            tops = {o[0] for o in orders}
            assert len(tops) == min(groups, budget)  # B' = min(L, B) distinct top groups
    assert sorted(cyclic_sequences(4, 24)) == list(itertools.permutations(range(4)))


def test_cyclic_rejects_impossible_sizes():
    with pytest.raises(ValueError, match="L!"):
        cyclic_sequences(3, 7)
    with pytest.raises(ValueError, match="groups"):
        cyclic_sequences(0, 1)
    with pytest.raises(ValueError, match="budget"):
        cyclic_sequences(3, 0)


def test_sequence_score_is_the_papers_formula_not_the_expected_prefix():
    p, order = (0.1, 0.2, 0.3, 0.4), (0, 1, 2, 3)
    assert [round(sequence_score(order, p, t), 4) for t in (1, 2, 5)] == [3.5, 2.27, 0.9573]
    assert [round(expected_prefix_score(order, p, t), 4) for t in (1, 2, 5)] == [2.0, 1.46, 0.7688]
    assert sequence_score(order, p) > sequence_score((3, 2, 1, 0), p)  # rarely deleted groups first score higher


def test_expected_prefix_score_matches_monte_carlo():
    p, order, t = (0.1, 0.2, 0.3, 0.4), (2, 0, 3, 1), 3
    rng = np.random.default_rng(0)
    hits = rng.choice(4, size=(20000, t), p=p)
    prefixes = [next((i for i, g in enumerate(order) if g in set(row)), 4) for row in hits.tolist()]
    assert np.mean(prefixes) == pytest.approx(expected_prefix_score(order, p, t), abs=0.03)


def test_bms_reproduces_the_reference_on_the_digest_prior():
    chosen = bms_sequences(4, 4, (0.4, 0.3, 0.2, 0.1))
    assert set(_digits(chosen)) == {"0123", "1032", "2301", "3210"}  # 1234, 2143, 3412, 4321 one-indexed
    scores = [sequence_score(o, (0.4, 0.3, 0.2, 0.1)) for o in chosen]
    assert scores == sorted(scores, reverse=True)
    assert bms_sequences(4, 2, (0.4, 0.3, 0.2, 0.1)) == chosen[:2]  # top-B by score


def test_bms_is_a_latin_square_for_any_prior_and_beats_sorted_cyclic():
    rng = np.random.default_rng(1)
    wins = 0
    for _ in range(20):
        p = rng.dirichlet(np.ones(6))
        p = (p / p.sum()).tolist()
        square = bms_sequences(6, 6, p)
        for position in range(6):
            assert sorted(o[position] for o in square) == list(range(6))
        baseline = sorted_cyclic_sequences(6, 6, p)
        wins += sum(sequence_score(o, p) for o in square) >= sum(sequence_score(o, p) for o in baseline)
    assert wins >= 16  # S3T Fig. 15: not a theorem, so only "most draws"


def test_bms_beyond_the_square_adds_seeded_distinct_conditional_samples():
    p = (0.4, 0.3, 0.2, 0.1)
    orders = bms_sequences(4, 10, p, seed=3)
    assert orders[:4] == bms_sequences(4, 4, p)
    assert len(set(orders)) == 10
    assert orders == bms_sequences(4, 10, p, seed=3)
    assert sorted(bms_sequences(4, 24, p)) == list(itertools.permutations(range(4)))
    # A group with probability 1 has sampling weight 0; the sampler must still finish.
    assert len(set(bms_sequences(3, 6, (1.0, 0.0, 0.0)))) == 6


def test_sorted_cyclic_matches_the_s3t_example():
    # p = (S1: .5, S2: .4, S3: .1) -> (S3,S2,S1), (S1,S3,S2), (S2,S1,S3)
    assert _digits(sorted_cyclic_sequences(3, 3, (0.5, 0.4, 0.1)), base=1) == ["321", "132", "213"]


def test_select_sequences_dispatches_and_validates_the_prior():
    assert select_sequences(5, 3) == cyclic_sequences(5, 3)
    assert select_sequences(4, 4, prior=(0.4, 0.3, 0.2, 0.1)) == bms_sequences(4, 4, (0.4, 0.3, 0.2, 0.1))
    with pytest.raises(ValueError, match="one probability per group"):
        select_sequences(4, 2, prior=(0.5, 0.5))
    with pytest.raises(ValueError, match=">= 0"):
        select_sequences(2, 2, prior=(1.5, -0.5))
    with pytest.raises(ValueError, match="sum to 1"):
        select_sequences(2, 2, prior=(0.5, 0.4))
    with pytest.raises(ValueError, match="numbers"):
        select_sequences(2, 2, prior=("a", "b"))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
def test_property_cyclic_orders_are_distinct_permutations_with_distinct_tops(size):
    groups, budget = size
    orders = cyclic_sequences(groups, budget)
    assert len(set(orders)) == budget
    assert all(sorted(o) == list(range(groups)) for o in orders)
    assert len({o[0] for o in orders}) == budget
    assert mean_pairwise_hamming(orders) == (groups if budget > 1 else 0.0)
