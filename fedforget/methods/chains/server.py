"""FedSGT, S3T, SISA and FedCIO: train every chain position through Flower, store each with its lineage.

Each position of each chain is one artifact: a module trained (``rounds-per-phase`` FedAvg rounds)
by the clients that hold slices of the chain's groups so far, on those slices only, with the
earlier modules of the chain frozen and a head snapshot of its own. Positions of all chains that
are due are sent together (they are independent), so a run needs ``L·rounds-per-phase`` exchanges,
not ``B·L·…``. ``action='retrain'`` first makes the clients delete forgotten samples for good
(``query.forget``), then rebuilds only the invalid positions, starting from each chain's valid prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.core.config import ConfigError, RunConfig
from fedforget.core.seeds import derive_seed, derive_seed32
from fedforget.core.slicing import UnitId
from fedforget.federation.control_messages import ModuleNeed
from fedforget.federation.failover import check_chain_reply
from fedforget.federation.messaging import CHAIN_MESSAGE, PARTITION_KEY, to_numpy
from fedforget.federation.module_messages import DEFAULT_SLOTS, MODULES_KEY, PREFIX_KEY, Slot, TrainModule
from fedforget.federation.module_stack import fresh_module, slot_name, split_state
from fedforget.federation.round_engine import Contribution, Round, Send
from fedforget.federation.run_setup import ServerRun
from fedforget.methods.chains.config import parse_prior
from fedforget.methods.chains.grouping import group_units
from fedforget.methods.chains.plan import Chain, ChainPlan, chain_layout, layer_blocks
from fedforget.methods.chains.shipping import ModuleShipping, check_need_reply, need_of
from fedforget.store.crash import crash_point
from fedforget.store.ledger import Ledger
from fedforget.store.store import StoreError, arrays_of
from fedforget.tasks.partitioning import PartitionPlan

Arrays = dict[str, np.ndarray]


# -- planning --------------------------------------------------------------------------------
def data_units(plan: PartitionPlan) -> list[str]:
    """Every non-empty client slice, as a unit id."""
    return [str(UnitId(p, s)) for p, parts in sorted(plan.slices.items()) for s, ids in enumerate(parts) if ids]


def cluster_partitions(class_counts: dict[int, list[int]], clusters: int, seed: int) -> list[list[int]]:
    """FedCIO's clustering: seeded k-means on the clients' label histograms (from the class counts they
    registered); clusters in partition order."""
    from sklearn.cluster import KMeans

    parts = sorted(class_counts)
    if clusters > len(parts):
        raise ValueError(f"clusters={clusters} exceeds the {len(parts)} clients; lower chains.clusters=")
    counts = {p: np.asarray(class_counts[p], dtype=np.int64) for p in parts}
    hist = np.stack([counts[p] / max(1, int(counts[p].sum())) for p in parts])
    assign = KMeans(n_clusters=clusters, n_init=10, random_state=derive_seed32(seed, "fedcio-kmeans")).fit_predict(hist)
    groups = [[p for p, a in zip(parts, assign, strict=True) if a == c] for c in range(clusters)]
    return sorted((g for g in groups if g), key=min)


def refuse_groups_without_data(cfg: RunConfig, partitions: int) -> None:
    """Every group needs at least one client slice. Checked once the nodes have answered (their number
    is not in the run config) and before the store exists."""
    layout = chain_layout(cfg.method)
    if layout.clustered:  # groups are clusters of partitions, formed from the data
        return
    shards = layout.shards(cfg.chains.shards, cfg.chains.clusters)
    slices = partitions * cfg.slices_per_client
    if slices < shards * cfg.chains.groups:
        raise ConfigError(f"'chains.groups'={cfg.chains.groups} x {shards} shard(s) needs at least "
                          f"{shards * cfg.chains.groups} "
                          f"client slices, and {partitions} partitions x 'slices-per-client'="
                          f"{cfg.slices_per_client} give {slices}; lower 'chains.groups' or raise "
                          "'slices-per-client'")


def build_chain_plan(cfg: RunConfig, run: ServerRun) -> ChainPlan:
    """Groups, sequences, stacking and placement of ``cfg.method`` over this run's units."""
    units = data_units(run.plan)
    prior = parse_prior(cfg.chains.prior, cfg.chains.groups) if cfg.chains.prior else None
    layout, chains = chain_layout(cfg.method), cfg.chains
    if layout.clustered:
        clusters = cluster_partitions(run.federation.class_counts, chains.clusters, cfg.seed)
        groups = [[[u for u in units if UnitId.parse(u).partition in members]] for members in clusters]
    else:
        shards = layout.shards(chains.shards, chains.clusters)
        flat = group_units(units, shards * chains.groups, derive_seed(cfg.seed, layout.name, "grouping"))
        groups = [flat[s * chains.groups : (s + 1) * chains.groups] for s in range(shards)]
    orders = layout.orders(chains.groups, chains.budget, prior, seed=derive_seed(cfg.seed, layout.name, "sequences"))
    return ChainPlan(layout.name, groups, [list(orders) for _ in groups], layout.stacking,
                     layout.module_placement(chains.placement), layout.rounds(cfg), chains.serving)


def position_targets(plan: ChainPlan, run: ServerRun) -> list[list[str] | None]:
    """The layers each position's module sits on (None = every LoRA target)."""
    phases = max(len(o) for orders in plan.sequences for o in orders)
    if plan.placement != "layer":
        return [None] * phases
    targets = run.bundle.backbone.lora_targets
    if isinstance(targets, str):
        raise ValueError("layer placement needs a list of LoRA target modules; use chains.placement='additive'")
    return layer_blocks(target_modules_in_depth_order(run.bundle.backbone.module, targets), phases)


def target_modules_in_depth_order(module: torch.nn.Module, targets: list[str]) -> list[str]:
    """Every module peft wraps for ``targets`` (exact names or name suffixes, like peft matches them),
    by full name in the model's order, so blocks of them are blocks of layers (``query``/``value`` of
    a transformer become one pair per layer)."""
    names = [n for n, _ in module.named_modules()
             if any(n == t or n.endswith("." + t) for t in targets)]
    return names or list(targets)


# -- training --------------------------------------------------------------------------------
def _numpy(state: dict[str, torch.Tensor]) -> Arrays:
    return {k: np.ascontiguousarray(v.detach().numpy()) for k, v in state.items()}


def _copied(state: dict[str, torch.Tensor]) -> Arrays:
    """Arrays of their own (``state`` may be the cached seeded start, which nothing may write to)."""
    return {k: np.array(v.detach().numpy(), copy=True) for k, v in state.items()}


def _record(arrays: Arrays) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


@dataclass
class ChainState:
    """Where one chain stands while positions are being (re)trained."""

    chain: Chain
    position: int  # the position being trained (1-based)
    prefix: list[str] = field(default_factory=list)  # artifact sha256 of each frozen module before it (new stacking)
    start: Arrays = field(default_factory=dict)  # LoRA + head the position starts from


class ChainTrainer:
    """Trains positions of many chains in lock-step waves over the Grid."""

    def __init__(self, grid: Grid, run: ServerRun, plan: ChainPlan, ledger: Ledger, watermark: int) -> None:
        self.grid, self.run, self.plan, self.ledger, self.watermark = grid, run, plan, ledger, watermark
        self.cfg = run.cfg
        self.targets = position_targets(plan, run)
        self.num_classes = run.num_classes
        self.rebuilt: list[str] = []
        self.wave = 0
        #: partitions lost in this run and the positions left unbuilt because they needed one
        self.excluded: set[int] = set()
        self.unbuilt: list[str] = []
        #: examples each position's last round trained on: FedCIO weighs its clusters' votes by it
        self.trained_on: dict[str, int] = {}
        self.shipping = ModuleShipping(run.store)
        self.stored: dict[str, str] = {}  # artifact -> sha256, as recorded in this run

    def _artifact_sha(self, artifact: str) -> str:
        if artifact not in self.stored:
            self.stored[artifact] = next(a["sha256"] for a in self.ledger.artifacts() if a["artifact"] == artifact)
        return self.stored[artifact]

    def _artifact_state(self, artifact: str) -> Arrays:
        """A stored module's arrays, from the bytes this run holds (the same bytes it sends the nodes)."""
        sha = self._artifact_sha(artifact)
        return {k: np.array(v, copy=True) for k, v in arrays_of(sha, self.shipping.module_bytes(sha).tobytes()).items()}

    def _begin(self, chain: Chain, position: int) -> ChainState:
        """The starting point of ``position``: prefix modules and head from the stored valid prefix; a first
        position starts from the run's initial model (the seeded LoRA + head, or for a continued chain the
        initial arrays the store recorded), a new module from its own seed."""
        state = ChainState(chain, position)
        first_lora, first_head = (_copied(part) for part in split_state(self.run.initial_state))
        head = first_head
        previous = None
        for p in range(1, position):
            previous = self._artifact_state(self.plan.artifact_id(chain, p))
            lora, head = split_state(previous)
            if self.plan.stacking == "new":
                state.prefix.append(self._artifact_sha(self.plan.artifact_id(chain, p)))
        if self.plan.stacking == "continue":
            lora = split_state(previous)[0] if previous else first_lora
        else:
            artifact = self.plan.artifact_id(chain, position)
            lora = _numpy(fresh_module(self.cfg, self.num_classes, slot_name(position), self.targets[position - 1],
                                       self._init_seed(artifact)))
        state.start = {**lora, **head}
        return state

    def _init_seed(self, artifact: str) -> int:
        """The seed of a new module's initial weights (the node derives nothing: it is sent)."""
        return derive_seed(self.cfg.seed, self.cfg.method, artifact)

    def _slots(self, position: int) -> tuple[Slot, ...]:
        if self.plan.stacking == "continue":
            return DEFAULT_SLOTS
        return tuple(Slot(slot_name(p), None if self.targets[p - 1] is None else tuple(self.targets[p - 1]))
                     for p in range(1, position + 1))

    def participants(self, chain: Chain, position: int) -> dict[int, list[int]]:
        slices: dict[int, list[int]] = {}
        for unit in self.plan.lineage(chain, position):
            u = UnitId.parse(unit)
            slices.setdefault(u.partition, []).append(u.slice)
        return {p: sorted(s) for p, s in sorted(slices.items())}

    def artifact(self, s: ChainState) -> str:
        """The artifact the state's position builds: the group its round averages."""
        return self.plan.artifact_id(s.chain, s.position)

    def train(self, start: dict[str, int]) -> None:
        """Train every chain from its start position to its end, all chains advancing together."""
        states = []
        for chain in self.plan.chains():
            if chain.key in start:
                try:
                    states.append(self._begin(chain, start[chain.key]))
                except StoreError:
                    if not self._forgotten_meanwhile(chain, start[chain.key]):
                        raise
                    self._leave_unbuilt(chain, start[chain.key])
        total = sum(self.plan.phases(s.chain) - s.position + 1 for s in states)
        done = 0
        while states:
            current = {self.artifact(s): s.start for s in states}
            for server_round in range(1, self.plan.rounds_per_phase + 1):
                current = self._round(states, current, server_round)
                states = self._drop_excluded(states)
            for s in states:
                self._finish(s, current[self.artifact(s)])
                done += 1
            log(INFO, "fedforget: %d/%d chain positions trained", done, total)
            states = [self._advance(s, current[self.artifact(s)]) for s in states
                      if s.position < self.plan.phases(s.chain)]

    def _forgotten_meanwhile(self, chain: Chain, position: int) -> bool:
        """Whether a request applied since this run chose what to rebuild invalidated the prefix ``position``
        continues (and its purge took the files): everything built on it would be stale."""
        valid = self.ledger.valid_artifacts()
        return any(self.plan.artifact_id(chain, p) not in valid for p in range(1, position))

    def _leave_unbuilt(self, chain: Chain, position: int) -> None:
        """The chain stops before ``position``: the next retrain rebuilds it from its valid prefix."""
        log(INFO, "fedforget: a request applied during this run forgot the prefix of chain %s before position %d; "
                  "the next retrain rebuilds it", chain.key, position)
        self.unbuilt += [self.plan.artifact_id(chain, p) for p in range(position, self.plan.phases(chain) + 1)]

    def lost(self, s: ChainState) -> bool:
        """Whether a partition the state's position needs was excluded in this run."""
        return bool(set(self.participants(s.chain, s.position)) & self.excluded)

    def _drop_excluded(self, states: list[ChainState]) -> list[ChainState]:
        """States that lost a participant stop here: their position (and the rest of the chain) stays unbuilt."""
        kept = []
        for s in states:
            if not self.lost(s):
                kept.append(s)
                continue
            for position in range(s.position, self.plan.phases(s.chain) + 1):
                self.unbuilt.append(self.plan.artifact_id(s.chain, position))
        return kept

    def message(self, s: ChainState, partition: int, slices: list[int], start: Arrays, server_round: int,
                again: bool = False) -> Message:
        """One node's ``train.chain`` message: frozen modules by sha256 (bytes only where the node may
        lack them), and the start state, unless the node can rebuild it from its seed."""
        artifact = self.artifact(s)
        seeded = self.shipping.enabled and self.plan.stacking == "new" and server_round == 1
        request = TrainModule(artifact, server_round, self.plan.stacking, tuple(slices), self._slots(s.position),
                              keep=self.shipping.enabled, prefix=tuple(s.prefix or ()),
                              init_seed=self._init_seed(artifact) if seeded else None)
        content = RecordDict({"config": request.to_config()})
        if s.prefix:
            modules = self.shipping.carry(partition, s.prefix, everything=again)
            if modules:
                content[MODULES_KEY] = _record(modules)
        if not seeded:
            content["arrays"] = _record(start)
        return Message(content, dst_node_id=self.run.nodes[partition], message_type=CHAIN_MESSAGE)

    def _round(self, states: list[ChainState], current: dict[str, Arrays], server_round: int) -> dict[str, Arrays]:
        """One round of every position due (:class:`ChainRound`); the positions' new states."""
        states = [s for s in states if not self.lost(s)]
        self.wave += 1
        result = ChainRound(self, states).run(server_round, {self.artifact(s): current[self.artifact(s)]
                                                             for s in states})
        self.excluded |= result.excluded
        for s in states:
            self.trained_on[self.artifact(s)] = result.weights.get(self.artifact(s), 0)
        return result.states

    def _finish(self, s: ChainState, state: Arrays) -> None:
        artifact = self.plan.artifact_id(s.chain, s.position)
        sha = self.run.store.put_arrays(state, {"artifact": artifact, "method": self.cfg.method,
                                                "task": self.cfg.task})
        self.stored[artifact] = sha
        if self.plan.stacking == "new" and s.position < self.plan.phases(s.chain):
            self.shipping.module_bytes(sha)  # the next position's prefix, held before a request can purge it
        slot = self._slots(s.position)[-1]
        self.ledger.record_artifact(
            artifact, sha, "lora+head", self.plan.lineage(s.chain, s.position), self.watermark,
            {"shard": s.chain.shard, "sequence": s.chain.index, "position": s.position, "slot": slot.slot,
             "targets": None if slot.targets is None else list(slot.targets), "order": list(s.chain.order),
             "train-examples": self.trained_on.get(self.artifact(s), 0)})
        self.rebuilt.append(artifact)
        crash_point("chains:position-recorded")

    def _advance(self, s: ChainState, state: Arrays) -> ChainState:
        head = split_state(state)[1]
        nxt = ChainState(s.chain, s.position + 1, list(s.prefix))
        if self.plan.stacking == "continue":
            nxt.start = dict(state)
        else:
            nxt.prefix.append(self.stored[self.plan.artifact_id(s.chain, s.position)])
            artifact = self.plan.artifact_id(s.chain, nxt.position)
            fresh = _numpy(fresh_module(self.cfg, self.num_classes, slot_name(nxt.position),
                                        self.targets[nxt.position - 1], self._init_seed(artifact)))
            nxt.start = {**fresh, **head}
        return nxt


@dataclass(frozen=True)
class ChainSend(Send):
    """A ``train.chain`` message with what rebuilds it (carrying every module) when the node lacks one."""

    state: ChainState | None = None
    slices: tuple[int, ...] = ()
    start: Arrays = field(default_factory=dict)
    server_round: int = 0


class ChainRound(Round):
    """One round of every chain position due: each holder of slices of the position's groups trains the
    position's module on them; a node that lacks a frozen module it names gets the message again with
    the bytes."""

    def __init__(self, trainer: ChainTrainer, states: list[ChainState]) -> None:
        run = trainer.run
        super().__init__(trainer.grid, run)
        self.trainer, self.states = trainer, states
        self.needs = 0

    def configure_train(self, server_round: int, states: Mapping[str, Arrays]) -> list[Send]:
        t = self.trainer
        sends: list[Send] = []
        for s in self.states:
            start = states[t.artifact(s)]
            for partition, slices in t.participants(s.chain, s.position).items():
                message = t.message(s, partition, slices, start, server_round)
                sends.append(ChainSend(partition, message, partial(self._valid_or_need, partition, start, message),
                                       t.artifact(s), state=s, slices=tuple(slices), start=start,
                                       server_round=server_round))
        return sends

    def _valid(self, partition: int, start: Arrays, reply: Message) -> str | None:
        return check_chain_reply(reply, partition, start, len(self.trainer.run.plan.partition_ids(partition)))

    def _valid_or_need(self, partition: int, start: Arrays, sent: Message, reply: Message) -> str | None:
        if not reply.has_error() and ModuleNeed.in_record(reply.content):
            return check_need_reply(reply, partition, list(sent.content["config"][PREFIX_KEY]))
        return self._valid(partition, start, reply)

    def exchange(self, sends: Sequence[Send]) -> tuple[list[Message | None], set[int], int]:
        """The failure rule's exchange, then the messages again with the bytes to every node that asked for
        modules it lacks."""
        replies, lost, bytes_down = super().exchange(sends)
        needy = [i for i, r in enumerate(replies) if r is not None and need_of(r) is not None]
        self.needs = len(needy)
        if needy:
            log(INFO, "fedforget: %d node(s) lack cached modules; sending them again with the bytes", len(needy))
            t = self.trainer
            again: list[Send] = []
            for i in needy:
                first = sends[i]
                assert isinstance(first, ChainSend) and first.state is not None
                t.shipping.lost(first.partition)
                message = t.message(first.state, first.partition, list(first.slices), first.start,
                                    first.server_round, again=True)
                again.append(Send(first.partition, message, partial(self._valid, first.partition, first.start),
                                  first.group))
            answers, more, resent = super().exchange(again)
            for i, answer in zip(needy, answers, strict=True):
                replies[i] = answer
            lost |= more
            bytes_down += resent
        return replies, lost, bytes_down

    def contributions(self, send: Send, reply: Message) -> list[Contribution]:
        metrics = reply.content["metrics"]
        return [Contribution(str(send.group), int(metrics[PARTITION_KEY]),
                             int(metrics["num-examples"]), to_numpy(reply.content["arrays"]),
                             float(metrics["train-loss"]))]

    def row_fields(self, server_round: int, sends: Sequence[Send]) -> dict[str, Any]:
        t = self.trainer
        return {"wave": t.wave, "positions": sorted({s.position for s in self.states}), "chains": len(self.states),
                "modules-named": sum(len(s.prefix) * len(t.participants(s.chain, s.position)) for s in self.states),
                "modules-carried": sum(len(x.message.content[MODULES_KEY]) for x in sends
                                       if MODULES_KEY in x.message.content),
                "module-needs": self.needs}
