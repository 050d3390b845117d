"""The control messages every method shares, as typed classes, one per message in each direction.

- ``query`` (registration, at the start of a run): :class:`RegisterQuery` (``config``: ``ask=register``, the
  method's ``needs``, the ``action``, the store's ``record-key`` for the nodes' own records' sample ids),
  answered by :class:`Registration` (``info``: partition, node name, how its records are numbered;
  ``arrays``: its sample ids, their slices, what it has deleted, and labels or class counts when asked) or a
  refusal naming what is wrong with its data.
- ``query`` (finding a node mid-run: failover, propagation): :class:`PartitionQuery` (``config``:
  ``ask=partition``), answered by :class:`PartitionInfo` (``info``: the node's partition and how many the run has;
  a registration's ``info`` carries the same two keys, so :mod:`~fedforget.federation.discovery` reads both alike).
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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from fedforget.core.ids import MAX_ID

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


# -- registration ----------------------------------------------------------------------------------
ASK_REGISTER = "register"
NEEDS_KEY, ACTION_KEY, RECORD_KEY_KEY = "needs", "action", "record-key"
_RECORD_KEY = re.compile(r"[0-9a-f]{64}")
NODE_NAME_KEY, RECORDS_KEY, REFUSED_KEY = "node-name", "records", "refused"
SLICE_KEY, LABELS_KEY, CLASS_COUNTS_KEY, DELETED_ARRAY_KEY = "slice", "labels", "class-counts", "deleted"
#: What a method's planning may ask a node for, beyond its sample ids and their slices.
NEED_LABELS, NEED_CLASS_COUNTS = "labels", "class-counts"
KNOWN_NEEDS = (NEED_LABELS, NEED_CLASS_COUNTS)
#: The most class counts a registration may carry (a task's classes are far fewer).
MAX_CLASSES = 1_000_000


@dataclass(frozen=True)
class RegisterQuery:
    """``query`` at the start of a run: which records does this node hold, in which slices, and what does the
    method's planning need (``needs``: labels, class counts)? ``action``: train, or retrain (the node then
    checks its data against what it registered for training). ``record_key``: the store's key for the sample ids
    of a node's own records ("" for a store whose ids are unkeyed)."""

    needs: tuple[str, ...] = ()
    action: str = "train"
    record_key: str = ""

    def to_record(self) -> RecordDict:
        return RecordDict({CONFIG: ConfigRecord({ASK_KEY: ASK_REGISTER, NEEDS_KEY: list(self.needs),
                                                 ACTION_KEY: self.action, RECORD_KEY_KEY: self.record_key})})

    @staticmethod
    def asked(content: RecordDict) -> bool:
        config = content[CONFIG] if CONFIG in content else None
        return isinstance(config, ConfigRecord) and config.get(ASK_KEY) == ASK_REGISTER

    @classmethod
    def from_record(cls, content: RecordDict) -> RegisterQuery:
        config = _config(content, CONFIG)
        if config.get(ASK_KEY) != ASK_REGISTER:
            raise MalformedMessage(f"a query asks for {config.get(ASK_KEY)!r}, not {ASK_REGISTER!r}")
        needs = _strings(config, NEEDS_KEY)
        unknown = sorted(set(needs) - set(KNOWN_NEEDS))
        if unknown:
            raise MalformedMessage(f"a registration asks for {unknown}, not one of {list(KNOWN_NEEDS)}")
        action = config.get(ACTION_KEY)
        if not isinstance(action, str):
            raise MalformedMessage(f"no {ACTION_KEY}")
        key = config.get(RECORD_KEY_KEY, "")
        if not (isinstance(key, str) and (key == "" or _RECORD_KEY.fullmatch(key))):
            raise MalformedMessage(f"{RECORD_KEY_KEY} is not 64 lowercase hex digits")
        return cls(needs, action, key)


def register_queries(nodes: Sequence[int], query: RegisterQuery) -> list[Message]:
    """One :class:`RegisterQuery` to each of ``nodes``, in the order given."""
    return [Message(query.to_record(), dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]


#: Bytes a ``.npy`` header may take beside an array's values (numpy writes 128, or a multiple of 64 past it).
NPY_HEADER_BYTES = 4096


class TooManyIds(MalformedMessage):
    """A registration array holds more values than the server accepts (``count``: how many it holds, or
    declares when its bytes alone were too many to read)."""

    def __init__(self, key: str, count: int, limit: int) -> None:
        super().__init__(f"{key} hold {count} values, more than {limit}")
        self.key, self.count, self.limit = key, count, limit


def _int64(arrays: ArrayRecord, key: str, max_values: int | None = None) -> np.ndarray:
    """``arrays[key]`` as int64 values: integers that fit, at most ``max_values`` of them, checked on the
    bytes before they are read and on the count before they are widened (bounded memory for any reply)."""
    if key not in arrays:
        raise MalformedMessage(f"no {key}")
    array = arrays[key]
    if not isinstance(array, Array):
        raise MalformedMessage(f"{key} is not an array")
    declared = int(min(np.prod(array.shape, dtype=np.float64), 2.0**63)) if array.shape else 1
    if max_values is not None and len(array.data) > NPY_HEADER_BYTES + 8 * max_values:
        raise TooManyIds(key, max(declared, (len(array.data) - NPY_HEADER_BYTES) // 8), max_values)
    try:
        values = np.asarray(array.numpy()).ravel()
    except (ValueError, TypeError, OSError, EOFError) as exc:
        raise MalformedMessage(f"{key} is not a numpy array ({str(exc)[:100]})") from None
    if max_values is not None and values.size > max_values:
        raise TooManyIds(key, int(values.size), max_values)
    if not np.issubdtype(values.dtype, np.integer):
        raise MalformedMessage(f"{key} are {values.dtype}, not integers")
    if values.size and np.issubdtype(values.dtype, np.unsignedinteger) and int(values.max()) > MAX_ID:
        raise MalformedMessage(f"{key} hold {int(values.max())}, above 2^63-1")
    return values.astype(np.int64)


@dataclass(frozen=True)
class Registration:
    """A node's answer to :class:`RegisterQuery`: who it is and what it holds, or why it refuses.

    ``samples`` are its sample ids (deleted ones included: the plan is fixed at training), ``slices`` the slice
    of each, ``deleted`` the ids it has already deleted for good; ``labels`` (one per sample, -1 for a deleted
    record whose label is gone) and ``class_counts`` ride only when the query asked for them. ``refused``: one
    line naming what is wrong with the node's data; nothing else is then read.
    """

    partition: int
    num_partitions: int
    node_name: str
    records: str = ""
    samples: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    slices: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    deleted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    labels: np.ndarray | None = None
    class_counts: np.ndarray | None = None
    refused: str = ""

    def to_record(self) -> RecordDict:
        info = ConfigRecord({PARTITION_KEY: self.partition, NUM_PARTITIONS_KEY: self.num_partitions,
                             NODE_NAME_KEY: self.node_name})
        if self.refused:
            info[REFUSED_KEY] = self.refused
            return RecordDict({INFO: info})
        info[RECORDS_KEY] = self.records
        arrays = {SAMPLES_KEY: self.samples, SLICE_KEY: self.slices, DELETED_ARRAY_KEY: self.deleted}
        if self.labels is not None:
            arrays[LABELS_KEY] = self.labels
        if self.class_counts is not None:
            arrays[CLASS_COUNTS_KEY] = self.class_counts
        record = ArrayRecord({k: Array(np.ascontiguousarray(np.asarray(v, dtype=np.int64))) for k, v in arrays.items()})
        return RecordDict({INFO: info, ARRAYS: record})

    @classmethod
    def from_record(cls, content: RecordDict, max_ids: int | None = None) -> Registration:
        """The registration in ``content``; :class:`TooManyIds` when an array holds more than ``max_ids``
        values (checked before it is read)."""
        info = _config(content, INFO)
        partition, num = _int(info, PARTITION_KEY), _int(info, NUM_PARTITIONS_KEY)
        name = info.get(NODE_NAME_KEY)
        if not isinstance(name, str):
            raise MalformedMessage(f"no {NODE_NAME_KEY}")
        refused = info.get(REFUSED_KEY, "")
        if not isinstance(refused, str):
            raise MalformedMessage(f"{REFUSED_KEY} is not text")
        if refused:
            return cls(partition, num, name, refused=refused)
        records = info.get(RECORDS_KEY)
        if not isinstance(records, str):
            raise MalformedMessage(f"no {RECORDS_KEY}")
        arrays = required_record(content, ARRAYS, ArrayRecord)
        samples = _int64(arrays, SAMPLES_KEY, max_ids)  # type: ignore[arg-type]
        slices = _int64(arrays, SLICE_KEY, max_ids)  # type: ignore[arg-type]
        if len(samples) != len(slices):
            raise MalformedMessage(f"{len(samples)} samples but {len(slices)} slices")
        labels = _int64(arrays, LABELS_KEY, max_ids) if LABELS_KEY in arrays else None  # type: ignore[arg-type]
        if labels is not None and len(labels) != len(samples):
            raise MalformedMessage(f"{len(samples)} samples but {len(labels)} labels")
        counts = (_int64(arrays, CLASS_COUNTS_KEY, MAX_CLASSES) if CLASS_COUNTS_KEY in arrays  # type: ignore[arg-type]
                  else None)
        deleted = _int64(arrays, DELETED_ARRAY_KEY, max_ids)  # type: ignore[arg-type]
        if len(deleted) > len(samples):
            raise MalformedMessage(f"{len(samples)} samples but {len(deleted)} deleted")
        return cls(partition, num, name, records, samples, slices, deleted, labels, counts)


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
    ``deleted``, and the handler's own counts in ``extra`` (the nodes' one handler: ``remaining`` and
    ``purged-cache-files``; an older SAFE node: ``purged-token-files``)."""

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
