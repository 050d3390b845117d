"""What every task provides: examples with stable ids, a frozen backbone, LoRA targets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from fedforget.core.config import RunConfig

#: a target position with nothing to predict (padding, a sequence's last token): torch's ``ignore_index``
IGNORE = -100


@dataclass
class Examples:
    """Input tensors, int64 labels, and each row's stable global sample id.

    A sample's id is its index in the task's full original split, so it stays the same whatever
    subset a run uses (``train-size``), and forget requests can name it.
    """

    inputs: tuple[torch.Tensor, ...]
    labels: torch.Tensor
    ids: torch.Tensor
    #: what the model is trained to output per record when it is not the label: a sequence task's targets,
    #: ``Task(targets=...)`` of the inputs (a language model's next tokens, ``IGNORE`` where there is none)
    sequence_targets: torch.Tensor | None = None

    def __post_init__(self) -> None:
        n = len(self.labels)
        if any(len(t) != n for t in self.inputs) or len(self.ids) != n:
            raise ValueError("every input tensor and the ids need one row per label")
        if self.sequence_targets is not None and len(self.sequence_targets) != n:
            raise ValueError("the sequence targets need one row per label")

    @property
    def targets(self) -> torch.Tensor:
        """What training and evaluation compare the model's output with: the labels, or a sequence task's
        targets."""
        return self.labels if self.sequence_targets is None else self.sequence_targets

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: Sequence[int] | torch.Tensor) -> Examples:
        idx = torch.as_tensor(index, dtype=torch.long)
        targets = None if self.sequence_targets is None else self.sequence_targets[idx]
        return Examples(tuple(t[idx] for t in self.inputs), self.labels[idx], self.ids[idx], targets)

    def by_ids(self, sample_ids: Sequence[int]) -> Examples:
        """The rows with these global ids, in the order given; unknown ids raise KeyError."""
        row_of = {int(g): r for r, g in enumerate(self.ids.tolist())}
        try:
            return self.subset([row_of[int(g)] for g in sample_ids])
        except KeyError as exc:
            raise KeyError(f"sample id {exc.args[0]} is not in this split") from None


@dataclass
class TaskData:
    """The whole train pool (partitioned across clients) and the held-out test split."""

    train: Examples
    test: Examples
    num_classes: int


@dataclass
class Backbone:
    """A frozen feature extractor: ``module(*inputs) -> (batch, feature_dim)`` features."""

    module: nn.Module
    feature_dim: int
    lora_targets: list[str] | str
    #: sha256 of the pretrained weights (or of the recipe for a seeded init), recorded in the manifest.
    weights_sha256: str = ""
    source: str = ""
    #: True for backbones fedforget pretrains itself: each store keeps a copy of their weights.
    project_trained: bool = False


@dataclass
class TaskSpec:
    """How to load one task: the loaded form :attr:`fedforget.client.Task.spec` builds, for a shipped task and a
    user's alike, and what the rest of fedforget reads; ``load_data`` and ``load_backbone`` must be deterministic."""

    name: str
    load_data: Callable[[RunConfig], TaskData]
    load_backbone: Callable[[RunConfig, int], Backbone]
    default_train_size: int = 0
    default_test_size: int = 0
    #: the classes its labels range over (0: known only once its data is read), for nodes that bring their own data
    num_classes: int = 0
    notes: dict[str, str] = field(default_factory=dict)
    #: strings -> the model's input tensors, tokenized as the loader tokenizes them: a text task the forget
    #: service's ``predict`` takes strings for
    encode_text: Callable[[list[str]], tuple[torch.Tensor, ...]] | None = None
    #: a batch of pixel arrays as the data set stores them -> the model's inputs, by the loader's own code:
    #: what ``predict`` does with ``raw``
    scale_raw: Callable[[np.ndarray], np.ndarray] | None = None
    #: the sample ids of the public training pool a run uses, from the set's fixed sizes without reading a row
    #: (what the server holds a public node's registered ids to); None: known only once the data is read
    train_ids: Callable[[RunConfig], np.ndarray] | None = None
    #: which parameters train (:mod:`fedforget.tasks.trained_parameters`): ``"lora"`` (LoRA + fedforget's head),
    #: ``"all"`` or parameter-name prefixes of a user's model that is the whole model
    trains: str | tuple[str, ...] = "lora"
    #: the node-data column of a record's inputs: ``text``, ``pixels`` (a shipped vision task's), a user task's own
    #: name for its column of number lists (``features``); "": ``text`` if it encodes text, ``pixels`` if it scales
    #: raw rows, else none (nodes read no records of their own)
    input_column: str = ""
    #: a user task's columns of a record's inputs, one number each, stacked in this order into its values
    #: (``()``: the one column of ``input_column``)
    input_columns: tuple[str, ...] = ()
    #: where a node whose node config names no ``data-dir`` (the simulation engine's) finds its records: a
    #: directory with ``{partition}`` in it ("": such a node trains on its share of the task's public set)
    simulation_data: str = ""
    #: the task's own training loss, ``loss(logits, labels) -> scalar tensor``, in place of cross-entropy
    #: (None: cross-entropy); only methods that declare they take it run a task that has one
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    #: the task's own metric of what is served, ``metric(probabilities, labels) -> {name: value}`` (with a
    #: ``prediction``: ``metric(outputs, labels)``), reported beside accuracy and loss wherever the served model
    #: is evaluated (None: accuracy and loss only)
    metric: Callable[[np.ndarray, np.ndarray], Mapping[str, float]] | None = None
    #: the task's own train step, ``train_step(model, inputs, labels, optimizer) -> loss``, called once per batch in
    #: place of the loop's forward, backward and optimizer step (None: the loop's own; exclusive with ``loss``);
    #: only methods that declare they take it run a task that has one
    train_step: Callable[..., object] | None = None
    #: a sequence task's targets from its inputs, ``targets(*inputs) -> (batch, positions)`` int64 (``IGNORE``
    #: where a position has none): the model's output per position is compared with them, not with a label
    targets: Callable[..., torch.Tensor] | None = None
    #: fedforget's linear head on the backbone's features; False: the backbone's output is the task's output
    #: (a language model's logits), and LoRA alone trains
    head: bool = True
    #: the task's own prediction from the served logits, ``prediction(logits) -> array`` (one output per record),
    #: what the forget service's ``predict`` returns and what ``metric`` reads in place of the class
    #: probabilities (None: the probabilities, their argmax the predicted class)
    prediction: Callable[[torch.Tensor], Any] | None = None
