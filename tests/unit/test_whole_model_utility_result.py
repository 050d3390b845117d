"""The whole-model utility result holds what it claims: a row per way of training and seed, each trained the way
its method says (the probe only its last layer), and paired differences against plain Flower that are the rows'
own differences, seed by seed, with a t-interval around their mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..benchmark_scripts import benchmark_script

RESULT = Path(__file__).resolve().parents[2] / "docs" / "results" / "whole_model_utility.json"
METHODS = {"replay", "fedavg", "flower", "probe", "central"}


@pytest.fixture(scope="module")
def result() -> dict:
    return json.loads(RESULT.read_text(encoding="utf-8"))


def test_every_way_of_training_has_a_row_for_every_seed_of_at_least_three(result) -> None:
    seeds = result["setup"]["seeds"]
    assert len(seeds) >= 3
    assert sorted((r["method"], r["seed"]) for r in result["rows"]) == sorted(
        (m, s) for m in METHODS for s in seeds)
    for row in result["rows"]:
        assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["macro-f1"] <= 1.0


def test_the_probe_trains_only_its_last_layer_and_the_others_the_whole_model(result) -> None:
    for row in result["rows"]:
        whole = ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
        assert row["trained"] == (["fc2.bias", "fc2.weight"] if row["method"] == "probe" else whole), row
    assert all(r["max-abs-weight-diff-vs-flower"] == 0.0 for r in result["rows"] if r["method"] == "flower")


def test_the_paired_differences_are_the_rows_own_per_seed(result) -> None:
    with benchmark_script("whole_model_utility") as bench:
        expected = [bench.paired(result["rows"], method, "flower", metric)
                    for method in ("replay", "fedavg") for metric in ("accuracy", "macro-f1")]
    assert result["paired"] == expected
    by = {(r["method"], r["seed"]): r for r in result["rows"]}
    for diff in result["paired"]:
        assert diff["seeds"] == result["setup"]["seeds"] and diff["n"] == len(diff["seeds"])
        assert diff["per-seed"] == [round(100 * (by[(diff["method"], s)][diff["metric"]]
                                                 - by[("flower", s)][diff["metric"]]), 2) for s in diff["seeds"]]
        assert diff["ci95"][0] <= diff["mean"] <= diff["ci95"][1]


def test_a_missing_seed_drops_out_of_the_pairing(result) -> None:
    """Negative control: a seed plain Flower lacks is not paired."""
    rows = [r for r in result["rows"] if not (r["method"] == "flower" and r["seed"] == result["setup"]["seeds"][0])]
    with benchmark_script("whole_model_utility") as bench:
        diff = bench.paired(rows, "replay", "flower", "accuracy")
    assert diff["seeds"] == result["setup"]["seeds"][1:]
