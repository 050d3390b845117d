"""The zeroth-order side of HO-SFL: directions from seeds, ZO scalars, the shared update, replay.

Everything that changes θ_c is a pure function of (θ_c, seeds, v̄) computed on the CPU, so every
replica of θ_c (each client, a client replaying missed rounds, the server's shadow copy) computes the
same bits, whichever device ran its forward passes:

- ``u_p`` is ``torch.randn(d_c)`` from a CPU ``torch.Generator`` seeded with ``s_p`` (one generator
  per (seed, p); the seed already encodes the round and p), over θ_c flattened in the client
  part's parameter order. CUDA generators draw other numbers, so directions are always drawn on the
  CPU and only moved to the forward's device.
- The perturbed forward runs on a **copy** ``θ_c + μu_p`` built in the buffer that holds ``u_p``
  (one d_c-sized buffer per perturbation, reused, never a float64 one); θ_c itself is never touched.
  :func:`perturbed_outputs_in_place` is the MeZO trick (θ += μu, forward, θ −= μu) kept only as the
  negative control of the bit-exactness tests: in float32 ``(θ + μu) − μu != θ``, so participants
  drift away from replicas that replay.
- ``v_p = <λ, f_c(x; θ_c + μu_p) − z>``: ``z̃`` is overwritten by ``z̃ − z`` and reduced with one
  float32 dot product, so a step holds three activation-sized tensors (z, λ, z̃) and no temporaries.
  v only travels (it is averaged by the server); its bits need not match across replicas.
- The update is ``θ_c ← θ_c − η (1/(Pμ)) Σ_p v̄_p u_p``, applied in place one direction at a time
  in the order p = 1..P (plain SGD, Algorithm 1).
- Opt-in variance reduction (``hosfl.zo-params``, ``hosfl.client-momentum``), both exact under replay:
  a **subspace** ``index`` (the positions of the client parameters the directions perturb, e.g. only
  the LoRA ``B`` factors of one layer): ``u_p`` is ``direction(s_p, k)`` over those k entries and zero
  elsewhere, so the ZO error scales with √(k/P) instead of √(d_c/P); and **heavy-ball momentum**
  ``m ← βm + ĝ, θ_c ← θ_c − ηm``, m a k-sized CPU float32 buffer every replica rebuilds from the same
  (seeds, v̄) in the same order. Without them (``index=None``, β = 0) the code path and its bits are
  the plain update's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call

from fedforget.training.determinism import deterministic_torch

#: A client forward pass: flat θ_c (CPU, float32) → the cut-layer activations z.
ClientForward = Callable[[torch.Tensor], torch.Tensor]


def direction(seed: int, d: int) -> torch.Tensor:
    """u ~ N(0, I_d), float32, from its own CPU generator (the same bits on every machine)."""
    return torch.randn(d, generator=torch.Generator().manual_seed(int(seed)), dtype=torch.float32)


#: Positions in flat θ_c that the directions perturb (sorted int64), or None for all of θ_c.
Index = torch.Tensor | None


def subspace_index(names: Sequence[str], numels: Sequence[int], spec: str) -> Index:
    """The flat positions of the client parameters whose name contains one of ``spec``'s comma-separated
    substrings (``hosfl.zo-params``); ``""`` → None (every entry of θ_c). Raises if nothing matches."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        return None
    chunks, start = [], 0
    for name, n in zip(names, numels, strict=True):
        if any(p in name for p in parts):
            chunks.append(torch.arange(start, start + int(n), dtype=torch.int64))
        start += int(n)
    if not chunks:
        raise ValueError(f"hosfl.zo-params={spec!r} matches none of the client parameters: {', '.join(names)}")
    return torch.cat(chunks)


def subspace_dim(theta: torch.Tensor, index: Index) -> int:
    return theta.numel() if index is None else int(index.numel())


def perturbed(theta: torch.Tensor, seed: int, mu: float, index: Index = None) -> torch.Tensor:
    """``θ + μu`` in the one buffer that held ``u``; θ untouched. With ``index``, u is zero outside it."""
    if index is None:
        return direction(seed, theta.numel()).mul_(mu).add_(theta)
    out = theta.clone()
    out.index_add_(0, index, direction(seed, int(index.numel())), alpha=mu)
    return out


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
    """``f_c(x; θ)`` with θ given as a flat vector, on views of θ (no copy); the first output."""
    params = dict(module.named_parameters())
    shapes = [params[n].shape for n in names]
    device = params[names[0]].device
    return _as_tuple(functional_call(module, _params(names, theta.to(device), shapes), inputs))[0]


def projection(lam: torch.Tensor, z_tilde: torch.Tensor, z: torch.Tensor) -> float:
    """``<λ, z̃ − z>`` over batch and features; **overwrites** ``z̃`` with ``z̃ − z``."""
    return float(torch.dot(lam.reshape(-1), z_tilde.sub_(z).reshape(-1)))


@torch.no_grad()
def scalars(forward: ClientForward, theta: torch.Tensor, z: torch.Tensor, lam: torch.Tensor,
            seeds: Sequence[int], mu: float, index: Index = None) -> list[float]:
    """Algorithm 2 over any client forward: P perturbed forwards, ``v_p = λᵀ(f_c(θ + μu_p) − z)``."""
    lam = lam.to(z.device)
    with deterministic_torch():
        return [projection(lam, forward(perturbed(theta, s, mu, index)), z) for s in seeds]


@torch.no_grad()
def zo_scalars(module: nn.Module, names: Sequence[str], theta: torch.Tensor, inputs: tuple[torch.Tensor, ...],
               z: torch.Tensor, lam: torch.Tensor, seeds: Sequence[int], mu: float) -> list[float]:
    """Algorithm 2 on a module: ``v_p = λᵀ(f_c(x; θ + μu_p) − z)`` for each seed, θ left untouched."""
    return scalars(lambda th: forward_at(module, names, th, inputs), theta, z, lam, seeds, mu)


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
                chunks.append(u[start : start + p.numel()].view_as(p).to(p.device))
                start += p.numel()
            for p, c in zip(params, chunks, strict=True):
                p.add_(mu * c)
            z_tilde = _as_tuple(module(*inputs))[0]
            for p, c in zip(params, chunks, strict=True):
                p.sub_(mu * c)
            out.append(projection(lam, z_tilde, z))
    return out


def zo_gradient(seeds: Sequence[int], vbar: Sequence[float], mu: float, d: int) -> torch.Tensor:
    """``ĝ = (1/(Pμ)) Σ_p v̄_p u_p`` (Eq. 19 / 22), float32; for analysis (the update never builds it)."""
    scale = 1.0 / (len(seeds) * mu)
    g = torch.zeros(d, dtype=torch.float32)
    for s, v in zip(seeds, vbar, strict=True):
        g.add_(direction(s, d), alpha=float(v) * scale)
    return g


def apply_update(theta: torch.Tensor, seeds: Sequence[int], vbar: Sequence[float], mu: float,
                 lr: float, index: Index = None, momentum: float = 0.0,
                 buf: torch.Tensor | None = None) -> torch.Tensor:
    """θ ← θ − η ĝ **in place** on the CPU tensor θ (returned); the same bits for every replica.

    One direction at a time, so the update needs one d_c buffer whatever P is; ``lr == 0`` leaves θ
    bit-identical (the frozen-client control). With ``index`` the directions live in that subspace;
    with ``momentum`` β > 0, ``buf`` (k entries, updated in place) is the heavy-ball buffer m:
    ``m ← βm + ĝ``, ``θ[index] ← θ[index] − ηm``.
    """
    if lr == 0.0:
        return theta
    if momentum == 0.0 and index is None:  # the plain update (Algorithm 1): the original bits
        scale = lr / (len(seeds) * mu)
        with deterministic_torch():
            for s, v in zip(seeds, vbar, strict=True):
                theta.add_(direction(s, theta.numel()), alpha=-float(v) * scale)
        return theta
    k = subspace_dim(theta, index)
    with deterministic_torch():
        if momentum == 0.0:
            scale = lr / (len(seeds) * mu)
            for s, v in zip(seeds, vbar, strict=True):
                theta.index_add_(0, index, direction(s, k), alpha=-float(v) * scale)  # type: ignore[arg-type]
            return theta
        if buf is None or buf.numel() != k:
            raise ValueError(f"momentum needs a buffer of {k} entries")
        buf.mul_(momentum)
        scale = 1.0 / (len(seeds) * mu)
        for s, v in zip(seeds, vbar, strict=True):
            buf.add_(direction(s, k), alpha=float(v) * scale)
        if index is None:
            theta.add_(buf, alpha=-lr)
        else:
            theta.index_add_(0, index, buf, alpha=-lr)
    return theta


def replay(theta: torch.Tensor, history: Sequence[tuple[Sequence[int], Sequence[float]]], mu: float,
           lr: float, index: Index = None, momentum: float = 0.0,
           buf: torch.Tensor | None = None) -> torch.Tensor:
    """Algorithm 3: apply the (seeds, v̄) of each missed round in order (in place on θ and ``buf``)."""
    for seeds, vbar in history:
        theta = apply_update(theta, seeds, vbar, mu, lr, index, momentum, buf)
    return theta
