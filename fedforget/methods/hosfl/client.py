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
from flwr.app import Context, Message
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch.func import functional_call

import fedforget.methods.hosfl.zo as zo
from fedforget.core.config import RunConfig
from fedforget.federation.client_site import ClientSite
from fedforget.methods.hosfl.messages import (
    Activations,
    BackpropStep,
    ClientTheta,
    Cut,
    LambdaZo,
    MalformedMessage,
    ReplayForward,
    ReplyHead,
    RoundHead,
    SpsaZo,
    ThetaForward,
    ZoScalars,
)
from fedforget.methods.hosfl.plan import entries_to_apply, local_batch_indices, local_steps, split_protocol
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

    def __init__(self, site: ClientSite, head: RoundHead, context: Context, step: int = 0) -> None:
        self.site = site
        self.cfg = self.site.cfg
        self.protocol = split_protocol(self.cfg.method)
        self.round = head.server_round
        self.step = step
        self.split: SplitModel = cached_split_model(self.cfg, self.site.data.num_classes, "client")
        self.device = split_device(self.cfg)
        self.path = state_path(context, self.cfg, self.site.partition, head.run_tag)
        examples = self.site.slice_examples()
        self.num_examples = len(examples)
        idx = local_batch_indices(len(examples), self.cfg.batch_size, self.cfg.seed, self.cfg.method, self.round,
                                  self.site.partition, self.step)
        batch = examples.subset(idx)
        self.inputs = tuple(x.to(self.device) for x in batch.inputs)
        self.labels = batch.labels
        #: the ZO subspace (``hosfl.zo-params``; None = all of θ_c)
        self.index = zo.subspace_index(self.split.client_names, [p.numel() for _, p in self.split.client_params],
                                       self.cfg.hosfl.zo_params) if self.protocol.replays_history else None

    def forward(self, theta: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The client part at θ (on views of θ, moved to the device): (z, *aux)."""
        names = self.split.client_names
        shapes = [p.shape for _, p in self.split.client_params]
        params = dict(zip(names, _views(theta.to(self.device), shapes), strict=True))
        with torch.no_grad(), deterministic_torch():
            return functional_call(self.split.client, params, self.inputs)

    @staticmethod
    def cut(out: tuple[torch.Tensor, ...]) -> Cut:
        """z and, for text, the attention mask that travels with the activations."""
        return Cut(out[0].cpu().contiguous(), out[1].cpu().contiguous() if len(out) > 1 else None)

    def head(self) -> ReplyHead:
        return ReplyHead(self.site.partition, self.round, peak_rss_mb())

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


# -- handlers --------------------------------------------------------------------------------------
def forward(msg: Message, context: Context) -> Message:
    """Phase 1: sync θ_c (HO-SFL: replay history; SFL/ZO-SFL: take the global θ_c, or SFL's local θ_c
    after its first local step), draw the batch, send the cut-layer activations and labels."""
    site = ClientSite.from_context(context)
    protocol = split_protocol(site.cfg.method)
    steps = None
    if protocol.replays_history:
        replay = ReplayForward.from_record(msg.content)
        rnd = _Round(site, replay.head, context)
        theta, version = load_state(rnd.path, rnd.split.initial_client)
        momentum = rnd.cfg.hosfl.client_momentum
        buf = load_momentum(rnd.path, zo.subspace_dim(theta, rnd.index)) if momentum > 0 else None
        history_from = replay.history_from
        seeds, vbar = replay.history_seeds, replay.history_vbar
        for i in entries_to_apply(version, history_from, len(seeds)):
            theta = zo.apply_update(theta, seeds[i].tolist(), vbar[i].tolist(), rnd.cfg.hosfl.mu,
                                    rnd.cfg.hosfl.client_lr, rnd.index, momentum, buf)
        if history_from + len(seeds) != rnd.round:
            raise RuntimeError(f"history ends at {history_from + len(seeds)}, expected round {rnd.round}")
        out = rnd.forward(theta)
        # the round's seeds came with this message: keep them and z for the ZO phase (no second z forward)
        extras = {"momentum": buf} if buf is not None else {}
        save_state(rnd.path, theta, rnd.round, z=out[0], seeds=replay.seeds, **extras)
        cut, minus = rnd.cut(out), None
    else:  # the global θ_c with the round's first message; SFL's later local steps go on from the client's own
        request = ThetaForward.from_record(msg.content)
        rnd = _Round(site, request.head, context, request.local_step)
        if rnd.step > 0:
            theta = rnd.load_round_state()
        elif request.theta is None:
            raise MalformedMessage("the round's first train.forward carries no θ_c")
        else:
            theta = request.theta
            save_state(rnd.path, theta, rnd.round)
        if protocol.local_steps:
            if rnd.step == 0:
                steps = local_steps(rnd.num_examples, rnd.cfg.batch_size, rnd.cfg.local_epochs)
            cut, minus = rnd.cut(rnd.forward(theta)), None
        else:  # zo-sfl: f_c(x; θ ± μu) with the round's shared seed
            if request.seed is None:
                raise MalformedMessage("a zo-sfl train.forward carries no round seed")
            u = zo.direction(request.seed, theta.numel())
            cut = rnd.cut(rnd.forward(theta + rnd.cfg.hosfl.mu * u))
            minus = rnd.cut(rnd.forward(theta - rnd.cfg.hosfl.mu * u))
    reply = Activations(rnd.head(), rnd.round, rnd.labels.contiguous(), cut, minus, steps)
    return Message(reply.to_record(), reply_to=msg)


def zo_phase(msg: Message, context: Context) -> Message:
    """Phase 3 of HO-SFL (P scalars from λ, P perturbed forwards), or ZO-SFL's client step."""
    site = ClientSite.from_context(context)
    if split_protocol(site.cfg.method).spsa:
        spsa = SpsaZo.from_record(msg.content)
        rnd = _Round(site, spsa.head, context)
        theta = rnd.load_round_state()
        u = zo.direction(spsa.seed, theta.numel())
        new = theta - (rnd.cfg.hosfl.client_lr * spsa.g) * u
        return Message(ClientTheta(rnd.head(), new).to_record(), reply_to=msg)
    request = LambdaZo.from_record(msg.content)
    rnd = _Round(site, request.head, context)
    theta = rnd.load_round_state()
    cfg = rnd.cfg
    lam = request.lam.to(rnd.device)
    kept = load_round_extras(rnd.path)
    z, seeds = kept["z"].to(rnd.device), [int(s) for s in kept["seeds"].tolist()]
    if IN_PLACE_PERTURBATION:  # negative control: the live parameters are perturbed and restored
        rnd.split.load_client_vector(theta)
        v = zo.perturbed_outputs_in_place(rnd.split.client, [p for _, p in rnd.split.client_params], rnd.inputs,
                                          z, lam, seeds, cfg.hosfl.mu)
        save_state(rnd.path, rnd.split.client_vector(), rnd.round)
    else:
        v = zo.scalars(lambda th: rnd.forward(th)[0], theta, z, lam, seeds, cfg.hosfl.mu, rnd.index)
    return Message(ZoScalars(rnd.head(), torch.tensor(v, dtype=torch.float32)).to_record(), reply_to=msg)


def backprop(msg: Message, context: Context) -> Message:
    """SFL's local step: back-propagate λ through the client part, one SGD step on the local θ_c;
    after the last local step of the round, send θ_c (the server averages them: SFLv1)."""
    request = BackpropStep.from_record(msg.content)
    rnd = _Round(ClientSite.from_context(context), request.head, context, request.local_step)
    theta = rnd.load_round_state().clone().requires_grad_(True)
    lam = request.lam.to(rnd.device)
    shapes = [p.shape for _, p in rnd.split.client_params]
    with deterministic_torch():
        params = dict(zip(rnd.split.client_names, _views(theta.to(rnd.device), shapes), strict=True))
        z = functional_call(rnd.split.client, params, rnd.inputs)[0]
        (grad,) = torch.autograd.grad((z * lam).sum(), theta)
        new = (theta.detach() - rnd.cfg.hosfl.client_lr * grad).contiguous()
    save_state(rnd.path, new, rnd.round)
    return Message(ClientTheta(rnd.head(), new if request.last_step else None).to_record(), reply_to=msg)
