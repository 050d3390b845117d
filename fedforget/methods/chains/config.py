"""The chains methods' own config bounds, checked whenever a run config is parsed (pure: no torch, no flwr)."""

from __future__ import annotations

import math

from fedforget.core.config import ConfigError, RunConfig
from fedforget.methods.chains.theory import selection_refusal

ORDERED = ("fedsgt", "s3t")  # the variants that select group orders (SISA keeps one, FedCIO clusters)


def check_config(cfg: RunConfig) -> None:
    """The orders an ordered chain method can select in seconds (raises ConfigError)."""
    if cfg.method not in ORDERED:
        return
    if cfg.groups < 8 and cfg.budget > math.factorial(cfg.groups):  # 8! is past the budget's bound
        raise ConfigError(f"run-config 'chains.budget'={cfg.budget} exceeds the {math.factorial(cfg.groups)} "
                          f"distinct orders of {cfg.groups} groups; use at most {math.factorial(cfg.groups)} "
                          "or more 'chains.groups'")
    refusal = selection_refusal(cfg.groups, cfg.budget, bool(cfg.prior), ("'chains.groups'", "'chains.budget'"))
    if refusal:
        raise ConfigError(f"run-config {refusal}")
