"""The split methods' messages as typed classes, one per message in each direction.

=================  =========================  ===================================================
message type       server → client            client → server
=================  =========================  ===================================================
``train.forward``  :class:`ReplayForward`     :class:`Activations`
                   (HO-SFL),                  (ZO-SFL: the activations at θ_c ± μu)
                   :class:`ThetaForward`
                   (SFL, ZO-SFL)
``train.zo``       :class:`LambdaZo` (HO-SFL) :class:`ZoScalars` (HO-SFL)
                   :class:`SpsaZo` (ZO-SFL)   :class:`ClientTheta` (ZO-SFL)
``train.backprop`` :class:`BackpropStep`      :class:`ClientTheta` (θ_c after the last local step)
=================  =========================  ===================================================

A message is a RecordDict of named records: ``control`` (a ConfigRecord of scalars: a request's round
and run tag, a reply's partition, round and peak RSS) beside one ArrayRecord of tensors, named by what
it carries for the traffic ledger: ``aggregation`` (history, θ_c, v), ``feedback`` (λ, g) or
``activations`` (z, mask, y). ``from_record`` raises :class:`MalformedMessage` (a ValueError) when a
record, key or tensor is missing or does not fit; the server refuses such a reply as malformed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from fedforget.federation.control_messages import MalformedMessage, required_record
from fedforget.federation.messaging import PARTITION_KEY

FORWARD = "train.forward"
ZO = "train.zo"
BACKPROP = "train.backprop"

CONTROL = "control"
AGGREGATION = "aggregation"
FEEDBACK = "feedback"
ACTIVATIONS = "activations"

ROUND_KEY = "round"
RUN_TAG_KEY = "run-tag"
PEAK_RSS_KEY = "peak-rss-mb"
HISTORY_FROM_KEY = "history-from"
SEED_KEY = "seed"
LOCAL_STEP_KEY = "local-step"
LAST_STEP_KEY = "last-step"
VERSION_KEY = "version"
LOCAL_STEPS_KEY = "local-steps"

HISTORY_SEEDS = "history-seeds"
HISTORY_VBAR = "history-vbar"
SEEDS = "seeds"
THETA = "theta"
LAMBDA = "lambda"
G = "g"
V = "v"
LABELS = "y"
Z, MASK = "z", "mask"
PLUS_Z, PLUS_MASK = "plus-z", "plus-mask"
MINUS_Z, MINUS_MASK = "minus-z", "minus-mask"


def _arrays(content: RecordDict, name: str) -> ArrayRecord:
    return required_record(content, name, ArrayRecord)  # type: ignore[return-value]


def _config(content: RecordDict) -> ConfigRecord:
    return required_record(content, CONTROL, ConfigRecord)  # type: ignore[return-value]


def _tensor(record: ArrayRecord, key: str) -> torch.Tensor:
    if key not in record:
        raise MalformedMessage(f"no tensor {key}")
    return torch.from_numpy(record[key].numpy().copy())


def _optional_tensor(record: ArrayRecord, key: str) -> torch.Tensor | None:
    return _tensor(record, key) if key in record else None


def _value(config: ConfigRecord, key: str, kind: type) -> int | float | str:
    if key not in config:
        raise MalformedMessage(f"no {key}")
    try:
        return kind(config[key])
    except (TypeError, ValueError) as exc:
        raise MalformedMessage(f"{key} is not a {kind.__name__}") from exc


def _shape(tensor: torch.Tensor, shape: tuple[int, ...], what: str) -> None:
    if tuple(tensor.shape) != shape:
        raise MalformedMessage(f"{what} has shape {list(tensor.shape)}, expected {list(shape)}")


def _theta(tensor: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """θ_c travels flat, in float32."""
    if tensor.dtype != torch.float32 or tensor.dim() != 1:
        raise MalformedMessage(f"theta is {tensor.dtype}{list(tensor.shape)}, not a flat float32 vector")
    if size is not None:
        _shape(tensor, (size,), THETA)
    return tensor


# -- the two headers -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoundHead:
    """A request's control: the round, and the run tag (it names the client's state file)."""

    server_round: int
    run_tag: str

    def config(self, extra: dict[str, int | str] | None = None) -> ConfigRecord:
        return ConfigRecord({ROUND_KEY: self.server_round, RUN_TAG_KEY: self.run_tag, **(extra or {})})

    @classmethod
    def from_config(cls, config: ConfigRecord) -> RoundHead:
        return cls(int(_value(config, ROUND_KEY, int)), str(_value(config, RUN_TAG_KEY, str)))


@dataclass(frozen=True)
class ReplyHead:
    """A reply's control: the partition that answers (the server checks it), the round and the peak RSS
    of the client's process (MB)."""

    partition: int
    server_round: int
    peak_rss_mb: float

    def config(self, extra: dict[str, int] | None = None) -> ConfigRecord:
        return ConfigRecord({PARTITION_KEY: self.partition, ROUND_KEY: self.server_round,
                             PEAK_RSS_KEY: self.peak_rss_mb, **(extra or {})})

    @classmethod
    def from_config(cls, config: ConfigRecord) -> ReplyHead:
        return cls(int(_value(config, PARTITION_KEY, int)), int(_value(config, ROUND_KEY, int)),
                   float(_value(config, PEAK_RSS_KEY, float)))


# -- server → client -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayForward:
    """HO-SFL's ``train.forward``: the history entries (seeds, v̄) from entry ``history_from`` on, for the
    client to replay up to this round, and the round's P seeds (it keeps them with the z it sends)."""

    head: RoundHead
    history_from: int
    history_seeds: torch.Tensor  # int64 [entries, P]
    history_vbar: torch.Tensor  # float32 [entries, P]
    seeds: torch.Tensor  # int64 [P]

    def to_record(self) -> RecordDict:
        return RecordDict({
            CONTROL: self.head.config({HISTORY_FROM_KEY: self.history_from}),
            AGGREGATION: ArrayRecord({HISTORY_SEEDS: self.history_seeds, HISTORY_VBAR: self.history_vbar,
                                      SEEDS: self.seeds}),
        })

    @classmethod
    def from_record(cls, content: RecordDict) -> ReplayForward:
        control, arrays = _config(content), _arrays(content, AGGREGATION)
        seeds = _tensor(arrays, SEEDS)
        history_seeds, history_vbar = _tensor(arrays, HISTORY_SEEDS), _tensor(arrays, HISTORY_VBAR)
        if seeds.dim() != 1 or history_seeds.dim() != 2 or history_seeds.shape[1] != seeds.numel():
            raise MalformedMessage("the history's seeds do not match the round's")
        _shape(history_vbar, tuple(history_seeds.shape), HISTORY_VBAR)
        return cls(RoundHead.from_config(control), int(_value(control, HISTORY_FROM_KEY, int)), history_seeds,
                   history_vbar, seeds)


@dataclass(frozen=True)
class ThetaForward:
    """SFL's and ZO-SFL's ``train.forward``: the global θ_c with a round's first message (none with SFL's
    later local steps: the client goes on from its own), ZO-SFL's round seed, SFL's local step."""

    head: RoundHead
    theta: torch.Tensor | None = None
    seed: int | None = None
    local_step: int = 0

    def to_record(self) -> RecordDict:
        extra: dict[str, int | str] = {}
        if self.seed is not None:
            extra[SEED_KEY] = self.seed
        if self.local_step:
            extra[LOCAL_STEP_KEY] = self.local_step
        records: dict[str, ArrayRecord | ConfigRecord] = {CONTROL: self.head.config(extra)}
        if self.theta is not None:
            records[AGGREGATION] = ArrayRecord({THETA: self.theta})
        return RecordDict(records)

    @classmethod
    def from_record(cls, content: RecordDict) -> ThetaForward:
        control = _config(content)
        theta = _theta(_tensor(_arrays(content, AGGREGATION), THETA)) if AGGREGATION in content else None
        return cls(RoundHead.from_config(control), theta,
                   int(_value(control, SEED_KEY, int)) if SEED_KEY in control else None,
                   int(_value(control, LOCAL_STEP_KEY, int)) if LOCAL_STEP_KEY in control else 0)


@dataclass(frozen=True)
class LambdaZo:
    """HO-SFL's ``train.zo``: λ = ∂ℓ/∂z of the client's batch; the client answers P scalars."""

    head: RoundHead
    lam: torch.Tensor

    def to_record(self) -> RecordDict:
        return RecordDict({CONTROL: self.head.config(), FEEDBACK: ArrayRecord({LAMBDA: self.lam})})

    @classmethod
    def from_record(cls, content: RecordDict) -> LambdaZo:
        return cls(RoundHead.from_config(_config(content)), _tensor(_arrays(content, FEEDBACK), LAMBDA))


@dataclass(frozen=True)
class SpsaZo:
    """ZO-SFL's ``train.zo``: the round seed and the SPSA scalar g (it travels as float32)."""

    head: RoundHead
    seed: int
    g: float

    def to_record(self) -> RecordDict:
        return RecordDict({CONTROL: self.head.config({SEED_KEY: self.seed}),
                           FEEDBACK: ArrayRecord({G: torch.tensor([self.g], dtype=torch.float32)})})

    @classmethod
    def from_record(cls, content: RecordDict) -> SpsaZo:
        control = _config(content)
        g = _tensor(_arrays(content, FEEDBACK), G)
        _shape(g, (1,), G)
        return cls(RoundHead.from_config(control), int(_value(control, SEED_KEY, int)), float(g[0]))


@dataclass(frozen=True)
class BackpropStep:
    """SFL's ``train.backprop``: λ of local step ``local_step``; after the last one the client sends θ_c."""

    head: RoundHead
    local_step: int
    last_step: bool
    lam: torch.Tensor

    def to_record(self) -> RecordDict:
        control = self.head.config({LOCAL_STEP_KEY: self.local_step, LAST_STEP_KEY: int(self.last_step)})
        return RecordDict({CONTROL: control, FEEDBACK: ArrayRecord({LAMBDA: self.lam})})

    @classmethod
    def from_record(cls, content: RecordDict) -> BackpropStep:
        control = _config(content)
        return cls(RoundHead.from_config(control), int(_value(control, LOCAL_STEP_KEY, int)),
                   bool(_value(control, LAST_STEP_KEY, int)), _tensor(_arrays(content, FEEDBACK), LAMBDA))


# -- client → server -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cut:
    """The client part's output on a batch: the cut-layer activations z and, for text, the attention mask."""

    z: torch.Tensor
    mask: torch.Tensor | None = None

    @property
    def aux(self) -> tuple[torch.Tensor, ...]:
        """What the server part takes after z."""
        return () if self.mask is None else (self.mask,)

    def named(self, z: str, mask: str) -> dict[str, torch.Tensor]:
        return {z: self.z} if self.mask is None else {z: self.z, mask: self.mask}

    @classmethod
    def read(cls, record: ArrayRecord, z: str, mask: str, batch: int) -> Cut:
        out = cls(_tensor(record, z), _optional_tensor(record, mask))
        if out.z.dim() == 0 or out.z.shape[0] != batch:
            raise MalformedMessage(f"{z} does not hold one row per label")
        return out


@dataclass(frozen=True)
class Activations:
    """The ``train.forward`` reply: the labels y of the round's batch and the client part's output on it
    (ZO-SFL: ``cut`` at θ_c + μu, sent as ``plus-``, and ``minus`` at θ_c − μu), the version of θ_c the
    client holds now, and with SFL's first local step how many local steps the client will take."""

    head: ReplyHead
    version: int
    y: torch.Tensor
    cut: Cut
    minus: Cut | None = None
    local_steps: int | None = None

    def to_record(self) -> RecordDict:
        if self.minus is None:
            arrays = self.cut.named(Z, MASK)
        else:
            arrays = {**self.cut.named(PLUS_Z, PLUS_MASK), **self.minus.named(MINUS_Z, MINUS_MASK)}
        extra = {VERSION_KEY: self.version}
        if self.local_steps is not None:
            extra[LOCAL_STEPS_KEY] = self.local_steps
        return RecordDict({ACTIVATIONS: ArrayRecord({**arrays, LABELS: self.y}), CONTROL: self.head.config(extra)})

    @classmethod
    def from_record(cls, content: RecordDict, spsa: bool = False, local_steps: bool = False) -> Activations:
        """``spsa``: ZO-SFL's pair of activations is required; ``local_steps``: the count is required."""
        control, arrays = _config(content), _arrays(content, ACTIVATIONS)
        y = _tensor(arrays, LABELS)
        if y.dim() != 1 or y.dtype != torch.int64:
            raise MalformedMessage("y is not one int64 label per row")
        batch = int(y.shape[0])
        if spsa:
            cut, minus = Cut.read(arrays, PLUS_Z, PLUS_MASK, batch), Cut.read(arrays, MINUS_Z, MINUS_MASK, batch)
        else:
            cut, minus = Cut.read(arrays, Z, MASK, batch), None
        steps = int(_value(control, LOCAL_STEPS_KEY, int)) if local_steps or LOCAL_STEPS_KEY in control else None
        return cls(ReplyHead.from_config(control), int(_value(control, VERSION_KEY, int)), y, cut, minus, steps)


@dataclass(frozen=True)
class ZoScalars:
    """HO-SFL's ``train.zo`` reply: the P scalars v_m (float32)."""

    head: ReplyHead
    v: torch.Tensor

    def to_record(self) -> RecordDict:
        return RecordDict({AGGREGATION: ArrayRecord({V: self.v}), CONTROL: self.head.config()})

    @classmethod
    def from_record(cls, content: RecordDict, perturbations: int | None = None) -> ZoScalars:
        v = _tensor(_arrays(content, AGGREGATION), V)
        _shape(v, (v.numel() if perturbations is None else perturbations,), V)
        return cls(ReplyHead.from_config(_config(content)), v)


@dataclass(frozen=True)
class ClientTheta:
    """ZO-SFL's ``train.zo`` reply and SFL's ``train.backprop`` reply: the client's θ_c after its step;
    none after an SFL local step that is not the round's last."""

    head: ReplyHead
    theta: torch.Tensor | None = None

    def to_record(self) -> RecordDict:
        records: dict[str, ArrayRecord | ConfigRecord] = {}
        if self.theta is not None:
            records[AGGREGATION] = ArrayRecord({THETA: self.theta})
        return RecordDict({**records, CONTROL: self.head.config()})

    @classmethod
    def from_record(cls, content: RecordDict, theta: bool = True, size: int | None = None) -> ClientTheta:
        """``theta``: θ_c is required (otherwise it is read only if sent); ``size``: its length."""
        got = _theta(_tensor(_arrays(content, AGGREGATION), THETA), size) if theta or AGGREGATION in content else None
        return cls(ReplyHead.from_config(_config(content)), got)
