"""The run configuration: one typed, validated view of Flower's ``run_config`` (pure)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from fedforget.core.defaults import AUTO_KEYS, resolve_defaults

TASKS = ("digits-mlp", "fmnist-cnn", "fmnist-effnet", "rt-minilm", "hf", "rt-smollm", "fortunes-minilm",
         "digits-mlp-val", "digits-mlp-perm", "digits-mlp-perm-val")  # HO-SFL's validation split of digits-mlp
# (tasks/digits_validation.py) and its pixel-permuted positive control (tasks/digits_permuted.py)
METHODS = ("fedavg", "fedsgt", "s3t", "sisa", "fedcio", "hosfl", "sfl", "zo-sfl", "fedshard", "safe", "protosisa")
SERVING = ("allseq", "minseq", "longseq")
PLACEMENTS = ("auto", "additive", "layer")
ACTIONS = ("train", "retrain", "propagate")
PARTITIONERS = ("iid", "dirichlet")
OPTIMIZERS = ("sgd", "adam")


class ConfigError(ValueError):
    """A run-config value a user must fix; the message says which key and what is allowed."""


# -- Config groups ---------------------------------------------------------------------
#: Keys read by one family of methods (or by one task) live in a group: a TOML table
#: ``[tool.flwr.app.config.<group>]`` that Flower flattens to dotted run-config keys (``safe.coarse``).
#: Every other key is common and stays flat.
CONFIG_GROUPS: dict[str, tuple[str, ...]] = {
    "hf": ("hf.dataset", "hf.model", "hf.input-column", "hf.label-column"),
    "chains": ("chains.groups", "chains.budget", "chains.rounds-per-phase", "chains.serving", "chains.shards",
               "chains.clusters", "chains.placement", "chains.prior"),
    "hosfl": ("hosfl.cut", "hosfl.perturbations", "hosfl.mu", "hosfl.clients-per-round", "hosfl.client-lr",
              "hosfl.eval-every", "hosfl.device", "hosfl.zo-params", "hosfl.client-momentum"),
    "fedshard": ("fedshard.fanout", "fedshard.rounds-min", "fedshard.rounds-max", "fedshard.merge",
                 "fedshard.lora-merge", "fedshard.rounds-rule", "fedshard.fallback", "fedshard.flat",
                 "fedshard.plan-file"),
    "safe": ("safe.coarse", "safe.fine", "safe.coarse-by", "safe.prototypes", "safe.dp", "safe.dp-epsilon",
             "safe.dp-delta", "safe.dp-alpha", "safe.dp-beta", "safe.dp-clip", "safe.schedule", "safe.adapter-steps",
             "safe.adapter-width", "safe.adapter-weight-decay", "safe.shard"),
}
#: The group of method keys each method reads (None: the common keys only).
METHOD_GROUP: dict[str, str | None] = {
    "fedavg": None,
    "fedsgt": "chains", "s3t": "chains", "sisa": "chains", "fedcio": "chains",
    "hosfl": "hosfl", "sfl": "hosfl", "zo-sfl": "hosfl",
    "fedshard": "fedshard",
    "safe": "safe", "protosisa": "safe",
}
#: The group of task keys each task reads.
TASK_GROUP: dict[str, str] = {"hf": "hf"}
#: Flat name → grouped key, for each grouped key; a flat name is still read, with a warning on stderr.
RENAMED: dict[str, str] = {
    "hf-dataset": "hf.dataset", "hf-model": "hf.model", "hf-input-column": "hf.input-column",
    "hf-label-column": "hf.label-column",
    **{k.split(".", 1)[1]: k for k in CONFIG_GROUPS["chains"] + CONFIG_GROUPS["hosfl"] + CONFIG_GROUPS["fedshard"]},
    "coarse": "safe.coarse", "fine": "safe.fine", "coarse-by": "safe.coarse-by", "prototypes": "safe.prototypes",
    "safe-dp": "safe.dp", "dp-epsilon": "safe.dp-epsilon", "dp-delta": "safe.dp-delta", "dp-alpha": "safe.dp-alpha",
    "dp-beta": "safe.dp-beta", "dp-clip": "safe.dp-clip", "safe-schedule": "safe.schedule",
    "adapter-steps": "safe.adapter-steps", "adapter-width": "safe.adapter-width",
    "adapter-weight-decay": "safe.adapter-weight-decay", "safe-shard": "safe.shard",
}


def field_key(name: str) -> str:
    """The run-config key of a :class:`RunConfig` attribute (``num_rounds`` → ``num-rounds``, ``coarse`` →
    ``safe.coarse``)."""
    flat = name.replace("_", "-")
    return RENAMED.get(flat, flat)


def key_group(key: str) -> str | None:
    """The group a run-config key belongs to (None: a common key)."""
    return key.split(".", 1)[0] if "." in key else None


def applicable_groups(method: str, task: str) -> tuple[str, ...]:
    """The groups whose keys ``method`` on ``task`` reads."""
    return tuple(g for g in (METHOD_GROUP.get(method), TASK_GROUP.get(task)) if g)


def key_applies(key: str, method: str, task: str) -> bool:
    """Whether ``method`` on ``task`` reads the run-config ``key`` (a common key, or one of its groups)."""
    group = key_group(key)
    return group is None or group in applicable_groups(method, task)


@dataclass(frozen=True)
class RunConfig:
    """Every key of ``[tool.flwr.app.config]`` and its groups; the pyproject holds the defaults users see.

    Attributes keep the flat names (``coarse``, ``safe_dp``); :func:`field_key` gives each one's run-config key.
    """

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
    action: str = "train"
    # -- [hf]: task='hf' --
    hf_dataset: str = ""
    hf_model: str = ""
    hf_input_column: str = ""
    hf_label_column: str = "label"
    # -- [chains]: the sequence-sharded methods (fedsgt, s3t, sisa, fedcio) --
    groups: int = 10
    budget: int = 10
    rounds_per_phase: int = 0
    serving: str = "allseq"
    shards: int = 1
    clusters: int = 5
    placement: str = "auto"
    prior: str = ""
    # -- [hosfl]: HO-SFL and the split baselines --
    cut: int = 1
    perturbations: int = 5
    mu: float = 0.001
    clients_per_round: int = 3
    client_lr: float = 0.01
    eval_every: int = 1
    device: str = "auto"
    #: comma-separated substrings of client parameter names the ZO directions perturb ("" = all of θ_c)
    zo_params: str = ""
    #: heavy-ball momentum β of the client's ZO update (0 = plain ZO-SGD, Algorithm 1)
    client_momentum: float = 0.0
    # -- [fedshard] --
    fanout: int = 2
    rounds_min: int = 2
    rounds_max: int = 4
    merge: str = "a1"
    lora_merge: str = "product"
    rounds_rule: str = "intent"
    fallback: str = "last-valid"
    flat: bool = False
    plan_file: str = ""
    # -- [safe]: SAFE and its InCA baselines (safe_dp, safe_schedule, safe_shard: safe.dp, safe.schedule, safe.shard)
    coarse: int = 4
    fine: int = 0
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
        """Flower's run-config keys (``num-rounds``, ``safe.coarse``), as stored in the manifest."""
        return {field_key(k): v for k, v in asdict(self).items()}


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
#: Documented absolute caps (docs/configuration.md, "Bounds"): past any count a run can use, so a typed value
#: costs bounded memory and time before the machine-dependent estimate (core/run_footprint.py) is asked.
_MAX = {
    "seed": 2**63 - 1,
    "num_rounds": 100_000,
    "local_epochs": 10_000,
    "batch_size": 65_536,
    "lora_r": 65_536,
    "lora_alpha": 1_000_000,
    "slices_per_client": 10_000,
    "train_size": 10_000_000,
    "test_size": 10_000_000,
    "groups": 1000,
    "budget": 10_000,
    "rounds_per_phase": 10_000,
    "shards": 1000,
    "clusters": 1000,
    "perturbations": 10_000,
    "clients_per_round": 100_000,
    "eval_every": 100_000,
    "fanout": 1000,
    "rounds_min": 100_000,
    "rounds_max": 100_000,
    "coarse": 10_000,
    "fine": 10_000,
    "adapter_steps": 1_000_000,
    "adapter_width": 16_384,
}
_POSITIVE = ("lr", "dirichlet_alpha", "round_timeout", "mu")


def _coerce(name: str, kind: type, value: object) -> object:
    key = field_key(name)
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(float(value)):
                raise ConfigError(f"run-config {key!r} must be a finite number, got {value!r}")
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"run-config {key!r} must be {kind.__name__}, got {value!r}")


_WARNED: set[str] = set()


def declared_defaults() -> dict[str, object]:
    """Each run-config key's declared default (the pyproject's), before the auto keys resolve."""
    return {field_key(f.name): f.default for f in fields(RunConfig)}


def warn_renamed(keys: Iterable[str]) -> None:
    """One line on stderr per flat name of a grouped key (once per process), naming the grouped key."""
    for old in keys:
        if old in RENAMED and old not in _WARNED:
            _WARNED.add(old)
            print(f"fedforget: run-config key {old!r} is now {RENAMED[old]!r}; the old name is accepted for one "
                  "release", file=sys.stderr)


def rename_flat_keys(raw: Mapping[str, object], warn: bool = True) -> dict[str, object]:
    """``raw`` with each flat name (``coarse``) under its grouped key (``safe.coarse``).

    A dict built as ``{**defaults, "coarse": 8}`` holds both names: the one that differs from the default
    wins, and two different non-default values are refused. ``warn`` prints one line per old key on stderr
    (once per process); stored manifests are upgraded silently.
    """
    out = {k: v for k, v in raw.items() if k not in RENAMED}
    defaults = declared_defaults()
    if warn:
        warn_renamed(raw)
    for old, value in raw.items():
        new = RENAMED.get(old)
        if new is None:
            continue
        if new in out and out[new] != value and out[new] != defaults[new]:
            if value != defaults[new]:
                raise ConfigError(f"run-config {old!r} and {new!r} name the same key with different values; "
                                  f"use {new!r}")
            continue
        out[new] = value
    return out


def method_keys(method: str, task: str) -> list[str]:
    """The grouped keys ``method`` on ``task`` reads."""
    return [k for g in applicable_groups(method, task) for k in CONFIG_GROUPS[g]]


def _refuse_foreign_keys(raw: Mapping[str, object], cfg: RunConfig) -> None:
    """A grouped key the method does not read may only hold its default (Flower passes every default)."""
    groups = applicable_groups(cfg.method, cfg.task)
    plain, resolved = declared_defaults(), RunConfig(method=cfg.method, task=cfg.task).to_dict()
    for key, value in raw.items():
        group = key_group(key)
        if group is None or group in groups or value in (plain[key], resolved[key]):
            continue
        if group in TASK_GROUP.values():
            raise ConfigError(f"run-config {key!r} applies to task={group!r} only, got task={cfg.task!r}")
        own = method_keys(cfg.method, cfg.task)
        raise ConfigError(f"run-config {key!r} does not apply to method {cfg.method!r}, which reads the common keys"
                          + (f" and {', '.join(own)}" if own else " only"))


def stored_run_config(raw: Mapping[str, object]) -> dict[str, object]:
    """A manifest's config as run-config keys: flat names read as their grouped keys, and grouped keys the
    stored method never read dropped (they took no part in the run)."""
    config = rename_flat_keys(raw, warn=False)
    groups = applicable_groups(str(config.get("method", "fedavg")), str(config.get("task", "")))
    return {k: v for k, v in config.items() if key_group(k) is None or key_group(k) in groups}


def parse_run_config(raw: Mapping[str, object], warn: bool = True) -> RunConfig:
    """Validate Flower's run config; unknown keys and bad values raise :class:`ConfigError`.

    Flat names of grouped keys are read as the grouped keys (``warn``: say so on stderr).
    """
    by_key = {field_key(f.name): f for f in fields(RunConfig)}
    raw = rename_flat_keys(raw, warn)
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
                f"run-config {field_key(name)!r}={getattr(cfg, name)!r} is not one of: {', '.join(allowed)}"
            )
    for name, low in _MIN.items():
        if getattr(cfg, name) < low:
            raise ConfigError(f"run-config {field_key(name)!r} must be >= {low}, got {getattr(cfg, name)}")
    for name, high in _MAX.items():
        if getattr(cfg, name) > high:
            raise ConfigError(f"run-config {field_key(name)!r} must be <= {high:,} (its documented bound), "
                              f"got {getattr(cfg, name)}")
    for name in _POSITIVE:
        if not getattr(cfg, name) > 0:
            raise ConfigError(f"run-config {field_key(name)!r} must be > 0, got {getattr(cfg, name)}")
    if not cfg.client_lr >= 0:  # 0 freezes the client: HO-SFL's control run
        raise ConfigError(f"run-config 'hosfl.client-lr' must be >= 0, got {cfg.client_lr}")
    if not 0.0 <= cfg.client_momentum < 1.0:
        raise ConfigError(f"run-config 'hosfl.client-momentum' must be in [0, 1), got {cfg.client_momentum}")
    if not 0.0 < cfg.fraction_train <= 1.0:
        raise ConfigError(f"run-config 'fraction-train' must be in (0, 1], got {cfg.fraction_train}")
    if not cfg.store.strip():
        raise ConfigError("run-config 'store' must be a directory path, got an empty string")
    if cfg.task == "hf" and not (cfg.hf_dataset and cfg.hf_model):
        raise ConfigError(
            "task='hf' needs run-config 'hf.dataset' and 'hf.model' (a dataset path/name and a model name)"
        )
    _refuse_foreign_keys(raw, cfg)
    if cfg.prior:
        parse_prior(cfg.prior, cfg.groups)
    _check_split(cfg)
    if cfg.head_only and cfg.method != "fedavg":
        raise ConfigError(f"head-only=true (a linear probe) needs method='fedavg', got {cfg.method!r}")
    if cfg.rounds_min > cfg.rounds_max:
        raise ConfigError(f"run-config 'fedshard.rounds-min'={cfg.rounds_min} exceeds "
                          f"'fedshard.rounds-max'={cfg.rounds_max}")
    _check_safe(cfg)
    _check_sizes(cfg, _changed_names(raw))
    return cfg


def _changed_names(raw: Mapping[str, object]) -> frozenset[str]:
    """The attributes whose run-config key ``raw`` sets to something other than its declared default."""
    defaults = declared_defaults()
    return frozenset(f.name for f in fields(RunConfig)
                     if raw.get(field_key(f.name), defaults[field_key(f.name)]) != defaults[field_key(f.name)])


def _check_sizes(cfg: RunConfig, typed: frozenset[str]) -> None:
    """Sizes that multiply: orders a chain method can select in seconds, slices the task's rows can fill,
    and the memory the whole run needs (:mod:`fedforget.core.run_footprint`) against what this machine has."""
    from fedforget.core.run_footprint import available_memory, fit_refusal, task_rows
    from fedforget.methods.registry import method_entry, resolve

    method = method_entry(cfg.method)
    if method.config_check:  # the method's own bounds (chains: the orders it can select in seconds)
        resolve(method.config_check)(cfg)
    rows = task_rows(cfg)
    if cfg.slices_per_client > rows:
        raise ConfigError(f"run-config 'slices-per-client'={cfg.slices_per_client} is more slices than task "
                          f"{cfg.task!r} has training rows ({rows}); use at most {rows}")
    refusal = fit_refusal(cfg, available_memory(), field_key, typed)
    if refusal:
        raise ConfigError(refusal)


def parse_prior(text: str, groups: int) -> list[float]:
    """``prior='0.4,0.3,...'``: one deletion probability per group, summing to 1 (drives BMS)."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"run-config 'chains.prior' must be comma-separated numbers, got {text!r}") from None
    if len(values) != groups or any(v < 0 for v in values) or abs(sum(values) - 1.0) > 1e-6:
        raise ConfigError(f"run-config 'chains.prior' needs {groups} non-negative numbers (one per group) "
                          f"summing to 1, got {text!r}")
    return values


# -- HO-SFL and the split baselines ----------------------------------------------------
SPLIT_METHODS = ("hosfl", "sfl", "zo-sfl")
#: Blocks a split model can put on the client: digits-mlp fc1|fc2, fmnist-cnn conv1|conv2|fc1,
#: rt-minilm transformer layers, rt-smollm decoder layers (the embeddings always stay on the client).
SPLIT_MAX_CUT = {"digits-mlp": 2, "fmnist-cnn": 3, "rt-minilm": 6, "rt-smollm": 29, "digits-mlp-val": 2,
                 "digits-mlp-perm": 2, "digits-mlp-perm-val": 2}


def _check_split(cfg: RunConfig) -> None:
    if cfg.method not in SPLIT_METHODS:
        return
    if cfg.task not in SPLIT_MAX_CUT:
        raise ConfigError(f"method {cfg.method!r} needs a split model; use task one of: {', '.join(SPLIT_MAX_CUT)}")
    if cfg.cut > SPLIT_MAX_CUT[cfg.task]:
        raise ConfigError(f"run-config 'hosfl.cut'={cfg.cut} is too deep for task {cfg.task!r}: "
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
#: Upper bound of 'safe.shard' (server-held samples); the task's unused rows bound it further at run time.
SAFE_SHARD_MAX = 1_000_000


def _check_safe(cfg: RunConfig) -> None:
    for name in ("coarse", "fine"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"run-config {field_key(name)!r} must be >= 1, got {getattr(cfg, name)}")
    if cfg.coarse_by not in COARSE_BY:
        raise ConfigError(f"run-config 'safe.coarse-by'={cfg.coarse_by!r} is not one of: {', '.join(COARSE_BY)}")
    for name in ("dp_epsilon", "dp_alpha", "dp_clip"):
        if not getattr(cfg, name) > 0:
            raise ConfigError(f"run-config {field_key(name)!r} must be > 0, got {getattr(cfg, name)}")
    if not 0 < cfg.dp_delta < 1 or not 0 < cfg.dp_beta <= 1:
        raise ConfigError(f"run-config needs 0 < 'safe.dp-delta' < 1 and 0 < 'safe.dp-beta' <= 1, got {cfg.dp_delta} "
                          f"and {cfg.dp_beta}")
    for name in ("adapter_steps", "adapter_width", "adapter_weight_decay"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"run-config {field_key(name)!r} must be >= 0 (0 = the task's default), "
                              f"got {getattr(cfg, name)}")
    if cfg.adapter_width % 4:
        raise ConfigError(f"run-config 'safe.adapter-width' must be a multiple of 4 (the attention's heads), "
                          f"got {cfg.adapter_width}")
    if cfg.safe_dp and cfg.method != "safe":
        raise ConfigError(f"safe.dp=true needs method='safe', got {cfg.method!r}")
    _check_safe_shard(cfg)
    if cfg.method in SAFE_METHODS and cfg.task == "hf":
        raise ConfigError(f"method {cfg.method!r} reads backbone tokens of a built-in task; use task digits-mlp, "
                          "fmnist-cnn, fmnist-effnet, rt-minilm or fortunes-minilm")


def _check_safe_shard(cfg: RunConfig) -> None:
    """'safe.shard': a count of server-held samples, only for the InCA methods and not under SAFE-DP."""
    if not 0 <= cfg.safe_shard <= SAFE_SHARD_MAX:
        raise ConfigError(f"run-config 'safe.shard' must be in 0..{SAFE_SHARD_MAX} (0 = no safe shard), "
                          f"got {cfg.safe_shard}")
    if cfg.safe_shard and cfg.method not in SAFE_METHODS:
        raise ConfigError(f"safe.shard={cfg.safe_shard} needs method='safe' or 'protosisa' (a server-held shard "
                          f"every clique reads), got {cfg.method!r}; set safe.shard=0")
    if cfg.safe_shard and cfg.safe_dp:
        raise ConfigError("safe.shard is not supported with safe.dp=true (the DP class nodes are per client); "
                          "set safe.shard=0 or safe.dp=false")
