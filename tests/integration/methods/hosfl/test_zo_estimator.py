"""The ZO math of HO-SFL on real split models: split equivalence, estimator moments, bit-exact replay."""

import pytest
import torch
from torch import nn

from fedforget.core.config import parse_run_config
from fedforget.methods.hosfl import zo
from fedforget.methods.hosfl.plan import round_seeds
from fedforget.methods.hosfl.split_model import build_split_model
from fedforget.training.determinism import deterministic_torch


def _split(task="digits-mlp", cut=1, **kw):
    return build_split_model(parse_run_config({"method": "hosfl", "task": task, "hosfl.cut": cut, **kw}), 10)


@pytest.mark.parametrize(("task", "cut", "shape"), [("digits-mlp", 1, (4, 64)), ("digits-mlp", 2, (4, 64)),
                                                    ("fmnist-cnn", 2, (4, 1, 28, 28))])
def test_server_after_client_is_the_full_model(task, cut, shape):
    split = _split(task, cut)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(split.server(*split.client(x)), split.full(x))
    assert split.d_c > 0 and not any(p.requires_grad for _, p in split.client_params)
    assert all("lora_" in n for n in split.client_names)


def test_rt_minilm_cut_after_three_layers_matches_the_full_model():
    cfg = parse_run_config({"method": "hosfl", "task": "rt-minilm", "hosfl.cut": 3})
    split = build_split_model(cfg, 2)
    from fedforget.tasks.text import minilm_path, tokenize

    ids, mask = tokenize(["a fine film", "dull and far too long, with nothing to say"], str(minilm_path()))
    with torch.no_grad():
        z, m = split.client(ids, mask)
        assert z.shape == (2, ids.shape[1], 384)
        torch.testing.assert_close(split.server(z, m), split.full(ids, mask), rtol=1e-5, atol=1e-5)
    # LoRA on query and value of the three client layers only: 3 layers x 2 modules x (A + B)
    assert len(split.client_params) == 12
    assert all(f"layer.{i}." not in n for n in split.client_names for i in (3, 4, 5))


def _linear_client(d_in=10, d_out=5):
    lin = nn.Linear(d_in, d_out, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(d_out, d_in, generator=torch.Generator().manual_seed(1)))
    return lin, ["weight"], lin.weight.detach().reshape(-1).clone()


def test_v_over_mu_is_the_directional_derivative_on_a_linear_client():
    lin, names, theta = _linear_client()
    x = torch.randn(8, 10, generator=torch.Generator().manual_seed(2))
    lam = torch.randn(8, 5, generator=torch.Generator().manual_seed(3))
    z = zo.forward_at(lin, names, theta, (x,))
    g = (lam.T @ x).reshape(-1)  # ∇_θ <λ, Wx>
    seeds = [11, 12, 13]
    v = zo.zo_scalars(lin, names, theta, (x,), z, lam, seeds, mu=1e-2)
    for s, vp in zip(seeds, v, strict=True):
        expected = float(zo.direction(s, theta.numel()).double() @ g.double())
        assert vp / 1e-2 == pytest.approx(expected, rel=1e-3, abs=1e-3)


def test_estimator_is_unbiased_with_the_gaussian_second_moment_on_a_linear_client():
    """E ĝ = g and E‖ĝ‖²/‖g‖² = 1 + (d_c + 1)/P (Eq. 41) with d_c = 50, P = 5."""
    lin, names, theta = _linear_client(10, 5)
    d, p_dirs, mu, draws = theta.numel(), 5, 1e-2, 3000
    x = torch.randn(8, 10, generator=torch.Generator().manual_seed(4))
    lam = torch.randn(8, 5, generator=torch.Generator().manual_seed(5))
    z = zo.forward_at(lin, names, theta, (x,))
    g = (lam.T @ x).reshape(-1).double()
    # every draw goes through the real code path (3000 x 5 tiny forwards)
    mean = torch.zeros(d, dtype=torch.float64)
    second = 0.0
    for n in range(draws):
        seeds = round_seeds(7, "unbiased", n, p_dirs)
        v = zo.zo_scalars(lin, names, theta, (x,), z, lam, seeds, mu)
        ghat = zo.zo_gradient(seeds, v, mu, d)
        mean += ghat / draws
        second += float(ghat @ ghat) / draws
    ratio = second / float(g @ g)
    assert ratio == pytest.approx(1 + (d + 1) / p_dirs, rel=0.06)  # 11.2
    rel_err = float((mean - g).norm() / g.norm())
    assert rel_err < 3 * ((d + 1) / (p_dirs * draws)) ** 0.5  # ≈ 0.058 for these sizes
    # the wrong scale (forgetting 1/μ) is far off: the check can fail
    assert second * mu**2 / float(g @ g) < 0.5


def test_mean_zo_gradient_points_along_the_true_client_gradient_of_a_real_split_model():
    split = _split("digits-mlp", 1)
    theta = split.client_vector()
    # LoRA B starts at 0: move it off zero so both A and B have a gradient
    theta = theta + 0.05 * torch.randn(theta.numel(), generator=torch.Generator().manual_seed(8))
    x = torch.rand(16, 64, generator=torch.Generator().manual_seed(9))
    y = torch.arange(16) % 10
    names = split.client_names
    with deterministic_torch():
        th = theta.clone().requires_grad_(True)
        shapes = [p.shape for _, p in split.client_params]
        params, start = {}, 0
        for n, s in zip(names, shapes, strict=True):
            k = int(torch.Size(s).numel())
            params[n] = th[start : start + k].view(s)
            start += k
        z = torch.func.functional_call(split.client, params, (x,))[0]
        zt = z.detach().requires_grad_(True)
        nn.functional.cross_entropy(split.server(zt), y).backward()
        lam = zt.grad
        (g,) = torch.autograd.grad((z * lam).sum(), th)
    zc = zo.forward_at(split.client, names, theta, (x,))
    mean = torch.zeros(theta.numel(), dtype=torch.float64)
    for n in range(300):
        seeds = round_seeds(3, "align", n, 20)
        mean += zo.zo_gradient(seeds, zo.zo_scalars(split.client, names, theta, (x,), zc, lam, seeds, 1e-3),
                               1e-3, theta.numel())
    cos = float(nn.functional.cosine_similarity(mean, g.double(), dim=0))
    assert cos > 0.5, cos  # 6000 directions in d_c = 768: noise floor of the cosine ≈ 0.3


def _rounds(split, rounds, in_place):
    """One participant that takes part every round, and the (seeds, v̄) history it produced."""
    names, params = split.client_names, [p for _, p in split.client_params]
    theta = split.initial_client.clone()
    history = []
    for t in range(rounds):
        x = torch.rand(8, 64, generator=torch.Generator().manual_seed(100 + t))
        lam = 0.01 * torch.randn(8, 128, generator=torch.Generator().manual_seed(200 + t))
        seeds = round_seeds(1, "replay-test", t, 4)
        z = zo.forward_at(split.client, names, theta, (x,))
        if in_place:
            split.load_client_vector(theta)
            v = zo.perturbed_outputs_in_place(split.client, params, (x,), z, lam, seeds, 1e-3)
            theta = split.client_vector()  # the live parameters after perturb/un-perturb
        else:
            v = zo.zo_scalars(split.client, names, theta, (x,), z, lam, seeds, 1e-3)
        v32 = torch.tensor(v, dtype=torch.float32).tolist()
        history.append((seeds, v32))
        theta = zo.apply_update(theta, seeds, v32, 1e-3, 0.05)
    return theta, history


def test_replay_reaches_the_participants_theta_bit_for_bit():
    split = _split("digits-mlp", 1)
    participant, history = _rounds(split, 12, in_place=False)
    replayed = zo.replay(split.initial_client.clone(), history, 1e-3, 0.05)
    assert torch.equal(participant, replayed)
    halfway = zo.replay(split.initial_client.clone(), history[:5], 1e-3, 0.05)  # a client that missed 7 rounds
    assert torch.equal(zo.replay(halfway, history[5:], 1e-3, 0.05), participant)
    assert not torch.equal(participant, split.initial_client)
    assert float(participant.abs().max()) < 10  # a sane trajectory, not a diverged one


def test_in_place_perturbation_drifts_away_from_replay():
    """Negative control: the MeZO trick leaves float32 rounding in θ_c that replay does not have."""
    split = _split("digits-mlp", 1)
    participant, history = _rounds(split, 12, in_place=True)
    replayed = zo.replay(split.initial_client.clone(), history, 1e-3, 0.05)
    assert not torch.equal(participant, replayed)
    assert float((participant - replayed).abs().max()) < 1e-3  # small, but not bit-exact
