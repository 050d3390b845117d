"""SAFE-DP's private randomness and accounting: node-secret seeds, the owner-only secret file, Poisson
sampling at the accountant's rate, and σ composed over every adapter of a clique a sample touches."""

from __future__ import annotations

import math
import stat

import numpy as np
import pytest
import torch

from fedforget.methods.safe.dp import SECRET_BYTES, clique_sampling, secret_seed
from fedforget.methods.safe.node_secret import SECRET_FILE, node_secret


def test_secret_seed_needs_the_secret_and_follows_the_context():
    a, b = bytes(range(32)), bytes(range(1, 33))
    assert secret_seed(a, "safe-dp", "k3", 1, 0) == secret_seed(a, "safe-dp", "k3", 1, 0)
    assert secret_seed(a, "safe-dp", "k3", 1, 0) != secret_seed(b, "safe-dp", "k3", 1, 0)
    assert secret_seed(a, "safe-dp", "k3", 1, 0) != secret_seed(a, "safe-dp", "k3", 2, 0)
    assert 0 <= secret_seed(a, "x") < 2**63
    with pytest.raises(ValueError, match="32 bytes"):
        secret_seed(b"short", "x")


def test_node_secret_is_created_once_owner_only_and_kept(tmp_path):
    state = tmp_path / "clients" / "0"
    first = node_secret(state)
    path = state / SECRET_FILE
    assert len(first) == SECRET_BYTES and path.read_bytes() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) & 0o077 == 0
    assert node_secret(state) == first
    assert node_secret(tmp_path / "clients" / "1") != first  # each node draws its own
    assert not [p for p in state.iterdir() if p.name != SECRET_FILE]  # no temp file left behind


def test_a_lost_or_corrupt_secret_is_replaced_and_the_corrupt_one_kept_aside(tmp_path):
    first = node_secret(tmp_path)
    (tmp_path / SECRET_FILE).unlink()
    second = node_secret(tmp_path)
    assert second != first
    (tmp_path / SECRET_FILE).write_bytes(b"truncated")
    third = node_secret(tmp_path)
    assert third not in (first, second) and len(third) == SECRET_BYTES
    assert (tmp_path / f"{SECRET_FILE}.corrupt").read_bytes() == b"truncated"


def test_clique_sampling_rate_covers_the_smallest_negative_set_and_counts_every_peer_adapter():
    plan = clique_sampling([30, 10, 0, 20], batch=8, rounds=3, epochs=2)
    # negatives per adapter: 30, 50, 60, 40 -> smallest 30; 8/30 -> q = 0.5 (power of two ≥ 0.267)
    assert plan.sample_rate == 0.5 and plan.steps_per_epoch == 2
    assert plan.adapter_steps == 3 * 2 * 2
    assert plan.peers == 3 and plan.composed_steps == 3 * plan.adapter_steps  # a sample is negative in 3 adapters
    assert clique_sampling([12], batch=8, rounds=1, epochs=1) is None  # one class: nobody has negatives
    assert clique_sampling([0, 0], batch=8, rounds=1, epochs=1) is None
    small = clique_sampling([1, 1], batch=8, rounds=1, epochs=1)
    assert small.sample_rate == 1.0 and small.steps_per_epoch == 1


def test_dp_training_samples_by_poisson_at_the_rate_and_steps_the_accountant_is_given(monkeypatch):
    from fedforget.core.config import RunConfig
    from fedforget.methods.safe import dp_training as dp
    from fedforget.methods.safe.adapters import AdapterSettings, FrozenCrossAttention, init_adapters

    rates, batches, accounted = [], [], []
    real_mask, real_sigma = dp.poisson_mask, dp.noise_multiplier.__wrapped__

    def mask(size, rate, draws):
        rates.append(rate)
        out = real_mask(size, rate, draws)
        batches.append(int(out.sum()))
        return out

    def sigma(epsilon, delta, rate, steps):
        accounted.append((rate, steps))
        return real_sigma(epsilon, delta, rate, steps)

    monkeypatch.setattr(dp, "poisson_mask", mask)
    monkeypatch.setattr(dp, "noise_multiplier", sigma)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randn(60, 3, 8, generator=g)
    labels = torch.tensor([0] * 30 + [1] * 20 + [2] * 10)
    theta = FrozenCrossAttention(8, 1, 8)
    start = init_adapters(8, 1, 2, 8)
    cfg = RunConfig(task="digits-mlp", method="safe").with_keys({"safe.dp": True, "safe.dp-epsilon": 3.0,
                                                                 "safe.dp-delta": 1e-5})
    settings = AdapterSettings(2, 8, 0.01, "adam", 5, "constant", 1, 3)
    dp.train_dp_adapter(theta, start, tokens, labels, 0, [0, 1, 2], settings, cfg, num_rounds=3, private_seed=11)
    plan = clique_sampling([30, 20, 10], 8, 3, 2)
    assert accounted == [(plan.sample_rate, plan.composed_steps)]
    assert set(rates) == {plan.sample_rate}
    assert len(rates) == plan.adapter_steps // 3  # one of the run's three rounds
    assert len(set(batches)) > 1  # batch sizes vary: independent inclusion, not fixed-size shuffled batches
    assert abs(np.mean(batches) - plan.sample_rate * 30) < 0.35 * plan.sample_rate * 30


def test_poisson_mask_includes_each_sample_independently_at_rate_q():
    from fedforget.methods.safe.dp_training import poisson_mask

    draws = torch.Generator().manual_seed(3)
    masks = torch.stack([poisson_mask(50, 0.25, draws) for _ in range(2000)]).float()
    assert abs(float(masks.mean()) - 0.25) < 0.01
    per_sample = masks.mean(0)
    assert float(per_sample.min()) > 0.2 and float(per_sample.max()) < 0.3
    sizes = masks.sum(1)
    assert abs(float(sizes.var()) - 50 * 0.25 * 0.75) < 1.5  # binomial spread, not a fixed batch


def test_sigma_for_the_composed_clique_meets_epsilon_over_all_its_adapters():
    from opacus.accountants import RDPAccountant

    from fedforget.methods.safe.dp_training import noise_multiplier

    plan = clique_sampling([30, 20, 10], batch=8, rounds=2, epochs=1)
    sigma = noise_multiplier(3.0, 1e-5, plan.sample_rate, plan.composed_steps)
    accountant = RDPAccountant()
    for _ in range(plan.peers):  # the sample's loss in each adapter of the clique where it is a negative
        accountant.history.append((sigma, plan.sample_rate, plan.adapter_steps))
    assert accountant.get_epsilon(1e-5) <= 3.0 + 1e-6
    alone = noise_multiplier(3.0, 1e-5, plan.sample_rate, plan.adapter_steps)
    assert sigma > alone and math.isfinite(sigma)  # composition over the clique costs noise
