"""A sequence task's targets (``Task(targets=...)``): what the model's output at each position is compared with,
computed from the record's own inputs (a language model predicts each next token), so its records need no label.

Training's default loss and every evaluation read an output ``(records, positions, classes)`` against targets
``(records, positions)`` with :data:`~fedforget.tasks.base.IGNORE` where a position predicts nothing, the way
torch's ``cross_entropy`` and Hugging Face's causal-LM labels do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fedforget.tasks.base import IGNORE

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig
    from fedforget.tasks.base import Examples


def next_token_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """A causal language model's targets: position ``t`` predicts token ``t + 1``; the last position and every
    padded one predict nothing (``IGNORE``)."""
    targets = torch.full_like(input_ids, IGNORE)
    targets[:, :-1] = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, IGNORE)
    return targets


def checked_targets(fn: object, inputs: tuple[torch.Tensor, ...], num_classes: int) -> torch.Tensor:
    """``fn(*inputs)``, checked: an int64 tensor of one row of positions per record, each a class or ``IGNORE``
    (raises ValueError with one line naming the function)."""
    where = f"the task's targets {getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', fn)!s}"
    out = fn(*inputs)  # type: ignore[operator]
    n = len(inputs[0]) if inputs else 0
    if not isinstance(out, torch.Tensor) or out.dtype != torch.int64 or out.dim() < 2 or len(out) != n:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{where} returned {shape}, not an int64 tensor (records, positions) for {n} records")
    bad = (out != IGNORE) & ((out < 0) | (out >= num_classes))
    if bool(bad.any()):
        raise ValueError(f"{where} returned target {int(out[bad][0])}, outside the task's classes "
                         f"0..{num_classes - 1} (or {IGNORE} for a position that predicts nothing)")
    return out


def with_targets(cfg: RunConfig, examples: Examples) -> Examples:
    """``examples`` with their targets when ``cfg``'s task is a sequence task (else unchanged)."""
    from dataclasses import replace

    from fedforget.tasks.registry import get_task

    spec = get_task(cfg.task)
    if spec.targets is None or not len(examples):
        return examples
    return replace(examples, sequence_targets=checked_targets(spec.targets, examples.inputs, spec.num_classes))
