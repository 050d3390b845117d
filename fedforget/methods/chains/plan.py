"""The shape of every sequence-sharded method (FedSGT, S3T, SISA, FedCIO) as one pure plan.

A *chain* is one trained sequence: shard ``s``, sequence ``q`` of that shard, visiting the shard's
groups in ``order``. Position ``i`` of a chain is an artifact trained on the cumulative data of
groups ``order[:i+1]``, so its lineage is those groups' units; truncating a chain at its first
invalid position leaves a model that never saw the forgotten data (FedSGT §2.4, S3T A5).

* FedSGT: one shard, ``L`` groups from Algorithm 1, ``B`` sequences, a new LoRA module per position.
* S3T: ``m`` shards of ``L`` slices, ``B`` sequences per shard, modules placed on layer blocks.
* SISA: ``m`` shards of ``L`` slices, one identity sequence, one adapter continued slice by slice.
* FedCIO: ``c`` client clusters, one position trained for ``num-rounds`` rounds, ensembled.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedforget.core.harmonic import harmonic
from fedforget.methods.chains.serving import select_serving

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig

STACKINGS = ("new", "continue")
PLACEMENTS = ("additive", "layer")


@dataclass(frozen=True)
class ChainLayout:
    """How one chains variant lays out its chains, in one value its Strategy class names (``FedSGT.layout``):
    training, the memory estimate, the config rules and the theory ask it, and none compares variant names."""

    #: the run config's ``method`` value: it names the variant's artifacts and seeds
    name: str
    #: cuts ``chains.shards`` shards (S3T, SISA); FedSGT's groups form one global shard
    sharded: bool
    #: selects ``chains.budget`` group orders per shard, a new module per position (FedSGT, S3T); otherwise
    #: one order whose single module is continued group by group (SISA, FedCIO)
    ordered: bool
    #: where a new position's module sits under ``chains.placement = "auto"`` (S3T: blocks of layers)
    placement: str = "additive"
    #: the groups are k-means clusters of the clients' label histograms, one group per shard (FedCIO): formed
    #: once the nodes registered their class counts, trained ``num-rounds`` rounds, voting by their examples
    clustered: bool = False

    @property
    def stacking(self) -> str:
        """``new``: a frozen prefix plus a fresh module per position; ``continue``: one module carried on."""
        return "new" if self.ordered else "continue"

    @property
    def rounds_key(self) -> str:
        """The run-config key that sets the rounds one position trains."""
        return "num-rounds" if self.clustered else "chains.rounds-per-phase"

    def rounds(self, cfg: RunConfig) -> int:
        return cfg.num_rounds if self.clustered else cfg.chains.rounds_per_phase

    def shards(self, shards: int, clusters: int) -> int:
        """The shards its chains are trained over: ``chains.shards``, FedSGT's one, FedCIO's clusters."""
        return clusters if self.clustered else shards if self.sharded else 1

    def shape(self, groups: int, budget: int, shards: int, clusters: int) -> tuple[int, int, int]:
        """(shards, groups per shard, orders per shard) for these sizes; a size the variant does not read is
        ignored (FedSGT has one shard, FedCIO only clusters)."""
        per_shard = 1 if self.clustered else groups
        return self.shards(shards, clusters), per_shard, (budget if self.ordered else 1)

    def stored_modules(self, groups: int, budget: int, shards: int, clusters: int) -> int:
        """Modules (LoRA factors + head) the variant stores: one per chain position."""
        num_shards, per_shard, orders = self.shape(groups, budget, shards, clusters)
        return num_shards * per_shard * orders

    def orders(self, groups: int, budget: int, prior: Sequence[float] | None, seed: int) -> list[tuple[int, ...]]:
        """The group orders every shard trains: the budget's selection (cyclic, or BMS under a prior), or the
        shard's groups in their own order."""
        if not self.ordered:
            return [tuple(range(1 if self.clustered else groups))]
        from fedforget.methods.chains.sequences import select_sequences  # numpy: only a run selects

        return select_sequences(groups, budget, prior, seed=seed)

    def module_placement(self, chosen: str) -> str:
        """Where the modules sit for ``chains.placement = chosen``: a continued module stays additive."""
        if not self.ordered:
            return "additive"
        return self.placement if chosen == "auto" else chosen


FEDSGT_LAYOUT = ChainLayout("fedsgt", sharded=False, ordered=True)
S3T_LAYOUT = ChainLayout("s3t", sharded=True, ordered=True, placement="layer")
SISA_LAYOUT = ChainLayout("sisa", sharded=True, ordered=False)
FEDCIO_LAYOUT = ChainLayout("fedcio", sharded=False, ordered=False, clustered=True)
#: the run config names the variant (``method=``); this is where that name becomes its layout
CHAIN_LAYOUTS: dict[str, ChainLayout] = {v.name: v for v in (FEDSGT_LAYOUT, S3T_LAYOUT, SISA_LAYOUT, FEDCIO_LAYOUT)}


def chain_layout(method: str) -> ChainLayout:
    """The layout of the chains variant ``method`` (a ValueError names the variants for any other)."""
    try:
        return CHAIN_LAYOUTS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(CHAIN_LAYOUTS)}") from None


@dataclass(frozen=True)
class Chain:
    shard: int
    index: int
    order: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"s{self.shard}/q{self.index}"


@dataclass(frozen=True)
class ChainPlan:
    """Everything training, forgetting, serving and verifying need to agree on, in one value."""

    method: str
    #: shard -> group -> sorted units ("partition:slice")
    groups: list[list[list[str]]]
    #: shard -> the group orders trained for it
    sequences: list[list[tuple[int, ...]]]
    stacking: str
    placement: str
    rounds_per_phase: int
    serving: str

    def chains(self) -> Iterator[Chain]:
        for shard, orders in enumerate(self.sequences):
            for index, order in enumerate(orders):
                yield Chain(shard, index, tuple(order))

    def chain(self, shard: int, index: int) -> Chain:
        return Chain(shard, index, tuple(self.sequences[shard][index]))

    def artifact_id(self, chain: Chain, position: int) -> str:
        """Position is 1-based: ``p1`` is the module trained on the chain's first group."""
        return f"{self.method}/{chain.key}/p{position}"

    def phases(self, chain: Chain) -> int:
        return len(chain.order)

    def lineage(self, chain: Chain, position: int) -> list[str]:
        units = [u for g in chain.order[:position] for u in self.groups[chain.shard][g]]
        return sorted(set(units))

    def artifacts(self) -> Iterator[tuple[str, Chain, int]]:
        for chain in self.chains():
            for position in range(1, self.phases(chain) + 1):
                yield self.artifact_id(chain, position), chain, position

    def num_groups(self) -> int:
        return sum(len(g) for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "chains",
            "method": self.method,
            "groups": self.groups,
            "sequences": [[list(o) for o in orders] for orders in self.sequences],
            "stacking": self.stacking,
            "placement": self.placement,
            "rounds-per-phase": self.rounds_per_phase,
            "serving": self.serving,
        }

    def serving_json(self) -> dict[str, Any]:
        """The plan without its groups' unit lists: all that serving needs, so the forget path does
        not parse a list that grows with the number of clients (the full plan is in the manifest)."""
        return {**self.to_json(), "groups": [[[] for _ in shard] for shard in self.groups]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChainPlan:
        return cls(
            method=str(data["method"]),
            groups=[[list(map(str, g)) for g in shard] for shard in data["groups"]],
            sequences=[[tuple(int(x) for x in o) for o in orders] for orders in data["sequences"]],
            stacking=str(data["stacking"]),
            placement=str(data["placement"]),
            rounds_per_phase=int(data["rounds-per-phase"]),
            serving=str(data["serving"]),
        )


def active_length(plan: ChainPlan, chain: Chain, valid: Collection[str]) -> int:
    """How many leading positions of ``chain`` are still valid (its servable prefix)."""
    n = 0
    for position in range(1, plan.phases(chain) + 1):
        if plan.artifact_id(chain, position) not in valid:
            break
        n = position
    return n


def serving_artifacts(plan: ChainPlan, chain: Chain, prefix: int) -> list[str]:
    """What a served prefix loads: every module up to ``prefix`` (stacked), or the last checkpoint."""
    if prefix < 1:
        return []
    if plan.stacking == "continue":
        return [plan.artifact_id(chain, prefix)]
    return [plan.artifact_id(chain, p) for p in range(1, prefix + 1)]


def chain_serving(plan: ChainPlan, valid: Collection[str]) -> dict[str, Any]:
    """The serving plan: per shard the selected prefixes and their weights; shards are ensembled."""
    valid = set(valid)
    shards = []
    for shard, orders in enumerate(plan.sequences):
        chains = [plan.chain(shard, i) for i in range(len(orders))]
        prefixes = [active_length(plan, c, valid) for c in chains]
        chosen = select_serving([c.order for c in chains], prefixes, plan.serving)
        members = [
            {"sequence": i, "prefix": prefixes[i], "weight": w,
             "artifacts": serving_artifacts(plan, chains[i], prefixes[i])}
            for i, w in chosen
        ]
        shards.append({"shard": shard, "prefixes": prefixes, "members": members})
    served = sorted({a for s in shards for m in s["members"] for a in m["artifacts"]})
    return {"kind": "chains", "available": bool(served), "strategy": plan.serving, "shards": shards,
            "artifacts": served, "deletions-left": expected_deletions_left(plan, valid)}


def expected_deletions_left(plan: ChainPlan, valid: Collection[str]) -> float:
    """δ left: expected further requests (uniform over groups) until no chain has a valid first module.

    Coupon collection over the clean top groups: ``n·H_k`` with ``n`` groups in all and ``k``
    distinct first groups still valid; counts the request that causes the failure, like the paper's δ.
    """
    valid = set(valid)
    clean_tops = {
        (c.shard, c.order[0]) for c in plan.chains() if plan.artifact_id(c, 1) in valid
    }
    return plan.num_groups() * harmonic(len(clean_tops)) if clean_tops else 0.0


def rebuild_from(plan: ChainPlan, valid: Collection[str]) -> dict[str, int]:
    """For each chain with an invalid position, the first position to retrain (1-based)."""
    valid = set(valid)
    out = {}
    for chain in plan.chains():
        prefix = active_length(plan, chain, valid)
        if prefix < plan.phases(chain):
            out[chain.key] = prefix + 1
    return out


def layer_of(target: str) -> str:
    """The layer a LoRA target sits in: its path up to the first numbered component (``encoder.layer.3``,
    ``model.layers.3``), or the target itself when it is not in a numbered stack (``conv1``)."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return target


def layer_blocks(targets: Sequence[str], phases: int) -> list[list[str]]:
    """S3T placement: phase ``i`` (0-based) trains the ``i``-th block of layers counted from the output.

    ``targets`` come in depth order and are grouped into layers (``layer_of``), so a block never splits
    a layer's query from its value; ``g = layers // phases`` layers per block, and the layers below
    ``phases·g`` get no module.
    """
    layers: list[list[str]] = []
    for target in targets:
        if layers and layer_of(layers[-1][-1]) == layer_of(target):
            layers[-1].append(target)
        else:
            layers.append([target])
    g = len(layers) // phases
    if g < 1:
        raise ValueError(
            f"layer placement needs at least one layer per phase: {len(layers)} layers for {phases} "
            "phases; lower chains.groups= or use chains.placement='additive'"
        )
    n = len(layers)
    return [[t for layer in layers[n - (i + 1) * g : n - i * g] for t in layer] for i in range(phases)]


def serving_from_json(plan_json: dict[str, Any], valid: Collection[str]) -> dict[str, Any]:
    """:func:`chain_serving` of a stored chains plan."""
    return chain_serving(ChainPlan.from_json(plan_json), valid)


def describe_invalidation(plan_json: dict[str, Any] | None, invalidated: Collection[str]) -> dict[str, Any]:
    """Which groups a request newly hit and which sequences it cut, read off the invalidated ids.

    A chain's first invalidated position holds the group that was hit, so no unit → group map (which
    grows with the number of clients) is needed on the forget path.
    """
    if not plan_json or plan_json.get("kind") != "chains":
        return {"groups": [], "sequences": []}
    first: dict[tuple[int, int], int] = {}
    for artifact in invalidated:
        _, shard, seq, pos = artifact.rsplit("/", 3)
        key = (int(shard[1:]), int(seq[1:]))
        first[key] = min(first.get(key, 1 << 30), int(pos[1:]))
    sequences = [{"shard": s, "sequence": q, "prefix": p - 1} for (s, q), p in sorted(first.items())]
    groups = sorted({(s, plan_json["sequences"][s][q][p - 1]) for (s, q), p in first.items()})
    return {"groups": [{"shard": s, "group": g} for s, g in groups], "sequences": sequences}


def shard_vote_weights(plan_json: dict[str, Any], serving: dict[str, Any],
                       metas: dict[str, dict[str, Any]]) -> list[float]:
    """How much each served shard's mixture counts in the ensemble, in ``serving["shards"]`` order.

    FedCIO's clusters are as unequal as k-means makes them, so a cluster votes with the examples its
    served model was trained on (recorded in the artifact's meta; a retrain on less data records less,
    exactly as a run from scratch would). S3T and SISA shards are equal by construction and vote
    equally. Shards with nothing served get 0. Weights sum to 1 over the served shards.
    """
    served = [s for s in serving["shards"] if s["members"]]
    if not served:
        return []
    layout = CHAIN_LAYOUTS.get(str(plan_json.get("method")))
    if layout is None or not layout.clustered:
        return [1.0 / len(served)] * len(served)
    sizes = [float(sum(metas.get(m["artifacts"][-1], {}).get("train-examples", 0) * m["weight"]
                       for m in s["members"])) for s in served]
    total = sum(sizes)
    if total <= 0:  # artifacts from before sizes were recorded: equal votes
        return [1.0 / len(served)] * len(served)
    return [x / total for x in sizes]
