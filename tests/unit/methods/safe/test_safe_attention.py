"""θ's cross-attention: padding tokens (NaN rows, text) take no part, and precomputed keys/values give
the same logits as the plain forward (what training and serving rely on)."""

from __future__ import annotations

import torch

from fedforget.methods.safe.adapters import FrozenCrossAttention, adapter_logits, init_adapters, kv_logits


def test_padding_rows_are_masked_out_of_the_attention():
    theta = FrozenCrossAttention(8, 2, 16)
    g = torch.Generator().manual_seed(0)
    real = torch.randn(1, 3, 8, generator=g)
    padded = torch.cat((real, torch.full((1, 4, 8), float("nan"))), dim=1)
    queries = torch.randn(2, 8, generator=g)
    short, long = theta(real, queries), theta(padded, queries)
    assert not torch.isnan(long).any()
    torch.testing.assert_close(long, short, rtol=0, atol=1e-6)
    moved = torch.cat((real, torch.randn(1, 4, 8, generator=g)), dim=1)  # negative control: real extra tokens
    assert not torch.allclose(theta(moved, queries), short, atol=1e-3)


def test_gradients_stay_finite_with_padding():
    theta = FrozenCrossAttention(8, 2, 16)
    tokens = torch.randn(2, 5, 8)
    tokens[0, 3:] = float("nan")
    params = {k: v.requires_grad_(True) for k, v in init_adapters(8, 3, 1, 16).items()}
    params["heads"].data.normal_()
    adapter_logits(theta, params, tokens).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in params.values())


def test_precomputed_keys_values_give_the_forward_bit_for_bit():
    theta = FrozenCrossAttention(8, 3, 16)
    tokens = torch.randn(4, 6, 8)
    params = init_adapters(8, 2, 4, 16)
    params["heads"].normal_()
    assert torch.equal(kv_logits(theta, params, theta.keys_values(tokens)), adapter_logits(theta, params, tokens))
