"""Training defaults that depend on the task and the method: what a key left at 0 ("auto") means (pure).

A user who passes only ``method``, ``task`` and ``store`` must get a model worth serving, and the
settings that get there differ by task (a tiny MLP wants a large step, MiniLM a small one) and by
method (a chain position sees its data once unless it gets more rounds or epochs). The pyproject
therefore ships ``0`` for these keys, and these tables decide. A value the user passes always wins.

The tasks' values and the fallback are here; each method's, per variant and per (variant, task), are
its package's :class:`~fedforget.core.method.Defaults`, which its declaration holds and which this
module reads from the declarations the registry hands in (:mod:`fedforget.core.known_methods`).

Precedence, most specific first: the user's value, ``(method, task)``, ``method``, ``task``, the
fallback. ``lora-alpha`` left at auto follows the rank (alpha = 2·r).
"""

from __future__ import annotations

from collections.abc import Mapping

from fedforget.core import known_methods
from fedforget.core.method import Defaults, Value

NO_DEFAULTS = Defaults()

#: Run-config keys whose default is "the task's and method's value"; 0 selects it.
AUTO_KEYS: tuple[str, ...] = (
    "num-rounds", "local-epochs", "batch-size", "lr", "lora-r", "lora-alpha", "rounds-per-phase",
    "adapter-steps", "adapter-width", "fine",
)

FALLBACK: dict[str, Value] = {
    "num-rounds": 10, "local-epochs": 1, "batch-size": 32, "lr": 0.005, "lora-r": 4, "rounds-per-phase": 1,
    "adapter-steps": 100, "adapter-width": 128, "fine": 4,
}

#: What plain FedAvg of LoRA + head needs per task (benchmarks/utility.py measures these).
TASK_DEFAULTS: dict[str, dict[str, Value]] = {
    "digits-mlp": {"num-rounds": 10, "local-epochs": 2, "lr": 0.02},
    "fmnist-cnn": {"num-rounds": 10, "local-epochs": 2, "lr": 0.01, "lora-r": 8},
    "fmnist-effnet": {"num-rounds": 10, "local-epochs": 1, "lr": 0.005, "lora-r": 8},
    "rt-minilm": {"num-rounds": 8, "local-epochs": 1, "lr": 0.005, "lora-r": 8},
    "hf": {"num-rounds": 5, "local-epochs": 1, "lr": 0.005, "lora-r": 8},
    "rt-smollm": {"num-rounds": 3, "local-epochs": 1, "lr": 0.001, "lora-r": 8, "batch-size": 16},
}
TASK_DEFAULTS["rt-smollm-val"] = TASK_DEFAULTS["rt-smollm"]  # a validation split tunes what rt-smollm runs


def method_defaults(method: str) -> Defaults:
    """The auto-key values ``method``'s package declares (none for a method no package runs)."""
    entry = known_methods.by_variant().get(method)
    return entry.defaults if entry is not None and entry.defaults else NO_DEFAULTS


def default_for(key: str, method: str, task: str) -> Value:
    """The value ``key`` takes when left at auto for this method and task (lora-alpha: see resolve)."""
    declared = method_defaults(method)
    for table in (declared.pairs.get((method, task), {}), declared.variants.get(method, {}),
                  TASK_DEFAULTS.get(task, {})):
        if key in table:
            return table[key]
    return FALLBACK[key]


def resolve_defaults(values: Mapping[str, Value], method: str, task: str) -> dict[str, Value]:
    """``values`` (Flower-style keys) with every key at 0 replaced by its method/task default.

    ``lora-alpha`` at 0 becomes twice the (resolved) rank, the scale LoRA is usually run at.
    """
    out = dict(values)
    for key in AUTO_KEYS:
        if key != "lora-alpha" and out.get(key, 0) == 0:
            out[key] = default_for(key, method, task)
    if out.get("lora-alpha", 0) == 0:
        out["lora-alpha"] = 2 * int(out["lora-r"])
    return out
