import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedforget.methods.chains.sequences import cyclic_sequences
from fedforget.methods.chains.serving import STRATEGIES, active_prefix, select_serving


def _bracket(order, prefix):
    """FedSGT Table II notation: active prefix in brackets, e.g. [234]501."""
    digits = "".join(map(str, order))
    return f"[{digits[:prefix]}]{digits[prefix:]}"


def _served(sequences, affected, strategy):
    prefixes = [active_prefix(s, affected) for s in sequences]
    return [_bracket(sequences[i], prefixes[i]) for i, _ in select_serving(sequences, prefixes, strategy)]


def test_active_prefix_counts_leading_clean_groups():
    assert active_prefix((2, 3, 4, 5, 0, 1), {1}) == 5
    assert active_prefix((1, 2, 3), {1}) == 0
    assert active_prefix((0, 1, 2), set()) == 3


def test_fedsgt_table_ii_all_nine_cells():
    sequences = cyclic_sequences(6, 6)
    times = [{1}, {1, 5}, {1, 5, 2}]  # requests on G1, then G5, then G2
    expected = {
        "allseq": [
            ["[0]12345", "[50]1234", "[450]123", "[3450]12", "[23450]1"],
            ["[0]12345", "[4]50123", "[34]5012", "[234]501"],
            ["[0]12345", "[4]50123", "[34]5012"],
        ],
        "minseq": [["[23450]1"], ["[0]12345", "[234]501"], ["[0]12345", "[34]5012"]],
        "longseq": [["[23450]1"], ["[234]501"], ["[34]5012"]],
    }
    for strategy, cells in expected.items():
        assert [_served(sequences, affected, strategy) for affected in times] == cells


def test_s3t_workflow_example_three_shards():
    # m = 3, L = 4, B = 4; a deletion hits slice 1 of shard 3, then slice 2 of the same shard (one-indexed).
    shards = [cyclic_sequences(4, 4) for _ in range(3)]
    affected = [set(), set(), {0}]

    def surviving(shard):
        seqs = shards[shard]
        prefixes = [active_prefix(s, affected[shard]) for s in seqs]
        alive = [tuple(g + 1 for g in seqs[i][: prefixes[i]]) for i, _ in select_serving(seqs, prefixes, "allseq")]
        ((best, _),) = select_serving(seqs, prefixes, "longseq")
        return alive, tuple(g + 1 for g in seqs[best][: prefixes[best]])

    assert surviving(2) == ([(4,), (3, 4), (2, 3, 4)], (2, 3, 4))
    affected[2].add(1)
    assert surviving(2) == ([(4,), (3, 4)], (3, 4))
    assert surviving(0) == ([(1, 2, 3, 4), (4, 1, 2, 3), (3, 4, 1, 2), (2, 3, 4, 1)], (1, 2, 3, 4))


def test_weights_follow_prefix_lengths():
    sequences = cyclic_sequences(6, 6)
    prefixes = [active_prefix(s, {1, 5}) for s in sequences]  # [1, 0, 1, 2, 3, 0]
    assert select_serving(sequences, prefixes, "allseq") == [(0, 1 / 7), (2, 1 / 7), (3, 2 / 7), (4, 3 / 7)]
    assert select_serving(sequences, prefixes, "minseq") == [(0, 0.25), (4, 0.75)]
    assert select_serving(sequences, prefixes, "longseq") == [(4, 1.0)]


def test_longseq_ties_go_to_the_lowest_index():
    sequences = [(0, 1, 2), (1, 2, 0), (2, 0, 1)]
    assert select_serving(sequences, [1, 2, 2], "longseq") == [(1, 1.0)]


def test_nothing_survives_and_bad_input():
    sequences = [(0, 1), (1, 0)]
    for strategy in STRATEGIES:
        assert select_serving(sequences, [0, 0], strategy) == []
    with pytest.raises(ValueError, match="allseq"):
        select_serving(sequences, [1, 1], "best")
    with pytest.raises(ValueError, match="prefix lengths"):
        select_serving(sequences, [1], "allseq")
    with pytest.raises(ValueError, match="outside"):
        select_serving(sequences, [3, 0], "allseq")


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 7).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(1, n), st.sets(st.integers(0, n - 1)), st.sampled_from(STRATEGIES))
    )
)
def test_property_serving_weights_sum_to_one_over_live_sequences(case):
    groups, budget, affected, strategy = case
    sequences = cyclic_sequences(groups, budget)
    prefixes = [active_prefix(s, affected) for s in sequences]
    chosen = select_serving(sequences, prefixes, strategy)
    if all(a == 0 for a in prefixes):
        assert chosen == []
        return
    indices = [i for i, _ in chosen]
    assert indices == sorted(set(indices))
    assert all(prefixes[i] >= 1 for i in indices)
    assert sum(w for _, w in chosen) == pytest.approx(1.0)
    assert max(prefixes[i] for i in indices) == max(prefixes)  # every strategy keeps a longest prefix
    if strategy == "minseq":  # the cover reaches every group some active prefix reaches
        reach = {g for s, a in zip(sequences, prefixes, strict=True) for g in s[:a]}
        assert {g for i in indices for g in sequences[i][: prefixes[i]]} == reach


def test_fedcio_clusters_vote_with_the_examples_their_served_model_saw():
    from fedforget.methods.chains.plan import shard_vote_weights

    serving = {"shards": [
        {"members": [{"artifacts": ["c0"], "weight": 1.0}]},
        {"members": []},  # a cluster with nothing valid left does not vote
        {"members": [{"artifacts": ["c2"], "weight": 1.0}]},
    ]}
    metas = {"c0": {"train-examples": 300}, "c2": {"train-examples": 100}}
    assert shard_vote_weights({"method": "fedcio"}, serving, metas) == [0.75, 0.25]
    assert shard_vote_weights({"method": "sisa"}, serving, metas) == [0.5, 0.5]
    assert shard_vote_weights({"method": "fedcio"}, serving, {}) == [0.5, 0.5]  # stores without sizes
