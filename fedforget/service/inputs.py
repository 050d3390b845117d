"""Raw inputs in a task's own form → the model inputs its test split holds (what ``predict`` feeds).

Vision tasks take pixel arrays of the task's input shape (``digits-mlp``: 8×8 or 64 values,
``fmnist-cnn``: 28×28 or 784), in the model's scale by default (digits: pixel/16 in [0, 1];
Fashion-MNIST: /255 then normalised), or as the data set stores them with ``raw`` (digits 0..16,
Fashion-MNIST 0..255). Text tasks take strings, tokenized exactly as training tokenized them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

MAX_TEXT_CHARS = 10_000


class InputError(ValueError):
    """The inputs are not in the task's form; the message names what is expected."""


def _minilm_tokens(texts: list[str]) -> tuple[torch.Tensor, ...]:
    from fedforget.tasks.text import minilm_path, tokenize

    return tokenize(texts, str(minilm_path()))


def _fortunes_tokens(texts: list[str]) -> tuple[torch.Tensor, ...]:
    from fedforget.tasks.fortunes import MAX_LENGTH
    from fedforget.tasks.text import minilm_path, tokenize

    return tokenize(texts, str(minilm_path()), MAX_LENGTH)


#: text task → how its strings become model inputs (the tokenizer its data loader uses)
TEXT_TASKS: dict[str, Callable[[list[str]], tuple[torch.Tensor, ...]]] = {
    "rt-minilm": _minilm_tokens, "fortunes-minilm": _fortunes_tokens}
def _digits_scale(batch: np.ndarray) -> np.ndarray:
    from fedforget.tasks.vision_data import scale_digits

    return scale_digits(batch)


def _fmnist_scale(batch: np.ndarray) -> np.ndarray:
    from fedforget.tasks.vision_data import normalise_fmnist

    return normalise_fmnist(batch.reshape(len(batch), 28, 28))


#: vision task → raw pixels (as the data set stores them) → the model's scale, by the task loader's own code
RAW_SCALE: dict[str, Callable[[np.ndarray], np.ndarray]] = {"digits-mlp": _digits_scale, "fmnist-cnn": _fmnist_scale}


def model_inputs(task: str, example_shape: tuple[int, ...] | None, inputs: list[Any],
                 raw: bool = False) -> tuple[torch.Tensor, ...]:
    """``inputs`` (one item per example) as the tensors the served model takes; :class:`InputError` if not."""
    if task in TEXT_TASKS:
        if not all(isinstance(x, str) for x in inputs):
            raise InputError(f"inputs: task {task} takes strings (one text per example)")
        if any(len(x) > MAX_TEXT_CHARS for x in inputs):
            raise InputError(f"inputs: a text is over {MAX_TEXT_CHARS:,} characters")
        return tuple(TEXT_TASKS[task](list(inputs)))
    if example_shape is None:
        raise InputError(f"inputs: predict does not take inputs for task {task} (it serves pixel arrays for "
                         f"{', '.join(sorted(RAW_SCALE))} and strings for {', '.join(sorted(TEXT_TASKS))})")
    size = int(np.prod(example_shape))
    rows = []
    for i, item in enumerate(inputs):
        try:
            arr = np.asarray(item, dtype=np.float64)
        except (ValueError, TypeError):
            raise InputError(f"inputs[{i}]: not an array of numbers of shape {list(example_shape)}") from None
        if arr.size != size or arr.dtype == object:
            raise InputError(f"inputs[{i}]: {arr.size} values, task {task} takes {size} (shape {list(example_shape)})")
        if not np.isfinite(arr).all():
            raise InputError(f"inputs[{i}]: values must be finite numbers")
        rows.append(arr.reshape(example_shape))
    batch = np.stack(rows)
    if raw:
        if task not in RAW_SCALE:
            raise InputError(f"raw: task {task} takes inputs in the model's scale only")
        batch = RAW_SCALE[task](batch)
    return (torch.from_numpy(batch.astype(np.float32)),)
