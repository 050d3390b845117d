"""The shared control messages (partition query, forget request and acknowledgement, module need) survive
their record form unchanged, keep the record names and keys the wire has always had, and refuse a record
that does not carry what their type needs."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from hypothesis import given
from hypothesis import strategies as st

from fedforget.federation.control_messages import (
    ForgetAck,
    ForgetSamples,
    MalformedMessage,
    ModuleNeed,
    PartitionInfo,
    PartitionQuery,
    partition_queries,
)
from fedforget.methods.chains.shipping import check_need_reply

ids = st.integers(0, 2**40)
shas = st.text("0123456789abcdef", min_size=64, max_size=64)
counts = st.integers(0, 10**6)


@pytest.fixture
def task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower builds a Message only inside a task: give this process one, for this test only."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def wire(content: RecordDict) -> dict:
    """A RecordDict as plain data: record name → its config values, or its tensors' dtype, shape and bytes."""
    out = {}
    for name, record in content.items():
        if isinstance(record, ArrayRecord):
            out[name] = {k: (str(v.numpy().dtype), v.numpy().shape, v.numpy().tobytes()) for k, v in record.items()}
        else:
            out[name] = dict(record)
    return out


def test_the_partition_query_and_its_answer_keep_their_wire_form(task_identity):
    assert wire(PartitionQuery().to_record()) == {"config": {"ask": "partition"}}
    assert wire(PartitionInfo(2, 5).to_record()) == {"info": {"partition-id": 2, "num-partitions": 5}}
    assert PartitionQuery.from_record(PartitionQuery().to_record()) == PartitionQuery()
    messages = partition_queries([7, 3])
    assert [m.metadata.dst_node_id for m in messages] == [7, 3]
    assert {m.metadata.message_type for m in messages} == {MessageType.QUERY}


@given(partition=st.integers(0, 1000), num=st.integers(1, 1001))
def test_a_partition_answer_round_trips(partition, num):
    assert PartitionInfo.from_record(PartitionInfo(partition, num).to_record()) == PartitionInfo(partition, num)


@given(samples=st.lists(ids, max_size=20).map(tuple), purged=st.lists(shas, max_size=4).map(tuple))
def test_a_forget_request_round_trips(samples, purged):
    message = ForgetSamples(samples, purged)
    assert ForgetSamples.from_record(message.to_record()) == message


def test_a_forget_request_keeps_its_wire_form():
    old = RecordDict({"arrays": ArrayRecord({"samples": Array(np.asarray([4, 9], dtype=np.int64))}),
                      "purge": ConfigRecord({"purged-sha256": ["a" * 64]})})
    assert wire(ForgetSamples((4, 9), ("a" * 64,)).to_record()) == wire(old)
    bare = ForgetSamples(()).to_record()
    assert set(bare) == {"arrays"}  # the purge record rides only when something was purged
    assert wire(bare)["arrays"]["samples"][:2] == ("int64", (0,))


@given(partition=st.integers(0, 100), deleted=counts, requested=counts,
       extra=st.dictionaries(st.sampled_from(["remaining", "purged-token-files", "other"]), counts, max_size=2))
def test_an_acknowledgement_round_trips(partition, deleted, requested, extra):
    ack = ForgetAck(partition, deleted, requested, extra)
    assert ForgetAck.from_record(ack.to_record()) == ack


def test_each_handlers_acknowledgement_keeps_its_wire_form():
    assert wire(ForgetAck(1, 2, 3, {"remaining": 40}).to_record()) == {
        "info": {"partition-id": 1, "deleted": 2, "requested": 3, "remaining": 40}}
    assert wire(ForgetAck(0, 1, 1, {"purged-token-files": 2}).to_record()) == {
        "info": {"partition-id": 0, "deleted": 1, "requested": 1, "purged-token-files": 2}}
    with pytest.raises(ValueError, match="may not be named"):
        ForgetAck(0, 1, 1, {"deleted": 5})


@given(partition=st.integers(0, 100), need=st.lists(shas, min_size=1, max_size=4).map(tuple))
def test_a_module_need_round_trips(partition, need):
    record = ModuleNeed(partition, need).to_record()
    assert ModuleNeed.in_record(record)
    assert ModuleNeed.from_record(record) == ModuleNeed(partition, need)


def test_a_module_need_keeps_its_wire_form():
    assert wire(ModuleNeed(3, ("b" * 64,)).to_record()) == {"need": {"partition-id": 3, "sha256": ["b" * 64]}}
    assert not ModuleNeed.in_record(RecordDict({"arrays": ArrayRecord()}))


@pytest.mark.parametrize(("kind", "content", "why"), [
    (PartitionQuery, RecordDict(), "no ConfigRecord 'config'"),
    (PartitionQuery, RecordDict({"config": ConfigRecord({"ask": "weights"})}), "asks for 'weights'"),
    (PartitionInfo, RecordDict({"info": ConfigRecord({"partition-id": 1})}), "no num-partitions"),
    (PartitionInfo, RecordDict({"info": ConfigRecord({"partition-id": "1", "num-partitions": 2})}),
     "partition-id is not an integer"),
    (PartitionInfo, RecordDict({"info": ConfigRecord({"partition-id": True, "num-partitions": 2})}),
     "partition-id is not an integer"),
    (ForgetSamples, RecordDict({"config": ConfigRecord({"samples": [1]})}), "no ArrayRecord 'arrays'"),
    (ForgetSamples, RecordDict({"arrays": ArrayRecord({"ids": Array(np.arange(2))})}), "no samples"),
    (ForgetSamples, RecordDict({"arrays": ArrayRecord({"samples": Array(np.ones(2))})}), "not integer ids"),
    (ForgetSamples, RecordDict({"arrays": ArrayRecord({"samples": Array(np.arange(2))}),
                                "purge": ConfigRecord({"purged-sha256": [1, 2]})}), "not a list of strings"),
    (ForgetSamples, RecordDict({"arrays": ArrayRecord({"samples": Array(np.arange(2))}),
                                "purge": ConfigRecord({"other": ["a"]})}), "no purged-sha256"),
    (ForgetAck, RecordDict({"metrics": ConfigRecord({"partition-id": 1})}), "no ConfigRecord 'info'"),
    (ForgetAck, RecordDict({"info": ConfigRecord({"partition-id": 1, "deleted": 1})}), "no requested"),
    (ForgetAck, RecordDict({"info": ConfigRecord({"partition-id": 1, "deleted": 1.5, "requested": 2})}),
     "deleted is not an integer"),
    (ForgetAck, RecordDict({"info": ConfigRecord({"partition-id": 1, "deleted": 1, "requested": 2,
                                                  "remaining": "many"})}), "remaining is not an integer"),
    (ModuleNeed, RecordDict({"need": ConfigRecord({"partition-id": 1})}), "no sha256"),
    (ModuleNeed, RecordDict({"need": ConfigRecord({"partition-id": 1, "sha256": "abc"})}), "not a list of strings"),
])
def test_a_malformed_record_is_refused(kind, content, why):
    with pytest.raises(MalformedMessage, match=why):
        kind.from_record(content)


def test_a_malformed_need_reply_is_refused_by_the_server(task_identity):
    def reply(content: RecordDict) -> Message:
        return Message(content, dst_node_id=1, message_type="train.chain")

    named = ["c" * 64]
    assert check_need_reply(reply(ModuleNeed(2, tuple(named)).to_record()), 2, named) is None
    bad = RecordDict({"need": ConfigRecord({"partition-id": 2, "sha256": 7})})
    assert check_need_reply(reply(bad), 2, named) == "malformed need"
    other = reply(ModuleNeed(1, tuple(named)).to_record())
    assert check_need_reply(other, 2, named) == "need claims partition 1, not 2"
