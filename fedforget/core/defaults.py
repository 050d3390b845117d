"""Training defaults that depend on the task and the method: what a key left at 0 ("auto") means (pure).

A user who passes only ``method``, ``task`` and ``store`` must get a model worth serving, and the
settings that get there differ by task (a tiny MLP wants a large step, MiniLM a small one) and by
method (a chain position sees its data once unless it gets more rounds or epochs). The pyproject
therefore ships ``0`` for these keys, and this table decides. A value the user passes always wins.

Precedence, most specific first: the user's value, ``(method, task)``, ``method``, ``task``, the
fallback. ``lora-alpha`` left at auto follows the rank (alpha = 2·r).
"""

from __future__ import annotations

from collections.abc import Mapping

Value = int | float

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

#: Method-wide adjustments (before any task-specific one).
METHOD_DEFAULTS: dict[str, dict[str, Value]] = {
    # a chain position trains its module in rounds-per-phase FedAvg rounds on its prefix's data only
    "fedsgt": {"rounds-per-phase": 3},
    "s3t": {"rounds-per-phase": 3},
    "sisa": {"rounds-per-phase": 3},
    # split methods: one HO-SFL / ZO-SFL round is one mini-batch per sampled client (3 by default), so
    # they need many more rounds than FedAvg; SFL runs the paper's one local epoch per round
    "hosfl": {"num-rounds": 150},
    "zo-sfl": {"num-rounds": 150},
    "sfl": {"local-epochs": 1},
    # SAFE's InCA adapters: AdamW steps per adapter on each node, whatever its clique holds (methods/safe/budget.py)
    "safe": {"num-rounds": 5, "lr": 0.005},
    # ProtoSISA/SISA: safe.coarse uniform shards (it deals coarse·fine shards of all classes)
    "protosisa": {"num-rounds": 5, "lr": 0.005, "fine": 1},
}

#: Method and task together, where the pair needs its own value.
PAIR_DEFAULTS: dict[tuple[str, str], dict[str, Value]] = {
    ("hosfl", "rt-smollm"): {"num-rounds": 60},  # about 50 s a round on 2 CPU cores
    ("zo-sfl", "rt-smollm"): {"num-rounds": 60},
    **{(m, "rt-smollm-val"): {"num-rounds": 60} for m in ("hosfl", "zo-sfl")},
    **{(m, "digits-mlp"): {"adapter-width": 64} for m in ("safe", "protosisa")},
    **{(m, "fmnist-effnet"): {"adapter-width": 1280} for m in ("safe", "protosisa")},
    **{(m, t): {"adapter-width": 384} for m in ("safe", "protosisa") for t in ("rt-minilm", "fortunes-minilm")},
}
#: SAFE's class groups per coarse shard: a clique's one-vs-all adapters need enough other classes as
#: negatives. Ten classes: two groups of five (n_f = 4 leaves 2–3 a clique and serves 6.3 points below
#: SISA at 16 cliques, n_f = 2 2.0 above: benchmarks/safe_topology.py). Two classes: both in every clique.
SAFE_FINE: dict[str, int] = {"digits-mlp": 2, "fmnist-cnn": 2, "fmnist-effnet": 2, "rt-minilm": 1}
PAIR_DEFAULTS.update({("safe", t): {**PAIR_DEFAULTS.get(("safe", t), {}), "fine": f} for t, f in SAFE_FINE.items()})


def default_for(key: str, method: str, task: str) -> Value:
    """The value ``key`` takes when left at auto for this method and task (lora-alpha: see resolve)."""
    for table in (PAIR_DEFAULTS.get((method, task), {}), METHOD_DEFAULTS.get(method, {}),
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
