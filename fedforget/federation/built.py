"""What one training or retrain built: a strategy's ``train``/``retrain`` returns it, the driver records it.

Its own module, below both: the strategy base (light, imported by a user's ServerApp module) and the driver
(the server's run: the model, the data) each import it without importing the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Built:
    """What one training or retrain built, as the driver records it."""

    rebuilt: list[str]  # artifacts (re)built by this run
    unbuilt: list[str] = field(default_factory=list)  # artifacts a lost partition kept from being built
    excluded: set[int] = field(default_factory=set)  # partitions lost in this run
    metrics: dict[str, Any] | None = None  # the method's fields of the final metrics row (None: no row)
    manifest: dict[str, Any] = field(default_factory=dict)  # manifest fields written once it is served
    summary: str = ""  # the closing log line, before the served accuracy
