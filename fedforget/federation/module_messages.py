"""The ``train.chain`` message as one typed class: train the last LoRA module of a stacked prefix on given
slices (the chains and FedShard send it; :mod:`fedforget.federation.module_training` answers it).

Everything rides in the message's ``config`` ConfigRecord as scalars and lists of scalars; the start state
(``arrays``) and any module bytes (``modules``) are ArrayRecords beside it. A slot's targets are a list of
module names, or none (the backbone's default targets): they are flattened into one list with a count per
slot, −1 meaning none.
"""

from __future__ import annotations

from dataclasses import dataclass

from flwr.app import ConfigRecord

MODULES_KEY = "modules"  # ArrayRecord of a message: sha256 -> the artifact's bytes (uint8)
PREFIX_KEY = "prefix-sha256"  # config: the artifact sha256 of each frozen module, in slot order
INIT_SEED_KEY = "init-seed"  # config: rebuild the new module from this seed (no "arrays" sent)
KEEP_KEY = "keep-modules"  # config: whether the node may cache the modules it receives
SLOTS_KEY = "slots"
TARGETS_KEY = "slot-targets"
TARGET_COUNTS_KEY = "slot-target-counts"


@dataclass(frozen=True)
class Slot:
    """Where one module of the stack sits: its adapter name and the layers it targets (None: the default)."""

    slot: str
    targets: tuple[str, ...] | None = None


DEFAULT_SLOTS = (Slot("default"),)


@dataclass(frozen=True)
class TrainModule:
    """Train the last of ``slots`` (earlier ones frozen, named by ``prefix`` sha256s) on ``slices``."""

    artifact: str
    server_round: int
    stacking: str  # "new": a new module per position; "continue": one module trained on
    slices: tuple[int, ...]
    slots: tuple[Slot, ...] = DEFAULT_SLOTS
    keep: bool | None = None  # whether the node may cache the modules it receives (None: not said, yes)
    prefix: tuple[str, ...] = ()  # artifact sha256 of each frozen module, in slot order
    init_seed: int | None = None  # rebuild the new module from this seed (no start arrays sent)

    def to_config(self) -> ConfigRecord:
        counts = [-1 if s.targets is None else len(s.targets) for s in self.slots]
        config = ConfigRecord({
            "artifact": self.artifact, "server-round": self.server_round, "stacking": self.stacking,
            "slices": list(self.slices), SLOTS_KEY: [s.slot for s in self.slots],
            TARGETS_KEY: [t for s in self.slots for t in (s.targets or ())], TARGET_COUNTS_KEY: counts,
        })
        if self.keep is not None:
            config[KEEP_KEY] = self.keep
        if self.prefix:
            config[PREFIX_KEY] = list(self.prefix)
        if self.init_seed is not None:
            config[INIT_SEED_KEY] = self.init_seed
        return config

    @classmethod
    def from_config(cls, config: ConfigRecord) -> TrainModule:
        names = [str(s) for s in config[SLOTS_KEY]]
        counts = [int(c) for c in config[TARGET_COUNTS_KEY]]
        flat = [str(t) for t in config[TARGETS_KEY]]
        if len(counts) != len(names) or sum(max(c, 0) for c in counts) != len(flat):
            raise ValueError("a train.chain message's slot targets do not match its slots")
        slots, at = [], 0
        for name, count in zip(names, counts, strict=True):
            slots.append(Slot(name, None if count < 0 else tuple(flat[at:at + count])))
            at += max(count, 0)
        return cls(
            artifact=str(config["artifact"]), server_round=int(config["server-round"]),
            stacking=str(config["stacking"]), slices=tuple(int(s) for s in config["slices"]), slots=tuple(slots),
            keep=bool(config[KEEP_KEY]) if KEEP_KEY in config else None,
            prefix=tuple(str(s) for s in config[PREFIX_KEY]) if PREFIX_KEY in config else (),
            init_seed=int(config[INIT_SEED_KEY]) if INIT_SEED_KEY in config else None,
        )
