"""SAFE's own lightweight adapters: Open-InCA queries + heads on a frozen, seeded cross-attention.

Not LoRA: an InCA adapter is one learnable query ``q`` and head ``(v, b)`` per (class, clique) that
attends over frozen backbone tokens through a cross-attention whose weights θ come from a seed and
never train (paper §6, App. E). LayerNorms have no affine parameters, softmax runs over
tokens, never over queries, so every query is computed independently (Eq. 4) and sigmoid BCE keeps
each binary classifier's gradient to its own logit (App. A).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedforget.methods.safe.budget import AdapterBudget
from fedforget.training.determinism import deterministic_torch, generator

#: Width of the frozen attention (queries and tokens are projected to it); heads split it.
ATTN_WIDTH = 128
ATTN_HEADS = 4
#: Attention bias of a padding token (text): exp(−1e9) is exactly 0 in float32.
PAD_BIAS = -1e9
Params = dict[str, torch.Tensor]


class FrozenCrossAttention(nn.Module):
    """θ: seeded random W_q, W_k, W_v, W_o (buffers, never trained), identical on every node."""

    def __init__(self, dim: int, seed: int, width: int = ATTN_WIDTH, heads: int = ATTN_HEADS) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(int(seed))
        self.dim, self.width, self.heads = dim, width, heads
        for name, fan_in, fan_out in (("wq", dim, width), ("wk", dim, width), ("wv", dim, width),
                                      ("wo", width, width)):
            self.register_buffer(name, torch.randn(fan_in, fan_out, generator=g) / math.sqrt(fan_in))

    def forward(self, tokens: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """tokens (B, T, D), queries (M, D) → one output token per (sample, query): (B, M, W)."""
        return self.attend(self.keys_values(tokens), queries)

    def keys_values(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T, W + H·W + 1): keys, each head's values already through its block of W_o, and an attention
        bias, of frozen tokens under frozen θ. Computed once per node and reused by every step: they do not
        depend on the queries, the only thing that trains. Folding W_o into the values makes a step cost
        O(B·M·H·T·W) instead of O(B·M·W²), the difference between seconds and minutes at the backbone's width.

        A token row of NaNs is padding (text): its key and value are 0 and its bias is −1e9, so no query
        attends to it; real tokens get bias 0.
        """
        pad = torch.isnan(tokens).any(-1, keepdim=True)
        z = F.layer_norm(torch.where(pad, 0.0, tokens), (self.dim,))
        keys, values = (torch.where(pad, 0.0, z @ w) for w in (self.wk, self.wv))
        b, t, _ = tokens.shape
        h, dh, w = self.heads, self.width // self.heads, self.width
        folded = torch.einsum("bthd,hdw->bthw", values.reshape(b, t, h, dh), self.wo.view(h, dh, w))
        return torch.cat((keys, folded.reshape(b, t, h * w), torch.where(pad, PAD_BIAS, 0.0)), dim=-1)

    def attend(self, kv: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """Cross-attention of each query over one sample's keys/values at a time (Eq. 4: per query)."""
        b, t, _ = kv.shape
        m = queries.shape[0]
        h, dh, w = self.heads, self.width // self.heads, self.width
        q = F.layer_norm(queries, (self.dim,))
        keys, folded = kv[..., :w].reshape(b, t, h, dh), kv[..., w : w + h * w].reshape(b, t, h, w)
        qh = (q @ self.wq).view(m, h, dh)
        scores = torch.einsum("mhd,bthd->bhmt", qh, keys) / math.sqrt(dh) + kv[:, None, None, :, w + h * w]
        att = torch.softmax(scores, dim=-1)
        return F.layer_norm(torch.einsum("bhmt,bthw->bmw", att, folded), (self.width,))


def init_adapters(dim: int, count: int, seed: int, width: int = ATTN_WIDTH) -> Params:
    """Fresh queries (N(0, 1) before their LayerNorm), zero heads and biases, from the adapter's seed."""
    g = torch.Generator().manual_seed(int(seed))
    return {"queries": torch.randn(count, dim, generator=g), "heads": torch.zeros(count, width),
            "bias": torch.zeros(count)}


def adapter_logits(theta: FrozenCrossAttention, params: Params, tokens: torch.Tensor) -> torch.Tensor:
    """(B, M) logits of M binary classifiers: ``<v_i, LN(CA_θ(z, q_i))> + b_i``."""
    return kv_logits(theta, params, theta.keys_values(tokens))


def kv_logits(theta: FrozenCrossAttention, params: Params, kv: torch.Tensor) -> torch.Tensor:
    """:func:`adapter_logits` from precomputed keys/values."""
    out = theta.attend(kv, params["queries"])
    return (out * params["heads"]).sum(-1) + params["bias"]


@dataclass(frozen=True)
class AdapterSettings:
    """Epoch-based settings, used by SAFE-DP's per-class-node trainer only."""

    epochs: int
    batch_size: int
    lr: float
    optimizer: str
    seed: int
    schedule: str = "constant"
    server_round: int = 1
    rounds: int = 1


def _optimizer(params: list[torch.Tensor], name: str, lr: float) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=lr) if name == "adam" else torch.optim.SGD(params, lr=lr)


def batch_stream(held: int, batch: int, steps: range, seed: int) -> list[torch.Tensor]:
    """Row indices of each step in ``steps``: consecutive slices of seeded permutations of ``held`` rows.

    The stream is a pure function of (seed, held, batch), so the same global step reads the same rows
    whether the run has one round or many; a batch may straddle two permutations.
    """
    g = generator(seed)
    need = (steps.stop if len(steps) else 0) * batch
    order = torch.cat([torch.randperm(held, generator=g) for _ in range(math.ceil(need / held))]) if need else None
    return [order[t * batch : (t + 1) * batch] for t in steps] if order is not None else []


def train_adapters(theta: FrozenCrossAttention, start: Params, tokens: torch.Tensor, labels: torch.Tensor,
                   classes: list[int], budget: AdapterBudget, server_round: int, seed: int) -> tuple[Params, float]:
    """One round of a clique on one node: AdamW (fresh state), sigmoid BCE of its binary classifiers.

    Runs exactly ``budget.round_steps(server_round)`` steps whatever the node holds (a budget by steps,
    not passes), each on ``budget.batch(held)`` of the clique's samples here, with the cosine lr of the
    clique's global step; the data order comes from ``seed`` alone, so a clique replays bit for bit.
    """
    params = {k: v.detach().clone().requires_grad_(True) for k, v in start.items()}
    targets = (labels[:, None] == torch.as_tensor(classes)[None, :]).float()
    opt = torch.optim.AdamW(list(params.values()), lr=budget.lr, weight_decay=budget.weight_decay)
    steps = budget.round_steps(server_round)
    losses: list[float] = []
    with deterministic_torch():
        with torch.no_grad():
            kv = theta.keys_values(tokens) if len(steps) else tokens
        for step, idx in zip(steps, batch_stream(len(labels), budget.batch(len(labels)), steps, seed), strict=True):
            for group in opt.param_groups:
                group["lr"] = budget.lr_at(step)
            loss = F.binary_cross_entropy_with_logits(kv_logits(theta, params, kv[idx]), targets[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return {k: v.detach() for k, v in params.items()}, float(np.mean(losses)) if losses else 0.0


def predict_adapters(theta: FrozenCrossAttention, params: Params, tokens: torch.Tensor, batch: int = 256) -> np.ndarray:
    with deterministic_torch(), torch.no_grad():
        chunks = [adapter_logits(theta, params, tokens[s : s + batch]) for s in range(0, len(tokens), batch)]
    return torch.cat(chunks).double().numpy() if chunks else np.zeros((0, len(params["bias"])))


# -- prototypes ---------------------------------------------------------------------------------
def normalised(pooled: torch.Tensor) -> np.ndarray:
    """Per-sample L2-normalised pooled features in float64 (what prototypes sum)."""
    x = pooled.double().numpy()
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


class PrototypeBank:
    """Per-class sums of normalised features and counts (float64): O(1) exact forgetting (paper §7)."""

    def __init__(self, num_classes: int, dim: int) -> None:
        self.sums = np.zeros((num_classes, dim))
        self.counts = np.zeros(num_classes, dtype=np.int64)

    def add(self, label: int, feature_sum: np.ndarray, count: int) -> None:
        self.sums[label] += feature_sum
        self.counts[label] += count

    def forget(self, label: int, feature: np.ndarray) -> None:
        """Remove one sample: ``p ↦ (N p − f(x)) / (N − 1)`` on the sums."""
        self.sums[label] -= feature
        self.counts[label] -= 1

    def prototypes(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sums / self.counts[:, None]

    def scores(self, features: np.ndarray) -> np.ndarray:
        """Cosine similarity to each class prototype (NaN for a class with no samples left)."""
        protos = self.prototypes()
        protos = protos / np.maximum(np.linalg.norm(protos, axis=1, keepdims=True), 1e-12)
        return features @ protos.T
