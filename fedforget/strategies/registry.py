"""Method name → the function that drives it on the Grid."""

from __future__ import annotations

from collections.abc import Callable

from flwr.serverapp import Grid

from fedforget.core.config import RunConfig
from fedforget.strategies.chains import run_chains
from fedforget.strategies.fedavg import run_fedavg

METHODS: dict[str, Callable[[Grid, RunConfig], None]] = {
    "fedavg": run_fedavg,
    "fedsgt": run_chains,
    "s3t": run_chains,
    "sisa": run_chains,
    "fedcio": run_chains,
}


def get_method(name: str) -> Callable[[Grid, RunConfig], None]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(METHODS))}") from None
