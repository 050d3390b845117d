"""Frozen backbone tokens for SAFE, computed once per client and cached in its state dir.

Tokens are read where the backbone still has a spatial map: EfficientNet-Lite0's last feature map
(2×2 tokens × 1280 at 64 px), the small CNN's conv2 map (7×7 × 32), MiniLM's last hidden states (48
word pieces × 384, padding rows set to NaN so θ masks them), else the pooled feature vector as a single
token (digits-mlp). The pooled vector (mean of the tokens for the CNNs, which is exactly the
backbone's own global pooling) feeds the prototypes.

Each sample goes through the backbone alone (batch of one), so its tokens do not depend on which other
samples a node still holds: a node that deleted data yields bit-identical tokens for the rest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from torch import nn

from fedforget.store.atomic import atomic_write_bytes
from fedforget.store.secret_files import mkdir_private
from fedforget.training.determinism import deterministic_torch

CACHE_PREFIX = "safe-features-"


def _tokens_of(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    net = getattr(module, "net", None)
    if net is not None and hasattr(net, "forward_features"):  # fmnist-effnet (FmnistLite0)
        from fedforget.tasks.effnet import FMNIST_MEAN, FMNIST_STD, INPUT_SIZE, LITE_MEAN, LITE_STD

        grey = inputs[0] * FMNIST_STD + FMNIST_MEAN
        grey = nn.functional.interpolate(grey, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False)
        fmap = net.forward_features(((grey - LITE_MEAN) / LITE_STD).expand(-1, 3, -1, -1))
        tokens = fmap.flatten(2).transpose(1, 2)
        return tokens, tokens.mean(1)
    if hasattr(module, "conv2") and hasattr(module, "conv1"):  # fmnist-cnn (SmallCNN)
        x = torch.max_pool2d(torch.relu(module.conv1(inputs[0])), 2)
        x = torch.max_pool2d(torch.relu(module.conv2(x)), 2)
        tokens = x.flatten(2).transpose(1, 2)
        return tokens, module(inputs[0])
    if hasattr(module, "transformer"):  # rt-minilm (MeanPooledEncoder): every word-piece token, padding as NaN
        from fedforget.tasks.text import masked_mean

        ids, mask = inputs[0], inputs[1]
        hidden = module.transformer(input_ids=ids, attention_mask=mask).last_hidden_state
        return hidden.masked_fill(mask[..., None] == 0, float("nan")), masked_mean(hidden, mask)
    pooled = module(*inputs)
    return pooled[:, None, :], pooled


def compute_tokens(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(N, T, D) float32 tokens and (N, D) pooled features, one sample at a time, both C-contiguous.

    A conv map's tokens are a transposed view (channels vary slowest); ``np.stack`` keeps that layout, and
    ``safetensors.numpy`` writes an array's raw buffer whatever its strides, so a non-contiguous array
    would be cached scrambled (tokens whose mean is no longer the pooled vector).
    """
    module.eval()
    toks, pools = [], []
    with deterministic_torch(), torch.no_grad():
        for i in range(len(inputs[0])):
            t, p = _tokens_of(module, tuple(x[i : i + 1] for x in inputs))
            toks.append(t[0].float().numpy())
            pools.append(p[0].float().numpy())
    if not toks:
        return np.zeros((0, 1, 1), np.float32), np.zeros((0, 1), np.float32)
    return np.ascontiguousarray(np.stack(toks)), np.ascontiguousarray(np.stack(pools))


#: Part of every cache file's name: files written before the cache stored C-contiguous arrays (scrambled
#: conv-map tokens) have other names, so they are never read again and the next write removes them.
CACHE_FORMAT = "c-order"


def cache_key(kind: str, weights_sha256: str, ids: Sequence[int]) -> str:
    h = hashlib.sha256(f"{CACHE_FORMAT}|{kind}|{weights_sha256}|".encode())
    h.update(np.asarray(sorted(ids), dtype=np.int64).tobytes())
    return h.hexdigest()[:24]


def cached_tokens(folder: Path, kind: str, weights_sha256: str, ids: Sequence[int], module: nn.Module,
                  inputs: tuple[torch.Tensor, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of ``ids`` (rows in that order), from ``folder`` or computed and saved there.

    Another cache file of the same ``kind`` is removed when a new one is written: after a node deletes
    samples, the features of the deleted samples go too.
    """
    folder = Path(folder)
    key = cache_key(kind, weights_sha256, ids)
    path = folder / f"{CACHE_PREFIX}{kind}-{key}.safetensors"
    if path.is_file():
        data = load_file(str(path))
        order = {int(i): r for r, i in enumerate(data["ids"].tolist())}
        rows = [order[int(i)] for i in ids]
        return data["tokens"][rows], data["pooled"][rows]
    tokens, pooled = compute_tokens(module, inputs)
    mkdir_private(folder)
    for old in folder.glob(f"{CACHE_PREFIX}{kind}-*.safetensors"):
        old.unlink()
    tmp = path.with_suffix(".tmp")
    save_file({"tokens": np.ascontiguousarray(tokens), "pooled": np.ascontiguousarray(pooled),
               "ids": np.asarray(ids, dtype=np.int64)}, str(tmp))
    atomic_write_bytes(path, tmp.read_bytes())
    tmp.unlink()
    return tokens, pooled

