"""How a run-config key is declared: once, as a field of a typed table (pure: the standard library only).

A table is a frozen dataclass whose fields are keys (:func:`option`): the field's name is the key's name
(``dp_epsilon`` → ``dp-epsilon``), the class's ``group`` its prefix (``safe.dp-epsilon``; None for the
common keys), its annotation the type, its default the value the pyproject ships, and the field's metadata
its bounds or choices and its flat name from before the groups (``safe-dp``). Everything else a key needs
(its Flower name, its type check, the table of renamed keys, the bounds check) is derived from that one
declaration by :mod:`fedforget.core.config`. Rules that tie a key to other keys (``rounds-min <=
rounds-max``, a value that needs a method) live in the table's :meth:`ConfigTable.check`.

Frozen dataclasses rather than pydantic: the ClientApp parses the run config in every fresh per-message
process, so a table must cost nothing beyond the standard library to import, and the error texts users
see (one line, naming the key) are ours, not a validation library's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar, Protocol


class RunView(Protocol):
    """What code beneath :mod:`fedforget.core.config` reads of a run config (its ``RunConfig`` is one): typed
    here, not imported, because that module imports this one and :mod:`fedforget.core.run_footprint`."""

    @property
    def method(self) -> str: ...

    @property
    def task(self) -> str: ...

    @property
    def optimizer(self) -> str: ...

    @property
    def lora_r(self) -> int: ...

    @property
    def slices_per_client(self) -> int: ...

    @property
    def train_size(self) -> int: ...

    def value(self, key: str) -> Any: ...

    def with_keys(self, changes: Mapping[str, object]) -> RunView: ...


class ConfigError(ValueError):
    """A run-config value a user must fix; the message says which key and what is allowed."""


@dataclass(frozen=True)
class Bounds:
    """What a key's value may be, checked after the auto keys resolve (a 0 that means "auto" is never seen)."""

    choices: tuple[str, ...] = ()
    low: int | float | None = None  # value >= low
    below: int | float | None = None  # low <= value < below (a half-open interval)
    high: int | None = None  # value <= high: a documented cap (docs/configuration.md, "Bounds")
    positive: bool = False  # value > 0
    old: str | None = None  # the flat name the key had before it moved into its group


def option(default: Any, *, choices: tuple[str, ...] = (), low: int | float | None = None,
           below: int | float | None = None, high: int | None = None, positive: bool = False,
           old: str | None = None) -> Any:
    """A run-config key: its default, its bounds and its flat name from before the groups, if it had one."""
    return field(default=default, metadata={"bounds": Bounds(choices, low, below, high, positive, old)})


_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}


@dataclass(frozen=True)
class ConfigTable:
    """One table of run-config keys: the common keys (``group`` None) or one group's
    ``[tool.flwr.app.config.<group>]``."""

    group: ClassVar[str | None] = None

    @classmethod
    def options(cls) -> tuple[Field[Any], ...]:
        """Its keys' fields, in declaration order (the pyproject's order)."""
        return tuple(f for f in fields(cls) if "bounds" in f.metadata)

    @classmethod
    def key(cls, name: str) -> str:
        """The run-config key of field ``name`` (``dp_epsilon`` → ``safe.dp-epsilon``)."""
        flat = name.replace("_", "-")
        return f"{cls.group}.{flat}" if cls.group else flat

    @classmethod
    def renamed(cls) -> dict[str, str]:
        """Flat name from before the groups → its key, for each key that had one."""
        return {f.metadata["bounds"].old: cls.key(f.name) for f in cls.options() if f.metadata["bounds"].old}

    @classmethod
    def coerce(cls, name: str, value: object) -> object:
        """``value`` as field ``name``'s type (an int is accepted for a float), or a ConfigError naming the key."""
        f = next(f for f in cls.options() if f.name == name)
        kind, key = _KINDS[str(f.type)], cls.key(name)
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(float(value)):
                raise ConfigError(f"run-config {key!r} must be a finite number, got {value!r}")
            return float(value)
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
        raise ConfigError(f"run-config {key!r} must be {kind.__name__}, got {value!r}")

    def check_bounds(self) -> None:
        """Each key's declared choices and bounds (raises ConfigError naming the key)."""
        for f in self.options():
            b, key, value = f.metadata["bounds"], self.key(f.name), getattr(self, f.name)
            if b.choices and value not in b.choices:
                raise ConfigError(f"run-config {key!r}={value!r} is not one of: {', '.join(b.choices)}")
            if b.below is not None and not b.low <= value < b.below:
                raise ConfigError(f"run-config {key!r} must be in [{b.low}, {b.below}), got {value}")
            if b.low is not None and not value >= b.low:
                raise ConfigError(f"run-config {key!r} must be >= {b.low}, got {value}")
            if b.high is not None and value > b.high:
                raise ConfigError(f"run-config {key!r} must be <= {b.high:,} (its documented bound), got {value}")
            if b.positive and not value > 0:
                raise ConfigError(f"run-config {key!r} must be > 0, got {value}")

    def check(self, cfg: RunView) -> None:
        """Rules between this table's keys and the rest of the config (raises ConfigError); none by default."""
