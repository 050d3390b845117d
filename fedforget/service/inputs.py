"""Raw inputs in a task's own form → the model inputs its test split holds (what ``predict`` feeds).

Each task declares its own forms (its loaded :class:`~fedforget.tasks.base.TaskSpec`): a text task tokenizes strings
exactly as its loader does (``encode_text``); a vision task takes pixel arrays of its input shape
(``digits-mlp``: 8×8 or 64 values, ``fmnist-cnn``: 28×28 or 784) in the model's scale, or, with ``raw``, as
the data set stores them (digits 0..16, Fashion-MNIST 0..255), converted by the loader's own code
(``scale_raw``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedforget.service.schemas import MAX_TEXT_CHARS
from fedforget.tasks.registry import TASKS, get_task

#: the largest magnitude the model's float32 holds; a value past it would reach the network as inf
FLOAT32_MAX = float(np.finfo(np.float32).max)
INPUT_SCALE = "send finite values of the scale of the task's data (pixel values, or the model's scale)"


class InputError(ValueError):
    """The inputs are not in the task's form; the message names what is expected."""


def _numbers_only(item: Any) -> bool:
    """Nested lists of JSON numbers only: a boolean or a string ("1") is refused, never cast to a pixel value."""
    stack = [item]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            return False
    return True


def _serving(kind: str) -> str:
    return ", ".join(sorted(name for name, task in TASKS.items() if getattr(task.spec, kind) is not None))


def model_inputs(task: str, example_shape: tuple[int, ...] | None, inputs: list[Any],
                 raw: bool = False) -> tuple[torch.Tensor, ...]:
    """``inputs`` (one item per example) as the tensors the served model takes; :class:`InputError` if not."""
    spec = get_task(task)
    if spec.encode_text is not None:
        if not all(isinstance(x, str) for x in inputs):
            raise InputError(f"inputs: task {task} takes strings (one text per example)")
        if any(len(x) > MAX_TEXT_CHARS for x in inputs):
            raise InputError(f"inputs: a text is over {MAX_TEXT_CHARS:,} characters")
        for i, x in enumerate(inputs):
            try:
                x.encode("utf-8")  # JSON may spell lone surrogates ("\ud800"); no tokenizer takes them
            except UnicodeEncodeError:
                raise InputError(f"inputs[{i}]: not valid Unicode text (a lone surrogate)") from None
        return tuple(spec.encode_text(list(inputs)))
    if example_shape is None:
        raise InputError(f"inputs: predict does not take inputs for task {task} (it serves pixel arrays for "
                         f"{_serving('scale_raw')} and strings for {_serving('encode_text')})")
    size = int(np.prod(example_shape))
    rows = []
    for i, item in enumerate(inputs):
        try:
            arr = np.asarray(item) if _numbers_only(item) else np.asarray(None)
        except (ValueError, TypeError, OverflowError):
            arr = np.asarray(None)
        if arr.dtype.kind not in "iuf":
            raise InputError(f"inputs[{i}]: not an array of JSON numbers of shape {list(example_shape)}")
        arr = arr.astype(np.float64)
        if arr.size != size:
            raise InputError(f"inputs[{i}]: {arr.size} values, task {task} takes {size} (shape {list(example_shape)})")
        if not np.isfinite(arr).all() or (np.abs(arr) > FLOAT32_MAX).any():
            raise InputError(f"inputs[{i}]: values must be finite numbers within float32 (|x| <= {FLOAT32_MAX:.4g}); "
                             f"{INPUT_SCALE}")
        rows.append(arr.reshape(example_shape))
    batch = np.stack(rows)
    if raw:
        if spec.scale_raw is None:
            raise InputError(f"raw: task {task} takes inputs in the model's scale only")
        with np.errstate(over="ignore", invalid="ignore"):
            batch = spec.scale_raw(batch)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = batch.astype(np.float32)
    if not np.isfinite(scaled).all():
        raise InputError(f"inputs: the values overflow float32 once scaled; {INPUT_SCALE}")
    return (torch.from_numpy(scaled),)
