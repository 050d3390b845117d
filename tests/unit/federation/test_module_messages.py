"""The train.chain message survives its record form unchanged, carries no JSON strings, and refuses slot
targets that do not add up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedforget.federation.module_messages import DEFAULT_SLOTS, TARGET_COUNTS_KEY, Slot, TrainModule

names = st.text(alphabet="abcdefghij_.0123456789", min_size=1, max_size=12)
slots = st.builds(Slot, names, st.none() | st.lists(names, max_size=4).map(tuple))


@given(artifact=names, server_round=st.integers(1, 10_000), stacking=st.sampled_from(["new", "continue"]),
       slices=st.lists(st.integers(0, 1000), max_size=6).map(tuple), slot_list=st.lists(slots, min_size=1, max_size=5),
       keep=st.none() | st.booleans(), prefix=st.lists(st.text("0123456789abcdef", min_size=64, max_size=64),
                                                      max_size=3).map(tuple),
       init_seed=st.none() | st.integers(0, 2**63 - 1))
def test_a_train_module_message_round_trips_through_its_record(artifact, server_round, stacking, slices, slot_list,
                                                                keep, prefix, init_seed):
    message = TrainModule(artifact, server_round, stacking, slices, tuple(slot_list), keep, prefix, init_seed)
    record = message.to_config()
    assert TrainModule.from_config(record) == message
    assert not any(isinstance(v, str) and v.startswith(("[", "{")) for v in record.values())


def test_the_default_slot_targets_the_backbones_default_layers():
    record = TrainModule("a", 1, "continue", (0, 1)).to_config()
    assert TrainModule.from_config(record).slots == DEFAULT_SLOTS
    assert record[TARGET_COUNTS_KEY] == [-1]


def test_slot_targets_that_do_not_add_up_are_refused():
    record = TrainModule("a", 1, "new", (0,), (Slot("m1", ("q", "v")),)).to_config()
    record[TARGET_COUNTS_KEY] = [3]
    with pytest.raises(ValueError, match="slot targets do not match"):
        TrainModule.from_config(record)
