"""The control messages every method shares, as typed classes, one per message in each direction.

- ``query`` (discovery): :class:`PartitionQuery` (``config``: ``ask=partition``), answered by
  :class:`PartitionInfo` (``info``: the node's partition and the run's number of partitions).
- ``query.forget`` (or a method's own forget message): :class:`ForgetSamples` (``arrays``: the sample ids;
  ``purge``: the purged sha256s, when any), answered by :class:`ForgetAck` (``info``: partition, deleted,
  requested, and the handler's own counts).
- ``train.chain`` (:class:`~fedforget.federation.module_messages.TrainModule`): a node that lacks frozen
  modules answers :class:`ModuleNeed` (``need``: partition and the sha256s) instead of a result.

The record names and keys are the wire format that the stores, the tests and the traffic accounting know.
``from_record`` raises :class:`MalformedMessage` (a ValueError) when a record or key is missing or holds
the wrong kind of value. Kept to flwr + numpy: the partition query and the forget handlers start in a
fresh ClientApp process and must not pay for the training stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

PARTITION_KEY = "partition-id"  # every reply names the partition it answers for under this key

CONFIG = "config"
INFO = "info"
ARRAYS = "arrays"
PURGE_RECORD = "purge"  # ConfigRecord of a forget request: the purged sha256s the node drops its copies of
NEED_RECORD = "need"  # ConfigRecord of a train.chain reply: the module sha256s the node lacks

ASK_KEY, ASK_PARTITION = "ask", "partition"
NUM_PARTITIONS_KEY = "num-partitions"
SAMPLES_KEY = "samples"
PURGE_KEY = "purged-sha256"
DELETED_KEY, REQUESTED_KEY = "deleted", "requested"
SHA256_KEY = "sha256"


class MalformedMessage(ValueError):
    """A message's records do not carry what its type needs (every typed message raises this one)."""


def required_record(content: RecordDict, name: str, kind: type) -> ArrayRecord | ConfigRecord:
    """The record ``name`` of ``content``, which must be a ``kind``; otherwise :class:`MalformedMessage`."""
    record = content[name] if name in content else None
    if not isinstance(record, kind):
        raise MalformedMessage(f"no {kind.__name__} {name!r}")
    return record


def _config(content: RecordDict, name: str) -> ConfigRecord:
    return required_record(content, name, ConfigRecord)  # type: ignore[return-value]


def _int(config: ConfigRecord, key: str) -> int:
    if key not in config:
        raise MalformedMessage(f"no {key}")
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedMessage(f"{key} is not an integer")
    return value


def _strings(config: ConfigRecord, key: str) -> tuple[str, ...]:
    if key not in config:
        raise MalformedMessage(f"no {key}")
    values = config[key]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise MalformedMessage(f"{key} is not a list of strings")
    return tuple(values)


# -- discovery -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionQuery:
    """``query``: which partition does this node hold?"""

    def to_record(self) -> RecordDict:
        return RecordDict({CONFIG: ConfigRecord({ASK_KEY: ASK_PARTITION})})

    @classmethod
    def from_record(cls, content: RecordDict) -> PartitionQuery:
        config = _config(content, CONFIG)
        if config.get(ASK_KEY) != ASK_PARTITION:
            raise MalformedMessage(f"a query asks for {config.get(ASK_KEY)!r}, not {ASK_PARTITION!r}")
        return cls()


def partition_queries(nodes: Sequence[int]) -> list[Message]:
    """One :class:`PartitionQuery` to each of ``nodes``, in the order given."""
    return [Message(PartitionQuery().to_record(), dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]


@dataclass(frozen=True)
class PartitionInfo:
    """A node's answer to the partition query: its partition and how many the run has."""

    partition: int
    num_partitions: int

    def to_record(self) -> RecordDict:
        return RecordDict({INFO: ConfigRecord({PARTITION_KEY: self.partition,
                                               NUM_PARTITIONS_KEY: self.num_partitions})})

    @classmethod
    def from_record(cls, content: RecordDict) -> PartitionInfo:
        info = _config(content, INFO)
        return cls(_int(info, PARTITION_KEY), _int(info, NUM_PARTITIONS_KEY))


# -- forgetting ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ForgetSamples:
    """A forget request: delete ``samples`` (global ids) for good and drop every file named by a
    ``purged`` sha256. The ``purge`` record rides only when something was purged."""

    samples: tuple[int, ...]
    purged: tuple[str, ...] = ()

    def to_record(self) -> RecordDict:
        ids = np.ascontiguousarray(np.asarray(self.samples, dtype=np.int64))
        content = RecordDict({ARRAYS: ArrayRecord({SAMPLES_KEY: Array(ids)})})
        if self.purged:
            content[PURGE_RECORD] = ConfigRecord({PURGE_KEY: list(self.purged)})
        return content

    @classmethod
    def from_record(cls, content: RecordDict) -> ForgetSamples:
        arrays = required_record(content, ARRAYS, ArrayRecord)
        if SAMPLES_KEY not in arrays:
            raise MalformedMessage(f"no {SAMPLES_KEY}")
        ids = np.asarray(arrays[SAMPLES_KEY].numpy()).ravel()
        if not np.issubdtype(ids.dtype, np.integer):
            raise MalformedMessage(f"{SAMPLES_KEY} are {ids.dtype}, not integer ids")
        purged = _strings(_config(content, PURGE_RECORD), PURGE_KEY) if PURGE_RECORD in content else ()
        return cls(tuple(int(i) for i in ids), purged)


@dataclass(frozen=True)
class ForgetAck:
    """A node's acknowledgement of a forget request: how many of the ``requested`` samples it newly
    ``deleted``, and the handler's own counts in ``extra`` (the shared handler: ``remaining``; SAFE's:
    ``purged-token-files``)."""

    partition: int
    deleted: int
    requested: int
    extra: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clash = set(self.extra) & {PARTITION_KEY, DELETED_KEY, REQUESTED_KEY}
        if clash:
            raise ValueError(f"an acknowledgement's extra counts may not be named {sorted(clash)}")

    def to_record(self) -> RecordDict:
        return RecordDict({INFO: ConfigRecord({PARTITION_KEY: self.partition, DELETED_KEY: self.deleted,
                                               REQUESTED_KEY: self.requested, **self.extra})})

    @classmethod
    def from_record(cls, content: RecordDict) -> ForgetAck:
        info = _config(content, INFO)
        core = (PARTITION_KEY, DELETED_KEY, REQUESTED_KEY)
        partition, deleted, requested = (_int(info, k) for k in core)
        extra = {k: _int(info, k) for k in info if k not in core}
        return cls(partition, deleted, requested, extra)


# -- module shipping -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModuleNeed:
    """A node's answer to ``train.chain`` when it lacks frozen modules: their sha256s (it trains once
    the message comes again with their bytes)."""

    partition: int
    sha256: tuple[str, ...]

    def to_record(self) -> RecordDict:
        return RecordDict({NEED_RECORD: ConfigRecord({PARTITION_KEY: self.partition, SHA256_KEY: list(self.sha256)})})

    @staticmethod
    def in_record(content: RecordDict) -> bool:
        """Whether ``content`` is a need (and not the result of training)."""
        return NEED_RECORD in content

    @classmethod
    def from_record(cls, content: RecordDict) -> ModuleNeed:
        need = _config(content, NEED_RECORD)
        return cls(_int(need, PARTITION_KEY), _strings(need, SHA256_KEY))
