"""Local supervised training of the trainable parameters, and evaluation; both deterministic."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fedforget.core.seeds import derive_seed
from fedforget.tasks.base import IGNORE
from fedforget.training.determinism import deterministic_torch, generator

EVAL_BATCH = 256
#: a method's own term of the training loss: ``(logits, labels, trainable parameters) -> scalar``
LossTerm = Callable[[torch.Tensor, torch.Tensor, list[nn.Parameter]], torch.Tensor]
#: a task's own loss in place of cross-entropy: ``(logits, labels) -> scalar``
TaskLoss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: a task's own train step in place of the loop's forward, backward and optimizer step:
#: ``(model, inputs, labels, optimizer) -> the batch's loss`` (a finite number or a scalar tensor)
TrainStep = Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor, torch.optim.Optimizer], object]


@dataclass(frozen=True)
class TrainSettings:
    epochs: int
    batch_size: int
    lr: float
    optimizer: str
    seed: int
    #: FedProx's proximal term: ``mu / 2 * ||w - w_received||²`` over the trained parameters (0: none)
    proximal_mu: float = 0.0
    #: a method's own term added to each batch's loss: ``loss_term(logits, labels, params)`` (None: none)
    loss_term: LossTerm | None = None
    #: the task's own loss, in place of cross-entropy (None: cross-entropy); the terms above still add to it
    loss: TaskLoss | None = None
    #: the task's own train step, called once per batch instead of the loop's own (None: the loop's own); it
    #: computes its own loss, so neither a task's loss nor a term above can add to it
    train_step: TrainStep | None = None


@dataclass(frozen=True)
class TrainResult:
    num_examples: int
    steps: int
    mean_loss: float


def _optimizer(params: Sequence[nn.Parameter], settings: TrainSettings) -> torch.optim.Optimizer:
    if settings.optimizer == "sgd":
        return torch.optim.SGD(params, lr=settings.lr, momentum=0.9)
    if settings.optimizer == "adam":
        return torch.optim.Adam(params, lr=settings.lr)
    raise ValueError(f"unknown optimizer {settings.optimizer!r}")


def train_supervised(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], labels: torch.Tensor, settings: TrainSettings
) -> TrainResult:
    """Cross-entropy (or the task's own loss, or each batch by the task's own train step) training of the
    parameters that require grad; a fresh optimizer per call.

    The data order comes from a generator seeded by ``settings.seed`` (which callers derive from
    run seed, artifact, round and partition), so the same call gives the same bits anywhere.
    """
    n = len(labels)
    if n == 0:
        return TrainResult(0, 0, 0.0)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    if settings.train_step is not None:
        return _train_by_step(model, params, inputs, labels, settings, settings.train_step)
    total, steps = 0.0, 0
    with deterministic_torch():
        model.train()
        opt = _optimizer(params, settings)
        gen = generator(settings.seed)
        anchor = [p.detach().clone() for p in params] if settings.proximal_mu else None
        for _ in range(settings.epochs):
            order = torch.randperm(n, generator=gen)
            for start in range(0, n, settings.batch_size):
                idx = order[start : start + settings.batch_size]
                logits = model(*(t[idx] for t in inputs))
                loss = (cross_entropy(logits, labels[idx]) if settings.loss is None
                        else _task_loss(settings.loss, logits, labels[idx]))
                if anchor is not None:
                    loss = loss + settings.proximal_mu / 2 * sum(
                        ((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True))
                if settings.loss_term is not None:
                    loss = loss + settings.loss_term(logits, labels[idx], params)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach())
                steps += 1
        model.eval()
    return TrainResult(n, steps, total / max(steps, 1))


def _train_by_step(model: nn.Module, params: list[nn.Parameter], inputs: tuple[torch.Tensor, ...],
                   labels: torch.Tensor, settings: TrainSettings, step_fn: TrainStep) -> TrainResult:
    """The loop with the task's own step per batch: the same optimizer, batches and order as the loop's own, and
    torch's global random stream seeded before each step from the unit's seed and the step's number (dropout or
    augmentation in a step draws the same numbers in a retrain and a reference run), restored afterwards."""
    if settings.proximal_mu or settings.loss_term is not None:
        raise ValueError("a task's train step computes its own loss, which would hide the method's own term "
                         "(FedProx's proximal term or another); train this method with Task(loss=...) instead")
    n = len(labels)
    total, steps = 0.0, 0
    # the CUDA streams too once CUDA is in use (seeded and restored with the CPU's); else only the CPU's is touched
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    seed_stream = torch.manual_seed if devices else torch.random.default_generator.manual_seed
    with deterministic_torch(), torch.random.fork_rng(devices=devices):
        model.train()
        opt = _optimizer(params, settings)
        gen = generator(settings.seed)
        for _ in range(settings.epochs):
            order = torch.randperm(n, generator=gen)
            for start in range(0, n, settings.batch_size):
                idx = order[start : start + settings.batch_size]
                seed_stream(derive_seed(settings.seed, "train-step", steps))
                opt.zero_grad(set_to_none=True)
                total += step_loss(step_fn, step_fn(model, tuple(t[idx] for t in inputs), labels[idx], opt))
                steps += 1
        model.eval()
    return TrainResult(n, steps, total / max(steps, 1))


def step_loss(step: TrainStep, value: object) -> float:
    """The loss a task's train step returned for its batch, which must be a finite number or a scalar tensor."""
    number = None
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        number = float(value.detach())
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    if number is None or not math.isfinite(number):
        shown = (f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) and value.dim()
                 else " ".join(repr(value).split())[:80])
        raise ValueError(f"the task's train step {getattr(step, '__qualname__', step)!r} returned {shown}; it must "
                         "return the batch's loss as a finite number or a scalar tensor")
    return number
def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of class logits ``(batch, classes)`` against labels, or of a sequence task's logits
    ``(batch, positions, classes)`` against its targets over the positions that predict something."""
    if targets.dim() == 1:
        return nn.functional.cross_entropy(logits, targets)
    return nn.functional.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE)


def _task_loss(loss: TaskLoss, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The task's loss of one batch, which must be a scalar tensor backward can run through."""
    value = loss(logits, labels)
    if not isinstance(value, torch.Tensor) or value.dim() != 0 or not value.requires_grad:
        raise ValueError(f"the task's loss {getattr(loss, '__qualname__', loss)!r} must return a scalar tensor "
                         "computed from the logits it is handed")
    return value


@torch.no_grad()
def predict_logits(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    with deterministic_torch():
        model.eval()
        n = len(inputs[0])
        chunks = [model(*(t[s : s + EVAL_BATCH] for t in inputs)) for s in range(0, n, EVAL_BATCH)]
    return torch.cat(chunks) if chunks else torch.empty(0)


def evaluate(model: nn.Module, inputs: tuple[torch.Tensor, ...], labels: torch.Tensor) -> dict[str, float]:
    """Accuracy and mean cross-entropy on the given examples (a sequence task's: over its target positions)."""
    if len(labels) == 0:
        return {"accuracy": 0.0, "loss": 0.0, "num-examples": 0}
    if labels.dim() > 1:
        return _evaluate_sequences(model, inputs, labels)
    logits = predict_logits(model, inputs)
    loss = float(nn.functional.cross_entropy(logits, labels))
    acc = float((logits.argmax(dim=1) == labels).float().mean())
    return {"accuracy": acc, "loss": loss, "num-examples": int(len(labels))}


@torch.no_grad()
def _evaluate_sequences(model: nn.Module, inputs: tuple[torch.Tensor, ...], targets: torch.Tensor) -> dict[str, float]:
    """Token accuracy and mean cross-entropy over the target positions, batch by batch: a sequence task's
    logits for a whole test set (records × positions × classes) are never held at once."""
    nll, hits, count = 0.0, 0, 0
    with deterministic_torch():
        model.eval()
        for s in range(0, len(targets), EVAL_BATCH):
            logits = model(*(t[s : s + EVAL_BATCH] for t in inputs)).flatten(0, -2)
            y = targets[s : s + EVAL_BATCH].flatten()
            kept = y != IGNORE
            nll += float(nn.functional.cross_entropy(logits[kept].double(), y[kept], reduction="sum"))
            hits += int((logits[kept].argmax(dim=1) == y[kept]).sum())
            count += int(kept.sum())
    return {"accuracy": hits / max(count, 1), "loss": nll / max(count, 1), "num-examples": int(len(targets))}
