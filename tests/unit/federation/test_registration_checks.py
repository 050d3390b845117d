"""The registration exchange: what nodes say is checked before anything is written, and the plan is theirs."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ConfigRecord, RecordDict

from fedforget.core.config import ConfigError
from fedforget.federation.control_messages import MalformedMessage, RegisterQuery, Registration, TooManyIds
from fedforget.federation.registration import (
    RegistrationRefused,
    check_against_manifest,
    federation_from,
    manifest_node_names,
    public_pool_ids,
)


def reg(p: int, ids: list[int], slices: list[int] | None = None, name: str | None = None, *, records: str = "public",
        deleted: list[int] = (), labels: list[int] | None = None, counts: list[int] | None = None,
        num: int = 2) -> Registration:
    return Registration(p, num, f"node-{p}" if name is None else name, records, np.asarray(ids, np.int64),
                        np.asarray(slices if slices is not None else [0] * len(ids), np.int64),
                        np.asarray(list(deleted), np.int64),
                        None if labels is None else np.asarray(labels, np.int64),
                        None if counts is None else np.asarray(counts, np.int64))


def test_the_plan_is_built_from_what_the_nodes_registered():
    fed = federation_from({0: (7, reg(0, [5, 1, 3], [1, 0, 1])), 1: (9, reg(1, [2, 4], [0, 0]))}, 2, 10)
    assert fed.plan.slices == {0: [[1], [3, 5]], 1: [[2, 4], []]}
    assert fed.nodes == {0: 7, 1: 9}
    assert fed.manifest_nodes() == {"0": {"name": "node-0", "records": "public"},
                                    "1": {"name": "node-1", "records": "public"}}


@pytest.mark.parametrize(("replies", "message"), [
    ({0: (1, reg(0, [1, 2])), 1: (2, reg(1, [2, 3]))}, "both claim sample"),
    ({0: (1, reg(0, [1, 1]))}, "registered a sample id twice"),
    ({0: (1, reg(0, [1], name="a")), 1: (2, reg(1, [2], name="a"))}, "both named 'a'"),
    ({0: (1, reg(0, [1], [5]))}, "outside 0..1"),
    ({0: (1, reg(0, [1], [-1]))}, "outside 0..1"),
    ({0: (1, reg(0, [1], labels=[10]))}, "outside the task's classes"),
    ({0: (1, reg(0, [1], labels=[-2]))}, "outside the task's classes"),
    ({0: (1, reg(0, [1], labels=[-1]))}, "outside the task's classes"),  # a label lost without a deletion
    ({0: (1, reg(0, [1], counts=[1, 2]))}, "class counts"),
    ({0: (1, reg(0, [1], counts=[-1] + [0] * 9))}, "class counts"),
    ({0: (1, reg(0, [1], deleted=[2]))}, "deleted samples it never held"),
    ({0: (1, reg(0, [1], records="guess"))}, "numbers its records"),
])
def test_what_a_node_says_wrong_refuses_the_run_naming_the_node(replies, message):
    with pytest.raises(ConfigError, match=message):
        federation_from(replies, 2, 10)


def test_a_deleted_record_whose_label_is_gone_is_accepted():
    fed = federation_from({0: (1, reg(0, [1, 2], labels=[-1, 3], deleted=[1]))}, 2, 10)
    assert fed.labels == {0: {1: -1, 2: 3}} and fed.deleted == {0: {1}}


def test_a_retrain_refuses_nodes_holding_other_samples_than_the_manifest_less_the_forgotten():
    manifest = {"num-partitions": 1, "partitions": {"0": [[1, 2], [3]]}}
    same = federation_from({0: (1, reg(0, [1, 2, 3], [0, 0, 1], num=1))}, 2, 10)
    check_against_manifest(same, manifest, forgotten=set())
    forgot = federation_from({0: (1, reg(0, [1, 2], [0, 0], num=1))}, 2, 10)
    check_against_manifest(forgot, manifest, forgotten={3})
    with pytest.raises(ConfigError, match="missing sample"):
        check_against_manifest(forgot, manifest, forgotten=set())
    added = federation_from({0: (1, reg(0, [1, 2, 3, 4], [0, 0, 1, 1], num=1))}, 2, 10)
    with pytest.raises(ConfigError, match="new sample"):
        check_against_manifest(added, manifest, forgotten=set())
    renamed = federation_from({0: (1, reg(0, [1, 2, 3], [0, 0, 1], name="other", num=1))}, 2, 10)
    with pytest.raises(ConfigError, match="trained by node 'node-0'"):
        check_against_manifest(renamed, manifest, forgotten=set())


def test_old_manifests_name_their_nodes_by_partition():
    assert manifest_node_names({"num-partitions": 2}) == {0: {"name": "node-0", "records": "public"},
                                                         1: {"name": "node-1", "records": "public"}}


def test_registration_messages_round_trip_and_refuse_malformed_records():
    sent = reg(1, [4, 2], [1, 0], labels=[3, 0], counts=[1] * 10, deleted=[2])
    back = Registration.from_record(sent.to_record())
    assert (back.partition, back.node_name, back.records) == (1, "node-1", "public")
    assert back.samples.tolist() == [4, 2] and back.slices.tolist() == [1, 0] and back.deleted.tolist() == [2]
    assert back.labels.tolist() == [3, 0] and back.class_counts.tolist() == [1] * 10
    refusal = Registration.from_record(Registration(0, 2, "node-0", refused="bad data").to_record())
    assert refusal.refused == "bad data"
    assert RegisterQuery.from_record(RegisterQuery(("labels",), "retrain").to_record()) == RegisterQuery(("labels",),
                                                                                                         "retrain")
    with pytest.raises(MalformedMessage, match="not one of"):
        RegisterQuery.from_record(RecordDict({"config": ConfigRecord({"ask": "register", "needs": ["inputs"],
                                                                      "action": "train"})}))
    keyed = RegisterQuery((), "train", "ab" * 32)  # the store's record key rides in the query
    assert RegisterQuery.from_record(keyed.to_record()) == keyed
    for key in ("AB" * 32, "ab" * 31, 7):
        with pytest.raises(MalformedMessage, match="record-key"):
            RegisterQuery.from_record(RecordDict({"config": ConfigRecord({"ask": "register", "needs": [],
                                                                          "action": "train", "record-key": key})}))
    bad = sent.to_record()
    del bad["arrays"]["slice"]
    with pytest.raises(MalformedMessage, match="no slice"):
        Registration.from_record(bad)


@pytest.mark.parametrize(("reply", "message"), [
    (reg(0, [1, -5]), "sample id -5, outside the ledger's range"),
    (reg(0, [1], name="evil:x"), "node name 'evil:x'"),
    (reg(0, [1], name="../../etc/passwd"), "node name '../../etc/passwd'"),
    (reg(0, [1], name=""), "node name ''"),
    (reg(0, [1, 5000]), "sample id\\(s\\) 5000 that are not rows"),
])
def test_names_ids_and_public_rows_a_command_could_not_use_refuse_the_run(reply, message):
    with pytest.raises(RegistrationRefused, match=message):
        federation_from({0: (1, reply)}, 2, 10, public_ids=np.arange(1437))


def test_a_nodes_own_records_are_not_held_to_the_public_rows():
    own = reg(0, [2**62, 7], records="local")
    assert federation_from({0: (1, own)}, 2, 10, public_ids=np.arange(10)).plan.slices == {0: [[7, 2**62], []]}


def test_a_reply_is_held_to_its_bound_on_its_bytes_before_its_ids_are_read():
    content = reg(0, list(range(50))).to_record()
    assert len(Registration.from_record(content, max_ids=50).samples) == 50
    with pytest.raises(TooManyIds) as over:
        Registration.from_record(content, max_ids=49)
    assert (over.value.key, over.value.count) == ("samples", 50)
    # bytes that are no .npy at all: refused by their size alone, so they are never read
    content["arrays"]["samples"] = Array(dtype="<i8", shape=(10**6,), stype="numpy.ndarray", data=b"\0" * 8 * 10**6)
    with pytest.raises(TooManyIds) as huge:
        Registration.from_record(content, max_ids=1000)
    assert huge.value.count == 10**6


@pytest.mark.parametrize(("ids", "message"), [
    (np.asarray([1, 2**63 + 5], np.uint64), "9223372036854775813, above 2\\^63-1"),
    (np.asarray([1.0, 2.0]), "not integers"),
])
def test_ids_that_do_not_fit_the_ledger_are_malformed_never_wrapped(ids, message):
    content = reg(0, [1, 2]).to_record()
    content["arrays"]["samples"] = Array(ids)
    with pytest.raises(MalformedMessage, match=message):
        Registration.from_record(content)


def test_public_rows_are_named_without_reading_a_row():
    from fedforget.core.config import parse_run_config
    from fedforget.tasks.data_access import serving_role
    from fedforget.tasks.fortunes import FORTUNES_TRAIN_ROWS, fortune_rows
    from fedforget.tasks.registry import load_task_data
    from fedforget.tasks.text import RT_TRAIN_ROWS, fixed_split, rotten_tomatoes_rows

    for task, size in [("digits-mlp", 300), ("digits-mlp-val", 0)]:  # the -perm variants name theirs alike
        cfg = parse_run_config({"task": task, "train-size": size}, warn=False)
        with serving_role():
            named = public_pool_ids(cfg)
        assert np.array_equal(named, load_task_data(cfg).train.ids.numpy()), task
    # the text tasks number a row by its place in their fixed training split, whose size is pinned here
    assert len(fixed_split(len(rotten_tomatoes_rows()[1]), "rt-minilm")[0]) == RT_TRAIN_ROWS
    assert len(fixed_split(len(fortune_rows()[1]), "fortunes-minilm")[0]) == FORTUNES_TRAIN_ROWS
    assert public_pool_ids(parse_run_config({"task": "hf", "hf.dataset": "d", "hf.model": "m"}, warn=False)) is None
