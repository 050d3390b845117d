"""SAFE's and ProtoSISA's run-config keys, ``[tool.flwr.app.config.safe]``, and their rules (pure: no
torch, no flwr), checked whenever a run config is parsed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedforget.core.config_keys import ConfigError, ConfigTable, option
from fedforget.core.method import Defaults

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig

COARSE_BY = ("sample", "client")
#: Upper bound of 'safe.shard' (server-held samples); the task's unused rows bound it further at run time.
SAFE_SHARD_MAX = 1_000_000

#: SAFE's class groups per coarse shard: a clique's one-vs-all adapters need enough other classes as
#: negatives. Ten classes: two groups of five (n_f = 4 leaves 2–3 a clique and serves 6.3 points below
#: SISA at 16 cliques, n_f = 2 2.0 above: benchmarks/safe_topology.py). Two classes: both in every clique.
SAFE_FINE: dict[str, int] = {"digits-mlp": 2, "fmnist-cnn": 2, "fmnist-effnet": 2, "rt-minilm": 1}
#: The adapter width per task (elsewhere the fallback's 128).
ADAPTER_WIDTH: dict[str, int] = {"digits-mlp": 64, "fmnist-effnet": 1280, "rt-minilm": 384, "fortunes-minilm": 384}


def _per_task(method: str, task: str) -> dict[str, int]:
    """A variant's values on one task: the adapter width, and SAFE's class groups."""
    width = {"adapter-width": ADAPTER_WIDTH[task]} if task in ADAPTER_WIDTH else {}
    return width | ({"fine": SAFE_FINE[task]} if method == "safe" and task in SAFE_FINE else {})


#: What their auto keys take before the task's (core/defaults.py). SAFE's InCA adapters: adapter-steps is
#: AdamW steps per adapter on each node, whatever its clique holds (budget.py). ProtoSISA/SISA:
#: safe.coarse uniform shards (it deals coarse·fine shards of all classes), hence fine 1.
DEFAULTS = Defaults(
    variants={"safe": {"num-rounds": 5, "lr": 0.005}, "protosisa": {"num-rounds": 5, "lr": 0.005, "fine": 1}},
    pairs={(m, t): _per_task(m, t) for m in ("safe", "protosisa") for t in (*ADAPTER_WIDTH, *SAFE_FINE)
           if _per_task(m, t)},
)


@dataclass(frozen=True)
class SafeConfig(ConfigTable):
    """safe and its InCA baseline protosisa (safe.dp: SAFE-DP)."""

    group = "safe"

    coarse: int = option(4, low=1, high=10_000, old="coarse")
    #: 0 = auto: class groups per coarse group (SAFE_FINE)
    fine: int = option(0, low=1, high=10_000, old="fine")
    coarse_by: str = option("sample", choices=COARSE_BY, old="coarse-by")
    prototypes: bool = option(True, old="prototypes")
    dp: bool = option(False, old="safe-dp")
    dp_epsilon: float = option(3.0, positive=True, old="dp-epsilon")
    dp_delta: float = option(1e-10, old="dp-delta")
    dp_alpha: float = option(30.0, positive=True, old="dp-alpha")
    dp_beta: float = option(1.0, old="dp-beta")
    dp_clip: float = option(1.0, positive=True, old="dp-clip")
    schedule: str = option("cosine", choices=("cosine", "constant"), old="safe-schedule")
    #: 0 = auto, as for adapter-width: the method's and task's default (DEFAULTS); checked >= 0 below
    adapter_steps: int = option(0, high=1_000_000, old="adapter-steps")
    adapter_width: int = option(0, high=16_384, old="adapter-width")
    adapter_weight_decay: float = option(1e-4, old="adapter-weight-decay")
    #: server-held samples every clique also trains on (0 = none)
    shard: int = option(0, old="safe-shard")

    def check(self, cfg: RunConfig) -> None:
        """DP parameters in range, adapter sizes the attention can use, and what needs method safe."""
        if not 0 < self.dp_delta < 1 or not 0 < self.dp_beta <= 1:
            raise ConfigError(f"run-config needs 0 < 'safe.dp-delta' < 1 and 0 < 'safe.dp-beta' <= 1, got "
                              f"{self.dp_delta} and {self.dp_beta}")
        for name in ("adapter_steps", "adapter_width", "adapter_weight_decay"):
            if getattr(self, name) < 0:
                raise ConfigError(f"run-config {self.key(name)!r} must be >= 0 (0 = the task's default), "
                                  f"got {getattr(self, name)}")
        if self.adapter_width % 4:
            raise ConfigError(f"run-config 'safe.adapter-width' must be a multiple of 4 (the attention's heads), "
                              f"got {self.adapter_width}")
        if self.dp and cfg.method != "safe":
            raise ConfigError(f"safe.dp=true needs method='safe', got {cfg.method!r}")
        self._check_shard(cfg)
        if cfg.reads(self.group) and cfg.task == "hf":
            raise ConfigError(f"method {cfg.method!r} reads backbone tokens of a built-in task; use task digits-mlp, "
                              "fmnist-cnn, fmnist-effnet, rt-minilm or fortunes-minilm")

    def _check_shard(self, cfg: RunConfig) -> None:
        """'safe.shard': a count of server-held samples, only for the InCA methods and not under SAFE-DP."""
        if not 0 <= self.shard <= SAFE_SHARD_MAX:
            raise ConfigError(f"run-config 'safe.shard' must be in 0..{SAFE_SHARD_MAX} (0 = no safe shard), "
                              f"got {self.shard}")
        if self.shard and not cfg.reads(self.group):
            raise ConfigError(f"safe.shard={self.shard} needs method='safe' or 'protosisa' (a server-held shard "
                              f"every clique reads), got {cfg.method!r}; set safe.shard=0")
        if self.shard and self.dp:
            raise ConfigError("safe.shard is not supported with safe.dp=true (the DP class nodes are per client); "
                              "set safe.shard=0 or safe.dp=false")
