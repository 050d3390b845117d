import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedforget.core.slicing import UnitId, iid_shares, sample_to_unit, split_into_slices


@given(st.sets(st.integers(0, 10_000), max_size=300), st.integers(1, 12), st.integers(0, 2**31))
def test_slices_cover_the_partition_exactly_with_sizes_within_one(ids, k, seed):
    slices = split_into_slices(sorted(ids), k, seed)
    assert len(slices) == k
    assert sorted(i for s in slices for i in s) == sorted(ids)
    sizes = [len(s) for s in slices]
    assert max(sizes) - min(sizes) <= 1
    assert all(s == sorted(s) for s in slices)


def test_slicing_is_deterministic_and_depends_on_the_seed():
    ids = list(range(100))
    assert split_into_slices(ids, 4, 7) == split_into_slices(list(reversed(ids)), 4, 7)
    assert split_into_slices(ids, 4, 7) != split_into_slices(ids, 4, 8)


def test_slicing_rejects_bad_input():
    with pytest.raises(ValueError, match=">= 1"):
        split_into_slices([1, 2], 0, 1)
    with pytest.raises(ValueError, match="unique"):
        split_into_slices([1, 1], 2, 1)


def test_every_sample_maps_to_exactly_one_unit():
    plan = {0: split_into_slices(range(10), 2, 1), 1: split_into_slices(range(10, 25), 3, 2)}
    units = sample_to_unit(plan)
    assert len(units) == 25
    assert units[12].partition == 1
    with pytest.raises(ValueError, match="both"):
        sample_to_unit({0: [[1]], 1: [[1]]})


def test_unit_ids_parse_and_reject_malformed_text():
    assert UnitId.parse("3:1") == UnitId(3, 1)
    assert str(UnitId(3, 1)) == "3:1"
    for bad in ("3", "a:b", "1:2:3", ""):
        with pytest.raises(ValueError, match="PARTITION:SLICE"):
            UnitId.parse(bad)


def test_iid_shares_partition_the_ids():
    shares = iid_shares(range(50), 3, 5)
    assert sorted(i for s in shares for i in s) == list(range(50))
