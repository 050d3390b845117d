"""The chains methods' run-config keys, ``[tool.flwr.app.config.chains]``, and their rules (pure: no torch,
no flwr), checked whenever a run config is parsed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedforget.core.config_keys import ConfigError, ConfigTable, option
from fedforget.core.method import Defaults
from fedforget.methods.chains.plan import CHAIN_LAYOUTS

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig

SERVING = ("allseq", "minseq", "longseq")
PLACEMENTS = ("auto", "additive", "layer")

#: What their auto keys take before the task's (core/defaults.py): a chain position trains its module in
#: rounds-per-phase FedAvg rounds on its prefix's data only
DEFAULTS = Defaults(variants={"fedsgt": {"rounds-per-phase": 3}, "s3t": {"rounds-per-phase": 3},
                              "sisa": {"rounds-per-phase": 3}})


@dataclass(frozen=True)
class ChainsConfig(ConfigTable):
    """fedsgt, s3t, sisa, fedcio: sequence-sharded chains."""

    group = "chains"

    groups: int = option(10, low=1, high=1000, old="groups")
    budget: int = option(10, low=1, high=10_000, old="budget")
    #: 0 = auto: the method's default (DEFAULTS)
    rounds_per_phase: int = option(0, low=1, high=10_000, old="rounds-per-phase")
    serving: str = option("allseq", choices=SERVING, old="serving")
    shards: int = option(1, low=1, high=1000, old="shards")
    clusters: int = option(5, low=1, high=1000, old="clusters")
    placement: str = option("auto", choices=PLACEMENTS, old="placement")
    #: one deletion probability per group, comma-separated ("" = uniform)
    prior: str = option("", old="prior")

    def check(self, cfg: RunConfig) -> None:
        """A prior that fits the groups, and the orders an ordered chain method can select in seconds."""
        if self.prior:
            parse_prior(self.prior, self.groups)
        layout = CHAIN_LAYOUTS.get(cfg.method)
        if layout is None or not layout.ordered:  # SISA keeps one order, FedCIO clusters
            return
        from fedforget.methods.chains.theory import selection_refusal

        if self.groups < 8 and self.budget > math.factorial(self.groups):  # 8! is past the budget's bound
            raise ConfigError(f"run-config 'chains.budget'={self.budget} exceeds the "
                              f"{math.factorial(self.groups)} distinct orders of {self.groups} groups; use at most "
                              f"{math.factorial(self.groups)} or more 'chains.groups'")
        refusal = selection_refusal(self.groups, self.budget, bool(self.prior), ("'chains.groups'", "'chains.budget'"))
        if refusal:
            raise ConfigError(f"run-config {refusal}")


def parse_prior(text: str, groups: int) -> list[float]:
    """``prior='0.4,0.3,...'``: one deletion probability per group, summing to 1 (drives BMS)."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"run-config 'chains.prior' must be comma-separated numbers, got {text!r}") from None
    if len(values) != groups or any(v < 0 for v in values) or abs(sum(values) - 1.0) > 1e-6:
        raise ConfigError(f"run-config 'chains.prior' needs {groups} non-negative numbers (one per group) "
                          f"summing to 1, got {text!r}")
    return values
