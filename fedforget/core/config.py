"""The run configuration: one typed, validated view of Flower's ``run_config`` (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from fedforget.core.defaults import AUTO_KEYS, resolve_defaults

TASKS = ("digits-mlp", "fmnist-cnn", "fmnist-effnet", "rt-minilm", "hf", "rt-smollm", "fortunes-minilm")
METHODS = ("fedavg", "fedsgt", "s3t", "sisa", "fedcio", "hosfl", "sfl", "zo-sfl", "fedshard", "safe", "protosisa")
SERVING = ("allseq", "minseq", "longseq")
PLACEMENTS = ("auto", "additive", "layer")
ACTIONS = ("train", "retrain", "propagate")
RETRAINABLE = ("fedavg", "fedsgt", "s3t", "sisa", "fedcio", "fedshard", "safe", "protosisa")
PARTITIONERS = ("iid", "dirichlet")
OPTIMIZERS = ("sgd", "adam")


class ConfigError(ValueError):
    """A run-config value a user must fix; the message says which key and what is allowed."""


@dataclass(frozen=True)
class RunConfig:
    """Every key of ``[tool.flwr.app.config]``; the pyproject holds the defaults users see."""

    method: str = "fedavg"
    task: str = "fmnist-cnn"
    store: str = "runs/latest"
    seed: int = 1
    num_rounds: int = 0  # 0 = the task's and method's default (core/defaults.py), as below
    local_epochs: int = 0
    batch_size: int = 0
    lr: float = 0.0
    optimizer: str = "adam"
    lora_r: int = 0
    lora_alpha: int = 0
    partitioner: str = "dirichlet"
    dirichlet_alpha: float = 0.5
    slices_per_client: int = 2
    fraction_train: float = 1.0
    head_only: bool = False
    train_size: int = 0
    test_size: int = 0
    round_timeout: float = 900.0
    hf_dataset: str = ""
    hf_model: str = ""
    hf_input_column: str = ""
    hf_label_column: str = "label"
    # -- sequence-sharded methods (fedsgt, s3t, sisa, fedcio) and the coordinator ----------------
    groups: int = 10
    budget: int = 10
    rounds_per_phase: int = 0
    serving: str = "allseq"
    shards: int = 1
    clusters: int = 5
    placement: str = "auto"
    prior: str = ""
    action: str = "train"
    # -- HO-SFL and the split baselines --
    cut: int = 1
    perturbations: int = 5
    mu: float = 0.001
    clients_per_round: int = 3
    client_lr: float = 0.01
    eval_every: int = 1
    device: str = "auto"
    # -- FedShard --
    fanout: int = 2
    rounds_min: int = 2
    rounds_max: int = 4
    merge: str = "a1"
    lora_merge: str = "product"
    rounds_rule: str = "intent"
    fallback: str = "last-valid"
    flat: bool = False
    plan_file: str = ""
    # -- SAFE and its InCA baselines --
    coarse: int = 4
    fine: int = 4
    coarse_by: str = "sample"
    prototypes: bool = True
    safe_dp: bool = False
    dp_epsilon: float = 3.0
    dp_delta: float = 1e-10
    dp_alpha: float = 30.0
    dp_beta: float = 1.0
    dp_clip: float = 1.0
    safe_schedule: str = "cosine"
    adapter_steps: int = 0
    adapter_width: int = 0
    adapter_weight_decay: float = 1e-4
    safe_shard: int = 0

    def __post_init__(self) -> None:
        """Keys left at 0 take the method's and task's defaults, so a config is always concrete."""
        given = {key: getattr(self, key.replace("-", "_")) for key in AUTO_KEYS}
        for key, value in resolve_defaults(given, self.method, self.task).items():
            object.__setattr__(self, key.replace("-", "_"), value)

    def to_dict(self) -> dict[str, Any]:
        """Flower-style keys (``num-rounds``), as stored in the manifest."""
        return {k.replace("_", "-"): v for k, v in asdict(self).items()}


_CHOICES = {
    "method": METHODS,
    "task": TASKS,
    "partitioner": PARTITIONERS,
    "optimizer": OPTIMIZERS,
    "serving": SERVING,
    "placement": PLACEMENTS,
    "action": ACTIONS,
    "merge": ("a1", "random"),
    "lora_merge": ("product", "factors"),
    "rounds_rule": ("intent", "literal", "constant"),
    "fallback": ("last-valid", "refuse"),
    "safe_schedule": ("cosine", "constant"),
    "device": ("auto", "cpu", "cuda"),
}
_MIN = {
    "seed": 0,
    "num_rounds": 1,
    "local_epochs": 1,
    "batch_size": 1,
    "lora_r": 1,
    "lora_alpha": 1,
    "slices_per_client": 1,
    "train_size": 0,
    "test_size": 0,
    "groups": 1,
    "budget": 1,
    "rounds_per_phase": 1,
    "shards": 1,
    "clusters": 1,
    "cut": 1,
    "perturbations": 1,
    "clients_per_round": 1,
    "eval_every": 1,
    "fanout": 2,
    "rounds_min": 1,
    "rounds_max": 1,
}
_POSITIVE = ("lr", "dirichlet_alpha", "round_timeout", "mu")


def _coerce(name: str, kind: type, value: object) -> object:
    key = name.replace("_", "-")
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"run-config {key!r} must be {kind.__name__}, got {value!r}")


def parse_run_config(raw: Mapping[str, object]) -> RunConfig:
    """Validate Flower's run config; unknown keys and bad values raise :class:`ConfigError`."""
    by_key = {f.name.replace("_", "-"): f for f in fields(RunConfig)}
    unknown = sorted(set(raw) - set(by_key))
    if unknown:
        raise ConfigError(f"unknown run-config key(s): {', '.join(unknown)}; known: {', '.join(sorted(by_key))}")
    values: dict[str, object] = {}
    for key, value in raw.items():
        f = by_key[key]
        kind = {"int": int, "float": float, "str": str, "bool": bool}[str(f.type)]
        values[f.name] = _coerce(f.name, kind, value)
    cfg = RunConfig(**values)
    for name, allowed in _CHOICES.items():
        if getattr(cfg, name) not in allowed:
            raise ConfigError(
                f"run-config {name!r}={getattr(cfg, name)!r} is not one of: {', '.join(allowed)}"
            )
    for name, low in _MIN.items():
        if getattr(cfg, name) < low:
            raise ConfigError(f"run-config {name.replace('_', '-')!r} must be >= {low}, got {getattr(cfg, name)}")
    for name in _POSITIVE:
        if not getattr(cfg, name) > 0:
            raise ConfigError(f"run-config {name.replace('_', '-')!r} must be > 0, got {getattr(cfg, name)}")
    if not cfg.client_lr >= 0:  # 0 freezes the client: HO-SFL's control run
        raise ConfigError(f"run-config 'client-lr' must be >= 0, got {cfg.client_lr}")
    if not 0.0 < cfg.fraction_train <= 1.0:
        raise ConfigError(f"run-config 'fraction-train' must be in (0, 1], got {cfg.fraction_train}")
    if not cfg.store.strip():
        raise ConfigError("run-config 'store' must be a directory path, got an empty string")
    if cfg.task == "hf" and not (cfg.hf_dataset and cfg.hf_model):
        raise ConfigError(
            "task='hf' needs run-config 'hf-dataset' and 'hf-model' (a dataset path/name and a model name)"
        )
    if cfg.prior:
        parse_prior(cfg.prior, cfg.groups)
    if cfg.action == "retrain" and cfg.method not in RETRAINABLE:
        raise ConfigError(f"method {cfg.method!r} cannot retrain a store after forgetting; "
                          f"retrain methods: {', '.join(RETRAINABLE)}")
    _check_split(cfg)
    if cfg.head_only and cfg.method != "fedavg":
        raise ConfigError(f"head-only=true (a linear probe) needs method='fedavg', got {cfg.method!r}")
    if cfg.rounds_min > cfg.rounds_max:
        raise ConfigError(f"run-config 'rounds-min'={cfg.rounds_min} exceeds 'rounds-max'={cfg.rounds_max}")
    _check_safe(cfg)
    return cfg


def parse_prior(text: str, groups: int) -> list[float]:
    """``prior='0.4,0.3,...'``: one deletion probability per group, summing to 1 (drives BMS)."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"run-config 'prior' must be comma-separated numbers, got {text!r}") from None
    if len(values) != groups or any(v < 0 for v in values) or abs(sum(values) - 1.0) > 1e-6:
        raise ConfigError(f"run-config 'prior' needs {groups} non-negative numbers (one per group) summing to 1, "
                          f"got {text!r}")
    return values


# -- HO-SFL and the split baselines ----------------------------------------------------
SPLIT_METHODS = ("hosfl", "sfl", "zo-sfl")
#: Blocks a split model can put on the client: digits-mlp fc1|fc2, fmnist-cnn conv1|conv2|fc1,
#: rt-minilm transformer layers, rt-smollm decoder layers (the embeddings always stay on the client).
SPLIT_MAX_CUT = {"digits-mlp": 2, "fmnist-cnn": 3, "rt-minilm": 6, "rt-smollm": 29}


def _check_split(cfg: RunConfig) -> None:
    if cfg.method not in SPLIT_METHODS:
        return
    if cfg.task not in SPLIT_MAX_CUT:
        raise ConfigError(f"method {cfg.method!r} needs a split model; use task one of: {', '.join(SPLIT_MAX_CUT)}")
    if cfg.cut > SPLIT_MAX_CUT[cfg.task]:
        raise ConfigError(f"run-config 'cut'={cfg.cut} is too deep for task {cfg.task!r}: "
                          f"use 1..{SPLIT_MAX_CUT[cfg.task]} (blocks on the client)")


def sample_clients(partitions: list[int], fraction: float, seed: int) -> list[int]:
    """The partitions that train this round: ``ceil(fraction·n)`` of them, drawn with ``seed``."""
    import math
    import random

    ordered = sorted(partitions)
    k = max(1, math.ceil(fraction * len(ordered)))
    if k >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, k))


# -- SAFE ------------------------------------------------------------------------------
SAFE_METHODS = ("safe", "protosisa")
COARSE_BY = ("sample", "client")
#: Upper bound of 'safe-shard' (server-held samples); the task's unused rows bound it further at run time.
SAFE_SHARD_MAX = 1_000_000


def _check_safe(cfg: RunConfig) -> None:
    for name in ("coarse", "fine"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"run-config {name!r} must be >= 1, got {getattr(cfg, name)}")
    if cfg.coarse_by not in COARSE_BY:
        raise ConfigError(f"run-config 'coarse-by'={cfg.coarse_by!r} is not one of: {', '.join(COARSE_BY)}")
    for name in ("dp_epsilon", "dp_alpha", "dp_clip"):
        if not getattr(cfg, name) > 0:
            raise ConfigError(f"run-config {name.replace('_', '-')!r} must be > 0, got {getattr(cfg, name)}")
    if not 0 < cfg.dp_delta < 1 or not 0 < cfg.dp_beta <= 1:
        raise ConfigError(f"run-config needs 0 < 'dp-delta' < 1 and 0 < 'dp-beta' <= 1, got {cfg.dp_delta} and "
                          f"{cfg.dp_beta}")
    for name in ("adapter_steps", "adapter_width", "adapter_weight_decay"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"run-config {name.replace('_', '-')!r} must be >= 0 (0 = the task's default), "
                              f"got {getattr(cfg, name)}")
    if cfg.adapter_width % 4:
        raise ConfigError(f"run-config 'adapter-width' must be a multiple of 4 (the attention's heads), "
                          f"got {cfg.adapter_width}")
    if cfg.safe_dp and cfg.method != "safe":
        raise ConfigError(f"safe-dp=true needs method='safe', got {cfg.method!r}")
    _check_safe_shard(cfg)
    if cfg.method in SAFE_METHODS and cfg.task == "hf":
        raise ConfigError(f"method {cfg.method!r} reads backbone tokens of a built-in task; use task digits-mlp, "
                          "fmnist-cnn, fmnist-effnet, rt-minilm or fortunes-minilm")


def _check_safe_shard(cfg: RunConfig) -> None:
    """'safe-shard': a count of server-held samples, only for the InCA methods and not under SAFE-DP."""
    if not 0 <= cfg.safe_shard <= SAFE_SHARD_MAX:
        raise ConfigError(f"run-config 'safe-shard' must be in 0..{SAFE_SHARD_MAX} (0 = no safe shard), "
                          f"got {cfg.safe_shard}")
    if cfg.safe_shard and cfg.method not in SAFE_METHODS:
        raise ConfigError(f"safe-shard={cfg.safe_shard} needs method='safe' or 'protosisa' (a server-held shard "
                          f"every clique reads), got {cfg.method!r}; set safe-shard=0")
    if cfg.safe_shard and cfg.safe_dp:
        raise ConfigError("safe-shard is not supported with safe-dp=true (the DP class nodes are per client); "
                          "set safe-shard=0 or safe-dp=false")
