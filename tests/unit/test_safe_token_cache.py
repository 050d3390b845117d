"""The SAFE token cache holds what was computed: arrays are written in C order, because
``safetensors.numpy`` writes an array's raw buffer whatever its strides."""

from __future__ import annotations

import numpy as np
from safetensors.numpy import load_file, save_file

from fedforget.tasks.safe_features import cached_tokens


class _ConvMap:
    """Stands in for a backbone whose tokens are a transposed conv map (channels vary slowest)."""

    def eval(self) -> None:
        pass


def _conv_map_tokens(n: int) -> np.ndarray:
    maps = np.arange(n * 8 * 4, dtype=np.float32).reshape(n, 8, 4)  # (N, channels, positions)
    return np.stack([m.T for m in maps])  # (N, positions, channels), not C-contiguous


def test_a_transposed_token_array_is_scrambled_by_safetensors_unless_written_in_c_order(tmp_path):
    tokens = _conv_map_tokens(3)
    assert not tokens.flags["C_CONTIGUOUS"]
    save_file({"tokens": tokens}, str(tmp_path / "raw.safetensors"))
    assert not np.array_equal(load_file(str(tmp_path / "raw.safetensors"))["tokens"], tokens)  # the mismatch
    save_file({"tokens": np.ascontiguousarray(tokens)}, str(tmp_path / "c.safetensors"))
    assert np.array_equal(load_file(str(tmp_path / "c.safetensors"))["tokens"], tokens)


def test_cached_tokens_read_back_equal_to_what_was_computed(tmp_path, monkeypatch):
    import fedforget.tasks.safe_features as features

    tokens = _conv_map_tokens(5)
    pooled = tokens.mean(1)
    monkeypatch.setattr(features, "compute_tokens", lambda module, inputs: (tokens, pooled))
    ids = [7, 3, 11, 5, 2]
    first = cached_tokens(tmp_path, "train-x", "sha", ids, _ConvMap(), ())
    again = cached_tokens(tmp_path, "train-x", "sha", ids, _ConvMap(), ())  # read from the file
    assert np.array_equal(again[0], first[0]) and np.array_equal(again[1], first[1])
    assert np.allclose(again[0].mean(1), again[1])
