"""HO-SFL's pure bookkeeping: seeds, sampling, the (seed, v̄) history, replay ranges, traffic."""

import pytest

from fedforget.core.config import ConfigError, parse_run_config
from fedforget.methods.hosfl.plan import (
    History,
    TrafficLedger,
    entries_to_apply,
    round_seeds,
    sample_round,
    summarize_traffic,
)


def test_round_seeds_are_unique_per_round_and_direction_and_reproducible():
    seeds = [s for t in range(50) for s in round_seeds(1, "hosfl", t, 5)]
    assert len(set(seeds)) == len(seeds) == 250
    assert round_seeds(1, "hosfl", 3, 5) == round_seeds(1, "hosfl", 3, 5)
    assert round_seeds(2, "hosfl", 3, 5) != round_seeds(1, "hosfl", 3, 5)
    assert all(0 <= s < 2**63 for s in seeds)


def test_sample_round_draws_k_sorted_partitions_per_round():
    draws = [sample_round(range(10), 3, 1, "hosfl", t) for t in range(20)]
    assert all(len(d) == 3 and d == sorted(d) and len(set(d)) == 3 for d in draws)
    assert len({tuple(d) for d in draws}) > 5
    assert sample_round(range(10), 3, 1, "hosfl", 4) == draws[4]
    assert sample_round([2, 0, 1], 5, 1, "hosfl", 0) == [0, 1, 2]


def test_history_since_gives_exactly_the_missed_rounds():
    h = History()
    for t in range(4):
        h.append([t * 10, t * 10 + 1], [float(t), -float(t)])
    assert [s for s, _ in h.since(1)] == [[10, 11], [20, 21], [30, 31]]
    assert h.since(4) == []
    with pytest.raises(ValueError):
        h.since(5)


def test_entries_to_apply_fixes_the_off_by_one_and_skips_what_was_applied():
    # server thinks the client is at 3 and sends rounds 3..5 for round 6
    assert list(entries_to_apply(3, 3, 3)) == [0, 1, 2]
    # the client had already synced to 5 (its reply was lost): only round 5 is left, nothing twice
    assert list(entries_to_apply(5, 3, 3)) == [2]
    assert list(entries_to_apply(6, 3, 3)) == []
    with pytest.raises(ValueError, match="lost its state dir"):
        entries_to_apply(2, 3, 3)
    with pytest.raises(ValueError, match="ahead of the server"):
        entries_to_apply(7, 3, 3)


def test_traffic_ledger_splits_rounds_and_totals():
    ledger = TrafficLedger()
    ledger.add("up", "aggregation", 20)
    ledger.add("down", "feedback", 100)
    ledger.add_wire("up", 50)
    row = ledger.close_round()
    assert row["bytes"]["up"]["aggregation"] == 20 and row["wire-bytes"]["up"] == 50
    ledger.add("up", "aggregation", 20)
    assert ledger.close_round()["bytes"]["down"]["feedback"] == 0
    assert ledger.total["up"]["aggregation"] == 40
    with pytest.raises(ValueError):
        ledger.add("sideways", "aggregation", 1)
    summary = summarize_traffic([{**row, "forward-ok": [0, 1]}])
    assert summary["per-client-round"]["up"]["aggregation"] == 10


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"method": "hosfl", "task": "fmnist-effnet"}, "needs a split model"),
        ({"method": "hosfl", "task": "digits-mlp", "hosfl.cut": 3},
         "'hosfl.cut'=3 is too deep for task 'digits-mlp': use 1..2"),
        ({"method": "sfl", "hosfl.cut": 0}, "'hosfl.cut' must be >= 1"),
        ({"method": "hosfl", "hosfl.perturbations": 0}, "'hosfl.perturbations' must be >= 1"),
        ({"method": "hosfl", "hosfl.mu": 0.0}, "'hosfl.mu' must be > 0"),
        ({"method": "zo-sfl", "hosfl.client-lr": -1.0}, "'hosfl.client-lr' must be >= 0"),
        ({"method": "hosfl", "hosfl.clients-per-round": 0}, "'hosfl.clients-per-round' must be >= 1"),
    ],
)
def test_bad_split_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_run_config(override)


def test_local_batches_cover_an_epoch_once_and_reshuffle_the_next():
    from fedforget.methods.hosfl.plan import local_batch_indices, local_steps

    n, b = 70, 32
    assert local_steps(n, b, 1) == 3 and local_steps(n, b, 2) == 6
    epoch0 = [local_batch_indices(n, b, 1, "sfl", 4, 2, s) for s in range(3)]
    assert sorted(i for batch in epoch0 for i in batch) == list(range(n))
    assert [len(x) for x in epoch0] == [32, 32, 6]
    assert local_batch_indices(n, b, 1, "sfl", 4, 2, 3) != epoch0[0]  # epoch 1 is a new shuffle
    assert local_batch_indices(n, b, 1, "sfl", 4, 2, 0) == epoch0[0]  # the same numbers, the same rows


def test_split_methods_default_to_enough_rounds_and_sfl_to_one_local_epoch():
    from fedforget.core.config import parse_run_config

    assert parse_run_config({"method": "hosfl", "task": "digits-mlp"}).num_rounds == 150
    assert parse_run_config({"method": "hosfl", "task": "digits-mlp", "num-rounds": 7}).num_rounds == 7
    assert parse_run_config({"method": "sfl", "task": "fmnist-cnn"}).local_epochs == 1
    assert parse_run_config({"method": "hosfl", "task": "digits-mlp", "hosfl.client-lr": 0.0}).hosfl.client_lr == 0.0
