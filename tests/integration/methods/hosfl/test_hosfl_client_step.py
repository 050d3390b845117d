"""The HO-SFL client step itself: its message pattern, forward count, memory and the frozen control."""

from __future__ import annotations

import torch
from flwr.app import Context, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from torch.utils._python_dispatch import TorchDispatchMode

from fedforget.client_app import app as client_app
from fedforget.core.config import ConfigError, parse_run_config
from fedforget.federation.carried_config import RUN_CONFIG_RECORD
from fedforget.inprocess import InProcessGrid, default_run_config
from fedforget.methods.hosfl import client as hosfl_client
from fedforget.methods.hosfl import zo
from fedforget.methods.hosfl.plan import local_steps
from fedforget.methods.hosfl.split_model import build_split_model
from fedforget.server_app import app as server_app
from fedforget.store import Store
from tests.integration.helpers import train_in_process

SPLIT = {"task": "digits-mlp", "partitioner": "iid", "lr": 0.02, "hosfl.client-lr": 0.01, "train-size": 600,
         "test-size": 200}


class RecordingGrid(InProcessGrid):
    """Keeps (message type, record name → array keys) of every message the server sends."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.sent: list[tuple[str, dict[str, list[str]]]] = []

    def push_messages(self, messages):  # noqa: ANN001, ANN201
        messages = list(messages)
        for msg in messages:
            self.sent.append((msg.metadata.message_type, {k: sorted(v.keys()) for k, v in msg.content.items()}))
        return super().push_messages(messages)


def _recorded_run(tmp_path, **overrides: object) -> RecordingGrid:
    config = {**default_run_config(), **SPLIT, "method": "hosfl", "store": str(tmp_path / "s"), **overrides}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, InProcessGrid.SERVER_NODE_ID, 1
    grid = RecordingGrid(client_app, 3, config)
    server_app(grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config))
    return grid


def test_seeds_travel_at_round_start_and_the_zo_message_carries_only_lambda(tmp_path):
    grid = _recorded_run(tmp_path, **{"num-rounds": 2, "hosfl.clients-per-round": 2, "hosfl.eval-every": 2})
    forwards = [rec for kind, rec in grid.sent if kind == "train.forward"]
    zos = [rec for kind, rec in grid.sent if kind == "train.zo"]
    assert len(forwards) == len(zos) == 4
    assert all("seeds" in rec["aggregation"] for rec in forwards)
    # beside the run's config, which every message carries (no tensor), the ZO message holds λ alone
    assert all(set(rec) == {"control", "feedback", RUN_CONFIG_RECORD} and rec["feedback"] == ["lambda"]
               for rec in zos)


def test_a_client_runs_one_plus_p_forwards_per_round(tmp_path, monkeypatch):
    calls: list[int] = []
    original = hosfl_client._Round.forward

    def counting(self, theta):  # noqa: ANN001, ANN202
        calls.append(self.round)
        return original(self, theta)

    monkeypatch.setattr(hosfl_client._Round, "forward", counting)
    p, k, rounds = 4, 2, 3
    train_in_process(tmp_path / "s", 3, **SPLIT, method="hosfl", **{"hosfl.perturbations": p},
                     **{"num-rounds": rounds, "hosfl.clients-per-round": k, "hosfl.eval-every": rounds})
    assert len(calls) == rounds * k * (1 + p)


class _Allocations(TorchDispatchMode):
    """Every tensor an op creates: dtype and bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[torch.dtype, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.made.append((t.dtype, t.numel() * t.element_size()))
        return out


def test_the_zo_step_makes_no_float64_tensor_and_nothing_bigger_than_one_activation():
    cfg = parse_run_config({"method": "hosfl", "task": "fmnist-cnn", "hosfl.cut": 2})
    split = build_split_model(cfg, 10)
    x = torch.randn(16, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    theta = split.initial_client.clone()
    z = zo.forward_at(split.client, split.client_names, theta, (x,))
    lam = torch.randn(z.shape, generator=torch.Generator().manual_seed(1))
    with _Allocations() as seen:
        v = zo.zo_scalars(split.client, split.client_names, theta, (x,), z, lam, [1, 2, 3], 1e-3)
        zo.apply_update(theta, [1, 2, 3], v, 1e-3, 0.01)
    assert seen.made and not [d for d, _ in seen.made if d == torch.float64]
    # the client's own first-layer output (B x 16 x 28 x 28) is the largest thing a forward makes
    assert max(n for _, n in seen.made) <= 16 * 16 * 28 * 28 * 4


def test_client_lr_zero_freezes_every_client_and_the_shadow(tmp_path):
    store = train_in_process(tmp_path / "s", 3, **{**SPLIT, "hosfl.client-lr": 0.0}, method="hosfl",
                             **{"num-rounds": 3, "hosfl.clients-per-round": 2, "hosfl.eval-every": 3})
    manifest = store.manifest()
    cfg = parse_run_config(manifest["config"])
    split = build_split_model(cfg, 10)
    tag = manifest["split"]["run-tag"]
    for part in range(3):
        path = store.root / "clients" / str(part) / f"split-{tag}.safetensors"
        if path.is_file():
            assert torch.equal(hosfl_client.load_state(path, split.initial_client)[0], split.initial_client)
    rows = store.metrics()
    assert rows[-1]["bytes"]["up"]["aggregation"] == 2 * 5 * 4  # the same protocol, scalars still sent


def test_negative_client_lr_is_refused():
    with __import__("pytest").raises(ConfigError, match="'hosfl.client-lr' must be >= 0"):
        parse_run_config({"method": "hosfl", "task": "digits-mlp", "hosfl.client-lr": -0.1})


def test_sfl_runs_a_local_epoch_per_round_against_per_client_server_copies(tmp_path):
    store = train_in_process(tmp_path / "s", 3, **SPLIT, method="sfl",
                             **{"num-rounds": 2, "hosfl.clients-per-round": 2, "hosfl.eval-every": 2,
                                "local-epochs": 1})
    rows = store.metrics()[1:]
    per_client = 600 // 3  # iid partitions of the 600-sample train pool
    steps = local_steps(per_client, 32, 1)
    for row in rows:
        assert row["local-steps"] == steps
        assert row["samples"] == 2 * per_client
        assert row["bytes"]["up"]["activations"] == 2 * (per_client * 128 * 4 + per_client * 8)
    assert Store.open(tmp_path / "s").metrics()[-1]["accuracy"] > 0.3


def test_device_auto_runs_split_forwards_on_the_cpu_without_a_gpu_and_cuda_is_refused_there():
    from fedforget.methods.hosfl.split_model import split_device

    assert split_device(parse_run_config({"method": "hosfl", "task": "digits-mlp"})).type == (
        "cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with __import__("pytest").raises(ConfigError, match="no CUDA device is visible"):
            split_device(parse_run_config({"method": "hosfl", "task": "digits-mlp", "hosfl.device": "cuda"}))


def test_directions_are_drawn_on_the_cpu_whatever_the_forward_device():
    u = zo.direction(123, 1000)
    assert u.device.type == "cpu" and u.dtype == torch.float32
    theta = torch.zeros(1000)
    assert torch.equal(zo.perturbed(theta, 123, 0.5), 0.5 * u)
    assert theta.abs().sum() == 0  # θ untouched
