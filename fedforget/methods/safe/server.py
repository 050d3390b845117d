"""SAFE (and ProtoSISA / SISA on the same InCA adapters) through Flower: one artifact per clique.

Training: every clique runs ``num-rounds`` FedAvg rounds among only the clients holding its cells;
all cliques advance in the same Flower rounds (one message per client carries the blocks of its
cliques), but each block is averaged on its own, weighted by that clique's sample counts, in
partition order. With a safe shard (``safe-shard`` > 0) the server is one more contributor to every
clique, after the partitions (:mod:`fedforget.methods.safe.shard`). Prototype sums come per cell (the
ledger's unit), each one an artifact of its own, and per class of the safe shard (never invalidated).
``action='retrain'``: clients delete forgotten samples for good, then only invalid cliques retrain
(from their seeded init, same seeds and rounds) and only invalid cells resend prototype sums.
SAFE-DP (``safe.dp=true``): one artifact per class node; see :mod:`fedforget.methods.safe.dp_training`.

Failures follow the rule of :mod:`fedforget.federation.failover`: a lost or raising node is redone, a
bad reply rejected; a partition excluded for good leaves every artifact that reads its cells unbuilt
(named in the ledger's ``unbuilt``), and every other artifact is built as without the failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from logging import INFO
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.federation.failover import FRAMING_PER_TENSOR, check_reply, exchange_redo_or_exclude
from fedforget.federation.messaging import to_numpy
from fedforget.federation.round_engine import SERVER_ORDER, Contribution, Round, Send
from fedforget.federation.run_setup import ServerRun
from fedforget.methods.safe.adapters import init_adapters
from fedforget.methods.safe.budget import adapter_budget
from fedforget.methods.safe.client import PARAM_KEYS, SEP, frozen_backbone, frozen_theta
from fedforget.methods.safe.config import safe_layout
from fedforget.methods.safe.dp import request_budget
from fedforget.methods.safe.graph import SafePlan, build_safe_plan
from fedforget.methods.safe.messages import CliqueResults, CliqueWork, PrototypeQuery, TrainCliques
from fedforget.methods.safe.shard import SafeShard
from fedforget.methods.safe.shard_plan import class_counts
from fedforget.store.ledger import Ledger

if TYPE_CHECKING:
    import torch

TRAIN_MESSAGE = f"{MessageType.TRAIN}.safe"
PROTO_MESSAGE = f"{MessageType.QUERY}.safeproto"
Arrays = dict[str, np.ndarray]


def token_dim(cfg: RunConfig, example: tuple[torch.Tensor, ...]) -> int:
    """Width of the backbone tokens (what queries live in), read off one example of the server's test set."""
    from fedforget.methods.safe.features import compute_tokens

    backbone = frozen_backbone(cfg.task, cfg.hf.model, cfg.seed)
    tokens, _ = compute_tokens(backbone.module, tuple(x[:1] for x in example))
    return int(tokens.shape[-1])


def make_plan(cfg: RunConfig, run: ServerRun, shard: SafeShard | None = None,
              ) -> tuple[SafePlan, dict[int, dict[int, list[int]]]]:
    """The graph from seeds and the partitions' labels only, plus the safe shard's class counts."""
    # the labels the nodes registered (SAFE's cells are classes); a record deleted with its row has none
    labels = {p: {s: y for s, y in sorted(run.federation.labels[p].items()) if y >= 0} for p in sorted(run.plan.slices)}
    mode = safe_layout(cfg.method).coarse_mode(cfg.safe.coarse_by)
    safe = cfg.safe
    k = request_budget(safe.dp_epsilon, safe.dp_delta, safe.dp_alpha, safe.dp_beta) if safe.dp else 0
    counts = class_counts(shard.labels.tolist()) if shard is not None else {}
    return build_safe_plan(cfg.method, labels, run.num_classes, safe.coarse, safe.fine, mode, safe.prototypes,
                           cfg.seed, dp=safe.dp, dp_k=k, shard=counts)


def _group_of(plan: SafePlan, partition: int) -> int | None:
    """Option A: the coarse group a client belongs to (read off its cells)."""
    cells = {int(u.split(":")[1]) for u in plan.sizes if int(u.split(":")[0]) == partition}
    return min(cells) // plan.num_classes if cells else None


def _plan_config(plan: SafePlan, partition: int) -> dict[str, object]:
    out: dict[str, object] = {"mode": plan.mode, "coarse": plan.coarse, "fine": plan.fine}
    group = _group_of(plan, partition) if plan.mode == "client" else None
    if group is not None:
        out["group"] = group
    return out


def _record(arrays: Arrays) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


class SafeTrainer:
    """Trains a set of adapter artifacts (cliques, or class nodes under SAFE-DP) over the Grid."""

    def __init__(self, grid: Grid, run: ServerRun, plan: SafePlan, ledger: Ledger, watermark: int, dim: int,
                 shard: SafeShard | None = None) -> None:
        self.grid, self.run, self.plan, self.ledger, self.watermark, self.dim = grid, run, plan, ledger, watermark, dim
        self.shard = shard
        self.cfg = run.cfg
        self.budget = adapter_budget(run.cfg)
        self.rebuilt: list[str] = []
        self.client_rounds = 0
        self.samples_visited = 0
        #: sample gradients the server took on the safe shard (not in ``samples_visited``, the clients' work)
        self.shard_visited = 0
        #: partitions lost in this run and the artifacts left unbuilt because they read their cells
        self.excluded: set[int] = set()
        self.unbuilt: list[str] = []

    def specs(self, wanted: set[str] | None) -> list[dict[str, object]]:
        """What each artifact trains: its classes and the units (cells) it reads."""
        out = []
        for cid, _, _, classes in self.plan.cliques():
            units = self.plan.members[cid]
            if self.plan.dp:
                for adapter in self.plan.adapters(cid):
                    k = int(adapter.rsplit("/k", 1)[1])
                    out.append({"id": adapter, "classes": [k], "clique": list(classes), "units": units, "dp": True,
                                "lineage": self.plan.node_units(adapter)})
            else:
                out.append({"id": cid, "classes": classes, "units": units, "dp": False, "lineage": units})
        return [s for s in out if wanted is None or s["id"] in wanted]

    def train(self, specs: list[dict[str, object]]) -> None:
        current = {str(s["id"]): self._init(s) for s in specs}
        for server_round in range(1, self.cfg.num_rounds + 1):
            current = self._round(specs, current, server_round)
            specs = self._drop_excluded(specs)
            log(INFO, "fedforget: safe round %d/%d: %d adapter artifact(s)", server_round, self.cfg.num_rounds,
                len(specs))
        for s in specs:
            self._finish(s, current[str(s["id"])])

    def _drop_excluded(self, specs: list[dict[str, object]]) -> list[dict[str, object]]:
        """Artifacts that read a lost partition's cells stop here and stay unbuilt."""
        kept = []
        for s in specs:
            if set(self.plan.participants(s["units"])) & self.excluded:  # type: ignore[arg-type]
                self.unbuilt.append(str(s["id"]))
            else:
                kept.append(s)
        return kept

    def _init(self, spec: dict[str, object]) -> Arrays:
        classes = list(spec["classes"])  # type: ignore[arg-type]
        params = init_adapters(self.dim, len(classes), derive_seed(self.cfg.seed, self.cfg.method, spec["id"], "init"),
                               self.budget.width)
        return {k: v.numpy() for k, v in params.items()}

    def _round(self, specs: list[dict[str, object]], current: dict[str, Arrays],
               server_round: int) -> dict[str, Arrays]:
        """One round of every adapter (:class:`SafeRound`); their new states."""
        result = SafeRound(self, specs).run(server_round, {str(s["id"]): current[str(s["id"])] for s in specs})
        self.excluded |= result.excluded
        self.client_rounds += len(result.replies)
        dp = {str(s["id"]): bool(s["dp"]) for s in specs}
        for c in result.contributions:
            if c.weight > 0 and c.order != SERVER_ORDER:
                self.samples_visited += self._visited(c.weight, server_round, dp[c.group])
        return result.states

    def shard_contributions(self, specs: list[dict[str, object]], states: Mapping[str, Arrays],
                            server_round: int) -> list[Contribution]:
        """The server's own contribution to each clique's FedAvg (after the partitions): its safe-shard samples
        of the clique's classes, trained from the same start with the same budget as a client."""
        if self.shard is None:
            return []
        theta = frozen_theta(self.dim, self.cfg.seed, self.budget.width)
        out = []
        for s in (s for s in specs if not s["dp"]):  # SAFE-DP with a safe shard is refused by the config
            aid, classes = str(s["id"]), [int(k) for k in s["classes"]]  # type: ignore[attr-defined]
            n, arrays = self.shard.train(self.cfg, theta, aid, classes, states[aid], self.budget, server_round)
            if n > 0:
                out.append(Contribution(aid, SERVER_ORDER, n, arrays))
                self.shard_visited += self._visited(n, server_round, False)
        return out

    def _visited(self, held: int, server_round: int, dp: bool) -> int:
        """Sample-gradient evaluations of one adapter on one node this round (its step budget × batch)."""
        if dp:
            return held * self.cfg.local_epochs
        return len(self.budget.round_steps(server_round)) * self.budget.batch(held)

    def _finish(self, spec: dict[str, object], state: Arrays) -> None:
        aid = str(spec["id"])
        arrays = {**state, "classes": np.asarray(spec["classes"], dtype=np.int64)}
        sha = self.run.store.put_arrays(arrays, {"artifact": aid, "method": self.cfg.method, "task": self.cfg.task})
        self.ledger.record_artifact(aid, sha, "inca", spec["lineage"], self.watermark,  # type: ignore[arg-type]
                                    {"classes": spec["classes"], "dp": spec["dp"]})
        if spec["dp"]:
            from fedforget.methods.safe.budget_store import set_dp_exposure

            exposed = sorted(set(spec["units"]) - set(spec["lineage"]))  # type: ignore[arg-type]
            set_dp_exposure(self.ledger, aid, exposed, self.plan.dp_k)
        self.rebuilt.append(aid)


class SafeRound(Round):
    """One round of every adapter: one message per node carries the blocks of all its cliques, each block is
    averaged on its own (weighted by that clique's sample counts, summed in float64 in partition order), and
    the server's safe shard contributes last."""

    accumulate = np.float64

    def __init__(self, trainer: SafeTrainer, specs: list[dict[str, object]]) -> None:
        run = trainer.run
        super().__init__(trainer.grid, run)
        self.trainer, self.specs = trainer, specs

    def configure_train(self, server_round: int, states: Mapping[str, Arrays]) -> list[Send]:
        t = self.trainer
        by_node: dict[int, list[CliqueWork]] = {}
        for s in self.specs:
            for p, cells in t.plan.participants(s["units"]).items():  # type: ignore[arg-type]
                classes = tuple(int(k) for k in s["classes"])  # type: ignore[attr-defined]
                clique = tuple(int(c) for c in s["clique"]) if s["dp"] else None  # type: ignore[attr-defined]
                by_node.setdefault(p, []).append(CliqueWork(str(s["id"]), classes, tuple(cells), bool(s["dp"]), clique))
        sends = []
        for p, items in sorted(by_node.items()):
            arrays = {f"{i.adapter}{SEP}{k}": states[i.adapter][k] for i in items for k in PARAM_KEYS}
            config = TrainCliques(server_round, tuple(items), _plan_config(t.plan, p)).to_config()
            message = Message(RecordDict({"arrays": _record(arrays), "config": config}),
                              dst_node_id=t.run.nodes[p], message_type=TRAIN_MESSAGE)
            rows = len(t.run.plan.partition_ids(p)) * len(items)
            sends.append(Send(p, message, partial(self._valid, p, arrays, {i.adapter for i in items}, rows)))
        return sends

    @staticmethod
    def _valid(partition: int, sent: Arrays, adapters: set[str], rows: int, reply: Message) -> str | None:
        return check_reply(reply, partition, sent=sent, max_examples=rows, numbers=()) or check_counts(
            reply, adapters, rows)

    def contributions(self, send: Send, reply: Message) -> list[Contribution]:
        result = CliqueResults.from_config(reply.content["info"])
        arrays = to_numpy(reply.content["arrays"])
        return [Contribution(aid, send.partition, int(n), {k: arrays[f"{aid}{SEP}{k}"] for k in PARAM_KEYS},
                             float(result.losses.get(aid, 0.0)))
                for aid, n in result.counts.items() if n > 0]

    def server_contributions(self, server_round: int, states: Mapping[str, Arrays]) -> list[Contribution]:
        return self.trainer.shard_contributions(self.specs, states, server_round)

    def row_fields(self, server_round: int, sends: Sequence[Send]) -> dict[str, Any]:
        return {"adapters": len(self.specs)}


def check_counts(reply: Message, adapters: set[str], max_examples: int) -> str | None:
    """A ``train.safe`` reply's per-adapter counts and losses: adapters sent, plausible counts, finite losses."""
    try:
        result = CliqueResults.from_config(reply.content["info"])
        counts, losses = result.counts, result.losses
        bad = (set(counts) - adapters or set(losses) - adapters
               or not all(0 <= int(n) <= max_examples for n in counts.values())
               or not all(np.isfinite(float(v)) for v in losses.values()))
    except (KeyError, TypeError, ValueError, AttributeError):
        return "malformed info"
    return "implausible counts or losses" if bad else None


def collect_prototypes(grid: Grid, run: ServerRun, plan: SafePlan, ledger: Ledger, units: list[str],
                       watermark: int, dim: int, unbuilt: list[str], excluded: set[int]) -> list[str]:
    """Ask the holders of ``units`` for their cells' prototype sums; one artifact per cell. Cells of a
    partition lost for good are added to ``unbuilt`` (and it to ``excluded``)."""
    if not units:
        return []
    by_node = plan.participants(units)
    messages = [Message(RecordDict({"config": PrototypeQuery(tuple(cells), dim, _plan_config(plan, p)).to_config()}),
                        dst_node_id=run.nodes[p], message_type=PROTO_MESSAGE) for p, cells in by_node.items()]
    parts = list(by_node)

    def valid(reply: Message, i: int) -> str | None:
        cells = by_node[parts[i]]
        # per cell: a float64 sum of ``dim`` values and one int64 count, each framed
        why = check_reply(reply, parts[i], numbers=(), max_bytes=len(cells) * (dim * 8 + 8 + 2 * FRAMING_PER_TENSOR))
        wanted = {f"{c}{SEP}{k}" for c in cells for k in ("sum", "count")}
        if why is None and ("arrays" not in reply.content or set(reply.content["arrays"]) != wanted):
            return "unexpected prototype tensors"
        return why

    answered, lost = exchange_redo_or_exclude(grid, run.nodes, messages, parts, run.cfg.round_timeout, valid)
    rebuilt = []
    for p, reply in zip(parts, answered, strict=True):
        if reply is None:  # lost partition: its cells' prototypes stay unbuilt
            unbuilt.extend(plan.proto_id(f"{p}:{cell}") for cell in by_node[p])
            excluded.add(p)
            continue
        arrays = to_numpy(reply.content["arrays"])
        for cell in by_node[p]:
            unit = f"{p}:{cell}"
            label = plan.split_cell(cell)[1]
            state = {"sum": arrays[f"{cell}{SEP}sum"], "count": arrays[f"{cell}{SEP}count"],
                     "label": np.asarray([label], dtype=np.int64)}
            aid = plan.proto_id(unit)
            sha = run.store.put_arrays(state, {"artifact": aid, "method": run.cfg.method, "task": run.cfg.task})
            ledger.record_artifact(aid, sha, "prototype", [unit], watermark, {"label": label})
            rebuilt.append(aid)
    return sorted(rebuilt)


def record_shard_prototypes(run: ServerRun, plan: SafePlan, ledger: Ledger, shard: SafeShard | None,
                            wanted: list[str], watermark: int) -> list[str]:
    """The safe shard's per-class prototype sums, one artifact per class, with no lineage: no request can
    invalidate them (the server's data is never forgotten), so only a missing one is ever (re)built."""
    if shard is None:
        return []
    rebuilt = []
    for label, aid in ((k, plan.shard_proto_id(k)) for k in sorted(plan.shard)):
        if aid not in wanted:
            continue
        total, count = shard.prototype_sum(label)
        state = {"sum": np.ascontiguousarray(total), "count": np.asarray([count], dtype=np.int64),
                 "label": np.asarray([label], dtype=np.int64)}
        sha = run.store.put_arrays(state, {"artifact": aid, "method": run.cfg.method, "task": run.cfg.task})
        ledger.record_artifact(aid, sha, "prototype", [], watermark, {"label": label, "safe-shard": True})
        rebuilt.append(aid)
    return rebuilt


def evaluate_safe(run: ServerRun, ledger: Ledger) -> dict[str, float]:
    from fedforget.methods.safe.serve import safe_accuracy

    serving = ledger.serving()
    if not serving.get("available"):
        return {"accuracy": float("nan"), "loss": float("nan"), "num-examples": 0}
    result = safe_accuracy(run.cfg, run.store, ledger.plan(), serving, ledger.artifacts())
    ledger.set_meta("accuracy", {"serving": sorted(serving["artifacts"]), **result})
    return result
