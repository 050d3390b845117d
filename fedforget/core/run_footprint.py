"""How much memory a run config asks for, estimated before anything is trained or written (pure).

Every size a user can type multiplies into memory: ``lora-r`` into each module's LoRA factors, the chain
keys into the count of modules a method stores, ``slices-per-client`` into the partition plan and the
ledger's rows. :func:`check_fits` refuses a config whose estimate exceeds the memory this machine has
available, naming the key to lower and the largest value of it that fits, so a run that cannot finish is
refused before its store exists. The estimate is an upper bound of what grows with the config
(docs/configuration.md, "Bounds"); what does not (the interpreter, torch, the task's data) is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig

FLOAT_BYTES = 4
#: Copies of the trainable parameters while training: weights and gradients, plus Adam's two moments.
OPTIMISER_COPIES = {"sgd": 2, "adam": 4}
#: Models held at once while training: the server's and one training client's.
TRAINING_MODELS = 2
#: Partitions the estimate assumes (the run config does not say how many SuperNodes connect; the
#: local-simulation federation starts 10).
PLANNING_PARTITIONS = 10
#: Bytes per (partition, slice): the plan's lists, its JSON in the manifest, the unit's ledger rows and index.
SLICE_BYTES = 400
#: Bytes per training sample: its ledger row and index, and its place in the plan.
SAMPLE_BYTES = 200
#: Bytes per (artifact, unit) lineage row of the ledger.
LINEAGE_BYTES = 64
#: Bytes per group position of a chain method's orders (a pointer in a tuple), and per order.
ORDER_CELL_BYTES, ORDER_BYTES = 8, 64


@dataclass(frozen=True)
class TaskDims:
    """The sizes of a task that a run's memory scales with (counted on the built models)."""

    lora_per_rank: int  # LoRA parameters per unit of rank: Σ over the target layers of fan-in + fan-out
    head: int  # parameters of the classification head
    backbone: int  # frozen backbone parameters, one copy per model held
    feature_dim: int
    classes: int
    default_rows: int  # training rows a run uses with train-size=0
    pool_rows: int  # training rows the task has: a larger train-size takes them all


TASK_DIMS: dict[str, TaskDims] = {
    "digits-mlp": TaskDims(384, 650, 16_576, 64, 10, 1437, 1437),
    "digits-mlp-val": TaskDims(384, 650, 16_576, 64, 10, 1150, 1150),  # HO-SFL tuning split
    "digits-mlp-perm": TaskDims(384, 650, 16_576, 64, 10, 1437, 1437),  # pixel-permuted digits-mlp
    "digits-mlp-perm-val": TaskDims(384, 650, 16_576, 64, 10, 1150, 1150),  # its tuning split
    "fmnist-cnn": TaskDims(1897, 1290, 205_632, 128, 10, 12_000, 60_000),
    "fmnist-effnet": TaskDims(21_184, 12_810, 3_371_008, 1280, 10, 3000, 60_000),
    "rt-minilm": TaskDims(9216, 770, 22_565_376, 384, 2, 4000, 10_246),
    "fortunes-minilm": TaskDims(9216, 16_555, 22_565_376, 384, 43, 4000, 12_174),
    "rt-smollm": TaskDims(57_600, 1154, 134_515_008, 576, 2, 2000, 10_246),
    # any timm or Hugging Face model: sized like a base transformer (768 wide, 12 layers, query and value
    # adapted) with a thousand classes and a million rows, so only what no such model holds is refused
    "hf": TaskDims(36_864, 769_000, 86_000_000, 768, 1000, 1_000_000, 1_000_000),
}

CHAIN_METHODS = ("fedsgt", "s3t", "sisa", "fedcio")
SAFE_METHODS = ("safe", "protosisa")
#: The keys (attribute names) each method's estimate grows with, in the order a refusal names them.
SIZE_KEYS: dict[str, tuple[str, ...]] = {
    "fedsgt": ("lora_r", "groups", "budget", "slices_per_client"),
    "s3t": ("lora_r", "groups", "budget", "shards", "slices_per_client"),
    "sisa": ("lora_r", "groups", "shards", "slices_per_client"),
    "fedcio": ("lora_r", "clusters", "slices_per_client"),
    **{m: ("adapter_width", "coarse", "fine", "num_rounds", "slices_per_client") for m in SAFE_METHODS},
}
OTHER_SIZE_KEYS = ("lora_r", "slices_per_client")


def task_rows(cfg: RunConfig) -> int:
    """The training rows the run uses: ``train-size`` (0: the task's default), at most the task's pool."""
    dims = TASK_DIMS[cfg.task]
    return min(cfg.train_size or dims.default_rows, dims.pool_rows)


def stored_modules(cfg: RunConfig) -> int:
    """Modules (LoRA factors + head) the method stores: one per chain position, one per FedCIO cluster."""
    if cfg.method == "fedsgt":
        return cfg.budget * cfg.groups
    if cfg.method == "s3t":
        return cfg.shards * cfg.budget * cfg.groups
    if cfg.method == "sisa":
        return cfg.shards * cfg.groups
    if cfg.method == "fedcio":
        return cfg.clusters
    if cfg.method == "fedshard":
        return 2 * PLANNING_PARTITIONS  # a tree over the clients: at most twice its leaves
    return 2  # the final model (and a split run's client part)


def footprint(cfg: RunConfig, partitions: int = PLANNING_PARTITIONS) -> dict[str, int]:
    """Bytes the run holds, by part: ``model`` while training, ``modules`` stored, ``plan`` (partitions,
    slices, samples and their ledger rows), ``lineage`` (which units each module was trained on), ``orders``."""
    dims = TASK_DIMS[cfg.task]
    units = partitions * cfg.slices_per_client
    plan = units * SLICE_BYTES + task_rows(cfg) * SAMPLE_BYTES
    if cfg.method in SAFE_METHODS:
        width, dim = cfg.adapter_width, dims.feature_dim
        # a query and a head per class in each coarse shard (its cliques split the classes between them)
        per_round = cfg.coarse * dims.classes * (dim + width)
        attention = 3 * dim * width + width * width  # the frozen cross-attention every node rebuilds
        return {"model": (dims.backbone + attention + 4 * per_round) * FLOAT_BYTES,
                "modules": cfg.num_rounds * per_round * FLOAT_BYTES, "plan": plan,
                "lineage": cfg.num_rounds * cfg.fine * units * LINEAGE_BYTES, "orders": 0}  # a unit: ≤ fine cliques
    trainable = cfg.lora_r * dims.lora_per_rank + dims.head
    training = trainable * OPTIMISER_COPIES.get(cfg.optimizer, 4)
    modules = stored_modules(cfg)
    chained = cfg.method in CHAIN_METHODS
    orders = cfg.budget * (cfg.groups * ORDER_CELL_BYTES + ORDER_BYTES) if cfg.method in ("fedsgt", "s3t") else 0
    return {"model": TRAINING_MODELS * (dims.backbone + training) * FLOAT_BYTES,
            "modules": modules * trainable * FLOAT_BYTES, "plan": plan,
            "lineage": modules * (units // 2 + 1) * LINEAGE_BYTES if chained else modules * units * LINEAGE_BYTES,
            "orders": orders}


def total_bytes(cfg: RunConfig, partitions: int = PLANNING_PARTITIONS) -> int:
    return sum(footprint(cfg, partitions).values())


def size_keys(cfg: RunConfig) -> tuple[str, ...]:
    """The keys (attribute names) whose size this method's estimate grows with."""
    return SIZE_KEYS.get(cfg.method, OTHER_SIZE_KEYS)


def largest_fitting(cfg: RunConfig, name: str, limit: int, low: int = 1) -> int | None:
    """The largest value of ``name`` (keeping the rest of ``cfg``) whose estimate is within ``limit``
    bytes, by bisection (the estimate grows with every size key); None when even ``low`` does not fit."""
    fits: Callable[[int], bool] = lambda v: total_bytes(replace(cfg, **{name: v})) <= limit  # noqa: E731
    if not fits(low):
        return None
    lo, hi = low, int(getattr(cfg, name))
    while lo < hi:  # invariant: lo fits, hi does not (cfg as given does not fit)
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def fit_refusal(cfg: RunConfig, available: int, key_of: Callable[[str], str],
                typed: frozenset[str] = frozenset()) -> str | None:
    """None when the estimate fits in ``available`` bytes; otherwise the one line that says which key to
    lower and to what: of the size keys the user set (``typed``; all of them when none was), the one whose
    largest fitting value is the smallest change (``key_of`` maps an attribute to its run-config key)."""
    parts = footprint(cfg)
    need = sum(parts.values())
    if need <= available:
        return None
    biggest = max(parts, key=lambda part: parts[part])
    said = (f"this run config needs about {gib(need)} of memory ({biggest} {gib(parts[biggest])}) but this "
            f"machine has {gib(available)} available")
    names = size_keys(cfg)
    fixes: dict[str, int] = {}
    for name in names:
        largest = largest_fitting(cfg, name, available) if int(getattr(cfg, name)) > 1 else None
        if largest is not None:
            fixes[name] = largest
    if not fixes:
        return f"{said}; lower " + ", ".join(repr(key_of(n)) for n in names)
    chosen = [n for n in fixes if n in typed] or list(fixes)
    name = min(chosen, key=lambda n: int(getattr(cfg, n)) / fixes[n])
    others = ", ".join(repr(key_of(n)) for n in names if n != name)
    return (f"{said}; set run-config {key_of(name)!r} to at most {fixes[name]} (got {getattr(cfg, name)})"
            + (f", or lower {others}" if others else ""))


def available_memory() -> int:
    """Bytes this machine can give a new run now (psutil's ``available``: free plus reclaimable cache)."""
    import psutil

    return int(psutil.virtual_memory().available)
