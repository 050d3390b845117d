"""What a Flower user imports to run fedforget in an app of their own: a task of their own model and data
(:class:`Task`), and fedforget's ClientApp (``from fedforget.client import app``).

    # mlpapp/task.py
    TASK = Task(name="tabular-mlp", backbone=make_mlp, feature_dim=32, lora_targets=["fc1", "fc2"], num_classes=10)

and ``task = "mlpapp.task:TASK"`` in the app's ``[tool.flwr.app.config]``. fedforget wraps the backbone in its own
LoRA adapters (on the modules ``lora_targets`` names) and a linear head; the backbone stays frozen. Each node
holds its records as a node data directory (``record_id``, ``label`` and ``input_column``); the server
evaluates on ``test-data``, a records directory of the same form (docs/your-app.md).

This module imports neither torch nor the task code until a task is loaded: the ClientApp is imported anew
for every Flower message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fedforget.client_app import app

if TYPE_CHECKING:
    import numpy as np
    from torch import nn

    from fedforget.core.config import RunConfig
    from fedforget.tasks.base import Backbone, TaskData, TaskSpec

__all__ = ["Task", "app"]


@dataclass(frozen=True)
class Task:
    """A task of the user's own model, for ``task='<module>:<ATTRIBUTE>'``.

    ``backbone()`` builds the frozen feature extractor, ``module(inputs) -> (batch, feature_dim)``; it must
    build the same weights every call (pretrained weights loaded from a file, or a seeded init), since a
    retrain and ``fedforget verify`` rebuild it: the sha256 of its weights is recorded in the store.
    ``lora_targets`` names its ``nn.Linear``/``nn.Conv2d`` modules that get LoRA adapters. Records hold their
    inputs in the column ``input_column``: a flat list of numbers per record (cast to float32, or turned into the
    model's input by ``encode(rows)``, rows a float64 ``(records, values)`` array); with ``input_column="text"``
    a string per record, which ``encode(texts)`` must turn into a tuple of tensors.
    """

    name: str
    backbone: Callable[[], nn.Module]
    feature_dim: int
    lora_targets: Sequence[str]
    num_classes: int
    input_column: str = "features"
    encode: Callable[[Any], Any] | None = None
    #: where a simulated node (no ``data-dir`` in its node config) finds its records: a directory with
    #: ``{partition}`` in it, relative to ``FEDFORGET_HOME`` (else the current directory) like ``test-data``
    simulation_data: str = ""
    #: one line saying what the backbone is, recorded in the store's manifest
    source: str = ""
    _spec: list[TaskSpec] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not callable(self.backbone):
            raise TypeError("Task(backbone=...) must be a callable that returns a torch nn.Module")
        if self.feature_dim < 1 or self.num_classes < 2:
            raise ValueError("Task needs feature_dim >= 1 and num_classes >= 2")
        if isinstance(self.lora_targets, str) or not self.lora_targets:
            raise ValueError("Task(lora_targets=[...]) names the backbone's modules that get LoRA adapters")
        if not self.input_column or self.input_column in ("record_id", "label"):
            raise ValueError("Task(input_column=...) names the column of a record's inputs (not record_id or label)")
        if self.simulation_data and "{partition}" not in self.simulation_data:
            raise ValueError("Task(simulation_data=...) needs '{partition}' in it (data/node-{partition})")
        if self.input_column == "text" and self.encode is None:
            raise ValueError("a text task needs encode(texts) -> tuple of tensors")

    @property
    def spec(self) -> TaskSpec:
        """The :class:`~fedforget.tasks.base.TaskSpec` fedforget loads (built once)."""
        if not self._spec:
            from fedforget.tasks.base import TaskSpec

            text = self.input_column == "text"
            self._spec.append(TaskSpec(self.name, self._no_public_data, self._load_backbone,
                                       num_classes=self.num_classes, input_column=self.input_column,
                                       simulation_data=self.simulation_data,
                                       encode_text=self.encode if text else None,
                                       scale_raw=None if text else self._to_inputs))
        return self._spec[0]

    def _no_public_data(self, cfg: RunConfig) -> TaskData:
        from fedforget.core.config import ConfigError

        raise ConfigError(f"task {cfg.task!r} has no public data set: give every node its records "
                          "(--node-config data-dir=...) and the server run-config test-data=<records dir> "
                          "(docs/your-app.md)")

    def _load_backbone(self, cfg: RunConfig, seed: int) -> Backbone:
        from fedforget.tasks.base import Backbone

        module = self.backbone()
        return Backbone(module, self.feature_dim, list(self.lora_targets), weights_sha256(module),
                        self.source or f"{self.name}: the app's own backbone", project_trained=True)

    def _to_inputs(self, rows: np.ndarray) -> np.ndarray:
        import numpy as np

        out = rows.astype(np.float32) if self.encode is None else self.encode(rows)
        return np.asarray(out.detach().cpu().numpy() if hasattr(out, "detach") else out)


def weights_sha256(module: nn.Module) -> str:
    """sha256 over a module's state dict (names, dtypes, shapes, bytes, in name order)."""
    digest = hashlib.sha256(b"fedforget-user-backbone\0")
    for name, tensor in sorted(module.state_dict().items()):
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}\0{value.dtype}\0{tuple(value.shape)}\0".encode())
        digest.update(value.numpy().tobytes())
    return digest.hexdigest()
