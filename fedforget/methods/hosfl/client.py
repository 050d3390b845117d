"""The client side of HO-SFL, SFL and ZO-SFL: ``train.forward``, ``train.zo`` and ``train.backprop``.

A client's state between messages (and between the new ClientApp processes a deployment starts for
every message) is one safetensors file: θ_c (flat float32) with its version (HO-SFL: the number of
history entries applied; SFL/ZO-SFL: the round whose θ_c it holds) and, within a round, what the
next phase needs: HO-SFL keeps the activations z it sent and the round's seeds (they arrive with the
round's first message), so the ZO phase runs only the P perturbed forwards (1 + P per round, not
2 + P). It lives in the node's ``state-dir`` (``--node-config``, deployment) or, in simulation, in
``<store>/clients/<partition>/``, and is named by the server's run tag so runs never mix.

Every message is answered from (message, partition, state file) only: the batch of a round (and of
SFL's local step) is drawn with a seed of (run seed, method, round, partition, epoch), so the second
phase of a round redraws exactly the batch of the first.

Forwards run on ``device`` (CUDA when visible and ``device='auto'``); θ_c, its directions and its
update stay on the CPU, so replay is bit-exact whichever device a replica used.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch.func import functional_call

from fedforget.core.config import RunConfig
from fedforget.federation.client_site import ClientSite
from fedforget.federation.messaging import PARTITION_KEY
from fedforget.methods.hosfl import zo
from fedforget.methods.hosfl.plan import entries_to_apply, local_batch_indices, local_steps
from fedforget.methods.hosfl.split_model import SplitModel, cached_split_model, split_device
from fedforget.store.atomic import atomic_write_bytes
from fedforget.store.store import Store, resolve_store_path
from fedforget.training.determinism import deterministic_torch

#: Negative control for the bit-exactness tests only: perturb θ_c in place (MeZO style) instead of
#: on a copy. Never set in a real run; tests flip it with monkeypatch.
IN_PLACE_PERTURBATION = False


# -- state ---------------------------------------------------------------------------------------
def state_path(context: Context, cfg: RunConfig, partition: int, run_tag: str) -> Path:
    """``<state-dir>/split-<tag>.safetensors`` (deployment) or under the store's client dir (simulation)."""
    state_dir = context.node_config.get("state-dir")
    root = Path(str(state_dir)) if state_dir else Store(resolve_store_path(cfg.store)).client_dir(partition)
    root.mkdir(parents=True, exist_ok=True)
    return root / f"split-{run_tag}.safetensors"


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    data = path.read_bytes()
    meta = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")]).get("__metadata__", {})
    return st_load(data), meta


def load_state(path: Path, initial: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(θ_c, version); a node that never took part starts from θ_c^0 at version 0."""
    if not path.is_file():
        return initial.clone(), 0
    tensors, meta = _read(path)
    return tensors["theta"], int(meta["version"])


def load_round_extras(path: Path) -> dict[str, torch.Tensor]:
    """What the forward phase kept for the rest of the round (HO-SFL: ``z`` and ``seeds``)."""
    tensors, _ = _read(path)
    return {k: v for k, v in tensors.items() if k != "theta"}


def load_momentum(path: Path, k: int) -> torch.Tensor:
    """The client's heavy-ball buffer m (``hosfl.client-momentum``): zeros for a node that never took part;
    it is a function of the history entries applied, so it is replayed like θ_c."""
    if path.is_file():
        tensors, _ = _read(path)
        if "momentum" in tensors:
            return tensors["momentum"]
    return torch.zeros(k, dtype=torch.float32)


def save_state(path: Path, theta: torch.Tensor, version: int, **extras: torch.Tensor) -> None:
    tensors = {"theta": theta.contiguous(), **{k: v.detach().cpu().contiguous() for k, v in extras.items()}}
    atomic_write_bytes(path, st_save(tensors, metadata={"version": str(version)}))


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM); in a deployment that is one message's client."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


# -- shared pieces -------------------------------------------------------------------------------
class _Round:
    """What a handler needs: config, partition, split model, state file, this round's batch."""

    def __init__(self, msg: Message, context: Context) -> None:
        self.site = ClientSite.from_context(context)
        self.cfg = self.site.cfg
        control = msg.content["control"]
        self.round = int(control["round"])
        self.step = int(control.get("local-step", 0))
        self.split: SplitModel = cached_split_model(self.cfg, self.site.data.num_classes, "client")
        self.device = split_device(self.cfg)
        self.path = state_path(context, self.cfg, self.site.partition, str(control["run-tag"]))
        examples = self.site.slice_examples()
        self.num_examples = len(examples)
        idx = local_batch_indices(len(examples), self.cfg.batch_size, self.cfg.seed, self.cfg.method, self.round,
                                  self.site.partition, self.step)
        batch = examples.subset(idx)
        self.inputs = tuple(x.to(self.device) for x in batch.inputs)
        self.labels = batch.labels
        #: the ZO subspace (``hosfl.zo-params``; None = all of θ_c)
        self.index = zo.subspace_index(self.split.client_names, [p.numel() for _, p in self.split.client_params],
                                       self.cfg.hosfl.zo_params) if self.cfg.method == "hosfl" else None

    def forward(self, theta: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The client part at θ (on views of θ, moved to the device): (z, *aux)."""
        names = self.split.client_names
        shapes = [p.shape for _, p in self.split.client_params]
        params = dict(zip(names, _views(theta.to(self.device), shapes), strict=True))
        with torch.no_grad(), deterministic_torch():
            return functional_call(self.split.client, params, self.inputs)

    def activations(self, out: tuple[torch.Tensor, ...], prefix: str = "") -> dict[str, torch.Tensor]:
        arrays = {f"{prefix}z": out[0].cpu().contiguous()}
        if len(out) > 1:  # text: the attention mask travels with the activations
            arrays[f"{prefix}mask"] = out[1].cpu().contiguous()
        return arrays

    def reply(self, msg: Message, records: dict[str, ArrayRecord], **control: int | float) -> Message:
        ctrl = ConfigRecord({PARTITION_KEY: self.site.partition, "round": self.round,
                             "peak-rss-mb": peak_rss_mb(), **control})
        return Message(RecordDict({**records, "control": ctrl}), reply_to=msg)

    def load_round_state(self) -> torch.Tensor:
        theta, version = load_state(self.path, self.split.initial_client)
        if version != self.round:
            raise RuntimeError(f"client state is at version {version}, not round {self.round}: "
                               "the forward phase of this round did not complete on this node")
        return theta


def _views(theta: torch.Tensor, shapes: list[torch.Size]) -> list[torch.Tensor]:
    out, start = [], 0
    for shape in shapes:
        n = int(torch.Size(shape).numel())
        out.append(theta[start : start + n].view(shape))
        start += n
    return out


def _tensor(record: ArrayRecord, key: str) -> torch.Tensor:
    return torch.from_numpy(record[key].numpy().copy())


# -- handlers --------------------------------------------------------------------------------------
def forward(msg: Message, context: Context) -> Message:
    """Phase 1: sync θ_c (HO-SFL: replay history; SFL/ZO-SFL: take the global θ_c, or SFL's local θ_c
    after its first local step), draw the batch, send the cut-layer activations and labels."""
    rnd = _Round(msg, context)
    method = rnd.cfg.method
    agg = msg.content["aggregation"] if "aggregation" in msg.content else ArrayRecord()
    control: dict[str, int] = {}
    if method == "hosfl":
        theta, version = load_state(rnd.path, rnd.split.initial_client)
        momentum = rnd.cfg.hosfl.client_momentum
        buf = load_momentum(rnd.path, zo.subspace_dim(theta, rnd.index)) if momentum > 0 else None
        history_from = int(msg.content["control"]["history-from"])
        seeds, vbar = _tensor(agg, "history-seeds"), _tensor(agg, "history-vbar")
        for i in entries_to_apply(version, history_from, len(seeds)):
            theta = zo.apply_update(theta, seeds[i].tolist(), vbar[i].tolist(), rnd.cfg.hosfl.mu,
                                    rnd.cfg.hosfl.client_lr, rnd.index, momentum, buf)
        if history_from + len(seeds) != rnd.round:
            raise RuntimeError(f"history ends at {history_from + len(seeds)}, expected round {rnd.round}")
        out = rnd.forward(theta)
        # the round's seeds came with this message: keep them and z for the ZO phase (no second z forward)
        extras = {"momentum": buf} if buf is not None else {}
        save_state(rnd.path, theta, rnd.round, z=out[0], seeds=_tensor(agg, "seeds"), **extras)
        arrays = rnd.activations(out)
    elif method == "sfl":
        if rnd.step == 0:
            theta = _tensor(agg, "theta")
            save_state(rnd.path, theta, rnd.round)
            control["local-steps"] = local_steps(rnd.num_examples, rnd.cfg.batch_size, rnd.cfg.local_epochs)
        else:
            theta = rnd.load_round_state()
        arrays = rnd.activations(rnd.forward(theta))
    else:  # zo-sfl: f_c(x; θ ± μu) with the round's shared seed
        theta = _tensor(agg, "theta")
        save_state(rnd.path, theta, rnd.round)
        u = zo.direction(int(msg.content["control"]["seed"]), theta.numel())
        arrays = {**rnd.activations(rnd.forward(theta + rnd.cfg.hosfl.mu * u), "plus-"),
                  **rnd.activations(rnd.forward(theta - rnd.cfg.hosfl.mu * u), "minus-")}
    arrays["y"] = rnd.labels.contiguous()
    return rnd.reply(msg, {"activations": ArrayRecord(arrays)}, version=rnd.round, **control)


def zo_phase(msg: Message, context: Context) -> Message:
    """Phase 3 of HO-SFL (P scalars from λ, P perturbed forwards), or ZO-SFL's client step."""
    rnd = _Round(msg, context)
    theta = rnd.load_round_state()
    cfg = rnd.cfg
    if cfg.method == "zo-sfl":
        g = float(_tensor(msg.content["feedback"], "g")[0])
        u = zo.direction(int(msg.content["control"]["seed"]), theta.numel())
        new = theta - (cfg.hosfl.client_lr * g) * u
        return rnd.reply(msg, {"aggregation": ArrayRecord({"theta": new})})
    lam = _tensor(msg.content["feedback"], "lambda").to(rnd.device)
    kept = load_round_extras(rnd.path)
    z, seeds = kept["z"].to(rnd.device), [int(s) for s in kept["seeds"].tolist()]
    if IN_PLACE_PERTURBATION:  # negative control: the live parameters are perturbed and restored
        rnd.split.load_client_vector(theta)
        v = zo.perturbed_outputs_in_place(rnd.split.client, [p for _, p in rnd.split.client_params], rnd.inputs,
                                          z, lam, seeds, cfg.hosfl.mu)
        save_state(rnd.path, rnd.split.client_vector(), rnd.round)
    else:
        v = zo.scalars(lambda th: rnd.forward(th)[0], theta, z, lam, seeds, cfg.hosfl.mu, rnd.index)
    return rnd.reply(msg, {"aggregation": ArrayRecord({"v": torch.tensor(v, dtype=torch.float32)})})


def backprop(msg: Message, context: Context) -> Message:
    """SFL's local step: back-propagate λ through the client part, one SGD step on the local θ_c;
    after the last local step of the round, send θ_c (the server averages them: SFLv1)."""
    rnd = _Round(msg, context)
    theta = rnd.load_round_state().clone().requires_grad_(True)
    lam = _tensor(msg.content["feedback"], "lambda").to(rnd.device)
    shapes = [p.shape for _, p in rnd.split.client_params]
    with deterministic_torch():
        params = dict(zip(rnd.split.client_names, _views(theta.to(rnd.device), shapes), strict=True))
        z = functional_call(rnd.split.client, params, rnd.inputs)[0]
        (grad,) = torch.autograd.grad((z * lam).sum(), theta)
        new = (theta.detach() - rnd.cfg.hosfl.client_lr * grad).contiguous()
    save_state(rnd.path, new, rnd.round)
    last = bool(int(msg.content["control"].get("last-step", 1)))
    records = {"aggregation": ArrayRecord({"theta": new})} if last else {}
    return rnd.reply(msg, records)
