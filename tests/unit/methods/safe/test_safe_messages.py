"""SAFE's messages survive their record form unchanged, carry no JSON strings, keep their adapter order,
and refuse fields that do not add up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedforget.methods.safe.messages import CliqueResults, CliqueWork, PrototypeQuery, TrainCliques

ints = st.lists(st.integers(0, 10_000), max_size=5).map(tuple)
work = st.builds(CliqueWork, st.text("abc/k0123456789", min_size=1, max_size=8), ints, ints, st.booleans(),
                 st.none() | ints)
plans = st.fixed_dictionaries({"mode": st.sampled_from(["sample", "client"]), "coarse": st.integers(1, 64),
                               "fine": st.integers(0, 64)}, optional={"group": st.integers(0, 64)})


@given(server_round=st.integers(1, 1000), items=st.lists(work, max_size=6).map(tuple), plan=plans)
def test_a_train_message_round_trips_in_order(server_round, items, plan):
    record = TrainCliques(server_round, items, plan).to_config()
    assert TrainCliques.from_config(record) == TrainCliques(server_round, items, plan)
    assert not any(isinstance(v, str) and v.startswith(("[", "{")) for v in record.values())


@given(counts=st.dictionaries(st.text("abc0123", min_size=1, max_size=5), st.integers(0, 10**6), max_size=6),
       data=st.data())
def test_a_reply_round_trips_with_adapters_in_sorted_order(counts, data):
    trained = data.draw(st.lists(st.sampled_from(sorted(counts)), unique=True) if counts else st.just([]))
    losses = {a: data.draw(st.floats(0, 100, allow_nan=False)) for a in trained}
    back = CliqueResults.from_config(CliqueResults(counts, losses).to_config())
    assert back.counts == counts and list(back.counts) == sorted(counts)
    assert back.losses == losses and list(back.losses) == sorted(losses)


def test_a_prototype_query_round_trips():
    query = PrototypeQuery((3, 1, 2), 384, {"mode": "client", "coarse": 4, "fine": 2, "group": 1})
    assert PrototypeQuery.from_config(query.to_config()) == query


def test_fields_that_do_not_add_up_are_refused():
    record = TrainCliques(1, (CliqueWork("c0", (1, 2), (0,)),), {"mode": "sample", "coarse": 4, "fine": 0}).to_config()
    record["class-counts"] = [5]
    with pytest.raises(ValueError, match="classes do not add up"):
        TrainCliques.from_config(record)
