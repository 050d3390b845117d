"""The zeroth-order side of HO-SFL: directions from seeds, ZO scalars, the shared update, replay.

Everything here is a pure function of its inputs on one CPU thread, so every replica of θ_c (each
client, a client replaying missed rounds, the server's shadow copy) computes the same bits:

- ``u_p`` is ``torch.randn(d_c)`` from a CPU ``torch.Generator`` seeded with ``s_p`` (one generator
  per (seed, p); the seed already encodes the round and p), over θ_c flattened in the client
  part's parameter order.
- The perturbed forward runs on a **copy** (``torch.func.functional_call`` with θ_c + μu_p); θ_c
  itself is never touched. :func:`perturbed_outputs_in_place` is the MeZO trick (θ += μu, forward,
  θ −= μu) kept only as the negative control of the bit-exactness tests: in float32
  ``(θ + μu) − μu != θ``, so participants drift away from replicas that replay.
- ``v_p = <λ, f_c(x; θ_c + μu_p) − z>`` is accumulated in float64 and sent as float32.
- The update is ``θ_c ← θ_c − η · (1/(Pμ)) Σ_p v̄_p u_p`` (plain SGD, Algorithm 1), accumulated in
  float64 in the order p = 1..P and applied once in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call

from fedforget.training.determinism import deterministic_torch


def direction(seed: int, d: int) -> torch.Tensor:
    """u ~ N(0, I_d), float32, from its own CPU generator."""
    return torch.randn(d, generator=torch.Generator().manual_seed(int(seed)), dtype=torch.float32)


def _params(names: Sequence[str], theta: torch.Tensor, shapes: Sequence[torch.Size]) -> dict[str, torch.Tensor]:
    out, start = {}, 0
    for name, shape in zip(names, shapes, strict=True):
        n = 1
        for s in shape:
            n *= s
        out[name] = theta[start : start + n].view(shape)
        start += n
    return out


def _as_tuple(out: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


@torch.no_grad()
def forward_at(module: nn.Module, names: Sequence[str], theta: torch.Tensor,
               inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``f_c(x; θ)`` with θ given as a flat vector, on a copy of the parameters; the first output."""
    shapes = [dict(module.named_parameters())[n].shape for n in names]
    return _as_tuple(functional_call(module, _params(names, theta, shapes), inputs))[0]


def projection(lam: torch.Tensor, z_tilde: torch.Tensor, z: torch.Tensor) -> float:
    """``<λ, z̃ − z>`` summed over batch and features, in float64."""
    return float((lam.double() * (z_tilde.double() - z.double())).sum())


@torch.no_grad()
def zo_scalars(module: nn.Module, names: Sequence[str], theta: torch.Tensor, inputs: tuple[torch.Tensor, ...],
               z: torch.Tensor, lam: torch.Tensor, seeds: Sequence[int], mu: float) -> list[float]:
    """Algorithm 2: ``v_p = λᵀ(f_c(x; θ + μu_p) − z)`` for each seed, θ left untouched."""
    with deterministic_torch():
        return [projection(lam, forward_at(module, names, theta + mu * direction(s, theta.numel()), inputs), z)
                for s in seeds]


@torch.no_grad()
def perturbed_outputs_in_place(module: nn.Module, params: Sequence[nn.Parameter], inputs: tuple[torch.Tensor, ...],
                               z: torch.Tensor, lam: torch.Tensor, seeds: Sequence[int], mu: float) -> list[float]:
    """NEGATIVE CONTROL ONLY: the same scalars with θ perturbed and un-perturbed in place.

    Leaves θ changed by float32 rounding; tests use it to show the replay check can fail.
    """
    d = sum(p.numel() for p in params)
    out = []
    with deterministic_torch():
        for s in seeds:
            u = direction(s, d)
            chunks, start = [], 0
            for p in params:
                chunks.append(u[start : start + p.numel()].view_as(p))
                start += p.numel()
            for p, c in zip(params, chunks, strict=True):
                p.add_(mu * c)
            z_tilde = _as_tuple(module(*inputs))[0]
            for p, c in zip(params, chunks, strict=True):
                p.sub_(mu * c)
            out.append(projection(lam, z_tilde, z))
    return out


def zo_gradient(seeds: Sequence[int], vbar: Sequence[float], mu: float, d: int) -> torch.Tensor:
    """``ĝ = (1/(Pμ)) Σ_p v̄_p u_p`` in float64 (Eq. 19 / 22)."""
    scale = 1.0 / (len(seeds) * mu)
    g = torch.zeros(d, dtype=torch.float64)
    for s, v in zip(seeds, vbar, strict=True):
        g += (float(v) * scale) * direction(s, d).double()
    return g


def apply_update(theta: torch.Tensor, seeds: Sequence[int], vbar: Sequence[float], mu: float,
                 lr: float) -> torch.Tensor:
    """θ ← θ − η ĝ; a new float32 tensor (the same bits for every replica)."""
    with deterministic_torch():
        return theta - (lr * zo_gradient(seeds, vbar, mu, theta.numel())).to(torch.float32)


def replay(theta: torch.Tensor, history: Sequence[tuple[Sequence[int], Sequence[float]]], mu: float,
           lr: float) -> torch.Tensor:
    """Algorithm 3: apply the (seeds, v̄) of each missed round in order."""
    for seeds, vbar in history:
        theta = apply_update(theta, seeds, vbar, mu, lr)
    return theta
