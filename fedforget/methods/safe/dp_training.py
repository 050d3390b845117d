"""SAFE-DP (paper §8, App. A): one binary classifier per class node, its own node's samples used
directly (Adam), the clique neighbours' samples only through DP-SGD (opacus: per-sample gradients,
clipping, Gaussian noise, and the RDP accountant that sets the noise for (ε, δ) over the whole run).

Every step takes one batch of positives (non-private) and one Poisson-sampled batch of negatives
(private): each negative joins each DP step independently with probability q, the rate the RDP
accountant is given. The Poisson draws and the noise come from generators seeded by the node's secret,
so a retrain on that node replays them exactly and nobody else can.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedforget.core.config import RunConfig
from fedforget.methods.safe.adapters import AdapterSettings, FrozenCrossAttention, Params, _optimizer
from fedforget.methods.safe.dp import clique_sampling
from fedforget.training.determinism import deterministic_torch, generator


class BinaryInCA(nn.Module):
    """One class node's query + head on the frozen θ (θ is a buffer holder, never trained)."""

    def __init__(self, theta: FrozenCrossAttention, params: Params) -> None:
        super().__init__()
        self.__dict__["theta"] = theta  # not a submodule: opacus refuses trainable layers holding buffers
        self.queries = nn.Parameter(params["queries"].clone())
        self.heads = nn.Parameter(params["heads"].clone())
        self.bias = nn.Parameter(params["bias"].clone())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out = self.theta(tokens, self.queries)
        return (out * self.heads).sum(-1)[:, 0] + self.bias


@lru_cache(maxsize=256)
def noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """σ such that ``steps`` DP-SGD steps at ``sample_rate`` are (ε, δ)-DP (opacus RDP accountant)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=min(1.0, sample_rate),
                                      steps=max(1, steps), accountant="rdp"))


def train_dp_adapter(theta: FrozenCrossAttention, start: Params, tokens: torch.Tensor, labels: torch.Tensor,
                     positive: int, clique_classes: list[int], settings: AdapterSettings, cfg: RunConfig,
                     num_rounds: int, private_seed: int) -> tuple[Params, float]:
    """One local round of SAFE-DP for the adapter of class ``positive`` on this node's clique data.

    ``private_seed`` (from the node's secret) drives both the Poisson draws of the negatives and the
    Gaussian noise; the positives' order comes from the public ``settings.seed`` (they are used directly).
    """
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    pos = torch.nonzero(labels == positive).flatten()
    neg = torch.nonzero(labels != positive).flatten()
    batch = settings.batch_size
    counts = [int((labels == c).sum()) for c in clique_classes]
    sampling = clique_sampling(counts, batch, num_rounds, settings.epochs)
    steps_per_epoch = sampling.steps_per_epoch if sampling else max(math.ceil(len(pos) / batch), 1)
    model = GradSampleModule(BinaryInCA(theta, start), batch_first=True, loss_reduction="sum",
                             force_functorch=True)
    params = [model._module.queries, model._module.heads, model._module.bias]
    direct = _optimizer(params, settings.optimizer, settings.lr)
    private = None
    noise, draws = generator(private_seed), generator(private_seed + 1)
    if len(neg) and sampling is not None:
        sigma = noise_multiplier(cfg.safe.dp_epsilon, cfg.safe.dp_delta, sampling.sample_rate, sampling.composed_steps)
        private = DPOptimizer(torch.optim.SGD(params, lr=settings.lr), noise_multiplier=sigma,
                              max_grad_norm=cfg.safe.dp_clip, expected_batch_size=sampling.sample_rate * len(neg),
                              loss_reduction="mean", generator=noise)
    losses: list[float] = []
    with deterministic_torch(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # opacus' full-backward-hook notice on frozen inputs
        g = generator(settings.seed)
        for _ in range(settings.epochs):
            pos_order = pos[torch.randperm(len(pos), generator=g)]
            for step in range(steps_per_epoch):
                if len(pos):
                    idx = pos_order[torch.arange(step * batch, (step + 1) * batch) % len(pos)]
                    model.disable_hooks()
                    loss = F.binary_cross_entropy_with_logits(model(tokens[idx]), torch.ones(len(idx)))
                    direct.zero_grad()
                    loss.backward()
                    direct.step()
                    direct.zero_grad()
                    losses.append(float(loss.detach()))
                    model.enable_hooks()
                if private is not None:
                    chunk = neg[poisson_mask(len(neg), sampling.sample_rate, draws)]
                    loss = F.binary_cross_entropy_with_logits(model(tokens[chunk]), torch.zeros(len(chunk)),
                                                              reduction="sum")
                    private.zero_grad()
                    loss.backward()
                    private.step()
                    private.zero_grad()
                    if len(chunk):
                        losses.append(float(loss.detach()) / len(chunk))
    out = {"queries": params[0].detach().clone(), "heads": params[1].detach().clone(),
           "bias": params[2].detach().clone()}
    return out, float(np.mean(losses)) if losses else 0.0


def poisson_mask(size: int, rate: float, draws: torch.Generator) -> torch.Tensor:
    """Each of ``size`` samples joins this step's batch independently with probability ``rate``."""
    return torch.rand(size, generator=draws) < rate
