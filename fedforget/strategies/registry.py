"""Method name → the function that drives it on the Grid."""

from __future__ import annotations

from collections.abc import Callable

from flwr.serverapp import Grid

from fedforget.core.config import RunConfig
from fedforget.strategies.chains import run_chains
from fedforget.strategies.fedavg import run_fedavg
from fedforget.strategies.fedshard import run_fedshard
from fedforget.strategies.hosfl import run_split_method

METHODS: dict[str, Callable[[Grid, RunConfig], None]] = {
    "fedavg": run_fedavg,
    "fedsgt": run_chains,
    "s3t": run_chains,
    "sisa": run_chains,
    "fedcio": run_chains,
}
# HO-SFL and the split baselines
METHODS.update({"hosfl": run_split_method, "sfl": run_split_method, "zo-sfl": run_split_method})


def get_method(name: str) -> Callable[[Grid, RunConfig], None]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(METHODS))}") from None
# FedShard
METHODS["fedshard"] = run_fedshard

# SAFE and ProtoSISA / SISA on InCA adapters; imported on first use
def _run_safe(grid: Grid, cfg: RunConfig) -> None:
    from fedforget.strategies.safe import run_safe

    run_safe(grid, cfg)


METHODS.update({"safe": _run_safe, "protosisa": _run_safe})
