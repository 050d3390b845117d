import numpy as np
import pytest

from fedforget.tasks.partitioning import partition_samples, plan_partitions

LABELS = np.random.default_rng(0).integers(0, 10, 3000)
IDS = np.arange(5000, 8000)


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet"])
def test_partitions_cover_the_pool_once(partitioner):
    parts = partition_samples(LABELS, IDS, 7, partitioner, 0.5, seed=3)
    flat = [i for p in parts for i in p]
    assert sorted(flat) == IDS.tolist()
    assert all(len(p) >= 2 for p in parts)


def test_same_seed_same_partitions_other_seed_other_partitions():
    a = plan_partitions(LABELS, IDS, 5, "dirichlet", 0.3, 3, seed=1)
    assert a == plan_partitions(LABELS, IDS, 5, "dirichlet", 0.3, 3, seed=1)
    assert a != plan_partitions(LABELS, IDS, 5, "dirichlet", 0.3, 3, seed=2)


def test_small_alpha_makes_partitions_non_iid():
    parts = partition_samples(LABELS, np.arange(3000), 5, "dirichlet", 0.1, seed=4)
    dominant = [np.bincount(LABELS[p], minlength=10).max() / len(p) for p in parts]
    iid = partition_samples(LABELS, np.arange(3000), 5, "iid", 0.1, seed=4)
    dominant_iid = [np.bincount(LABELS[p], minlength=10).max() / len(p) for p in iid]
    assert np.mean(dominant) > 2 * np.mean(dominant_iid)


def test_iid_partitions_have_equal_sizes():
    sizes = [len(p) for p in partition_samples(LABELS, IDS, 6, "iid", 1.0, seed=1)]
    assert max(sizes) - min(sizes) <= 1


def test_each_partition_is_cut_into_slices():
    plan = plan_partitions(LABELS, IDS, 4, "iid", 1.0, 3, seed=1)
    for p, slices in plan.slices.items():
        assert len(slices) == 3
        assert plan.partition_ids(p) == sorted(i for s in slices for i in s)


def test_too_small_a_pool_is_refused_with_a_hint():
    with pytest.raises(ValueError, match="raise train-size"):
        partition_samples(LABELS[:5], IDS[:5], 4, "iid", 1.0, seed=1)
