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


@dataclass(frozen=True)
class SafeLayout:
    """How SAFE and ProtoSISA shard the clients' data, in one value their Strategy classes name
    (``SAFE.layout``): the config rules, the defaults and the graph ask it, none compares variant names."""

    #: the run config's ``method`` value: it names the variant's artifacts and seeds
    name: str
    #: cliques of class groups whose one-vs-all adapters need two classes each (SAFE): the task's class groups
    #: (SAFE_FINE) are the ``safe.fine`` default, ``safe.coarse-by`` deals the coarse groups, and SAFE-DP
    #: applies; otherwise ``coarse·fine`` uniform shards holding every class (ProtoSISA, SISA's sharding)
    class_cliques: bool

    def coarse_mode(self, coarse_by: str) -> str:
        """How the clients' samples are dealt into coarse groups, for ``safe.coarse-by = coarse_by``."""
        return coarse_by if self.class_cliques else "uniform"

    def per_task(self, task: str) -> dict[str, int]:
        """The variant's values on one task: the adapter width, and SAFE's class groups."""
        width = {"adapter-width": ADAPTER_WIDTH[task]} if task in ADAPTER_WIDTH else {}
        return width | ({"fine": SAFE_FINE[task]} if self.class_cliques and task in SAFE_FINE else {})


SAFE_LAYOUT = SafeLayout("safe", class_cliques=True)
PROTOSISA_LAYOUT = SafeLayout("protosisa", class_cliques=False)
#: the run config names the variant (``method=``); this is where that name becomes its layout
SAFE_LAYOUTS: dict[str, SafeLayout] = {v.name: v for v in (SAFE_LAYOUT, PROTOSISA_LAYOUT)}


def safe_layout(method: str) -> SafeLayout:
    """The layout of the SAFE variant ``method`` (a ValueError names the variants for any other)."""
    try:
        return SAFE_LAYOUTS[method]
    except KeyError:
        raise ValueError(f"unknown SAFE method {method!r}; choose one of {', '.join(SAFE_LAYOUTS)}") from None


#: What their auto keys take before the task's (core/defaults.py). SAFE's InCA adapters: adapter-steps is
#: AdamW steps per adapter on each node, whatever its clique holds (budget.py). ProtoSISA/SISA:
#: safe.coarse uniform shards (it deals coarse·fine shards of all classes), hence fine 1.
DEFAULTS = Defaults(
    variants={"safe": {"num-rounds": 5, "lr": 0.005}, "protosisa": {"num-rounds": 5, "lr": 0.005, "fine": 1}},
    pairs={(v.name, t): v.per_task(t) for v in SAFE_LAYOUTS.values() for t in (*ADAPTER_WIDTH, *SAFE_FINE)
           if v.per_task(t)},
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
        layout = SAFE_LAYOUTS.get(cfg.method)
        if self.dp and (layout is None or not layout.class_cliques):  # DP trains the cliques' class nodes
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
