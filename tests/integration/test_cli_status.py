import json

from typer.testing import CliRunner

from fedforget.unlearning.cli import app

from .helpers import served_sha, train_in_process

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
