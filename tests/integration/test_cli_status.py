import json

import numpy as np
from flwr.app import Array, ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from typer.testing import CliRunner

from fedforget.federation.run_setup import build_model
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.initial_arrays import INITIAL_ARRAYS
from fedforget.strategies import strategy_for
from fedforget.unlearning.cli import app

from .helpers import DIGITS, served_sha, train_in_process

runner = CliRunner()


def test_status_reports_task_method_rounds_accuracy_and_artifacts(tmp_path, monkeypatch):
    store = train_in_process(tmp_path / "s", **{"num-rounds": 1})
    result = runner.invoke(app, ["status", "--store", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["task"] == "digits-mlp" and info["method"] == "fedavg"
    assert info["rounds_done"] == 1 and 0.0 < info["accuracy"] <= 1.0
    assert info["artifacts"][0]["sha256"] == served_sha(store)
    assert info["artifacts"][0]["intact"] and info["complete"]
    table = runner.invoke(app, ["status", "--store", str(tmp_path / "s"), "--artifacts"])
    assert table.exit_code == 0 and served_sha(store) in table.output.replace("\n", "").replace("│", "")
    short = runner.invoke(app, ["status", "--store", str(tmp_path / "s")])
    assert short.exit_code == 0 and served_sha(store) not in short.output.replace("\n", "")
    assert "num-rounds=1" in short.output and "lora-r=" not in short.output  # only what differs from defaults
    monkeypatch.chdir(tmp_path)  # a relative --store is taken from the current directory, not FEDFORGET_HOME
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path / "elsewhere"))
    relative = runner.invoke(app, ["status", "--store", "s", "--json"])
    assert relative.exit_code == 0 and json.loads(relative.output)["store"] == str(tmp_path / "s")


def test_status_names_a_corrupt_artifact(tmp_path):
    store = train_in_process(tmp_path / "s", **{"num-rounds": 1})
    path = store.artifact_path(served_sha(store))
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    info = json.loads(runner.invoke(app, ["status", "--store", str(tmp_path / "s"), "--json"]).output)
    assert not info["artifacts"][0]["intact"] and not info["complete"]


def test_status_of_a_path_that_is_not_a_store_exits_2_with_one_line(tmp_path):
    result = runner.invoke(app, ["status", "--store", str(tmp_path / "nothing")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines() if result.stderr else result.output.strip().splitlines()
    assert len(lines) == 1 and "is not a store" in lines[0]


def test_run_refuses_a_store_inside_the_run_config():
    result = runner.invoke(app, ["run", "--run-config", "store='x'"])
    assert result.exit_code == 2


def _write_flat_keys(store: Store, **changed: object) -> None:
    """Rewrite the store's manifest config with every key flat (stores written without groups)."""
    from fedforget.core.config import RENAMED

    old_name = {new: old for old, new in RENAMED.items()}
    config = {old_name.get(k, k): v for k, v in store.manifest()["config"].items()}
    store.update_manifest(config={**config, **changed})


def test_status_shows_only_the_changed_keys_its_method_reads(tmp_path):
    """A fedavg store must not list chain, split or SAFE settings it never used."""
    store = train_in_process(tmp_path / "s", **{"num-rounds": 1})
    _write_flat_keys(store, groups=7)
    short = runner.invoke(app, ["status", "--store", str(tmp_path / "s")])
    assert short.exit_code == 0, short.output
    line = next(x for x in short.output.splitlines() if x.startswith("config"))
    assert "num-rounds=1" in line and "groups" not in line
    assert not any(f"{group}." in line for group in ("chains", "hosfl", "fedshard", "safe", "hf"))
    info = json.loads(runner.invoke(app, ["status", "--store", str(tmp_path / "s"), "--json"]).output)
    assert info["config"]["num-rounds"] == 1 and not any("groups" in k or "." in k for k in info["config"])


def test_status_names_a_chain_methods_changed_keys_by_their_grouped_names():
    """The grouped names are what a user passes back with --run-config."""
    from fedforget.core.config import RunConfig
    from fedforget.unlearning.status import non_default_config

    stored = RunConfig(method="fedsgt", task="digits-mlp").with_keys({"chains.groups": 3, "chains.budget": 2}).to_dict()
    assert non_default_config(stored) == {"chains.groups": 3, "chains.budget": 2}


def test_retrain_of_a_store_with_flat_keys_submits_keys_flower_accepts(tmp_path):
    """``flwr run`` rejects unknown keys, so a flat-key store must retrain with grouped keys."""
    import tomllib

    from flwr.common.config import flatten_dict, fuse_dicts, parse_config_args

    from fedforget.inprocess import PYPROJECT, default_run_config
    from fedforget.unlearning.retrain import retrain_run_config

    store = train_in_process(tmp_path / "s", **{"num-rounds": 1})
    _write_flat_keys(store)
    text = retrain_run_config(store)
    assert "hf-model" not in text and "coarse" not in text
    flat_defaults = flatten_dict(tomllib.loads(PYPROJECT.read_text())["tool"]["flwr"]["app"]["config"])
    fused = fuse_dicts(flat_defaults, parse_config_args([text]))  # raises on a key Flower does not know
    assert fused["num-rounds"] == 1 and set(fused) == set(default_run_config())


def test_run_with_a_key_of_another_method_exits_2_with_one_line(tmp_path):
    """The default method fedavg reads no chain keys; a changed one is a mistake to report before Flower starts."""
    result = runner.invoke(app, ["run", "--store", str(tmp_path / "new"), "--run-config", "chains.groups=3"])
    assert result.exit_code == 2
    lines = (result.stderr or result.output).strip().splitlines()
    assert len(lines) == 1 and "'chains.groups' does not apply to method 'fedavg'" in lines[0]
    assert not (tmp_path / "new").exists()


def test_run_submits_a_flat_key_under_its_grouped_name_with_a_warning(capsys):
    """A flat name on the command line still works; Flower itself only knows the grouped keys."""
    from fedforget.core import config
    from fedforget.unlearning.run_config import check_run_config

    config._WARNED.discard("groups")
    text = check_run_config("method='fedsgt' groups=4")  # 4 groups: 24 orders, room for the default budget of 10
    assert text == 'method="fedsgt" chains.groups=4'
    assert "'groups' is now 'chains.groups'" in capsys.readouterr().err
    assert check_run_config("method='fedsgt' chains.groups=4") == "method='fedsgt' chains.groups=4"


def _starting_from(initial: ArrayRecord) -> ServerApp:
    """A user's ServerApp that hands ``initial`` to the strategy the run config names."""
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy_for(context.run_config).start(grid=grid, initial_arrays=initial)

    return server


def test_status_shows_the_initial_arrays_training_started_from_and_none_for_a_seeded_start(tmp_path):
    seeded = train_in_process(tmp_path / "seeded", **{"num-rounds": 1})
    info = json.loads(runner.invoke(app, ["status", "--store", str(seeded.root), "--json"]).output)
    assert info["initial_arrays"] is None
    assert "initial arrays" not in runner.invoke(app, ["status", "--store", str(seeded.root)]).output

    cfg = strategy_for({**DIGITS, "num-rounds": 1}).config
    state = build_model(cfg, 10).initial_state
    initial = ArrayRecord({name: Array(t.numpy() + np.float32(0.01)) for name, t in state.items()})
    run_in_process({**DIGITS, "num-rounds": 1, "store": str(tmp_path / "mine")}, 3, server_app=_starting_from(initial))
    sha = Store.open(tmp_path / "mine").manifest()[INITIAL_ARRAYS]
    info = json.loads(runner.invoke(app, ["status", "--store", str(tmp_path / "mine"), "--json"]).output)
    assert info["initial_arrays"] == sha and len(sha) == 64
    text = runner.invoke(app, ["status", "--store", str(tmp_path / "mine")]).output.replace("\n", "")
    assert f"initial arrays sha256 {sha[:16]}…" in text and sha not in text
