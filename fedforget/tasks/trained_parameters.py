"""Which parameters of the user's model a task trains (``Task(train=...)``), and which methods can train them.

``"lora"``: LoRA adapters on the frozen backbone plus fedforget's head (every method). ``"all"``, or a list of
parameter-name prefixes: the user's model is the whole model (its output is the logits), those parameters train
and the rest stay frozen; only a method whose declaration says it exchanges one model's trainable state per round
(:meth:`fedforget.core.method.Method.whole_model_refusal` None) can run it. Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedforget.core import known_methods
from fedforget.core.config import ConfigError, RunConfig
from fedforget.core.method import Method

LORA = "lora"
ALL = "all"
#: what ``Task(train=...)`` holds: ``"lora"``, ``"all"`` or a tuple of parameter-name prefixes
Trains = str | tuple[str, ...]


def checked_trains(value: str | Sequence[str]) -> Trains:
    """``Task(train=...)`` as stored, or ValueError saying what it takes."""
    if value in (LORA, ALL):
        return str(value)
    if isinstance(value, str) or not value or not all(isinstance(p, str) and p.strip(".") for p in value):
        raise ValueError("Task(train=...) takes 'lora', 'all' or a list of parameter-name prefixes (['fc2'])")
    return tuple(value)


def trains_whole_model(trains: Trains) -> bool:
    """The user's model is the whole model (no LoRA, no fedforget head)."""
    return trains != LORA


def describe(trains: Trains) -> str:
    """``train='all'`` / ``train=['fc2']`` as the user wrote it, for one-line messages."""
    return f"train={trains!r}" if isinstance(trains, str) else f"train={list(trains)!r}"


def check_method_trains(method: Method, cfg: RunConfig, trains: Trains) -> None:
    """Refuse (one ConfigError line) a whole-model task under a method that trains LoRA + head only, or with
    ``head-only`` (the user's model has no separate head)."""
    if not trains_whole_model(trains):
        return
    refusal = method.whole_model_refusal(cfg.method)
    if refusal is not None:
        able = [v for m in known_methods.families() for v in m.variants if m.whole_model_refusal(v) is None]
        raise ConfigError(f"method={cfg.method!r} cannot train the user's own model (task {cfg.task!r} has "
                          f"{describe(trains)}): {refusal}; use method= one of {', '.join(able)}, "
                          "or Task(train='lora')")
    if cfg.head_only:
        raise ConfigError(f"head-only=true trains fedforget's head, and task {cfg.task!r} has {describe(trains)} "
                          "(no fedforget head); set head-only=false")


def is_trained(name: str, trains: Trains) -> bool:
    """Parameter ``name`` of the user's model trains under ``trains`` (a prefix names a module or a parameter)."""
    if trains == ALL:
        return True
    return any(name == p or name.startswith(p.rstrip(".") + ".") for p in trains)
