"""``hosfl`` (HO-SFL, Algorithm 1 over Flower messages) and its baselines ``sfl`` and ``zo-sfl``.

One round of every method is two exchanges with the K sampled clients:

===========  ==========================================  ===========================================
method       ``train.forward`` → reply                   second message → reply
===========  ==========================================  ===========================================
hosfl        history (seeds, v̄) since the client's      ``train.zo``: λ_m → P scalars v_m (float32)
             version and the round's P seeds → (z, y)    (the client kept z and the seeds)
sfl          global θ_c → (z, y), then one exchange      ``train.backprop``: λ_m → the client's local
             pair per local step (``local-epochs``        SGD step; θ_c after its last step (the server
             passes over the client's data)              averages them and its per-client copies: SFLv1)
zo-sfl       global θ_c, round seed → (z₊, z₋, y)        ``train.zo``: the SPSA scalar g_m → θ_c − η g_m u
===========  ==========================================  ===========================================

HO-SFL's server back-propagates each client's batch separately (λ_m = ∂ℓ_m/∂z_m of that client's
mean loss) and steps θ_s once with the mean gradient. SFL's server keeps one copy of θ_s per client
for the round (its own optimizer), steps it on every local batch, and averages the copies at the end
(SFLv1, the paper's baseline, where non-IID client drift comes from). HO-SFL's server keeps a shadow θ_c,
updated with the same (seeds, v̄) as every client, and evaluates [θ_c; θ_s] on the test split.

Failure rule (the common one of :mod:`fedforget.federation.failover`, with no rejoin wait: a round
cannot be held for a node): each exchange waits at most ``round-timeout`` seconds. A client whose
ClientApp raised, or whose reply is malformed, NaN, oversized or claims another partition, is asked
once more; a restarted node that is already back is redone on its new node id. A client still
failing, or silent, is dropped for the rest of the round (named in the round's ``dropped``): the
round goes on with the K' clients that answered (θ_s steps on their mean gradient; v̄ is their
mean); if nobody answers, the round's update is zero; if every client raised twice, the run stops
(a bug, not a node fault). A dropped client is not behind for good: its version stays where it was,
and the next time it is sampled it replays the missed (seed, v̄) entries.

Traffic is measured on the real messages: payload bytes per record, the records being named by
kind (activations, feedback, aggregation, control), in each direction; Flower's own serialized size
(``count_bytes``) is recorded next to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from logging import INFO, WARNING

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log
from torch import nn

import fedforget.methods.hosfl.zo as zo
from fedforget.core.config import ConfigError, RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.federation.failover import FRAMING_PER_TENSOR, check_reply, exchange_redo_or_exclude
from fedforget.federation.method_strategy import Built
from fedforget.federation.run_setup import ServerRun
from fedforget.federation.units import all_units
from fedforget.methods.hosfl.messages import (
    BACKPROP,
    FORWARD,
    ZO,
    Activations,
    BackpropStep,
    ClientTheta,
    LambdaZo,
    ReplayForward,
    RoundHead,
    SpsaZo,
    ThetaForward,
    ZoScalars,
)
from fedforget.methods.hosfl.plan import History, TrafficLedger, round_seeds, sample_round, split_protocol
from fedforget.methods.hosfl.serve import SPLIT_KIND
from fedforget.methods.hosfl.split_model import Composite, cached_split_model, split_device
from fedforget.store.ledger import Ledger
from fedforget.training.determinism import deterministic_torch
from fedforget.training.supervised import evaluate

#: Reads a reply of one partition as its typed message; raises ValueError (or KeyError, TypeError) when
#: the reply is malformed.
Parse = Callable[[int, RecordDict], object]


# -- traffic ---------------------------------------------------------------------------------------
def payload_bytes(record: ArrayRecord | ConfigRecord) -> int:
    """Bytes of the values a record carries: array data, 8 per number, the length of strings."""
    if isinstance(record, ArrayRecord):
        return sum(int(a.numpy().nbytes) for a in record.values())
    total = 0
    for value in record.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, bool):
                total += 1
            elif isinstance(item, (int, float)):
                total += 8
            elif isinstance(item, str):
                total += len(item.encode("utf-8"))
            elif isinstance(item, bytes):
                total += len(item)
    return total


def count_message(ledger: TrafficLedger, msg: Message, direction: str) -> None:
    for name, record in msg.content.items():
        ledger.add(direction, name, payload_bytes(record))
        ledger.add_wire(direction, int(record.count_bytes()))


# -- the run -------------------------------------------------------------------------------------------
class SplitRun:
    """State of one HO-SFL / SFL / ZO-SFL run on the server."""

    def __init__(self, grid: Grid, run: ServerRun, watermark: int) -> None:
        self.grid, self.cfg = grid, run.cfg
        cfg = run.cfg
        nodes = run.nodes
        self.nodes = nodes
        self.partition_of = {n: p for p, n in nodes.items()}
        self.run, self.watermark = run, watermark
        self.split = cached_split_model(cfg, self.run.num_classes, "server")
        self.device = split_device(cfg)
        self.split.load_client_vector(self.split.initial_client)
        self.split.load_server_state(self.split.initial_server)
        self.theta_c = self.split.initial_client.clone()  # HO-SFL: the shadow; SFL/ZO-SFL: the global θ_c
        self.protocol = protocol = split_protocol(cfg.method)
        # HO-SFL's opt-in variance reduction: the ZO subspace and the shadow's momentum buffer
        self.zo_index = zo.subspace_index(self.split.client_names, [p.numel() for _, p in self.split.client_params],
                                          cfg.hosfl.zo_params) if protocol.replays_history else None
        self.zo_buf = (torch.zeros(zo.subspace_dim(self.theta_c, self.zo_index), dtype=torch.float32)
                       if protocol.replays_history and cfg.hosfl.client_momentum > 0 else None)
        self.server_params = [p for _, p in self.split.server_params]
        self.opt = self._optimizer()
        self.history = History()
        self.version = dict.fromkeys(nodes, 0)  # partition -> history entries it has applied (t'_m)
        # names the clients' state files: a new tag per run (a retrain too) means no client ever resumes
        # from another run's θ_c, so every run starts from θ_c^0 at version 0 like a run from scratch
        self.tag = uuid.uuid4().hex[:12]
        self.ledger = TrafficLedger()
        self.participants: set[int] = set()
        self.samples = 0
        self.peak_rss = 0.0  # the largest client peak RSS reported this round (MB)
        self.artifact = f"{cfg.method}/global"
        self.max_reply_bytes = self._reply_bound()

    def _optimizer(self, params: Sequence[torch.Tensor] | None = None) -> torch.optim.Optimizer | None:
        if self.protocol.spsa and params is None:
            return None  # ZO-SGD on both sides
        params = list(self.server_params if params is None else params)
        if self.cfg.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.cfg.lr)
        return torch.optim.SGD(params, lr=self.cfg.lr)

    # -- messaging ---------------------------------------------------------------------------------------
    def _head(self, server_round: int) -> RoundHead:
        return RoundHead(server_round, self.tag)

    def _exchange(self, msgs: dict[int, Message], phase: str, parse: Parse) -> dict[int, object]:
        """Send, wait at most ``round-timeout``; the partitions that answered cleanly, with their replies
        read by ``parse`` (a reply it cannot read is malformed)."""
        for m in msgs.values():
            count_message(self.ledger, m, "down")
        parts = list(msgs)
        replies, _ = exchange_redo_or_exclude(self.grid, self.nodes, list(msgs.values()), parts,
                                              self.cfg.round_timeout, lambda r, i: self._check(r, parts[i], parse),
                                              rejoin=0.0)
        self.partition_of = {n: p for p, n in self.nodes.items()}
        ok: dict[int, object] = {}
        for part, r in zip(parts, replies, strict=True):
            if r is None:
                continue
            ok[part] = reply = parse(part, r.content)
            count_message(self.ledger, r, "up")
            self.peak_rss = max(self.peak_rss, reply.head.peak_rss_mb)  # type: ignore[attr-defined]
        missing = sorted(set(msgs) - set(ok))
        if missing:
            log(WARNING, "fedforget: %s: partitions %s did not answer within %.0f s or failed; the round goes on "
                "with %d of %d", phase, missing, self.cfg.round_timeout, len(ok), len(msgs))
        return dict(sorted(ok.items()))

    def _check(self, reply: Message, part: int, parse: Parse) -> str | None:
        """A reply names its partition and carries finite tensors, at most :attr:`max_reply_bytes` of them,
        and reads as the message expected (the activations and labels of a forward reply, the v or θ_c of
        a ``zo`` reply, θ_c after SFL's last local step)."""
        why = check_reply(reply, part, record="control", numbers=(), max_bytes=self.max_reply_bytes)
        if why is None:
            try:
                parse(part, reply.content)
            except (KeyError, TypeError, ValueError) as exc:
                return f"malformed reply: {exc}"
        return why

    def _activations(self, first_step: bool = False) -> Parse:
        """Reads forward replies (ZO-SFL's pair of activations; SFL's local-step count with its first)."""
        spsa, steps = self.protocol.spsa, first_step and self.protocol.local_steps
        return lambda part, content: Activations.from_record(content, spsa=spsa, local_steps=steps)

    def _thetas(self, expected: Callable[[int], bool] = lambda part: True) -> Parse:
        """Reads replies carrying the client's θ_c (where ``expected`` says one is due)."""
        return lambda part, content: ClientTheta.from_record(content, theta=expected(part), size=self.split.d_c)

    def _reply_bound(self) -> int:
        """The most bytes of tensors any reply may carry: two batches of activations (ZO-SFL sends z₊ and
        z₋) with their labels, θ_c, the P scalars, and framing; measured on one test example."""
        inputs = tuple(x[:1].to(self.device) for x in self.run.test.inputs)
        client, was_training = self.split.client, self.split.client.training
        client.eval()  # no dropout draw, no norm statistics: the run's state is untouched
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = client(*inputs)
        client.train(was_training)
        out = out if isinstance(out, tuple) else (out,)
        per_example = sum(int(t.nbytes) for t in out) + 8  # + the int64 label
        return (2 * self.cfg.batch_size * per_example + 4 * self.split.d_c + 8 * self.cfg.hosfl.perturbations
                + 4096 + 8 * FRAMING_PER_TENSOR)

    def _message(self, part: int, content: RecordDict, kind: str, server_round: int) -> Message:
        return Message(content, dst_node_id=self.nodes[part], message_type=kind,
                       group_id=f"{self.cfg.method}-r{server_round}")

    # -- server-side first-order step ------------------------------------------------------------------
    def _server_backward(self, batches: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor]]
                         ) -> tuple[dict[int, torch.Tensor], float]:
        """λ_m per client (its own mean loss), then one θ_s step with the mean gradient over clients."""
        lams: dict[int, torch.Tensor] = {}
        losses = []
        with deterministic_torch():
            self.opt.zero_grad(set_to_none=True)
            for part, (z, aux, y) in batches.items():
                zt = z.to(self.device).requires_grad_(True)
                aux = tuple(a.to(self.device) for a in aux)
                loss = nn.functional.cross_entropy(self.split.server(zt, *aux), y.to(self.device))
                loss.backward()
                lams[part] = zt.grad.detach().cpu().contiguous()
                losses.append(float(loss.detach()))
            if batches:
                for p in self.server_params:
                    if p.grad is not None:
                        p.grad /= len(batches)
                self.opt.step()
        return lams, float(np.mean(losses)) if losses else float("nan")

    @staticmethod
    def _batch(reply: Activations) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor]:
        return reply.cut.z, reply.cut.aux, reply.y

    # -- rounds ------------------------------------------------------------------------------------------
    def round_hosfl(self, t: int, chosen: list[int]) -> dict[str, object]:
        # the round's seeds travel with its first message (the paper's latency hiding): the client
        # keeps them with the z it sent and needs only λ in the second exchange
        seeds = round_seeds(self.cfg.seed, self.cfg.method, t, self.cfg.hosfl.perturbations)
        msgs = {}
        for part in chosen:
            since = self.history.since(self.version[part])
            shape = (len(since), self.cfg.hosfl.perturbations)
            past_seeds = np.array([s for s, _ in since], dtype=np.int64).reshape(shape)
            vbar = np.array([v for _, v in since], dtype=np.float32).reshape(shape)
            request = ReplayForward(self._head(t), self.version[part], torch.from_numpy(past_seeds),
                                    torch.from_numpy(vbar), torch.tensor(seeds, dtype=torch.int64))
            msgs[part] = self._message(part, request.to_record(), FORWARD, t)
        fwd: dict[int, Activations] = self._exchange(msgs, "forward", self._activations())  # type: ignore[assignment]
        for part in fwd:
            self.version[part] = t  # it replayed everything before round t (and persisted it)
        lams, loss = self._server_backward({p: self._batch(r) for p, r in fwd.items()})
        zo_msgs = {part: self._message(part, LambdaZo(self._head(t), lam).to_record(), ZO, t)
                   for part, lam in lams.items()}
        perturbations = self.cfg.hosfl.perturbations
        second: dict[int, ZoScalars] = self._exchange(  # type: ignore[assignment]
            zo_msgs, "zo", lambda part, content: ZoScalars.from_record(content, perturbations))
        if second:
            vs = np.stack([r.v.numpy().astype(np.float64) for r in second.values()])
            vbar = vs.mean(axis=0).astype(np.float32)
        else:
            vbar = np.zeros(self.cfg.hosfl.perturbations, dtype=np.float32)
        self.history.append(seeds, vbar.tolist())
        self.theta_c = zo.apply_update(self.theta_c, seeds, self.history.vbar[-1], self.cfg.hosfl.mu,
                                       self.cfg.hosfl.client_lr, self.zo_index, self.cfg.hosfl.client_momentum,
                                       self.zo_buf)
        return {"forward-ok": sorted(fwd), "second-ok": sorted(second), "train-loss": loss,
                "samples": sum(len(r.y) for r in fwd.values())}

    def _global_theta_messages(self, t: int, chosen: list[int], seed: int | None = None) -> dict[int, Message]:
        return {part: self._message(part, ThetaForward(self._head(t), self.theta_c.contiguous(), seed).to_record(),
                                    FORWARD, t) for part in chosen}

    def _average_thetas(self, replies: dict[int, ClientTheta]) -> None:
        if replies:  # FedAvg of the client parts, in partition order (uniform weights: one batch each)
            stack = torch.stack([r.theta for r in replies.values()])  # type: ignore[misc]
            self.theta_c = stack.double().mean(dim=0).to(torch.float32)

    def round_sfl(self, t: int, chosen: list[int]) -> dict[str, object]:
        """SFLv1 with local epochs: every chosen client runs its local steps (one exchange pair each)
        against its own copy of θ_s; client parts and server copies are averaged at the round's end."""
        start = [p.detach().clone() for p in self.server_params]
        copies: dict[int, tuple[list[torch.Tensor], torch.optim.Optimizer]] = {}
        steps: dict[int, int] = {}
        finals: dict[int, ClientTheta] = {}
        fwd_ok: list[int] = []
        losses: list[float] = []
        samples, step, active = 0, 0, list(chosen)
        while active:
            if step == 0:
                msgs = self._global_theta_messages(t, active)
            else:
                msgs = {part: self._message(part, ThetaForward(self._head(t), local_step=step).to_record(), FORWARD, t)
                        for part in active}
            fwd: dict[int, Activations] = self._exchange(  # type: ignore[assignment]
                msgs, "forward", self._activations(first_step=step == 0))
            if step == 0:
                steps = {p: int(r.local_steps) for p, r in fwd.items()}  # type: ignore[arg-type]
                fwd_ok = sorted(fwd)
            lams = {}
            for part, reply in fwd.items():
                if part not in copies:
                    tensors = [s.clone() for s in start]
                    copies[part] = (tensors, self._optimizer(tensors))  # type: ignore[assignment]
                batch = self._batch(reply)
                samples += len(batch[2])
                lams[part], loss = self._server_step_on_copy(*copies[part], batch)
                losses.append(loss)
            last = {part: step + 1 >= steps[part] for part in lams}
            back = {part: self._message(part, BackpropStep(self._head(t), step, last[part], lam).to_record(),
                                        BACKPROP, t) for part, lam in lams.items()}
            second: dict[int, ClientTheta] = self._exchange(  # type: ignore[assignment]
                back, "backprop", self._thetas(last.__getitem__))
            finals.update({p: r for p, r in second.items() if last[p]})
            active = [p for p in second if not last[p]]
            step += 1
        self._average_thetas(finals)
        with torch.no_grad():  # FedAvg of the server copies of the clients that finished the round
            for i, p in enumerate(self.server_params):
                if finals:
                    p.copy_(torch.stack([copies[part][0][i] for part in finals]).mean(dim=0))
                else:
                    p.copy_(start[i])
        return {"forward-ok": fwd_ok, "second-ok": sorted(finals), "local-steps": step,
                "train-loss": float(np.mean(losses)) if losses else float("nan"), "samples": samples}

    def _server_step_on_copy(self, tensors: list[torch.Tensor], opt: torch.optim.Optimizer,
                             batch: tuple[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor]
                             ) -> tuple[torch.Tensor, float]:
        """λ of one client's batch on its server copy, then one optimizer step of that copy."""
        z, aux, y = batch
        with deterministic_torch():
            with torch.no_grad():
                for p, c in zip(self.server_params, tensors, strict=True):
                    p.copy_(c)
            for p in self.server_params:
                p.grad = None
            zt = z.to(self.device).requires_grad_(True)
            out = self.split.server(zt, *(a.to(self.device) for a in aux))
            loss = nn.functional.cross_entropy(out, y.to(self.device))
            loss.backward()
            for p, c in zip(self.server_params, tensors, strict=True):
                c.grad = None if p.grad is None else p.grad.detach().clone()
            opt.step()
        return zt.grad.detach().cpu().contiguous(), float(loss.detach())

    def round_zo_sfl(self, t: int, chosen: list[int]) -> dict[str, object]:
        """SPSA on both sides with one shared seed per round (MeZO-style ZO-SFL)."""
        seed = derive_seed(self.cfg.seed, self.cfg.method, "spsa", t)
        fwd: dict[int, Activations] = self._exchange(  # type: ignore[assignment]
            self._global_theta_messages(t, chosen, seed=seed), "forward", self._activations())
        mu, lr = self.cfg.hosfl.mu, self.cfg.hosfl.client_lr
        base = torch.cat([p.detach().reshape(-1) for p in self.server_params]).clone()
        u_s = zo.direction(derive_seed(seed, "server"), base.numel()).to(base.device)
        gs, losses = {}, []
        with torch.no_grad(), deterministic_torch():
            for part, reply in fwd.items():
                zp, aux, y = self._batch(reply)
                zm = reply.minus.z.to(self.device)  # type: ignore[union-attr]
                zp, y, aux = zp.to(self.device), y.to(self.device), tuple(a.to(self.device) for a in aux)
                self._load_server_vector(base + mu * u_s)
                lp = float(nn.functional.cross_entropy(self.split.server(zp, *aux), y))
                self._load_server_vector(base - mu * u_s)
                lm = float(nn.functional.cross_entropy(self.split.server(zm, *aux), y))
                gs[part] = (lp - lm) / (2 * mu)
                losses.append((lp + lm) / 2)
            g_mean = float(np.mean(list(gs.values()))) if gs else 0.0
            self._load_server_vector(base - (lr * g_mean) * u_s)
        msgs = {part: self._message(part, SpsaZo(self._head(t), seed, g).to_record(), ZO, t) for part, g in gs.items()}
        second: dict[int, ClientTheta] = self._exchange(msgs, "zo", self._thetas())  # type: ignore[assignment]
        self._average_thetas(second)
        return {"forward-ok": sorted(fwd), "second-ok": sorted(second),
                "train-loss": float(np.mean(losses)) if losses else float("nan"),
                "samples": sum(len(r.y) for r in fwd.values())}

    def _load_server_vector(self, vec: torch.Tensor) -> None:
        start = 0
        with torch.no_grad():
            for p in self.server_params:
                p.copy_(vec[start : start + p.numel()].view_as(p))
                start += p.numel()

    # -- evaluation, metrics, artifacts -------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        self.split.load_client_vector(self.theta_c)
        test = self.run.test
        return evaluate(Composite(self.split), test.inputs, test.labels)

    def run_rounds(self) -> None:
        cfg = self.cfg
        protocol = self.protocol
        step = self.round_hosfl if protocol.replays_history else self.round_zo_sfl if protocol.spsa else self.round_sfl
        self._log_eval(0, {})
        for t in range(cfg.num_rounds):
            chosen = sample_round(self.nodes, cfg.hosfl.clients_per_round, cfg.seed, cfg.method, t)
            info = step(t, chosen)
            self.participants.update(info["forward-ok"])  # type: ignore[arg-type]
            self.samples += int(info["samples"])  # type: ignore[arg-type]
            dropped = sorted(set(chosen) - set(info["second-ok"]))  # type: ignore[arg-type]
            row = {"sampled": chosen, "dropped": dropped, "samples-total": self.samples,
                   "client-peak-rss-mb": self.peak_rss, **info, **self.ledger.close_round()}
            self.peak_rss = 0.0
            self._log_eval(t + 1, row)

    def _log_eval(self, server_round: int, row: dict[str, object]) -> None:
        cfg = self.cfg
        out = {"round": server_round, "num-rounds": cfg.num_rounds, "artifact": self.artifact,
               "action": cfg.action, **row}
        if server_round % cfg.hosfl.eval_every == 0 or server_round == cfg.num_rounds:
            result = self.evaluate()
            out.update(accuracy=result["accuracy"], loss=result["loss"])
            log(INFO, "round %d/%d: test accuracy %.4f, loss %.4f", server_round, cfg.num_rounds,
                result["accuracy"], result["loss"])
        self.run.store.append_metrics(out)

    def finish(self, ledger: Ledger) -> Built:
        """Store the served [θ_c; θ_s] artifact and HO-SFL's replay history, and record the artifact."""
        cfg, store = self.cfg, self.run.store
        self.split.load_client_vector(self.theta_c)
        arrays = {f"client.{n}": p.detach().cpu().numpy().copy() for n, p in self.split.client_params}
        arrays.update({f"server.{n}": p.detach().cpu().numpy().copy() for n, p in self.split.server_params})
        sha = store.put_arrays(arrays, {"artifact": self.artifact, "method": cfg.method, "task": cfg.task,
                                        "cut": str(cfg.hosfl.cut)})
        split_info: dict[str, object] = {
            "cut": cfg.hosfl.cut, "d_c": self.split.d_c, "d_s": self.split.d_s,
            "perturbations": cfg.hosfl.perturbations,
            "mu": cfg.hosfl.mu, "run-tag": self.tag, "client-versions": {str(p): v for p, v in self.version.items()},
        }
        if self.protocol.replays_history and (cfg.hosfl.zo_params or cfg.hosfl.client_momentum):  # when opted into
            split_info.update({"zo-params": cfg.hosfl.zo_params, "zo-dim": zo.subspace_dim(self.theta_c, self.zo_index),
                               "client-momentum": cfg.hosfl.client_momentum})
        if self.protocol.replays_history:
            split_info["history"] = store.put_arrays(
                {"seeds": np.array(self.history.seeds, dtype=np.int64).reshape(-1, cfg.hosfl.perturbations),
                 "vbar": np.array(self.history.vbar, dtype=np.float32).reshape(-1, cfg.hosfl.perturbations)},
                {"artifact": "hosfl/history"})
        ledger.set_plan({"kind": "split", "artifact": self.artifact})
        ledger.record_artifact(self.artifact, sha, SPLIT_KIND, all_units(self.run, self.participants),
                               self.watermark, {"cut": cfg.hosfl.cut, "rounds": cfg.num_rounds})
        return Built([self.artifact], manifest={"rounds-done": cfg.num_rounds, "split": split_info},
                     summary=f"{cfg.method} trained {self.artifact} (sha256 {sha})")


def check_clients_per_round(cfg: RunConfig, nodes: dict[int, int]) -> None:
    if cfg.hosfl.clients_per_round > len(nodes):
        raise ConfigError(f"run-config 'hosfl.clients-per-round'={cfg.hosfl.clients_per_round} is more than the "
                          f"{len(nodes)} nodes of this federation; use 1..{len(nodes)}")


def client_theta_from_artifact(arrays: dict[str, np.ndarray], names: Sequence[str]) -> torch.Tensor:
    """θ_c (flat) from a stored split artifact, in the client part's parameter order."""
    return torch.cat([torch.from_numpy(arrays[f"client.{n}"].copy()).reshape(-1) for n in names])
