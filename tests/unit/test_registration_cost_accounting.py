"""The registration benchmark books each message to the right phase and counts what crosses the wire:
the registration query (not the mid-run partition query) goes to registration, its reply's bytes grow with
the ids it carries, and the default-run projection is the measured train exchange times its client-rounds."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Context, Message, MessageType, RecordDict
from flwr.common.serde import message_to_proto
from flwr.supercore.task_identity import TaskIdentity

from fedforget.federation.control_messages import (
    RegisterQuery,
    Registration,
    partition_queries,
    register_queries,
)

from ..benchmark_scripts import benchmark_script


@pytest.fixture(scope="module")
def bench():  # noqa: ANN201
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    with benchmark_script("registration_cost") as module:
        yield module


def _registration_reply(query: Message, rows: int) -> Message:
    ids = np.arange(rows, dtype=np.int64)
    reg = Registration(0, 1, "node-0", "public", ids, ids % 2, np.zeros(0, np.int64))
    return Message(reg.to_record(), reply_to=query)


def test_only_the_registration_query_is_booked_to_registration(bench) -> None:
    register = register_queries([7], RegisterQuery(("labels",)))[0]
    partition_query = partition_queries([7])[0]  # a mid-run query is the run's own work
    train = Message(RecordDict(), dst_node_id=7, message_type=MessageType.TRAIN)
    assert bench.phase_of(register) == bench.REGISTRATION
    assert bench.phase_of(partition_query) == bench.TRAINING
    assert bench.phase_of(train) == bench.TRAINING


def test_counted_bytes_are_the_serialized_messages_and_grow_with_the_ids(bench) -> None:
    query = register_queries([7], RegisterQuery())[0]
    small, large = _registration_reply(query, 10), _registration_reply(query, 10_000)
    assert bench.wire_bytes(small) == message_to_proto(small).ByteSize()
    # two int64 arrays (ids, slices) of 10,000: at least 160,000 bytes, framing on top
    assert bench.wire_bytes(large) - bench.wire_bytes(small) >= 16 * (10_000 - 10)


def test_the_counting_client_books_calls_bytes_and_time_per_phase(bench) -> None:
    counter = bench.CountingClient(lambda msg, ctx: _registration_reply(msg, 100))
    query = register_queries([7], RegisterQuery())[0]
    context = Context(run_id=1, node_id=7, node_config={}, state=RecordDict(), run_config={})
    reply = counter(query, context)
    reg, train = counter.phases[bench.REGISTRATION], counter.phases[bench.TRAINING]
    assert (reg.calls, train.calls) == (1, 0)
    assert reg.down == bench.wire_bytes(query) and reg.up == bench.wire_bytes(reply)
    assert reg.payload_up == 2 * 100 * 8 and reg.node_s >= 0.0
    assert reg.types == {MessageType.QUERY: [1, reg.down + reg.up]}


def test_the_default_run_projection_multiplies_one_train_exchange_by_its_client_rounds(bench) -> None:
    by_type = {"train": {"calls": 4, "bytes": 400_000}, "evaluate": {"calls": 1, "bytes": 9_999}}
    out = bench.default_run_projection(100, by_type, 1_000_000, {"num-rounds": 10, "local-epochs": 2,
                                                                  "fraction-train": 1.0})
    assert out["client-rounds"] == 1_000 and out["train-bytes-per-client-round"] == 100_000
    assert out["training-bytes"] == 100_000_000 and out["registration-vs-training-bytes"] == 0.01
    nothing = bench.default_run_projection(10, {}, 5, {"num-rounds": 10})
    assert nothing["training-bytes"] == 0 and nothing["registration-vs-training-bytes"] is None


def test_registration_row_takes_the_nodes_time_off_the_server_side(bench) -> None:
    traffic = bench.Traffic(calls=3, down=30, up=300, node_s=1.5, node_max_s=0.7)
    fed = type("Fed", (), {"reply_bytes": 240})()
    row = bench.registration_row(2.0, traffic, fed)
    assert row["server-s"] == 0.5 and row["nodes-s"] == 1.5 and row["bytes"] == 330
    assert row["federation-reply-bytes"] == 240
