"""How much memory a run config asks for, estimated before anything is trained or written (pure).

Every size a user can type multiplies into memory: ``lora-r`` into each module's LoRA factors, a method's
keys into the count of modules it stores, ``slices-per-client`` into the partition plan and the ledger's
rows. :func:`fit_refusal` refuses a config whose estimate exceeds the memory this machine has available,
naming the key to lower and the largest value of it that fits, so a run that cannot finish is refused
before its store exists. The estimate is an upper bound of what grows with the config
(docs/configuration.md, "Bounds"); what does not (the interpreter, torch, the task's data) is left out.

Here are the tasks' sizes, the plan's, and the estimate of a method that trains LoRA + head modules
(:func:`lora_footprint`). A method that stores more modules, or another model, declares its own
``footprint`` and the keys it grows with (:class:`~fedforget.core.method.Method`), read from the
declarations the registry hands in (:mod:`fedforget.core.known_methods`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fedforget.core import known_methods
from fedforget.core.config_keys import RunView

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
#: Modules a method without a footprint of its own stores: the final model, and room for a second part
#: (a model split between client and server stores its two halves).
FINAL_MODULES = 2
#: The run-config keys the estimate of a method that declares none grows with, in the order a refusal names them.
LORA_SIZE_KEYS = ("lora-r", "slices-per-client")


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
    "rt-smollm-val": TaskDims(57_600, 1154, 134_515_008, 576, 2, 1600, 8197),  # HO-SFL tuning split
    # any timm or Hugging Face model: sized like a base transformer (768 wide, 12 layers, query and value
    # adapted) with a thousand classes and a million rows, so only what no such model holds is refused
    "hf": TaskDims(36_864, 769_000, 86_000_000, 768, 1000, 1_000_000, 1_000_000),
}
#: A task of the user's own app (``"<module>:<ATTRIBUTE>"``): its model is unknown before its module is
#: imported, which a parse never does, so it is sized like ``hf``'s and only what no such model holds is refused.
USER_TASK_DIMS = TASK_DIMS["hf"]


def task_dims(task: str) -> TaskDims:
    """The sizes of ``task``: a shipped task's own, a user task's as :data:`USER_TASK_DIMS`."""
    return TASK_DIMS.get(task, USER_TASK_DIMS)


def task_rows(cfg: RunView) -> int:
    """The training rows the run uses: ``train-size`` (0: the task's default), at most the task's pool."""
    dims = task_dims(cfg.task)
    return min(cfg.train_size or dims.default_rows, dims.pool_rows)


def plan_units(cfg: RunView, partitions: int = PLANNING_PARTITIONS) -> int:
    """The (partition, slice) units of the plan: the ledger's unit of lineage."""
    return partitions * cfg.slices_per_client


def plan_bytes(cfg: RunView, partitions: int = PLANNING_PARTITIONS) -> int:
    """The plan's part: its units' lists and ledger rows, and each training sample's row and place."""
    return plan_units(cfg, partitions) * SLICE_BYTES + task_rows(cfg) * SAMPLE_BYTES


def lora_footprint(cfg: RunView, modules: int, partitions: int = PLANNING_PARTITIONS,
                   lineage_units: int | None = None, orders: int = 0) -> dict[str, int]:
    """The estimate of a method that trains LoRA + head modules and stores ``modules`` of them, each with
    lineage rows for ``lineage_units`` units (None: every unit of the plan); ``orders``: bytes of anything
    else it plans (see :func:`footprint` for the parts)."""
    dims = task_dims(cfg.task)
    trainable = cfg.lora_r * dims.lora_per_rank + dims.head
    training = trainable * OPTIMISER_COPIES.get(cfg.optimizer, 4)
    units = plan_units(cfg, partitions) if lineage_units is None else lineage_units
    return {"model": TRAINING_MODELS * (dims.backbone + training) * FLOAT_BYTES,
            "modules": modules * trainable * FLOAT_BYTES, "plan": plan_bytes(cfg, partitions),
            "lineage": modules * units * LINEAGE_BYTES, "orders": orders}


def footprint(cfg: RunView, partitions: int = PLANNING_PARTITIONS) -> dict[str, int]:
    """Bytes the run holds, by part: ``model`` while training, ``modules`` stored, ``plan`` (partitions,
    slices, samples and their ledger rows), ``lineage`` (which units each module was trained on), ``orders``.

    The method's own ``footprint`` hook where it declares one; otherwise :func:`lora_footprint` with
    :data:`FINAL_MODULES`."""
    entry = known_methods.by_variant().get(cfg.method)
    if entry is not None and entry.footprint:
        return dict(entry.footprint(cfg, partitions))
    return lora_footprint(cfg, FINAL_MODULES, partitions)


def total_bytes(cfg: RunView, partitions: int = PLANNING_PARTITIONS) -> int:
    return sum(footprint(cfg, partitions).values())


def size_keys(cfg: RunView) -> tuple[str, ...]:
    """The run-config keys whose size this method's estimate grows with (its declaration's ``size_keys``)."""
    entry = known_methods.by_variant().get(cfg.method)
    return entry.size_keys.get(cfg.method, LORA_SIZE_KEYS) if entry is not None else LORA_SIZE_KEYS


def largest_fitting(cfg: RunView, key: str, limit: int, low: int = 1) -> int | None:
    """The largest value of run-config ``key`` (keeping the rest of ``cfg``) whose estimate is within
    ``limit`` bytes, by bisection (the estimate grows with every size key); None when even ``low`` does not fit."""
    fits: Callable[[int], bool] = lambda v: total_bytes(cfg.with_keys({key: v})) <= limit  # noqa: E731
    if not fits(low):
        return None
    lo, hi = low, int(cfg.value(key))
    while lo < hi:  # invariant: lo fits, hi does not (cfg as given does not fit)
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def fit_refusal(cfg: RunView, available: int, typed: frozenset[str] = frozenset()) -> str | None:
    """None when the estimate fits in ``available`` bytes; otherwise the one line that says which key to
    lower and to what: of the size keys the user set (``typed``, run-config keys; all of them when none
    was), the one whose largest fitting value is the smallest change."""
    parts = footprint(cfg)
    need = sum(parts.values())
    if need <= available:
        return None
    biggest = max(parts, key=lambda part: parts[part])
    said = (f"this run config needs about {gib(need)} of memory ({biggest} {gib(parts[biggest])}) but this "
            f"machine has {gib(available)} available")
    keys = size_keys(cfg)
    fixes: dict[str, int] = {}
    for key in keys:
        largest = largest_fitting(cfg, key, available) if int(cfg.value(key)) > 1 else None
        if largest is not None:
            fixes[key] = largest
    if not fixes:
        return f"{said}; lower " + ", ".join(repr(k) for k in keys)
    chosen = [k for k in fixes if k in typed] or list(fixes)
    key = min(chosen, key=lambda k: int(cfg.value(k)) / fixes[k])
    others = ", ".join(repr(k) for k in keys if k != key)
    return (f"{said}; set run-config {key!r} to at most {fixes[key]} (got {cfg.value(key)})"
            + (f", or lower {others}" if others else ""))


def available_memory() -> int:
    """Bytes this machine can give a new run now (psutil's ``available``: free plus reclaimable cache)."""
    import psutil

    return int(psutil.virtual_memory().available)
