"""FedSGT, S3T, SISA and FedCIO: train every chain position through Flower, store each with its lineage.

Each position of each chain is one artifact: a module trained (``rounds-per-phase`` FedAvg rounds)
by the clients that hold slices of the chain's groups so far, on those slices only, with the
earlier modules of the chain frozen and a head snapshot of its own. Positions of all chains that
are due are sent together (they are independent), so a run needs ``L·rounds-per-phase`` exchanges,
not ``B·L·…``. ``action='retrain'`` first makes the clients delete forgotten samples for good
(``query.forget``), then rebuilds only the invalid positions, starting from each chain's valid prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from logging import INFO

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.core.config import ConfigError, RunConfig
from fedforget.core.seeds import derive_seed, derive_seed32
from fedforget.core.slicing import UnitId
from fedforget.core.weighted_mean import weighted_mean
from fedforget.federation.control_messages import NEED_CLASS_COUNTS, ModuleNeed
from fedforget.federation.driver import Built, MethodServer, drive
from fedforget.federation.failover import check_chain_reply, exchange_redo_or_exclude
from fedforget.federation.messaging import (
    CHAIN_MESSAGE,
    PARTITION_KEY,
    payload_bytes,
    record_bytes,
    to_numpy,
)
from fedforget.federation.module_messages import DEFAULT_SLOTS, Slot, TrainModule
from fedforget.federation.module_shipping import (
    MODULES_KEY,
    PREFIX_KEY,
    ModuleShipping,
    check_need_reply,
    need_of,
)
from fedforget.federation.module_stack import default_module_init, fresh_module, initial_head, slot_name, split_state
from fedforget.federation.registration import Federation
from fedforget.federation.run_setup import ServerRun
from fedforget.methods.chains.config import parse_prior
from fedforget.methods.chains.grouping import group_units
from fedforget.methods.chains.plan import Chain, ChainPlan, layer_blocks, rebuild_from
from fedforget.methods.chains.sequences import select_sequences
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
    if cfg.method == "fedcio":  # groups are clusters of partitions, formed from the data
        return
    shards = 1 if cfg.method == "fedsgt" else cfg.chains.shards
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
    seq_seed = derive_seed(cfg.seed, cfg.method, "sequences")
    if cfg.method == "fedcio":
        clusters = cluster_partitions(run.federation.class_counts, cfg.chains.clusters, cfg.seed)
        groups = [[[u for u in units if UnitId.parse(u).partition in members]] for members in clusters]
        return ChainPlan("fedcio", groups, [[(0,)] for _ in groups], "continue", "additive", cfg.num_rounds,
                         cfg.chains.serving)
    shards = 1 if cfg.method == "fedsgt" else cfg.chains.shards
    flat = group_units(units, shards * cfg.chains.groups, derive_seed(cfg.seed, cfg.method, "grouping"))
    groups = [flat[s * cfg.chains.groups : (s + 1) * cfg.chains.groups] for s in range(shards)]
    if cfg.method == "sisa":
        return ChainPlan("sisa", groups, [[tuple(range(cfg.chains.groups))] for _ in groups], "continue", "additive",
                         cfg.chains.rounds_per_phase, cfg.chains.serving)
    orders = select_sequences(cfg.chains.groups, cfg.chains.budget, prior, seed=seq_seed)
    default_placement = "layer" if cfg.method == "s3t" else "additive"
    placement = default_placement if cfg.chains.placement == "auto" else cfg.chains.placement
    return ChainPlan(cfg.method, groups, [list(orders) for _ in groups], "new", placement, cfg.chains.rounds_per_phase,
                     cfg.chains.serving)


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
        self.trained_on: dict[int, int] = {}
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
        """The starting point of ``position``: prefix modules and head from the stored valid prefix."""
        state = ChainState(chain, position)
        head = _numpy(initial_head(self.cfg, self.num_classes))
        previous = None
        for p in range(1, position):
            previous = self._artifact_state(self.plan.artifact_id(chain, p))
            lora, head = split_state(previous)
            if self.plan.stacking == "new":
                state.prefix.append(self._artifact_sha(self.plan.artifact_id(chain, p)))
        if self.plan.stacking == "continue":
            lora = split_state(previous)[0] if previous else _numpy(default_module_init(self.cfg, self.num_classes))
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

    def _participants(self, chain: Chain, position: int) -> dict[int, list[int]]:
        slices: dict[int, list[int]] = {}
        for unit in self.plan.lineage(chain, position):
            u = UnitId.parse(unit)
            slices.setdefault(u.partition, []).append(u.slice)
        return {p: sorted(s) for p, s in sorted(slices.items())}

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
            current = {id(s): s.start for s in states}
            for server_round in range(1, self.plan.rounds_per_phase + 1):
                current = self._round(states, current, server_round)
                states = self._drop_excluded(states, current)
            for s in states:
                self._finish(s, current[id(s)])
                done += 1
            log(INFO, "fedforget: %d/%d chain positions trained", done, total)
            states = [self._advance(s, current[id(s)]) for s in states
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

    def _drop_excluded(self, states: list[ChainState], current: dict[int, Arrays]) -> list[ChainState]:
        """States that lost a participant stop here: their position (and the rest of the chain) stays unbuilt."""
        kept = []
        for s in states:
            if id(s) in current and not set(self._participants(s.chain, s.position)) & self.excluded:
                kept.append(s)
                continue
            for position in range(s.position, self.plan.phases(s.chain) + 1):
                self.unbuilt.append(self.plan.artifact_id(s.chain, position))
        return kept

    def _message(self, s: ChainState, partition: int, slices: list[int], start: Arrays, server_round: int,
                 again: bool = False) -> Message:
        """One node's ``train.chain`` message: frozen modules by sha256 (bytes only where the node may
        lack them), and the start state, unless the node can rebuild it from its seed."""
        artifact = self.plan.artifact_id(s.chain, s.position)
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

    def _exchange(self, messages: list[Message], partitions: list[int], shapes: list[Arrays],
                  rebuild: list[tuple]) -> tuple[list[Message | None], int, int]:
        """Send, then send again with the bytes to every node that asked for modules it lacks;
        return the replies, the bytes really sent down and how many nodes asked."""
        def valid_reply(reply: Message, i: int) -> str | None:
            return check_chain_reply(reply, partitions[i], shapes[i], len(self.run.plan.partition_ids(partitions[i])))

        def valid_or_need(reply: Message, i: int) -> str | None:
            if not reply.has_error() and ModuleNeed.in_record(reply.content):
                return check_need_reply(reply, partitions[i], list(messages[i].content["config"][PREFIX_KEY]))
            return valid_reply(reply, i)

        bytes_down = sum(payload_bytes(m.content) for m in messages)
        replies, lost = exchange_redo_or_exclude(self.grid, self.run.nodes, messages, partitions,
                                                 self.cfg.round_timeout, valid_or_need)
        needy = [i for i, r in enumerate(replies) if r is not None and need_of(r) is not None]
        if needy:
            log(INFO, "fedforget: %d node(s) lack cached modules; sending them again with the bytes", len(needy))
            for i in needy:
                self.shipping.lost(partitions[i])
            again = [self._message(*rebuild[i], again=True) for i in needy]
            bytes_down += sum(payload_bytes(m.content) for m in again)
            answers, more = exchange_redo_or_exclude(
                self.grid, self.run.nodes, again, [partitions[i] for i in needy], self.cfg.round_timeout,
                lambda reply, j: valid_reply(reply, needy[j]))
            for i, answer in zip(needy, answers, strict=True):
                replies[i] = answer
            lost |= more
        self.excluded |= lost
        return replies, bytes_down, len(needy)

    def _round(self, states: list[ChainState], current: dict[int, Arrays], server_round: int) -> dict[int, Arrays]:
        messages, owners, partitions, shapes, rebuild = [], [], [], [], []
        states = [s for s in states if not set(self._participants(s.chain, s.position)) & self.excluded]
        for s in states:
            for partition, slices in self._participants(s.chain, s.position).items():
                messages.append(self._message(s, partition, slices, current[id(s)], server_round))
                rebuild.append((s, partition, slices, current[id(s)], server_round))
                owners.append(id(s))
                partitions.append(partition)
                shapes.append(current[id(s)])
        named = sum(len(s.prefix) * len(self._participants(s.chain, s.position)) for s in states)
        carried = sum(len(m.content[MODULES_KEY]) for m in messages if MODULES_KEY in m.content)
        started = time.monotonic()
        replies, bytes_down, needs = self._exchange(messages, partitions, shapes, rebuild)
        self.wave += 1
        by_owner: dict[int, list[Message]] = {}
        for owner, reply in zip(owners, replies, strict=True):  # answers in message order
            if reply is not None:
                by_owner.setdefault(owner, []).append(reply)
        out, bytes_up, examples, losses = {}, 0, 0, []
        for s in states:
            if set(self._participants(s.chain, s.position)) & self.excluded:
                continue  # dropped by _drop_excluded
            ordered = sorted(by_owner.get(id(s), []), key=lambda r: int(r.content["metrics"][PARTITION_KEY]))
            bytes_up += sum(record_bytes(r.content["arrays"]) for r in ordered)
            useful = [r.content for r in ordered if int(r.content["metrics"]["num-examples"]) > 0]
            self.trained_on[id(s)] = sum(int(r["metrics"]["num-examples"]) for r in useful)
            examples += self.trained_on[id(s)]
            losses += [float(r["metrics"]["train-loss"]) for r in useful]
            if useful:
                mean = weighted_mean([to_numpy(r["arrays"]) for r in useful],
                                     [r["metrics"]["num-examples"] for r in useful],
                                     keys=[int(r["metrics"][PARTITION_KEY]) for r in useful])
                out[id(s)] = {k: np.ascontiguousarray(v) for k, v in mean.items()}
            else:  # every holder of this prefix's data deleted it all: the position keeps its start
                out[id(s)] = current[id(s)]
        self.run.store.append_metrics({
            "wave": self.wave, "round": server_round, "positions": sorted({s.position for s in states}),
            "chains": len(states), "client-rounds": len(messages), "bytes-down": bytes_down, "bytes-up": bytes_up,
            "modules-named": named, "modules-carried": carried, "module-needs": needs,
            "train-examples": examples, "train-loss": float(np.mean(losses)) if losses else 0.0,
            "seconds": time.monotonic() - started, "action": self.cfg.action,
        })
        return out

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
             "train-examples": self.trained_on.get(id(s), 0)})
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


# -- the two actions -------------------------------------------------------------------------
def run_chains(grid: Grid, cfg: RunConfig) -> None:
    """ServerApp entry for fedsgt / s3t / sisa / fedcio (``action`` = train or retrain)."""
    drive(grid, cfg, ChainsServer(grid, cfg))


class ChainsServer(MethodServer):
    """Chains of LoRA modules over groups of slices: a retrain continues each chain from its longest valid
    prefix."""

    def needs(self) -> tuple[str, ...]:
        return (NEED_CLASS_COUNTS,) if self.cfg.method == "fedcio" else ()  # FedCIO clusters label histograms

    def check(self, federation: Federation, num_classes: int) -> None:
        refuse_groups_without_data(self.cfg, len(federation.nodes))

    def train(self, run: ServerRun, ledger: Ledger) -> Built:
        plan = build_chain_plan(self.cfg, run)
        position_targets(plan, run)  # reject an impossible placement before any training
        ledger.load_samples(run.plan.slices)
        ledger.set_plan(plan.serving_json())
        run.store.update_manifest(plan=plan.to_json())
        trainer = ChainTrainer(self.grid, run, plan, ledger, watermark=0)
        trainer.train({c.key: 1 for c in plan.chains()})
        return Built(trainer.rebuilt, trainer.unbuilt, trainer.excluded, {"waves": trainer.wave},
                     {"rounds-done": trainer.wave}, f"{self.cfg.method} trained {len(trainer.rebuilt)} artifacts")

    def retrain(self, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        plan = ChainPlan.from_json(run.store.manifest()["plan"])
        trainer = ChainTrainer(self.grid, run, plan, ledger, watermark)
        trainer.train(rebuild_from(plan, reusable))
        return Built(trainer.rebuilt, trainer.unbuilt, trainer.excluded,
                     {"waves": trainer.wave, "rebuilt": trainer.rebuilt},
                     summary=f"retrain rebuilt {len(trainer.rebuilt)} artifact(s) up to request {watermark}")
