"""SAFE adapters train by a budget of optimiser steps (AdamW, cosine over the whole run), whatever the
size of their clique, with per-task defaults a user can override."""

from __future__ import annotations

import pytest
import torch

from fedforget.core.config import ConfigError, RunConfig, parse_run_config
from fedforget.core.defaults import default_for
from fedforget.methods.safe.adapters import FrozenCrossAttention, batch_stream, init_adapters, train_adapters
from fedforget.methods.safe.budget import AdapterBudget, adapter_budget


def _budget(steps: int = 10, rounds: int = 3, schedule: str = "cosine") -> AdapterBudget:
    return AdapterBudget(steps=steps, lr=0.05, weight_decay=1e-4, width=16, batch_size=4, schedule=schedule,
                         rounds=rounds)


def test_zero_takes_the_tasks_default_and_explicit_values_win():
    auto = adapter_budget(RunConfig(method="safe", task="fmnist-effnet"))
    wanted = tuple(default_for(k, "safe", "fmnist-effnet") for k in ("adapter-steps", "lr", "adapter-width"))
    assert (auto.steps, auto.lr, auto.width) == wanted and auto.weight_decay > 0
    mine = adapter_budget(RunConfig(method="safe", task="fmnist-effnet", lr=0.3).with_keys(
        {"safe.adapter-steps": 7, "safe.adapter-width": 32, "safe.adapter-weight-decay": 0.0}))
    assert (mine.steps, mine.lr, mine.width, mine.weight_decay) == (7, 0.3, 32, 0.0)


def test_rounds_split_the_step_budget_without_gaps_or_overlap():
    for steps, rounds in ((10, 3), (7, 7), (5, 8), (300, 5)):
        b = _budget(steps, rounds)
        done = [t for r in range(1, rounds + 1) for t in b.round_steps(r)]
        assert done == list(range(steps))


def test_cosine_anneals_from_lr_towards_zero_over_the_whole_budget():
    b = _budget(100)
    lrs = [b.lr_at(t) for t in range(100)]
    assert lrs[0] == pytest.approx(0.05) and lrs[50] == pytest.approx(0.025) and lrs[-1] < 1e-4
    assert all(x >= y for x, y in zip(lrs, lrs[1:], strict=False))
    assert {_budget(100, schedule="constant").lr_at(t) for t in range(100)} == {0.05}


def test_a_node_with_few_samples_still_takes_every_step_of_its_round():
    for held in (1, 3, 9):
        batches = batch_stream(held, min(4, held), range(4, 8), seed=3)
        assert len(batches) == 4 and all(len(b) == min(4, held) for b in batches)
        assert {int(i) for b in batches for i in b} <= set(range(held))


def test_a_round_reads_the_same_rows_as_that_stretch_of_a_single_long_run():
    whole = batch_stream(10, 4, range(0, 9), seed=11)
    assert all(torch.equal(a, b) for a, b in zip(batch_stream(10, 4, range(3, 6), seed=11), whole[3:6], strict=True))


def test_adapters_train_with_adamw_weight_decay_and_replay_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    tokens, labels = torch.randn(12, 3, 8, generator=g), torch.arange(12) % 3
    theta = FrozenCrossAttention(8, 1, 16)
    start = init_adapters(8, 2, 5, 16)
    b = _budget(6, 2)
    one, _ = train_adapters(theta, start, tokens, labels, [0, 2], b, 1, 9)
    again, _ = train_adapters(theta, start, tokens, labels, [0, 2], b, 1, 9)
    assert all(torch.equal(one[k], again[k]) for k in one)
    no_decay, _ = train_adapters(theta, start, tokens, labels, [0, 2],
                                 AdapterBudget(6, 0.05, 0.0, 16, 4, "cosine", 2), 1, 9)
    assert not torch.equal(one["queries"], no_decay["queries"])  # the decay is applied


@pytest.mark.parametrize("key,value", [("safe.adapter-steps", -1), ("safe.adapter-width", 6),
                                       ("safe.adapter-weight-decay", -0.1)])
def test_bad_adapter_settings_are_refused_with_the_key_named(key, value):
    with pytest.raises(ConfigError, match=key):
        parse_run_config({"method": "safe", key: value})


def test_protosisa_left_at_its_defaults_deals_safe_coarse_shards_and_safe_groups_classes():
    sisa = parse_run_config({"method": "protosisa", "task": "fmnist-effnet", "safe.coarse": 8}).safe
    assert (sisa.coarse, sisa.fine) == (8, 1)  # uniform shards are coarse·fine: eight, as the SAFE docs page says
    safe = parse_run_config({"method": "safe", "task": "fmnist-effnet"}).safe
    assert (safe.coarse, safe.fine) == (4, 2)
