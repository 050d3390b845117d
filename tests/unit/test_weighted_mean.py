"""The one weighted mean: in float32 it is Flower's ``aggregate_arrayrecords`` bit for bit, in float64 it is
the float64 FedAvg SAFE was built with, and with sort keys the order the states come in does not matter."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedforget.core.weighted_mean import weighted_mean

NAMES = ("lora_A", "lora_B", "head.bias")


@st.composite
def federations(draw: st.DrawFn, dtype: type = np.float32) -> tuple[list[dict[str, np.ndarray]], list[int]]:
    """2..5 states naming the same tensors (shapes shared, values anything finite, −0.0 and subnormals
    included) and their example counts."""
    count = draw(st.integers(1, 5))
    shapes = {n: draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=4)) for n in NAMES[:draw(st.integers(1, 3))]}
    elements = st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True)
    states = [{n: draw(hnp.arrays(dtype, shape, elements=elements)) for n, shape in shapes.items()}
              for _ in range(count)]
    return states, draw(st.lists(st.integers(1, 5000), min_size=count, max_size=count))


def _bits(arrays: dict[str, np.ndarray]) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    return {k: (v.dtype.str, v.shape, np.ascontiguousarray(v).tobytes()) for k, v in arrays.items()}


def _flower(states: list[dict[str, np.ndarray]], weights: list[int]) -> dict[str, np.ndarray]:
    records = [RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in s.items()}),
                           "metrics": MetricRecord({"num-examples": n})}) for s, n in zip(states, weights, strict=True)]
    return {k: v.numpy() for k, v in aggregate_arrayrecords(records, "num-examples").items()}


def _old_safe(contributions: list[tuple[int, dict[str, np.ndarray]]]) -> dict[str, np.ndarray]:
    """SAFE's FedAvg as it was written before the one weighted mean (a zero started each sum)."""
    total = float(sum(n for n, _ in contributions))
    out = {}
    for key in contributions[0][1]:
        acc = np.zeros_like(contributions[0][1][key], dtype=np.float64)
        for n, arrays in contributions:
            acc += arrays[key].astype(np.float64) * (n / total)
        out[key] = acc.astype(contributions[0][1][key].dtype)
    return out


@settings(max_examples=300, deadline=None)
@given(federations())
def test_float32_is_flowers_aggregate_arrayrecords_bit_for_bit(federation):
    states, weights = federation
    assert _bits(weighted_mean(states, weights)) == _bits(_flower(states, weights))


@settings(max_examples=300, deadline=None)
@given(federations())
def test_float64_is_safes_fedavg_bit_for_bit_but_for_the_sign_of_a_sum_of_negative_zeros(federation):
    states, weights = federation
    new = weighted_mean(states, weights, accumulate=np.float64)
    old = _old_safe(list(zip(weights, states, strict=True)))
    for name, value in new.items():
        # a zero no longer starts the sum: where every term is −0.0 the mean is −0.0 (it was +0.0)
        negative_zeros = np.logical_and.reduce([np.signbit(s[name]) & (s[name] == 0) for s in states])
        assert value.dtype == old[name].dtype and value.shape == old[name].shape
        assert value.tobytes() == np.where(negative_zeros, np.float32(-0.0), old[name]).astype(value.dtype).tobytes()


@settings(max_examples=200, deadline=None)
@given(federations(), st.randoms(use_true_random=False), st.sampled_from([np.float32, np.float64]))
def test_with_sort_keys_the_order_states_arrive_in_does_not_matter(federation, rnd, accumulate):
    states, weights = federation
    keys = list(range(len(states)))
    shuffled = keys[:]
    rnd.shuffle(shuffled)
    want = weighted_mean(states, weights, accumulate=accumulate)
    got = weighted_mean([states[i] for i in shuffled], [weights[i] for i in shuffled], accumulate=accumulate,
                        keys=[keys[i] for i in shuffled])
    assert _bits(got) == _bits(want)
    assert list(got) == list(states[0])  # the names in the order of the first state summed


def test_the_order_of_the_sum_is_part_of_the_mean():
    """Why callers give a sort key: float32 addition is not associative, so arrival order would leak."""
    states = [{"w": np.array([v], np.float32)} for v in (1e8, -1e8, 1.0)]
    forward = weighted_mean(states, [1, 1, 1])["w"]
    backward = weighted_mean(states[::-1], [1, 1, 1])["w"]
    assert forward.tobytes() != backward.tobytes()
    assert weighted_mean(states[::-1], [1, 1, 1], keys=[2, 1, 0])["w"].tobytes() == forward.tobytes()


def test_float64_accumulation_rounds_once_and_keeps_the_dtype():
    states = [{"w": np.full(3, 1 / 3, np.float32)}, {"w": np.full(3, 2 / 3, np.float32)}]
    out = weighted_mean(states, [1, 2], accumulate=np.float64)["w"]
    assert out.dtype == np.float32
    want = (states[0]["w"].astype(np.float64) / 3 + states[1]["w"].astype(np.float64) * 2 / 3).astype(np.float32)
    assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize(("states", "weights", "keys", "match"), [
    ([], [], None, "one weight per state"),
    ([{"w": np.ones(2, np.float32)}], [1, 2], None, "one weight per state"),
    ([{"w": np.ones(2, np.float32)}] * 2, [0, 0], None, "positive total"),
    ([{"w": np.ones(2, np.float32)}] * 2, [1, 1], [3, 3], "distinct"),
    ([{"w": np.ones(2, np.float32)}, {"v": np.ones(2, np.float32)}], [1, 1], None, "same tensors"),
    ([{"w": np.ones(2, np.float32)}, {"w": np.ones(3, np.float32)}], [1, 1], None, "shape"),
])
def test_states_that_cannot_be_averaged_are_refused(states, weights, keys, match):
    with pytest.raises(ValueError, match=match):
        weighted_mean(states, weights, keys=keys)


def test_the_first_term_starts_the_sum_so_a_mean_of_negative_zeros_is_negative_zero():
    states = [{"w": np.array([-0.0, -0.0], np.float32)}, {"w": np.array([-0.0, 0.0], np.float32)}]
    for accumulate in (np.float32, np.float64):
        assert np.signbit(weighted_mean(states, [1, 1], accumulate=accumulate)["w"]).tolist() == [True, False]
