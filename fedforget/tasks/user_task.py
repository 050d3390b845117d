"""A task defined in the user's own Flower app: ``task='<module>:<ATTRIBUTE>'`` in the run config names a
:class:`Task` (public as ``fedforget.client.Task``).

The reference is imported where a task is loaded (the ServerApp, the ClientApp, the coordinator's
commands), never when a run config is parsed, so a parse stays pure. The ServerApp and ClientApp run
inside the app's directory (Flower puts it on ``sys.path``); the coordinator puts the directory of the app
that trained a store there (:func:`use_app_of`), read from the manifest's ``app`` entry, which also tells
``retrain``, ``forget --propagate`` and ``verify`` which app to submit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedforget.core.config import ConfigError, is_user_task
from fedforget.tasks.trained_parameters import checked_trains, describe, trains_whole_model

if TYPE_CHECKING:
    import numpy as np
    from torch import nn

    from fedforget.core.config import RunConfig
    from fedforget.tasks.base import Backbone, TaskData, TaskSpec

_LOADED: dict[str, TaskSpec] = {}


@dataclass(frozen=True)
class Task:
    """A task: a user's own model for ``task='<module>:<ATTRIBUTE>'``, and every shipped task (the same class).

    ``backbone()`` builds the frozen feature extractor, ``module(inputs) -> (batch, feature_dim)``; it must
    build the same weights every call (pretrained weights loaded from a file, or a seeded init), since a
    retrain and ``fedforget verify`` rebuild it: the sha256 of its weights is recorded in the store.
    ``lora_targets`` names its ``nn.Linear``/``nn.Conv2d`` modules that get LoRA adapters. Records hold their
    inputs in the column ``input_column``: a flat list of numbers per record (cast to float32, or turned into the
    model's input by ``encode(rows)``, rows a float64 ``(records, values)`` array); with ``input_column="text"``
    a string per record, which ``encode(texts)`` must turn into a tuple of tensors. Or in ``input_columns``, one
    number per column (a CSV with a column per feature), stacked in the listed order into the same rows.

    ``train`` says which parameters train: ``"lora"`` (the default) the LoRA adapters and fedforget's head on the
    frozen backbone; ``"all"`` every parameter of the model ``backbone()`` builds, or a list of parameter-name
    prefixes (``["fc2"]``) only those, the rest frozen. Then that model is the whole model: its output is the
    logits, ``(batch, num_classes)`` (``feature_dim`` = ``num_classes``), with no LoRA (``lora_targets=[]``) and no
    fedforget head; fedavg, replay, FedShard, SISA and FedCIO train it (docs/strategies.md).
    ``loss`` trains with the task's own loss instead of cross-entropy, ``metric`` reports the task's own metric of
    what is served, ``prediction`` turns the served logits into the task's own output
    (:mod:`fedforget.tasks.task_functions`). ``train_step`` trains each batch with the task's own
    step (its forward, backward and optimizer step) instead of the loop's; a task gives a loss or a step, not both.
    ``targets`` makes it a sequence task (a language model): the model's logits per position are trained and
    evaluated against targets computed from the inputs (:mod:`fedforget.tasks.sequence_targets`), with
    ``head=False`` when the backbone's output is the logits.

    A shipped task brings a public data set (an app's task with one is refused where it is loaded: its nodes bring
    their records): ``data(cfg) -> TaskData`` loads its train pool and test split (:mod:`fedforget.tasks.base`,
    deterministic), ``train_ids(cfg)`` names the pool's sample ids without reading a row, ``num_classes=0`` takes the
    classes from the data, and ``input_column=""`` says its nodes read no records of their own.
    ``backbone(cfg)``, a builder that takes an argument, is handed the run config; ``feature_dim=0`` takes the width
    from the built module's ``feature_dim``; ``lora_targets(module)`` may name the targets once the module is built,
    ``source(cfg)`` may read the run config. ``weights_sha256(module)`` computes the sha256 the store records
    (default: over the state dict); ``project_trained`` (default True) keeps a copy of the backbone's weights in each
    store, for weights nobody can fetch again.
    """

    name: str
    backbone: Callable[[], nn.Module] | Callable[[RunConfig], nn.Module]
    feature_dim: int
    lora_targets: Sequence[str] | Callable[[nn.Module], Sequence[str]]
    num_classes: int
    input_column: str = "features"
    #: one column per input value, stacked in this order (instead of ``input_column``'s list per record)
    input_columns: Sequence[str] = ()
    encode: Callable[[Any], Any] | None = None
    #: where a simulated node (no ``data-dir`` in its node config) finds its records: a directory with
    #: ``{partition}`` in it, relative to ``FEDFORGET_HOME`` (else the current directory) like ``test-data``
    simulation_data: str = ""
    #: one line saying what the backbone is, recorded in the store's manifest
    source: str | Callable[[RunConfig], str] = ""
    #: which parameters train: "lora", "all", or a list of parameter-name prefixes (the model is the whole model)
    train: str | Sequence[str] = "lora"
    #: the task's own training loss, ``loss(logits, labels) -> scalar tensor`` (logits: the model's outputs for
    #: the batch), in place of cross-entropy: pure, handed fedforget's batches in its seeded order
    loss: Callable[[Any, Any], Any] | None = None
    #: the task's own metric, ``metric(probabilities, labels) -> {name: value}`` (numpy arrays: the served class
    #: probabilities, or with a ``prediction`` its outputs; the int labels), reported beside accuracy and loss
    #: wherever what is served is evaluated
    metric: Callable[[Any, Any], Any] | None = None
    #: the task's own train step, ``train_step(model, inputs, labels, optimizer) -> loss`` (inputs: a tuple of the
    #: batch's input tensors), called once per batch of fedforget's seeded order in place of its forward, backward
    #: and optimizer step: gradient clipping, several forward passes, auxiliary losses, seeded augmentation;
    #: it trains only on the batch it is handed (docs/your-app.md). Exclusive with ``loss``
    train_step: Callable[[Any, Any, Any, Any], Any] | None = None
    #: a sequence task's targets from a batch of its inputs, ``targets(*inputs) -> (batch, positions)`` int64, each
    #: a class or -100 where the position predicts nothing (a language model: ``next_token_targets``); its model
    #: outputs ``(batch, positions, num_classes)`` logits and its records need no ``label`` column
    targets: Callable[..., Any] | None = None
    #: fedforget's linear head on the backbone's ``feature_dim`` features (with ``train="lora"``); False: the
    #: backbone's output is already the logits (``feature_dim=num_classes``: a language model's own LM head),
    #: and the LoRA adapters alone train
    head: bool = True
    #: the task's own prediction, ``prediction(logits) -> array`` (logits: the served model's, a float64
    #: ``(records, num_classes)`` tensor; one output per record: a label, a value, the top k), what the forget
    #: service's ``predict`` returns as ``outputs`` and what ``metric`` reads instead of the probabilities
    prediction: Callable[[Any], Any] | None = None
    #: the task's public data, ``data(cfg) -> TaskData`` (None: none; the nodes bring their records)
    data: Callable[[RunConfig], TaskData] | None = None
    #: the public train pool's and test split's sizes a run loads when ``train-size``/``test-size`` are 0
    default_train_size: int = 0
    default_test_size: int = 0
    #: the public pool's sample ids a run uses, named from the set's fixed sizes without reading a row
    train_ids: Callable[[RunConfig], np.ndarray] | None = None
    #: the sha256 recorded for the backbone, ``weights_sha256(module)`` (None: over its state dict)
    weights_sha256: Callable[[nn.Module], str] | None = None
    #: True: each store keeps a copy of the backbone's weights (weights nobody can fetch again)
    project_trained: bool = True
    #: free-form notes on the task, kept with its loaded form
    notes: Mapping[str, str] = field(default_factory=dict)
    _spec: list[TaskSpec] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not callable(self.backbone):
            raise TypeError("Task(backbone=...) must be a callable that returns a torch nn.Module")
        known_classes = self.num_classes >= 2 or (self.num_classes == 0 and self.data is not None)
        if self.feature_dim < 0 or not known_classes:
            raise ValueError("Task needs feature_dim >= 1 (0: the built module's feature_dim) and num_classes >= 2 "
                             "(0: read from its data=)")
        object.__setattr__(self, "train", checked_trains(self.train))
        if trains_whole_model(self.train):
            if callable(self.lora_targets) or self.lora_targets or self.feature_dim != self.num_classes:
                raise ValueError(f"Task({describe(self.train)}) trains the model as the whole model: its output is "
                                 "the logits (feature_dim=num_classes) and it gets no LoRA (lora_targets=[])")
        elif not callable(self.lora_targets) and (isinstance(self.lora_targets, str) or not self.lora_targets):
            raise ValueError("Task(lora_targets=[...]) names the backbone's modules that get LoRA adapters")
        if self.input_column in ("record_id", "label") or not (self.input_column or self.data is not None):
            raise ValueError("Task(input_column=...) names the column of a record's inputs (not record_id or label)")
        self._check_public_data()
        self._check_input_columns()
        if self.simulation_data and "{partition}" not in self.simulation_data:
            raise ValueError("Task(simulation_data=...) needs '{partition}' in it (data/node-{partition})")
        if self.input_column == "text" and self.encode is None:
            raise ValueError("a text task needs encode(texts) -> tuple of tensors")
        if not self.head and (trains_whole_model(self.train) or self.feature_dim != self.num_classes):
            raise ValueError("Task(head=False) serves the backbone's output as the logits: it needs train='lora' "
                             "and feature_dim=num_classes")
        if self.targets is not None and self.head and not trains_whole_model(self.train):
            raise ValueError("a sequence task (Task(targets=...)) outputs logits per position: give head=False "
                             "(the backbone's output is the logits) or train='all'")
        if self.targets is not None and self.prediction is not None:
            raise ValueError("a sequence task (Task(targets=...)) serves probabilities per position; "
                             "Task(prediction=...) is for a task with one output per record")
        for name in ("loss", "metric", "train_step", "targets", "prediction", "data", "train_ids",
                     "weights_sha256"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise TypeError(f"Task({name}=...) must be a function (docs/your-app.md)")
        if self.loss is not None and self.train_step is not None:
            raise ValueError("give Task(loss=...) or Task(train_step=...), not both: a train step computes its own "
                             "loss (docs/your-app.md)")

    def _check_public_data(self) -> None:
        if self.default_train_size < 0 or self.default_test_size < 0:
            raise ValueError("Task(default_train_size=..., default_test_size=...) are row counts (0: the data's own)")
        if self.data is None and (self.train_ids is not None or self.default_train_size or self.default_test_size):
            raise ValueError("Task(train_ids=..., default_train_size=..., default_test_size=...) describe a public "
                             "data set: give it as Task(data=...)")

    def _check_input_columns(self) -> None:
        columns = self.input_columns
        if not columns:
            return
        if isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns):
            raise ValueError("Task(input_columns=[...]) names a record's input columns, one number each "
                             '(["f0", "f1", ...])')
        if self.input_column != "features":
            raise ValueError("give Task(input_column=...) (a list of numbers per record) or Task(input_columns=[...]) "
                             "(one number per column), not both")
        reserved = sorted({"record_id", "label", "text"} & set(columns))
        if reserved:
            raise ValueError(f"Task(input_columns=[...]) names {reserved[0]!r}, which is not an input column; "
                             "name the columns of a record's numbers")
        if len(set(columns)) != len(columns):
            twice = next(c for c in columns if list(columns).count(c) > 1)
            raise ValueError(f"Task(input_columns=[...]) names {twice!r} twice; name each column once")
        object.__setattr__(self, "input_columns", tuple(columns))

    @property
    def spec(self) -> TaskSpec:
        """The :class:`~fedforget.tasks.base.TaskSpec` fedforget loads (built once)."""
        if not self._spec:
            from fedforget.tasks.base import TaskSpec

            text = self.input_column == "text"
            data = self._no_public_data if self.data is None else self.data
            self._spec.append(TaskSpec(self.name, data, self._load_backbone,
                                       default_train_size=self.default_train_size,
                                       default_test_size=self.default_test_size,
                                       num_classes=self.num_classes, notes=dict(self.notes),
                                       input_column="" if self.input_columns else self.input_column,
                                       input_columns=tuple(self.input_columns),
                                       simulation_data=self.simulation_data,
                                       encode_text=self.encode if text else None,
                                       scale_raw=self._to_inputs if self.input_column and not text else None,
                                       train_ids=self.train_ids, trains=self.train,
                                       loss=self.loss, metric=self.metric, train_step=self.train_step,
                                       targets=self.targets, head=self.head,
                                       prediction=self.prediction))
        return self._spec[0]

    def _no_public_data(self, cfg: RunConfig) -> TaskData:
        from fedforget.core.config import ConfigError

        raise ConfigError(f"task {cfg.task!r} has no public data set: give every node its records "
                          "(--node-config data-dir=...) and the server run-config test-data=<records dir> "
                          "(docs/your-app.md)")

    def _load_backbone(self, cfg: RunConfig, seed: int) -> Backbone:
        from fedforget.tasks.base import Backbone

        module = self.backbone(cfg) if takes_an_argument(self.backbone) else self.backbone()
        targets = self.lora_targets(module) if callable(self.lora_targets) else self.lora_targets
        source = self.source(cfg) if callable(self.source) else self.source
        return Backbone(module, self.feature_dim or _built_width(module, self.name), list(targets),
                        (self.weights_sha256 or state_sha256)(module),
                        source or f"{self.name}: the app's own backbone", project_trained=self.project_trained)

    def _to_inputs(self, rows: np.ndarray) -> np.ndarray:
        import numpy as np

        out = rows.astype(np.float32) if self.encode is None else self.encode(rows)
        return np.asarray(out.detach().cpu().numpy() if hasattr(out, "detach") else out)


def takes_an_argument(builder: Callable[..., Any]) -> bool:
    """True when ``builder`` has a positional parameter without a default: it is handed the run config."""
    try:
        parameters = inspect.signature(builder).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: called as it is
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in parameters)


def _built_width(module: nn.Module, task: str) -> int:
    width = getattr(module, "feature_dim", None)
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"task {task}: Task(feature_dim=0) reads the width from the backbone's feature_dim, which "
                         "its module does not have; give Task(feature_dim=...)")
    return width


def state_sha256(module: nn.Module) -> str:
    """sha256 over a module's state dict (names, dtypes, shapes, bytes, in name order): what a task records for
    its backbone unless it says otherwise (``Task(weights_sha256=...)``)."""
    digest = hashlib.sha256(b"fedforget-user-backbone\0")
    for name, tensor in sorted(module.state_dict().items()):
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}\0{value.dtype}\0{tuple(value.shape)}\0".encode())
        digest.update(value.numpy().tobytes())
    return digest.hexdigest()


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def load_user_task(reference: str) -> TaskSpec:
    """The :class:`~fedforget.tasks.base.TaskSpec` that ``"<module>:<ATTRIBUTE>"`` names, named by the reference
    (so the store, the fingerprints and the service see one name). One :class:`ConfigError` line when the
    module cannot be imported or the attribute is not a :class:`fedforget.client.Task`."""
    if reference in _LOADED:
        return _LOADED[reference]
    if not is_user_task(reference):
        raise ConfigError(f"run-config 'task'={reference[:80]!r} is not a '<module>:<ATTRIBUTE>' reference")
    from fedforget.tasks.base import TaskSpec

    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises is one line for them
        raise ConfigError(f"run-config 'task'={reference!r}: cannot import {module_name!r} ({_one_line(exc)}); "
                          "run from your app's directory or put it on PYTHONPATH") from None
    found = getattr(module, attribute, None)
    if isinstance(found, Task) and found.data is not None:
        raise ConfigError(f"run-config 'task'={reference!r}: Task(data=...) is how fedforget's shipped tasks bring "
                          "their public data sets; your app's task has its nodes bring their records (data-dir, "
                          "simulation_data) and the server test-data: drop data= (docs/your-app.md)")
    spec = found.spec if isinstance(found, Task) else found
    if not isinstance(spec, TaskSpec):
        what = "has no attribute" if found is None else f"holds a {type(found).__name__}, not a fedforget.client.Task:"
        raise ConfigError(f"run-config 'task'={reference!r}: module {module_name!r} {what} {attribute!r}; "
                          f"define {attribute} = fedforget.client.Task(...) there (docs/your-app.md)")
    _LOADED[reference] = dataclasses.replace(spec, name=reference)
    return _LOADED[reference]


def app_of_task(reference: str) -> dict[str, str] | None:
    """The Flower app whose code defines the user task: its directory (the nearest one above the module holding a
    ``pyproject.toml`` with ``[tool.flwr.app]``), its ``publisher/name`` and version. None if there is none
    (a module on ``sys.path`` outside any app)."""
    module = sys.modules.get(reference.partition(":")[0])
    origin = getattr(module, "__file__", None)
    if not origin:
        return None
    for folder in Path(origin).resolve().parents:
        project = read_app_project(folder)
        if project is not None:
            return {"dir": str(folder), **project}
    return None


def read_app_project(folder: Path) -> dict[str, str] | None:
    """``{"name": "<publisher>/<name>", "version": ...}`` of the Flower app in ``folder``, or None."""
    try:
        data: dict[str, Any] = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    app = data.get("tool", {}).get("flwr", {}).get("app")
    project = data.get("project", {})
    if not isinstance(app, dict) or not isinstance(project, dict):
        return None
    return {"name": f"{app.get('publisher', '')}/{project.get('name', '')}", "version": str(project.get("version", ""))}


def use_app_of(manifest: dict[str, Any]) -> Path | None:
    """Put the app that trained a store (its manifest's ``app``) on ``sys.path``, so this process can load its
    task; its directory, or None for a store of fedforget's own app."""
    app = manifest.get("app")
    if not isinstance(app, dict) or not isinstance(app.get("dir"), str):
        return None
    folder = Path(app["dir"])
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return folder
