import numpy as np
import pytest

from fedforget.core.weighted_mean import weighted_mean
from fedforget.methods.fedshard.lora_merge import merge_lora


def _child(rng: np.random.Generator, rank: int = 3) -> dict[str, np.ndarray]:
    return {"fc.lora_A.weight": rng.normal(size=(rank, 8)).astype(np.float32),
            "fc.lora_B.weight": rng.normal(size=(5, rank)).astype(np.float32),
            "conv.lora_A.weight": rng.normal(size=(rank, 2, 3, 3)).astype(np.float32),
            "conv.lora_B.weight": rng.normal(size=(4, rank, 1, 1)).astype(np.float32),
            "head.weight": rng.normal(size=(10, 5)).astype(np.float32)}


def _delta(state: dict[str, np.ndarray], layer: str) -> np.ndarray:
    a, b = state[f"{layer}.lora_A.weight"], state[f"{layer}.lora_B.weight"]
    return b.reshape(b.shape[0], a.shape[0]).astype(np.float64) @ a.reshape(a.shape[0], -1).astype(np.float64)


def test_product_merge_keeps_the_mean_update_when_it_fits_the_rank():
    rng = np.random.default_rng(0)
    base = _child(rng)
    # children share A (only B moved): the mean of B·A has rank ≤ r, so the merge reproduces it exactly
    children = [{**base, "fc.lora_B.weight": rng.normal(size=(5, 3)).astype(np.float32),
                 "conv.lora_B.weight": rng.normal(size=(4, 3, 1, 1)).astype(np.float32)} for _ in range(3)]
    weights = [10, 30, 60]
    merged = merge_lora(children, weights)
    for layer in ("fc", "conv"):
        want = sum(w / 100 * _delta(c, layer) for w, c in zip(weights, children, strict=True))
        np.testing.assert_allclose(_delta(merged, layer), want, rtol=1e-4, atol=1e-5)
        assert merged[f"{layer}.lora_A.weight"].shape == base[f"{layer}.lora_A.weight"].shape
    np.testing.assert_array_equal(merged["head.weight"], weighted_mean(children, weights)["head.weight"])


def test_averaging_factors_of_diverged_children_loses_what_the_product_merge_keeps():
    rng = np.random.default_rng(1)
    children = [_child(rng) for _ in range(2)]
    want = sum(0.5 * _delta(c, "fc") for c in children)
    factors, product = merge_lora(children, [1, 1], "factors"), merge_lora(children, [1, 1], "product")
    assert np.linalg.norm(_delta(product, "fc") - want) < np.linalg.norm(_delta(factors, "fc") - want)


def test_product_merge_is_deterministic_and_keeps_zero_updates_trainable():
    rng = np.random.default_rng(2)
    children = [_child(rng) for _ in range(3)]
    one, two = merge_lora(children, [1, 2, 3]), merge_lora(children, [1, 2, 3])
    assert all(one[k].tobytes() == two[k].tobytes() for k in one)
    zero = [{**c, "fc.lora_B.weight": np.zeros_like(c["fc.lora_B.weight"])} for c in children]
    merged = merge_lora(zero, [1, 1, 1])
    assert not merged["fc.lora_B.weight"].any() and merged["fc.lora_A.weight"].any()


def test_unknown_merge_rule_is_refused():
    with pytest.raises(ValueError, match="unknown LoRA merge"):
        merge_lora([_child(np.random.default_rng(3))], [1], "median")
