"""The opt-in ZO variance reduction (subspace directions, heavy-ball momentum) replays bit for bit."""

from __future__ import annotations

import pytest
import torch

from fedforget.core.config import ConfigError, parse_run_config
from fedforget.methods.hosfl import zo

NAMES = ["l1.lora_A", "l1.lora_B", "l2.lora_A", "l2.lora_B"]
NUMELS = [6, 4, 8, 5]
D = sum(NUMELS)


def _history(rounds: int = 7, p: int = 3) -> list[tuple[list[int], list[float]]]:
    g = torch.Generator().manual_seed(5)
    return [([1000 * t + i for i in range(p)], torch.randn(p, generator=g).tolist()) for t in range(rounds)]


def test_subspace_index_selects_named_parameters_in_order():
    assert zo.subspace_index(NAMES, NUMELS, "") is None
    assert zo.subspace_index(NAMES, NUMELS, "lora_B").tolist() == [6, 7, 8, 9, 18, 19, 20, 21, 22]
    assert zo.subspace_index(NAMES, NUMELS, "l2.lora_B, l1.lora_A").tolist() == [0, 1, 2, 3, 4, 5, 18, 19, 20,
                                                                               21, 22]
    with pytest.raises(ValueError, match="matches none"):
        zo.subspace_index(NAMES, NUMELS, "conv9")


def test_perturbation_and_update_stay_in_the_subspace():
    theta = torch.randn(D, generator=torch.Generator().manual_seed(1))
    index = zo.subspace_index(NAMES, NUMELS, "lora_B")
    outside = torch.ones(D, dtype=torch.bool)
    outside[index] = False
    moved = zo.perturbed(theta, 42, 1e-2, index)
    assert torch.equal(moved[outside], theta[outside]) and not torch.equal(moved[index], theta[index])
    assert torch.allclose(moved[index] - theta[index], 1e-2 * zo.direction(42, index.numel()), atol=1e-6)
    new = zo.replay(theta.clone(), _history(), 1e-3, 1e-3, index, 0.9, torch.zeros(index.numel()))
    assert torch.equal(new[outside], theta[outside]) and not torch.equal(new[index], theta[index])


@pytest.mark.parametrize("spec", ["", "lora_B"])
@pytest.mark.parametrize("beta", [0.0, 0.9])
def test_replay_in_pieces_equals_replay_at_once_bit_for_bit(spec, beta):
    """A client that took part in some rounds and replays the rest ends with the shadow's exact bits."""
    theta0 = torch.randn(D, generator=torch.Generator().manual_seed(2))
    index = zo.subspace_index(NAMES, NUMELS, spec)
    k = zo.subspace_dim(theta0, index)
    hist = _history()
    shadow, sbuf = theta0.clone(), torch.zeros(k)
    for seeds, vbar in hist:  # the server: one entry per round
        zo.apply_update(shadow, seeds, vbar, 1e-3, 5e-3, index, beta, sbuf if beta else None)
    client, cbuf = theta0.clone(), torch.zeros(k)
    for chunk in (hist[:2], hist[2:3], hist[3:]):  # the client: replays what it missed, when it is sampled
        zo.replay(client, chunk, 1e-3, 5e-3, index, beta, cbuf if beta else None)
        cbuf = cbuf.clone()  # as if persisted and reloaded
    assert torch.equal(client, shadow)
    if beta:
        assert torch.equal(cbuf, sbuf)


def test_defaults_keep_the_plain_update_bits():
    theta0 = torch.randn(D, generator=torch.Generator().manual_seed(3))
    seeds, vbar = [11, 12, 13], [0.5, -1.0, 2.0]
    plain = theta0.clone()
    scale = 1e-2 / (3 * 1e-3)
    for s, v in zip(seeds, vbar, strict=True):
        plain.add_(zo.direction(s, D), alpha=-v * scale)
    assert torch.equal(zo.apply_update(theta0.clone(), seeds, vbar, 1e-3, 1e-2), plain)
    assert torch.equal(zo.apply_update(theta0.clone(), seeds, vbar, 1e-3, 0.0, None, 0.9, torch.zeros(D)), theta0)


def test_momentum_is_heavy_ball_on_the_zo_estimate():
    theta0 = torch.zeros(D)
    hist = _history(3)
    buf = torch.zeros(D)
    theta = theta0.clone()
    m = torch.zeros(D, dtype=torch.float64)
    ref = torch.zeros(D, dtype=torch.float64)
    for seeds, vbar in hist:
        zo.apply_update(theta, seeds, vbar, 1e-3, 1e-2, None, 0.5, buf)
        m = 0.5 * m + zo.zo_gradient(seeds, vbar, 1e-3, D).double()
        ref -= 1e-2 * m
    assert torch.allclose(theta.double(), ref, rtol=1e-4, atol=1e-5)


def test_config_keys_default_off_and_momentum_is_bounded():
    cfg = parse_run_config({"method": "hosfl", "task": "digits-mlp"})
    assert cfg.hosfl.zo_params == "" and cfg.hosfl.client_momentum == 0.0
    cfg = parse_run_config({"method": "hosfl", "task": "digits-mlp", "hosfl.zo-params": "lora_B",
                            "hosfl.client-momentum": 0.9})
    assert cfg.hosfl.zo_params == "lora_B" and cfg.hosfl.client_momentum == 0.9
    with pytest.raises(ConfigError, match="client-momentum"):
        parse_run_config({"method": "hosfl", "task": "digits-mlp", "hosfl.client-momentum": 1.0})
