"""FedShard's run-config keys, ``[tool.flwr.app.config.fedshard]``, and their rules (pure: no torch, no
flwr), checked whenever a run config is parsed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedforget.core.config_keys import ConfigError, ConfigTable, option

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig


@dataclass(frozen=True)
class FedShardConfig(ConfigTable):
    """fedshard: a tree of LoRA modules over client shards."""

    group = "fedshard"

    fanout: int = option(2, low=2, high=1000, old="fanout")
    rounds_min: int = option(2, low=1, high=100_000, old="rounds-min")
    rounds_max: int = option(4, low=1, high=100_000, old="rounds-max")
    merge: str = option("a1", choices=("a1", "random"), old="merge")
    lora_merge: str = option("product", choices=("product", "factors"), old="lora-merge")
    rounds_rule: str = option("intent", choices=("intent", "literal", "constant"), old="rounds-rule")
    fallback: str = option("last-valid", choices=("last-valid", "refuse"), old="fallback")
    flat: bool = option(False, old="flat")
    plan_file: str = option("", old="plan-file")

    def check(self, cfg: RunConfig) -> None:
        if self.rounds_min > self.rounds_max:
            raise ConfigError(f"run-config 'fedshard.rounds-min'={self.rounds_min} exceeds "
                              f"'fedshard.rounds-max'={self.rounds_max}")
