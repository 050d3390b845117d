"""Every run-config value a user can type is bounded before anything is written: finite floats, no empty
values, documented caps and an estimate of the run's memory against what this machine has; `theory`
bounds its inputs by the work they cost, so every accepted value answers within seconds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict

from fedforget.core import run_footprint
from fedforget.core.config import METHODS, TASKS, ConfigError, RunConfig, declared_types, parse_run_config
from fedforget.core.run_footprint import TASK_DIMS, fit_refusal, largest_fitting, total_bytes
from fedforget.inprocess import default_run_config
from fedforget.methods.chains import sequences
from fedforget.methods.chains.cli import MAX_MC_WORK
from fedforget.methods.chains.theory import BMS_WORK_MAX, ORDER_CELLS_MAX, bms_work, monte_carlo_work
from fedforget.server_app import RunConfigRefused
from fedforget.server_app import app as server_app

from ..integration.helpers import invoke

GiB = 2**30


def refusal_line(argv: list[str]) -> str:
    """The one line a refused command prints (exit 2, nothing on stdout)."""
    code, out, err = invoke(argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (argv, code, out, err)
    assert lines[0].startswith("fedforget: error: ")
    return lines[0]


def fedforget_run(store: Path, run_config: str) -> list[str]:
    return ["run", "--store", str(store), "--federation", "no-such-connection", "--run-config", run_config]


def parse(**overrides: object) -> RunConfig:
    return parse_run_config({**default_run_config(), **{k.replace("_", "-"): v for k, v in overrides.items()}},
                            warn=False)


REPORTED = [  # (run config, the key the refusal names)
    ("lora-r=1000000", "'lora-r'"),
    ("method='fedsgt' chains.groups=100000 chains.budget=100000000", "'chains.groups'"),
    ("method='fedsgt' chains.budget=100000000", "'chains.budget'"),
    ("slices-per-client=1000000", "'slices-per-client'"),
    ("lr=inf", "'lr'"),
    ("lr=nan", "'lr'"),
    ("lr=-inf", "'lr'"),
    ("lr= task='digits-mlp'", "'lr'"),
    ("task='digits-mlp' lr=", "'lr'"),
    ("task='digits-mlp' slices-per-client=1438", "'slices-per-client'"),
    ("method='fedsgt' chains.groups=4 chains.budget=25", "'chains.budget'"),
    ("method='fedsgt' chains.groups=100 chains.prior='" + ",".join(["0.01"] * 100) + "'", "'chains.groups'"),
]


@pytest.mark.parametrize(("run_config", "key"), REPORTED)
def test_fedforget_run_refuses_each_reported_value_in_one_line_naming_the_key_and_writes_nothing(
        tmp_path, run_config, key):
    store = tmp_path / "new"
    line = refusal_line(fedforget_run(store, run_config))
    assert key in line, line
    assert not store.exists()


@pytest.mark.parametrize(("run_config", "key"), [r for r in REPORTED if not r[0].rstrip().endswith("=")
                                                  and "lr= " not in r[0]])
def test_plain_flwr_run_refuses_each_reported_value_in_the_server_app_before_the_store_exists(
        tmp_path, run_config, key):
    from fedforget.unlearning.run_config import parse_flwr_run_config

    store = tmp_path / "new"
    config = {**default_run_config(), **parse_flwr_run_config(run_config), "store": str(store)}
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config)
    with pytest.raises(RunConfigRefused) as refused:
        server_app(None, context)  # refused before the grid is used
    assert key in str(refused.value) and "\n" not in str(refused.value)
    assert not store.exists()


@pytest.mark.parametrize("key", [k for k, kind in declared_types().items() if kind == "float"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_every_float_key_refuses_infinite_and_nan_values_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=f"'{key}' must be a finite number"):
        parse(**{key: value})


@pytest.mark.parametrize("method", METHODS)
def test_every_methods_defaults_are_accepted_on_this_machine(method):
    task = "digits-mlp" if method in ("hosfl", "sfl", "zo-sfl") else "fmnist-cnn"
    cfg = parse(method=method, task=task)
    assert total_bytes(cfg) < 64 * 2**20  # a default run holds little beyond the backbone


@pytest.mark.parametrize("task", [t for t in TASKS if t != "hf"])
def test_every_tasks_defaults_fit_well_within_a_small_machine(task):
    cfg = parse(task=task)
    assert fit_refusal(cfg, 2 * GiB) is None


def test_a_large_but_feasible_config_is_accepted():
    """100,000 chain modules (a tenth of the order bound) of digits-mlp: about 2 GiB on disk and in the ledger."""
    cfg = parse(method="fedsgt", task="digits-mlp", lora_r=8, slices_per_client=10,
                **{"chains.groups": 100, "chains.budget": 1000})
    assert cfg.chains.groups * cfg.chains.budget == 100_000 and 1 * GiB < total_bytes(cfg) < 4 * GiB
    assert parse(task="digits-mlp", slices_per_client=1437).slices_per_client == 1437  # one slice per row


def test_the_largest_value_a_refusal_names_fits_and_one_more_does_not():
    cfg = RunConfig(task="rt-smollm", lora_r=60_000)
    line = fit_refusal(cfg, 8 * GiB, frozenset({"lora-r"}))
    assert line is not None and "'lora-r' to at most" in line and "8.0 GiB available" in line
    largest = int(line.split("to at most ")[1].split()[0])
    assert largest == largest_fitting(cfg, "lora-r", 8 * GiB)
    fits, one_more = cfg.with_keys({"lora-r": largest}), cfg.with_keys({"lora-r": largest + 1})
    assert total_bytes(fits) <= 8 * GiB < total_bytes(one_more)


def test_a_refusal_names_the_key_the_user_set_not_a_default_one():
    cfg = RunConfig(method="s3t", task="fmnist-cnn").with_keys({"chains.groups": 100, "chains.budget": 1000,
                                                                "chains.shards": 100})
    line = fit_refusal(cfg, 8 * GiB, frozenset({"chains.shards"}))
    assert line is not None and "set run-config 'chains.shards' to at most" in line


def test_fedforget_run_refuses_a_config_past_this_machines_memory_naming_the_largest_value(tmp_path, monkeypatch):
    monkeypatch.setattr(run_footprint, "available_memory", lambda: 1 * GiB)
    store = tmp_path / "new"
    line = refusal_line(fedforget_run(store, "task='rt-minilm' lora-r=20000"))
    assert "this run config needs about" in line and "1.0 GiB available" in line, line
    largest = int(line.split("'lora-r' to at most ")[1].split()[0])
    assert not store.exists()
    parse(task="rt-minilm", lora_r=largest)  # the value it names is accepted
    with pytest.raises(ConfigError, match="'lora-r' to at most"):
        parse(task="rt-minilm", lora_r=largest + 1)


def test_every_task_has_its_dims_declared():
    assert set(TASK_DIMS) == set(TASKS)


# -- theory ------------------------------------------------------------------------------------------------
def largest(fits, high: int) -> int:  # noqa: ANN001
    lo, hi = 1, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def test_theory_sequences_with_a_prior_accepts_groups_up_to_its_work_bound_only():
    groups = largest(lambda g: bms_work(g, g) <= BMS_WORK_MAX, 1000)
    assert bms_work(groups, groups) <= BMS_WORK_MAX < bms_work(groups + 1, groups + 1)
    prior = ",".join([repr(1 / (groups + 1))] * (groups + 1))
    line = refusal_line(["theory", "sequences", "--groups", str(groups + 1), "--budget", str(groups + 1),
                         "--prior", prior])
    assert "bound" in line and "--groups" in line
    reported = refusal_line(["theory", "sequences", "--groups", "1000", "--budget", "100", "--prior", "1"])
    assert "--groups" in reported  # refused before the prior is even read


def test_theory_sequences_with_a_prior_refuses_a_budget_whose_conditional_sampling_is_past_its_bound():
    budget = largest(lambda b: bms_work(8, b) <= BMS_WORK_MAX, 10_000)
    line = refusal_line(["theory", "sequences", "--groups", "8", "--budget", str(budget + 1),
                         "--prior", "1,0,0,0,0,0,0,0"])
    assert f"--budget {budget} or fewer" in line


def test_bms_work_bounds_the_steps_bms_takes_even_with_a_degenerate_prior(monkeypatch):
    """A prior of one group makes every conditional draw end in that group: the sampler spends its whole
    attempt budget, the worst case the work model counts."""
    calls = {"score_steps": 0, "draw": 0}
    score, draw = sequences.sequence_score, sequences._sample_order

    def counted_score(order, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls["score_steps"] += len(order)
        return score(order, *args, **kwargs)

    def counted_draw(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["draw"] += 1
        return draw(*args, **kwargs)

    monkeypatch.setattr(sequences, "sequence_score", counted_score)
    monkeypatch.setattr(sequences, "_sample_order", counted_draw)
    groups, budget = 5, 100  # 4! = 24 orders end in group 0: 94 conditional samples cannot all be drawn
    orders = sequences.bms_sequences(groups, budget, [1.0, 0, 0, 0, 0])
    assert len(set(orders)) == budget
    assert calls["draw"] == 100 * (budget - groups) + 1000  # the whole attempt budget
    latin = bms_work(groups, groups) - groups * groups  # the Latin square and the ranking alone
    assert calls["score_steps"] == latin
    assert calls["score_steps"] + calls["draw"] * groups**2 <= bms_work(groups, budget)


def test_theory_sequences_without_a_prior_accepts_a_million_positions_and_no_more():
    assert 1000 * 1000 == ORDER_CELLS_MAX
    line = refusal_line(["theory", "sequences", "--groups", "1000", "--budget", "1001"])
    assert "--budget 1000 or fewer" in line


def test_theory_sequences_prints_the_same_orders_as_plain_lines_and_as_json():
    argv = ["theory", "sequences", "--groups", "200", "--budget", "50"]
    code, plain, _ = invoke(argv)
    code_json, as_json, _ = invoke([*argv, "--json"])
    assert code == code_json == 0
    assert [list(map(int, line.split())) for line in plain.splitlines()] == json.loads(as_json)["sequences"]


def test_theory_deletion_rate_accepts_monte_carlo_work_up_to_a_few_seconds_only():
    trials = int(MAX_MC_WORK / monte_carlo_work("fedsgt", 1000, 1, 5, 1))
    assert monte_carlo_work("fedsgt", 1000, 1, 5, trials) <= MAX_MC_WORK
    line = refusal_line(["theory", "deletion-rate", "--groups", "1000", "--budget", "10", "--trials",
                         str(trials + 1)])
    assert f"--trials {trials} or fewer" in line


def test_a_chain_run_with_more_groups_than_client_slices_is_refused_once_nodes_answer_and_leaves_no_store(tmp_path):
    """The number of nodes is not in the run config: the chains driver checks it after discovery, before the
    store exists, and the directory made for the run lock is taken back."""
    from fedforget.inprocess import run_in_process

    store = tmp_path / "s"
    config = {"method": "fedsgt", "task": "digits-mlp", "chains.groups": 5, "chains.budget": 2,
              "slices-per-client": 1, "store": str(store)}
    with pytest.raises(RunConfigRefused, match=r"'chains.groups'=5 .* 3 partitions x 'slices-per-client'=1 give 3"):
        run_in_process(config, num_nodes=3)
    assert not store.exists()
