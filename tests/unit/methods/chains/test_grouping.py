"""FedSGT Algorithm 1 (``fedforget.methods.chains.grouping``): seeded, canonical, near-equal groups of client slices."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedforget.methods.chains.grouping import array_split, canonical_units, group_units


def _units(partitions: int, slices: int) -> list[str]:
    return [f"{p}:{s}" for p in range(partitions) for s in range(slices)]


def _flat(groups: list[list[str]]) -> list[str]:
    return [u for g in groups for u in g]


def test_canonical_order_is_numeric_and_drops_duplicates():
    assert canonical_units(["10:0", "2:1", "2:0", "1:10", "1:2", "2:0"]) == ["1:2", "1:10", "2:0", "2:1", "10:0"]


def test_canonical_order_rejects_a_malformed_unit():
    with pytest.raises(ValueError, match="expected PARTITION:SLICE"):
        canonical_units(["0:1", "client-3"])


def test_array_split_gives_the_first_len_mod_parts_runs_one_more():
    assert array_split(list("abcdefg"), 3) == [["a", "b", "c"], ["d", "e"], ["f", "g"]]
    assert array_split(list("abc"), 3) == [["a"], ["b"], ["c"]]
    assert array_split(list("ab"), 3) == [["a"], ["b"], []]


def test_every_unit_lands_in_exactly_one_group_and_groups_are_sorted_inside():
    units = _units(7, 3)
    groups = group_units(units, 4, seed=11)
    flat = _flat(groups)
    assert canonical_units(flat) == canonical_units(units)
    assert len(flat) == len(set(flat)) == len(units)
    assert all(g == canonical_units(g) for g in groups)


def test_group_sizes_differ_by_at_most_one_with_the_first_m_mod_l_larger():
    units = _units(5, 3)  # M = 15
    for groups in (1, 2, 4, 6, 7, 15):
        sizes = [len(g) for g in group_units(units, groups, seed=3)]
        base, extra = divmod(15, groups)
        assert sizes == [base + 1] * extra + [base] * (groups - extra), groups


def test_same_seed_same_groups_other_seed_other_groups():
    units = _units(10, 3)
    assert group_units(units, 5, seed=42) == group_units(units, 5, seed=42)
    assert group_units(units, 5, seed=42) != group_units(units, 5, seed=43)


def test_the_groups_do_not_depend_on_the_input_order():
    units = _units(6, 4)
    reference = group_units(units, 3, seed=9)
    for trial in range(5):
        shuffled = list(units)
        random.Random(trial).shuffle(shuffled)
        assert group_units(shuffled, 3, seed=9) == reference
    assert group_units(units + units[:5], 3, seed=9) == reference  # duplicates are ignored


def test_the_grouping_is_a_seeded_shuffle_of_the_canonical_list():
    units = _units(4, 2)
    ordered = canonical_units(units)
    random.Random(5).shuffle(ordered)
    assert group_units(units, 3, seed=5) == [canonical_units(g) for g in array_split(ordered, 3)]


def test_fewer_units_than_groups_is_refused_with_a_fix():
    with pytest.raises(ValueError, match=r"3 client slices cannot fill 4 groups; lower chains.groups= or raise "
                                         r"slices-per-client="):
        group_units(["0:0", "0:1", "1:0"], 4, seed=0)
    with pytest.raises(ValueError, match="2 client slices cannot fill 3 groups"):
        group_units(["0:0", "0:0", "1:0"], 3, seed=0)  # a duplicate does not count twice


def test_zero_groups_is_refused():
    with pytest.raises(ValueError, match="groups must be >= 1, got 0"):
        group_units(["0:0"], 0, seed=0)


def test_as_many_groups_as_units_gives_singletons():
    units = _units(3, 2)
    groups = group_units(units, 6, seed=1)
    assert all(len(g) == 1 for g in groups)
    assert sorted(_flat(groups)) == sorted(units)


@settings(max_examples=80, deadline=None)
@given(
    st.sets(st.tuples(st.integers(0, 40), st.integers(0, 6)), min_size=1, max_size=60),
    st.integers(1, 12),
    st.integers(0, 2**32),
    st.randoms(use_true_random=False),
)
def test_algorithm_1_invariants_hold_for_any_units(pairs, groups, seed, rnd):
    units = [f"{p}:{s}" for p, s in pairs]
    if len(units) < groups:
        with pytest.raises(ValueError, match="cannot fill"):
            group_units(units, groups, seed)
        return
    result = group_units(units, groups, seed)
    assert len(result) == groups
    flat = _flat(result)
    assert sorted(flat) == sorted(units) and len(flat) == len(set(flat))
    sizes = [len(g) for g in result]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)
    assert all(g == canonical_units(g) for g in result)
    rnd.shuffle(units)
    assert group_units(units, groups, seed) == result
