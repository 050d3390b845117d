"""Records as their owners know them resolve against the manifest alone: an old store's partitions are
``node-<p>`` with public records (the record id is the row number), a node of its own data hashes its
record ids; a record is accepted only inside its own node's partition, and every other text is one line."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedforget.core.record_ids import local_sample_id, record_ids_field
from fedforget.store.ledger import LedgerUsageError
from fedforget.store.records import (
    NodesError,
    RecordError,
    node_named,
    record_sample_id,
    record_sample_ids,
    sample_record,
    store_nodes,
)

ALICE, COLON, CAFE = "alice", "b:c", unicodedata.normalize("NFC", "café-é")
LOCAL = [local_sample_id("clinic", r) for r in (ALICE, COLON, CAFE, "17")]
OLD = {"partitions": {"0": [[1, 4, 9], [2, 3]], "1": [[5, 6], [7, 8, 10]]}, "safe-shard-ids": [99]}
NEW = {"partitions": {"0": [[1, 4, 9], [2, 3]], "1": [sorted(LOCAL[:2]), sorted(LOCAL[2:])]},
       "nodes": {"0": {"name": "node-0", "records": "public"}, "1": {"name": "clinic", "records": "local"}}}


def test_an_old_store_names_each_partition_node_p_with_public_records():
    nodes = store_nodes(OLD)
    assert {n: (v.partition, v.records) for n, v in nodes.items()} == {"node-0": (0, "public"),
                                                                      "node-1": (1, "public")}
    assert record_sample_id(OLD, "node-1:7") == 7
    assert sample_record(OLD, 7) == "node-1:7"


def test_a_local_nodes_records_hash_and_split_at_the_first_colon():
    assert record_sample_ids(NEW, ["clinic:alice", "clinic:b:c", f"clinic:{CAFE}", "node-0:3"]) == {
        "clinic:alice": LOCAL[0], "clinic:b:c": LOCAL[1], f"clinic:{CAFE}": LOCAL[2], "node-0:3": 3}
    assert record_sample_id(NEW, "clinic:17") == LOCAL[3]  # a local "17" is not row 17
    assert node_named(NEW, "clinic").partition == 1


KEY = "5e" * 32
KEYED = {**NEW, "record-ids": record_ids_field(KEY),
         "partitions": {**NEW["partitions"], "1": [sorted(local_sample_id("clinic", r, KEY) for r in (ALICE, COLON)),
                                                   sorted(local_sample_id("clinic", r, KEY) for r in (CAFE, "17"))]}}


def test_a_keyed_stores_records_resolve_under_its_key_and_the_unkeyed_guess_is_not_among_them():
    """A store with a record key (new stores) numbers a node's records hmac(key, node, record): the unkeyed
    sha256 of a guessed name is no sample of it; a store without one (NEW, as written before keys) keeps it."""
    keyed = record_sample_id(KEYED, "clinic:alice")
    assert keyed == local_sample_id("clinic", ALICE, KEY) != local_sample_id("clinic", ALICE)
    held = {i for s in KEYED["partitions"]["1"] for i in s}
    assert not held & set(LOCAL)
    assert local_sample_id("clinic", ALICE, "6f" * 32) != keyed  # another store's key, another id
    assert record_sample_id(NEW, "clinic:alice") == local_sample_id("clinic", ALICE)
    for bad in ({"scheme": "sha256", "key": KEY}, {"scheme": "hmac-sha256", "key": "XY"}, "hmac"):
        with pytest.raises(NodesError, match="record-ids"):
            record_sample_id({**KEYED, "record-ids": bad}, "clinic:alice")


def test_a_local_sample_maps_back_to_its_node_only():
    assert sample_record(NEW, LOCAL[0]) is None
    assert sample_record(NEW, 4) == "node-0:4"


@pytest.mark.parametrize(("record", "needle"), [
    ("node-1:7", "unknown node 'node-1'"),            # partition 1 is now called clinic
    ("clinic:bob", "unknown record 'clinic:bob'"),     # a record the node does not hold
    ("node-0:5", "unknown record 'node-0:5'"),         # another node's row
    ("node-0:99", "unknown record"),                   # not in any partition
    ("node-0:017", "without leading zeros"),           # a row number as the split writes it, exactly
    ("node-0:+3", "without leading zeros"),
    ("node-0:٣", "without leading zeros"),             # another script's digit
    ("node-0: 3", "without leading zeros"),
    ("node-0:99999999999999999999", "without leading zeros"),  # past 2**63
    (f"clinic:{unicodedata.normalize('NFD', CAFE)}", "unknown record"),  # compared exactly: no normalisation
    ("clinic", "is not NODE:RECORD_ID"),
    ("clinic:", "empty"),
    (":alice", "node name"),
    ("clin ic:alice", "node name"),
    ("clinic:a\nb", "control"),
    ("clinic:\udcff", "non-printable"),  # an argv byte that is not UTF-8, as Python passes it on
    ("clinic:" + "x" * 257, "longer than 256"),
    ("ⓒlinic:alice", "node name"),
])
def test_every_record_the_store_does_not_hold_is_one_line_naming_it(record, needle):
    with pytest.raises(RecordError) as err:
        record_sample_ids(NEW, ["clinic:alice", record])
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, LedgerUsageError)  # the CLI's and the service's usage errors (exit 2, 422)


def test_a_record_named_twice_is_one_and_thousands_resolve_at_once():
    many = {"partitions": {"0": [list(range(0, 200_000, 2))]}}
    names = [f"node-0:{i}" for i in range(0, 200_000, 20)]
    got = record_sample_ids(many, names + names[:5])
    assert len(got) == len(names) and got["node-0:40"] == 40


@pytest.mark.parametrize(("nodes", "needle"), [
    ([], "not a table"),
    ({"0": {"name": "node-0", "records": "public"}}, "partition 1 has no node"),
    ({**NEW["nodes"], "2": {"name": "x", "records": "local"}}, "node entry '2' has no partition"),
    ({"0": {"name": "same", "records": "public"}, "1": {"name": "same", "records": "local"}}, "'same'"),
    ({"0": {"name": "node-0", "records": "private"}, "1": NEW["nodes"]["1"]}, "partition 0 is not"),
    ({"0": {"name": "no/de", "records": "public"}, "1": NEW["nodes"]["1"]}, "node name"),
    ({"0": "node-0", "1": NEW["nodes"]["1"]}, "partition 0 is not"),
])
def test_a_nodes_table_training_never_writes_is_a_broken_store_not_a_usage_error(nodes, needle):
    with pytest.raises(NodesError, match=needle) as err:
        record_sample_ids({**NEW, "nodes": nodes}, ["clinic:alice"])
    assert not isinstance(err.value, LedgerUsageError)


def test_a_store_without_a_plan_has_no_records_yet():
    with pytest.raises(RecordError, match="no trained plan"):
        record_sample_id({}, "node-0:1")


@given(st.text(max_size=400))
def test_any_text_is_a_held_record_or_one_line_refusal_never_another_error(text):
    try:
        got = record_sample_ids(NEW, [text])
    except RecordError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 800
    else:
        assert text in {"node-0:1", "node-0:2", "node-0:3", "node-0:4", "node-0:9", "clinic:alice", "clinic:b:c",
                        f"clinic:{CAFE}", "clinic:17"} and len(got) == 1
