"""The run configuration: one typed, validated view of Flower's ``run_config`` (pure).

Each key is declared once, as a field of a typed table (:mod:`fedforget.core.config_keys`): the common
keys in :class:`RunConfig`, the ``hf`` task's in :class:`HfConfig`, each method's in its own package's
``config.py``, which its :class:`~fedforget.core.method.Method` holds. A :class:`RunConfig` holds the
common keys and one object per group (``cfg.safe.coarse``), always present with its defaults, so
``to_dict()`` records every key. The tables below (:data:`METHODS`, :data:`TABLES`, :data:`CONFIG_GROUPS`,
:data:`METHOD_GROUP`, :data:`RENAMED`) are derived from those declarations when the methods' registry
hands them in (:mod:`fedforget.core.known_methods`); until then they hold the common and task keys only.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fedforget.core import known_methods

# ConfigError is raised by every table; most callers import it from here, with RunConfig
from fedforget.core.config_keys import ConfigError, ConfigTable, option
from fedforget.core.defaults import AUTO_KEYS, resolve_defaults
from fedforget.core.method import Method

#: The last four serve HO-SFL's benchmarks: validation splits (tasks/digits_validation.py, tasks/smollm.py)
#: and the pixel-permuted positive control (tasks/digits_permuted.py).
TASKS = ("digits-mlp", "fmnist-cnn", "fmnist-effnet", "rt-minilm", "hf", "rt-smollm", "fortunes-minilm",
         "digits-mlp-val", "rt-smollm-val", "digits-mlp-perm", "digits-mlp-perm-val")
#: A task defined in the user's own Flower app, ``"<module>:<ATTRIBUTE>"`` (a :class:`fedforget.client.Task`):
#: only its form is checked here (a parse imports nothing); the module is imported where the task is loaded.
USER_TASK = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
#: The longest user task reference accepted.
MAX_USER_TASK_CHARS = 200
#: A benchmark variant of a task runs that task's model (the same backbone, blocks and cuts) on other rows.
MODEL_OF = {"digits-mlp-val": "digits-mlp", "digits-mlp-perm": "digits-mlp", "digits-mlp-perm-val": "digits-mlp",
            "rt-smollm-val": "rt-smollm"}
#: each method package's variants, in registry order (filled when the declarations are handed in)
METHODS: list[str] = []
ACTIONS = ("train", "retrain", "propagate")
PARTITIONERS = ("iid", "dirichlet")
OPTIMIZERS = ("sgd", "adam")
#: The longest path a path-valued run-config key may hold (Linux's PATH_MAX).
MAX_PATH_CHARS = 4096


def is_user_task(task: str) -> bool:
    """Whether ``task`` names a task of the user's own app (``"mlpapp.task:TASK"``) rather than a shipped one."""
    return len(task) <= MAX_USER_TASK_CHARS and USER_TASK.fullmatch(task) is not None


def model_task(task: str) -> str:
    """The task whose model ``task`` runs: itself, or the task a benchmark variant was cut from."""
    return MODEL_OF.get(task, task)


@dataclass(frozen=True)
class HfConfig(ConfigTable):
    """``[tool.flwr.app.config.hf]``: the dataset and model of task='hf'."""

    group = "hf"

    dataset: str = option("", old="hf-dataset")
    model: str = option("", old="hf-model")
    input_column: str = option("", old="hf-input-column")
    label_column: str = option("label", old="hf-label-column")

    def check(self, cfg: RunConfig) -> None:
        if cfg.task == "hf" and not (self.dataset and self.model):
            raise ConfigError(
                "task='hf' needs run-config 'hf.dataset' and 'hf.model' (a dataset path/name and a model name)"
            )


# -- Config groups ---------------------------------------------------------------------
#: Keys read by one family of methods (or by one task) live in a group: a TOML table
#: ``[tool.flwr.app.config.<group>]`` that Flower flattens to dotted run-config keys (``safe.coarse``).
#: Every other key is common and stays flat. Task groups come first, then the methods' in registry order
#: (the pyproject's order, hence the manifest's).
#: Group → its typed table.
TABLES: dict[str, type[ConfigTable]] = {"hf": HfConfig}
#: Group → its dotted keys.
CONFIG_GROUPS: dict[str, tuple[str, ...]] = {}
#: The group of method keys each method reads (None: the common keys only).
METHOD_GROUP: dict[str, str | None] = {}
#: The group of task keys each task reads.
TASK_GROUP: dict[str, str] = {"hf": "hf"}
#: Flat name → grouped key, for each grouped key; a flat name is still read, with a warning on stderr.
RENAMED: dict[str, str] = {}
#: The variants whose method can train the head alone (``head-only=true``).
HEAD_ONLY: list[str] = []


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
class RunConfig(ConfigTable):
    """The common keys of ``[tool.flwr.app.config]``, and one typed object per group (``cfg.safe``).

    Every group is present, at its defaults unless given, whatever the method: the manifest records every
    key, and a group's auto keys resolve for the method and task like the common ones. Core code cannot
    name a method's class (methods depend on core, not the reverse), so a group is reached by its name,
    ``cfg.<group>``, looked up in :attr:`tables`.
    """

    method: str = option("fedavg", choices=METHODS)
    #: a shipped task (:data:`TASKS`) or a user task ``"<module>:<ATTRIBUTE>"`` (checked in :meth:`check`)
    task: str = option("fmnist-cnn")
    store: str = option("runs/latest")
    seed: int = option(1, low=0, high=2**63 - 1)
    #: 0 = the task's and method's default (core/defaults.py), as for every auto key below
    num_rounds: int = option(0, low=1, high=100_000)
    local_epochs: int = option(0, low=1, high=10_000)
    batch_size: int = option(0, low=1, high=65_536)
    lr: float = option(0.0, positive=True)
    optimizer: str = option("adam", choices=OPTIMIZERS)
    lora_r: int = option(0, low=1, high=65_536)
    lora_alpha: int = option(0, low=1, high=1_000_000)
    partitioner: str = option("dirichlet", choices=PARTITIONERS)
    dirichlet_alpha: float = option(0.5, positive=True)
    slices_per_client: int = option(2, low=1, high=10_000)
    fraction_train: float = option(1.0)
    head_only: bool = option(False)
    train_size: int = option(0, low=0, high=10_000_000)
    test_size: int = option(0, low=0, high=10_000_000)
    #: a directory of records the server evaluates on (the node data format); "" = the task's test split
    test_data: str = option("")
    #: where a simulated node (no ``data-dir`` in its node config) finds its records: a directory with
    #: ``{partition}`` in it, anchored like ``test-data``; "" = the task's own (a user task's ``simulation_data``)
    node_data: str = option("")
    #: after a train or retrain run is served, each node evaluates what is served on its own test records and
    #: the server records their example-weighted mean beside its own evaluation (a user task's server may then
    #: run without ``test-data``)
    evaluate_on_nodes: bool = option(False)
    round_timeout: float = option(900.0, positive=True)
    #: the most records one node, and all nodes together, may register: a node past either is refused as the
    #: replies arrive, before the store exists
    max_records_per_node: int = option(10_000_000, low=1, high=1_000_000_000)
    max_records: int = option(10_000_000, low=1, high=1_000_000_000)
    action: str = option("train", choices=ACTIONS)
    #: a from-scratch reference run of `fedforget verify --federation`: nodes with their own records check them
    #: as at a retrain and keep what they registered for training (the real store's next retrain checks it)
    reference: bool = option(False)
    #: each group's typed keys, in :data:`TABLES` order (any left out take their defaults)
    tables: tuple[ConfigTable, ...] = ()

    def __post_init__(self) -> None:
        """Every group present, and keys left at 0 take the method's and task's defaults, so a config is
        always concrete."""
        known_methods.families()  # raises, naming what to import, before the methods' tables are handed in
        given = {t.group: t for t in self.tables}
        if set(given) - set(TABLES) or any(type(t) is not TABLES[g] for g, t in given.items()):
            raise TypeError(f"RunConfig tables must be instances of {', '.join(c.__name__ for c in TABLES.values())}")
        object.__setattr__(self, "tables", tuple(given.get(g) or cls() for g, cls in TABLES.items()))
        auto = {key: RENAMED.get(key, key) for key in AUTO_KEYS}  # defaults.py names the flat keys
        values = {key: self.value(full) for key, full in auto.items()}
        changed = {auto[k]: v for k, v in resolve_defaults(values, self.method, self.task).items() if v != values[k]}
        common, tables = self._split(changed)
        for name, value in common.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "tables", tables)

    def __getattr__(self, name: str) -> Any:
        """``cfg.<group>``: that group's typed keys (only group names; anything else is an AttributeError)."""
        if not name.startswith("_"):
            for table in self.__dict__.get("tables", ()):
                if table.group == name:
                    return table
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _split(self, changes: Mapping[str, object]) -> tuple[dict[str, object], tuple[ConfigTable, ...]]:
        """``changes`` (run-config keys) as (common attribute → value, the tables with theirs applied)."""
        common = {k.replace("-", "_"): v for k, v in changes.items() if key_group(k) is None}
        tables = tuple(dataclasses.replace(t, **{k.split(".", 1)[1].replace("-", "_"): v
                                                 for k, v in changes.items() if key_group(k) == t.group})
                       for t in self.tables)
        return common, tables

    def value(self, key: str) -> Any:
        """The value of the run-config ``key`` (``safe.coarse``, ``num-rounds``)."""
        group, _, name = key.rpartition(".")
        return getattr(getattr(self, group) if group else self, name.replace("-", "_"))

    def with_keys(self, changes: Mapping[str, object]) -> RunConfig:
        """A copy with run-config keys changed (``{"chains.groups": 3}``), not validated: for code and tests
        that build a config directly (user input goes through :func:`parse_run_config`)."""
        unknown = sorted(set(changes) - set(_OWNER))
        if unknown:
            raise ConfigError(f"unknown run-config key(s): {', '.join(unknown)}")
        common, tables = self._split(changes)
        return dataclasses.replace(self, **common, tables=tables)

    def reads(self, group: str) -> bool:
        """Whether this config's method or task reads ``group``'s keys."""
        return group in applicable_groups(self.method, self.task)

    def to_dict(self) -> dict[str, Any]:
        """Flower's run-config keys (``num-rounds``, ``safe.coarse``), as stored in the manifest."""
        return {t.key(f.name): getattr(t, f.name) for t in (self, *self.tables) for f in t.options()}

    def check(self, cfg: RunConfig) -> None:
        """The common keys' rules beyond their bounds (``cfg`` is this config)."""
        if self.task not in TASKS and not is_user_task(self.task):
            raise ConfigError(f"run-config 'task'={self.task!r} is not one of: {', '.join(TASKS)}; or name a task "
                              "of your own app as '<module>:<ATTRIBUTE>' (docs/your-app.md)")
        if not 0.0 < self.fraction_train <= 1.0:
            raise ConfigError(f"run-config 'fraction-train' must be in (0, 1], got {self.fraction_train}")
        if not self.store.strip():
            raise ConfigError("run-config 'store' must be a directory path, got an empty string")
        for key, path in (("test-data", self.test_data), ("node-data", self.node_data)):
            if path and (not path.strip() or len(path) > MAX_PATH_CHARS or any(ord(c) < 32 or ord(c) == 127
                                                                                for c in path)):
                raise ConfigError(f"run-config {key!r} must be a directory path (at most {MAX_PATH_CHARS} "
                                  f"characters, no control characters), got {path[:80]!r}")
        if self.node_data and "{partition}" not in self.node_data:
            raise ConfigError(f"run-config 'node-data'={self.node_data[:80]!r} needs '{{partition}}' in it, which each "
                              "simulated node replaces with its partition number (data/node-{partition})")
        probes = HEAD_ONLY  # the methods that declare head_only
        if self.head_only and self.method not in probes:
            raise ConfigError(f"head-only=true (a linear probe) needs method={' or '.join(map(repr, probes))}, "
                              f"got {self.method!r}")


#: Run-config key → (its table, its field name).
_OWNER: dict[str, tuple[type[ConfigTable], str]] = {}
_FIELDS: dict[str, dataclasses.Field[Any]] = {}


def _use_methods(families: tuple[Method, ...]) -> None:
    """Derive the tables above from the methods' declarations (in place: importers hold these dicts)."""
    method_tables = {m.name: m.config for m in families if m.config}
    METHODS[:] = [v for m in families for v in m.variants]
    HEAD_ONLY[:] = [v for m in families if m.head_only for v in m.variants]
    TABLES.clear()
    TABLES.update({"hf": HfConfig, **{cls.group: cls for cls in method_tables.values() if cls.group}})
    CONFIG_GROUPS.clear()
    CONFIG_GROUPS.update({g: tuple(cls.key(f.name) for f in cls.options()) for g, cls in TABLES.items()})
    METHOD_GROUP.clear()
    METHOD_GROUP.update({v: (method_tables[m.name].group if m.config else None) for m in families for v in m.variants})
    RENAMED.clear()
    RENAMED.update({old: new for cls in TABLES.values() for old, new in cls.renamed().items()})
    _OWNER.clear()
    _OWNER.update({cls.key(f.name): (cls, f.name) for cls in (RunConfig, *TABLES.values()) for f in cls.options()})
    _FIELDS.clear()
    _FIELDS.update({key: next(f for f in cls.options() if f.name == name) for key, (cls, name) in _OWNER.items()})


_WARNED: set[str] = set()


def declared_defaults() -> dict[str, object]:
    """Each run-config key's declared default (the pyproject's), before the auto keys resolve."""
    return {key: f.default for key, f in _FIELDS.items()}


def declared_types() -> dict[str, str]:
    """Each run-config key's type name (``int``, ``float``, ``str``, ``bool``)."""
    return {key: str(f.type) for key, f in _FIELDS.items()}


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
    groups = applicable_groups(str(config.get("method", declared_defaults()["method"])), str(config.get("task", "")))
    return {k: v for k, v in config.items() if key_group(k) is None or key_group(k) in groups}


def parse_run_config(raw: Mapping[str, object], warn: bool = True) -> RunConfig:
    """Validate Flower's run config; unknown keys and bad values raise :class:`ConfigError`.

    Flat names of grouped keys are read as the grouped keys (``warn``: say so on stderr). Checked in this
    order: every key's declared bounds, the common and task rules, keys of a group the method does not
    read, each method table's rules, and last the sizes the run multiplies into memory.
    """
    known_methods.families()  # raises, naming what to import, before the methods' tables are handed in
    raw = rename_flat_keys(raw, warn)
    unknown = sorted(set(raw) - set(_OWNER))
    if unknown:
        raise ConfigError(f"unknown run-config key(s): {', '.join(unknown)}; known: {', '.join(sorted(_OWNER))}")
    values: dict[type[ConfigTable], dict[str, object]] = {}
    for key, value in raw.items():
        cls, name = _OWNER[key]
        values.setdefault(cls, {})[name] = cls.coerce(name, value)
    cfg = RunConfig(**values.get(RunConfig, {}), tables=tuple(cls(**values.get(cls, {})) for cls in TABLES.values()))
    for table in (cfg, *cfg.tables):
        table.check_bounds()
    for table in (cfg, *(t for t in cfg.tables if t.group in TASK_GROUP.values())):
        table.check(cfg)
    _refuse_foreign_keys(raw, cfg)
    for table in cfg.tables:
        if table.group not in TASK_GROUP.values():
            table.check(cfg)
    _check_sizes(cfg, _changed_keys(raw))
    return cfg


def _changed_keys(raw: Mapping[str, object]) -> frozenset[str]:
    """The run-config keys ``raw`` sets to something other than their declared default."""
    defaults = declared_defaults()
    return frozenset(k for k, v in raw.items() if v != defaults[k])


def _check_sizes(cfg: RunConfig, typed: frozenset[str]) -> None:
    """Sizes that multiply: slices the task's rows can fill, and the memory the whole run needs
    (:mod:`fedforget.core.run_footprint`) against what this machine has."""
    from fedforget.core.run_footprint import available_memory, fit_refusal, task_rows

    rows = task_rows(cfg)
    if cfg.slices_per_client > rows:
        raise ConfigError(f"run-config 'slices-per-client'={cfg.slices_per_client} is more slices than task "
                          f"{cfg.task!r} has training rows ({rows}); use at most {rows}")
    refusal = fit_refusal(cfg, available_memory(), typed)
    if refusal:
        raise ConfigError(refusal)


def sample_clients(partitions: list[int], fraction: float, seed: int) -> list[int]:
    """The partitions that train this round: ``ceil(fraction·n)`` of them, drawn with ``seed``."""
    import math
    import random

    ordered = sorted(partitions)
    k = max(1, math.ceil(fraction * len(ordered)))
    if k >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, k))


known_methods.on_install(_use_methods)
