"""The grouped round's mean: each group averaged in partition order whatever order replies arrive in, the
server's own term last, zero-example replies abstaining, a group no one trained keeping its start, and the
method's precision honoured."""

from __future__ import annotations

import numpy as np
import pytest

from fedforget.core.weighted_mean import weighted_mean
from fedforget.federation.grouped_round import SERVER_ORDER, Contribution, group_means


def _state(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"lora_A": rng.standard_normal((4, 3)).astype(np.float32), "bias": rng.standard_normal(3).astype(np.float32)}


def _terms() -> list[Contribution]:
    return [Contribution("a", p, 10 + 7 * p, _state(p)) for p in range(5)] + [
        Contribution("b", 2, 5, _state(20)), Contribution("b", SERVER_ORDER, 3, _state(21))]


def _same(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> bool:
    return x.keys() == y.keys() and all(x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes() for k in x)


def test_each_group_is_averaged_in_partition_order_whatever_order_the_replies_arrive_in():
    starts = {"a": _state(100), "b": _state(101)}
    ordered, _ = group_means(starts, _terms())
    shuffled, _ = group_means(starts, list(reversed(_terms())))
    assert all(_same(ordered[g], shuffled[g]) for g in starts)
    a = [c for c in _terms() if c.group == "a"]
    assert _same(ordered["a"], weighted_mean([c.arrays for c in a], [c.weight for c in a]))


def test_the_servers_term_is_summed_last():
    starts = {"b": _state(101)}
    means, weights = group_means(starts, _terms())
    b = [c for c in _terms() if c.group == "b"]
    assert _same(means["b"], weighted_mean([c.arrays for c in b], [c.weight for c in b]))  # given order: server last
    assert weights["b"] == 8


def test_zero_example_replies_abstain_and_a_group_no_one_trained_keeps_its_start():
    starts = {"a": _state(100), "idle": _state(102)}
    terms = _terms() + [Contribution("a", 9, 0, {k: np.full_like(v, np.nan) for k, v in _state(9).items()}),
                        Contribution("idle", 1, 0, _state(3))]
    means, weights = group_means(starts, terms)
    assert means["idle"] is starts["idle"] and "idle" not in weights
    assert _same(means["a"], group_means(starts, _terms())[0]["a"])  # the NaN reply with no examples added nothing


def test_the_methods_precision_is_honoured():
    starts = {"a": _state(100)}
    wide, _ = group_means(starts, _terms(), np.float64)
    narrow, _ = group_means(starts, _terms(), np.float32)
    a = [c for c in _terms() if c.group == "a"]
    assert _same(wide["a"], weighted_mean([c.arrays for c in a], [c.weight for c in a], accumulate=np.float64))
    assert wide["a"]["lora_A"].dtype == np.float32  # summed wide, rounded back once
    assert not _same(wide["a"], narrow["a"])  # negative control: the two precisions differ on these terms


def test_a_grouped_rounds_models_are_keyed_by_group_even_when_one_is_due_and_unpack_inverts_pack():
    from fedforget.federation.round_hooks import pack, unpack

    one = {"chains/s0/q0/p1": _state(1)}
    assert all(k.startswith("chains/s0/q0/p1:") for k in pack(one))
    two = {"a": _state(1), "b": _state(2)}
    back = unpack(pack(two), two)
    assert all(_same(back[g], two[g]) for g in two)
    with pytest.raises(ValueError, match="no group of this round"):
        unpack(pack({"c": _state(3)}), {"a": _state(1)})
    with pytest.raises(ValueError, match="without the round's tensor 'bias'"):
        unpack(pack({"a": {"lora_A": _state(1)["lora_A"]}, "b": _state(2)}), two)
    with pytest.raises(ValueError, match="'lora_A' as it was"):
        unpack(pack({"a": {**_state(1), "lora_A": np.zeros((2, 2), np.float32)}, "b": _state(2)}), two)
