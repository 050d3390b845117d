"""The SAFE token cache holds what was computed: arrays are written in C order, because
``safetensors.numpy`` writes an array's raw buffer whatever its strides."""

from __future__ import annotations

import numpy as np

from fedforget.methods.safe.features import cached_tokens


class _ConvMap:
    """Stands in for a backbone whose tokens are a transposed conv map (channels vary slowest)."""

    def eval(self) -> None:
        pass


def _conv_map_tokens(n: int) -> np.ndarray:
    maps = np.arange(n * 8 * 4, dtype=np.float32).reshape(n, 8, 4)  # (N, channels, positions)
    return np.stack([m.T for m in maps])  # (N, positions, channels), not C-contiguous


def test_computed_conv_map_tokens_are_c_contiguous_and_in_token_major_order():
    import torch

    from fedforget.methods.safe.features import compute_tokens

    class TinyCNN(torch.nn.Module):  # the token path of the conv backbones: conv1, conv2, a 2×2 map
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.conv1, self.conv2 = torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Conv2d(4, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1)[:, :8]

    module, x = TinyCNN(), torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    tokens, pooled = compute_tokens(module, (x,))
    assert tokens.shape == (3, 4, 8) and tokens.flags["C_CONTIGUOUS"] and pooled.flags["C_CONTIGUOUS"]
    with torch.no_grad():
        fmap = torch.max_pool2d(torch.relu(module.conv2(torch.max_pool2d(torch.relu(module.conv1(x)), 2))), 2)
    assert np.allclose(tokens, fmap.flatten(2).transpose(1, 2).numpy())


def test_cached_tokens_read_back_equal_to_what_was_computed(tmp_path, monkeypatch):
    import fedforget.methods.safe.features as features

    tokens = _conv_map_tokens(5)
    pooled = tokens.mean(1)
    monkeypatch.setattr(features, "compute_tokens", lambda module, inputs: (tokens, pooled))
    ids = [7, 3, 11, 5, 2]
    first = cached_tokens(tmp_path, "train-x", "sha", ids, _ConvMap(), ())
    again = cached_tokens(tmp_path, "train-x", "sha", ids, _ConvMap(), ())  # read from the file
    assert np.array_equal(again[0], first[0]) and np.array_equal(again[1], first[1])
    assert np.allclose(again[0].mean(1), again[1])
