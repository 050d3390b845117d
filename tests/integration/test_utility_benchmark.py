"""The utility benchmark runs methods × partitionings × seeds in process and writes what it promises:
one row per run with its cost taken from the real messages, paired differences against fedavg, the
probe and central reference rows, serving alternatives scored from the same store, and a plot."""

from __future__ import annotations

import json

import pytest

from ..benchmark_scripts import benchmark_script


@pytest.fixture(scope="module")
def utility():  # noqa: ANN201
    with benchmark_script("utility") as module:
        yield module


def test_utility_writes_paired_rows_with_real_costs_references_and_serving_alternatives(utility, tmp_path, capsys):
    out = tmp_path / "utility_digits"
    utility.main(["--tasks", "digits-mlp", "--partitions", "dir0.5", "--seeds", "1,2", "--clients", "4",
                  "--methods", "fedavg,fedcio,fedshard", "--common", "num-rounds=2 local-epochs=1 chains.clusters=2 "
                  "fedshard.rounds-min=1 fedshard.rounds-max=1", "--out", str(out)])
    doc = json.loads(out.with_suffix(".json").read_text())
    runs = {(r["method"], r["seed"]) for r in doc["rows"]}
    assert runs == {(m, s) for m in ("fedavg", "fedcio", "fedshard", "probe", "central") for s in (1, 2)}
    for row in doc["rows"]:
        assert row["client-rounds"] > 0 and row["bytes-down"] > 0 and row["bytes-up"] > 0, row["method"]
        assert 0.0 <= row["accuracy"] <= 1.0
    summary = {s["method"]: s for s in doc["summary"]}
    assert set(summary) >= {"fedavg", "fedcio", "fedcio@equal-votes", "fedshard", "probe", "central"}
    assert summary["fedavg"]["paired-diffs"] == [0.0, 0.0]
    fedavg = {r["seed"]: r["accuracy"] for r in doc["rows"] if r["method"] == "fedavg"}
    fedcio = {r["seed"]: r["accuracy"] for r in doc["rows"] if r["method"] == "fedcio"}
    assert summary["fedcio"]["paired-diffs"] == pytest.approx([fedcio[s] - fedavg[s] for s in (1, 2)])
    assert summary["central"]["client-rounds"] == 2  # one client holding everything, two rounds
    assert out.with_suffix(".png").stat().st_size > 0
    capsys.readouterr()
    utility.main(["--replot", str(out.with_suffix(".json")), "--markdown"])
    table = capsys.readouterr().out
    assert "| digits-mlp | dir0.5 | fedcio@equal-votes | 2 |" in table
