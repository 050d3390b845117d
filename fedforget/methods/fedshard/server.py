"""FedShard: a stage-wise shard tree trained through Flower, every shard cached with its clients' lineage.

Stage by stage, all shards of a stage train in parallel: each round sends one ``train.fedshard``
message to every member of every shard that still has rounds left (per-shard seeds come from the
shard's artifact id), and each shard FedAvg-aggregates its own replies in partition order. After a
stage, update angles are measured and A1/A2 (``fedforget.methods.fedshard.plan``) plan the next one. Each
shard's final model is an artifact with lineage = its clients; its weight (examples seen), rounds,
angle and children are in the ledger, the tree in the manifest.

``action='retrain'`` makes the clients delete forgotten data for good, then walks the stages and
retrains only invalid shards, each from the re-aggregation of its (retrained or cached) children,
with the cached rounds: the path to the root for a leaving client, never from the cached init that
held the leaver.
``plan-file`` replays a stored tree instead of running A1/A2 (what ``verify`` does: the guarantee
is relative to the plan).

Node failures follow the rule of :mod:`fedforget.federation.failover`: a lost node is redone on the
node that now holds its partition, a raising one once more on the same node, a bad reply (NaN,
oversized, another partition's, malformed) is rejected. A partition lost for good is excluded: every
shard that has it as a client (its path to the root) stays unbuilt, named in the ledger's ``unbuilt``
(serving falls back as after its leaving; ``retrain`` builds the path later), and every other shard
is built exactly as without the failure, so one dead node does not stall the stage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.federation.failover import check_chain_reply
from fedforget.federation.messaging import PARTITION_KEY, to_numpy, to_record
from fedforget.federation.module_messages import TrainModule
from fedforget.federation.round_engine import Contribution, Round, Send
from fedforget.federation.run_setup import ServerRun
from fedforget.methods.fedshard.angles import signed_update_angles, update_angles
from fedforget.methods.fedshard.lora_merge import merge_lora
from fedforget.methods.fedshard.plan import (
    CALIBRATION_STAGES,
    Child,
    ShardNode,
    ShardTree,
    allocate_rounds,
    check_tree,
    first_stage,
    merge_a1,
    merge_random,
    merged_stage,
    num_stages,
    variance,
)
from fedforget.store.ledger import Ledger
from fedforget.tasks.registry import get_task
from fedforget.tasks.trained_parameters import trains_whole_model

Arrays = dict[str, np.ndarray]
#: a shard member's round: the chains' module training (``TrainModule``, one continued module), FedShard's type
TRAIN_MESSAGE = "train.fedshard"


def _flat(arrays: Arrays) -> np.ndarray:
    return np.concatenate([arrays[k].ravel().astype(np.float64) for k in sorted(arrays)])


@dataclass
class ShardResult:
    """A shard after its rounds: final model, the examples it saw (its weight), who was left out."""

    state: Arrays
    weight: int
    excluded: list[list[int]] = field(default_factory=list)  # stays empty: a lost client leaves the shard unbuilt


class ShardTrainer:
    """Runs shards of one stage in parallel over the Grid and caches them in the store and ledger."""

    def __init__(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int,
                 gone: set[int] | None = None) -> None:
        self.grid, self.run, self.ledger, self.watermark = grid, run, ledger, watermark
        self.cfg = run.cfg
        self.gone = gone or set()  # clients with no data left: not contacted
        self.rebuilt: list[str] = []
        #: partitions lost in this run and the shards left unbuilt because they have one as a client
        self.excluded: set[int] = set()
        self.unbuilt: list[str] = []
        self.client_rounds = 0
        self.client_angles: dict[int, float] = {}
        self._probe: dict[int, Arrays] = {}
        #: θ^0, every first-stage shard's start: the seeded LoRA + head, or the initial arrays the store recorded
        self.theta0: Arrays = {k: np.array(v.detach().numpy(), copy=True) for k, v in run.initial_state.items()}

    def members(self, shard: ShardNode) -> list[int]:
        return [c for c in shard.clients if c not in self.gone]

    def lost(self, shard: ShardNode) -> bool:
        """Whether ``shard`` has a client excluded in this run (it, and its path up, stay unbuilt)."""
        return bool(set(shard.clients) & self.excluded)

    def message(self, shard: ShardNode, partition: int, state: Arrays, server_round: int) -> Message:
        slices = list(range(len(self.run.plan.slices[partition])))
        request = TrainModule(shard.artifact, server_round, "continue", tuple(slices))
        content = RecordDict({"arrays": to_record(state), "config": request.to_config()})
        return Message(content, dst_node_id=self.run.nodes[partition], message_type=TRAIN_MESSAGE)

    def train_stage(self, shards: Sequence[ShardNode], inits: dict[int, Arrays]) -> dict[int, ShardResult]:
        """FedAvg inside each shard for its own number of rounds (:class:`ShardRound`); shards with fewer
        rounds idle."""
        current = {s.artifact: inits[s.index] for s in shards}
        results = {s.index: ShardResult(inits[s.index], 0) for s in shards}
        probe = self.cfg.action == "train" and bool(shards) and shards[0].stage == 1
        stage = shards[0].stage if shards else 0
        for server_round in range(1, max((s.rounds for s in shards), default=0) + 1):
            active = [s for s in shards if s.rounds >= server_round and self.members(s) and not self.lost(s)]
            result = ShardRound(self, active, stage).run(server_round, {s.artifact: current[s.artifact]
                                                                        for s in active})
            self.excluded |= result.excluded
            self.client_rounds += len(result.replies)
            for s in active:
                if self.lost(s):
                    log(WARNING, "fedforget: %s round %d: a client was lost; the shard stays unbuilt", s.artifact,
                        server_round)
                    continue
                if probe and server_round == 1:
                    self._probe.update({int(c.order): dict(c.arrays) for c in result.contributions
                                        if c.group == s.artifact and c.weight > 0})
                current[s.artifact] = result.states[s.artifact]
                if s.artifact in result.weights:
                    results[s.index].weight = result.weights[s.artifact]
                results[s.index].state = current[s.artifact]
        if probe:
            self._finish_probe()
        for s in shards:
            if self.lost(s):  # nothing of it is used: weight 0, state as it started
                results[s.index] = ShardResult(inits[s.index], 0)
        return results

    def _finish_probe(self) -> None:
        """Per-client angles α_c from the first round of stage 1, where every client starts from θ^0:
        the reference the fairness metrics use for every method."""
        clients = sorted(self._probe)
        if not clients:
            return
        base = _flat(self.theta0)
        updates = np.stack([_flat(self._probe.pop(c)) - base for c in clients])
        self.client_angles = {c: float(a) for c, a in zip(clients, update_angles(updates), strict=True)}

    def record(self, shard: ShardNode, result: ShardResult, angle: float, signed: float) -> None:
        if self.lost(shard):
            self.unbuilt.append(shard.artifact)
            return
        sha = self.run.store.put_arrays(result.state, {"artifact": shard.artifact, "method": self.cfg.method,
                                                       "task": self.cfg.task})
        units = [f"{c}:{s}" for c in shard.clients for s in range(len(self.run.plan.slices[c]))]
        self.ledger.record_artifact(shard.artifact, sha, "lora+head", units, self.watermark, {
            "stage": shard.stage, "shard": shard.index, "rounds": shard.rounds, "weight": result.weight,
            "children": list(shard.children), "clients": list(shard.clients), "angle": angle,
            "signed-angle": signed, "excluded": result.excluded, "slot": "default", "targets": None})
        self.rebuilt.append(shard.artifact)


class ShardRound(Round):
    """One round of every shard of a stage with rounds left: each member trains the shard's model on all of
    its slices, and each shard averages its own members' replies."""

    def __init__(self, trainer: ShardTrainer, shards: Sequence[ShardNode], stage: int) -> None:
        run = trainer.run
        super().__init__(trainer.grid, run)
        self.trainer, self.shards, self.stage = trainer, list(shards), stage

    def configure_train(self, server_round: int, states: Mapping[str, Arrays]) -> list[Send]:
        t = self.trainer
        return [Send(p, t.message(s, p, states[s.artifact], server_round),
                     partial(self._valid, p, states[s.artifact]), s.artifact)
                for s in self.shards for p in t.members(s)]

    def _valid(self, partition: int, start: Arrays, reply: Message) -> str | None:
        return check_chain_reply(reply, partition, start, len(self.trainer.run.plan.partition_ids(partition)))

    def contributions(self, send: Send, reply: Message) -> list[Contribution]:
        metrics = reply.content["metrics"]
        return [Contribution(str(send.group), int(metrics[PARTITION_KEY]), int(metrics["num-examples"]),
                             to_numpy(reply.content["arrays"]), float(metrics["train-loss"]))]

    def row_fields(self, server_round: int, sends: Sequence[Send]) -> dict[str, Any]:
        return {"stage": self.stage, "shards": len(self.shards)}


def stage_angles(finals: Sequence[Arrays], inits: Sequence[Arrays], weights: Sequence[int]) -> tuple[list, list]:
    """Eq. 1 on updates (G3): each shard's Δθ against the stage's weighted-mean Δθ; and signed (G2)."""
    updates = np.stack([_flat(f) - _flat(i) for f, i in zip(finals, inits, strict=True)])
    w = [max(0, x) for x in weights]
    return [float(a) for a in update_angles(updates, w)], [float(a) for a in signed_update_angles(updates, w)]


def plan_next_stage(cfg: RunConfig, stage: Sequence[ShardNode], signed: Sequence[float],
                    costs: Sequence[float]) -> list[ShardNode]:
    """A1 (or seeded random merging) and A2 (or constant rounds) for the stage after ``stage``."""
    p = stage[0].stage + 1
    if cfg.fedshard.merge == "a1":
        children = [Child(s.index, signed[i], s.clients, costs[i]) for i, s in enumerate(stage)]
        groups = merge_a1(children, cfg.fedshard.fanout)
    else:
        groups = merge_random(len(stage), cfg.fedshard.fanout, derive_seed(cfg.seed, "fedshard", "merge", p))
    if p <= CALIBRATION_STAGES or cfg.fedshard.rounds_rule == "constant":
        rounds = [cfg.fedshard.rounds_max] * len(groups)
    else:
        variances = [variance([signed[j] for j in g]) for g in groups]
        rounds = allocate_rounds(variances, cfg.fedshard.rounds_min, cfg.fedshard.rounds_max, cfg.fedshard.rounds_rule)
    return merged_stage(stage, groups, rounds)


def load_plan_file(path: str) -> ShardTree:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return ShardTree.from_json(data.get("plan", data))


def train_tree(trainer: ShardTrainer, cfg: RunConfig, partitions: list[int], replay: ShardTree | None) -> ShardTree:
    stage = replay.stages[0] if replay else first_stage(
        partitions, cfg.fedshard.fanout, derive_seed(cfg.seed, "fedshard", "stage-1"),
        cfg.fedshard.rounds_max * (num_stages(len(partitions), cfg.fedshard.fanout) if cfg.fedshard.flat else 1))
    total = (len(replay.stages) if replay else 1 if cfg.fedshard.flat
             else num_stages(len(partitions), cfg.fedshard.fanout))
    stages: list[list[ShardNode]] = []
    previous: dict[int, ShardResult] = {}
    path_cost = {c: 0.0 for c in partitions}
    while True:
        inits = stage_inits(trainer, stage, stages[-1] if stages else None, previous)
        results = trainer.train_stage(stage, inits)
        finals = [results[s.index].state for s in stage]
        angles, signed = stage_angles(finals, [inits[s.index] for s in stage], [results[s.index].weight for s in stage])
        for i, s in enumerate(stage):
            trainer.record(s, results[s.index], angles[i], signed[i])
            for c in s.clients:
                path_cost[c] += s.rounds * len(s.clients)
        stages.append(list(stage))
        log(INFO, "fedforget: FedShard stage %d/%d: %d shard(s) trained (%s rounds)", stage[0].stage, total,
            len(stage), ",".join(str(s.rounds) for s in stage))
        previous = results
        if cfg.fedshard.flat or len(stage) == 1:
            break
        if replay:
            stage = replay.stages[len(stages)]
        else:
            costs = [float(np.mean([path_cost[c] for c in s.clients])) for s in stage]
            stage = plan_next_stage(cfg, stage, signed, costs)
    tree = ShardTree(cfg.fedshard.fanout if not replay else replay.fanout, stages,
                     cfg.fedshard.flat if not replay else replay.flat)
    check_tree(tree)
    return tree


def stage_inits(trainer: ShardTrainer, stage: Sequence[ShardNode], below: Sequence[ShardNode] | None,
           results: dict[int, ShardResult]) -> dict[int, Arrays]:
    """θ^0 at stage 1; else the re-aggregation of each shard's non-empty children (Eq. 9), weighted by
    their examples, with LoRA factors merged by ``lora-merge`` (methods/fedshard/lora_merge.py)."""
    if below is None:
        return {s.index: dict(trainer.theta0) for s in stage}
    rule = merge_rule(trainer.cfg)
    out = {}
    for s in stage:
        kids = [results[j] for j in s.children if results[j].weight > 0]
        out[s.index] = merge_lora([k.state for k in kids], [k.weight for k in kids], rule) if kids else dict(
            trainer.theta0)
    return out


def merge_rule(cfg: RunConfig) -> str:
    """``lora-merge`` for LoRA + head models; the user's own model (``Task(train='all')``) has no LoRA factors,
    whatever its parameters are named: its shards are averaged tensor by tensor (``factors``)."""
    return "factors" if trains_whole_model(get_task(cfg.task).trains) else cfg.fedshard.lora_merge


def record_first_per_class_accuracy(run: ServerRun, ledger: Ledger, serving: dict) -> None:
    """The first served model's per-class test accuracy, for ``fairness``'s ΔY once that model is purged."""
    from fedforget.federation.serve import serving_probabilities

    if not serving.get("available") or run.test.sequence_targets is not None:  # a sequence task has no classes
        return
    probs = serving_probabilities(run.cfg, run.num_classes, run.store, ledger.plan(), serving,
                                  ledger.artifacts(), run.test.inputs)
    labels = run.test.labels.numpy()
    hit = probs.argmax(1) == labels
    ledger.set_meta("first-per-class-accuracy", [float(hit[labels == k].mean()) if (labels == k).any() else 0.0
                                                 for k in range(run.num_classes)])
