"""The run-config key ``node-data`` says where a node with no ``data-dir`` in its node config (the simulation
engine's) finds its records, in place of the task's own ``simulation_data``: ``{partition}`` replaced by the
node's partition, a relative path anchored like ``test-data`` (``FEDFORGET_HOME``, else the working directory;
``fedforget run`` passes it absolute against the app's directory). A value without ``{partition}`` is refused
in one line."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from fedforget.core.config import ConfigError, declared_defaults, parse_run_config
from fedforget.federation.app_home import relative_paths
from fedforget.federation.client_site import simulated_data_dir
from fedforget.unlearning.run_app import plan_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tabular-mlp"
APP = """
from torch import nn
from fedforget.client import Task

TASK = Task(name="mine", backbone=lambda: nn.Linear(2, 4), feature_dim=4, lora_targets=["x"], num_classes=2,
            simulation_data="task-data/node-{partition}")
"""


@pytest.fixture
def user_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"nodedata_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:TASK"


def test_node_data_is_unset_by_default():
    assert declared_defaults()["node-data"] == "" and parse_run_config({}).node_data == ""


@pytest.mark.parametrize(("value", "message"), [
    ("data/node", r"run-config 'node-data'='data/node' needs '\{partition\}' in it"),
    ("data/node-{part}", r"needs '\{partition\}'"),
    (" ", "run-config 'node-data' must be a directory path"),
    ("data/\nnode-{partition}", "no control characters"),
])
def test_a_node_data_value_that_is_no_directory_per_partition_is_refused_in_one_line(value, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_run_config({"node-data": value})
    assert "\n" not in str(info.value)


def test_node_data_is_read_in_place_of_the_tasks_own_and_anchored_like_test_data(user_task, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path / "home"))
    task_own = parse_run_config({"task": user_task})
    assert simulated_data_dir(task_own, 1) == tmp_path / "home" / "task-data" / "node-1"
    configured = parse_run_config({"task": user_task, "node-data": "records/site-{partition}/current"})
    assert simulated_data_dir(configured, 2) == tmp_path / "home" / "records" / "site-2" / "current"
    absolute = parse_run_config({"task": user_task, "node-data": str(tmp_path / "abs" / "{partition}")})
    assert simulated_data_dir(absolute, 0) == tmp_path / "abs" / "0"


def test_a_shipped_task_reads_node_data_too_and_its_public_share_without_it(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path))
    assert simulated_data_dir(parse_run_config({"task": "digits-mlp"}), 0) is None
    cfg = parse_run_config({"task": "digits-mlp", "node-data": "split/node-{partition}"})
    assert simulated_data_dir(cfg, 3) == tmp_path / "split" / "node-3"


def test_a_relative_node_data_is_checked_against_the_apps_directory_on_the_simulation_engine(user_task):
    cfg = parse_run_config({"task": user_task, "store": "/abs/store", "node-data": "records/{partition}"})
    assert relative_paths(cfg, with_simulation_data=True) == [("run-config 'node-data'", "records/{partition}")]
    assert relative_paths(cfg, with_simulation_data=False) == []  # SuperNodes name their data-dir
    own = parse_run_config({"task": user_task, "store": "/abs/store"})
    assert relative_paths(own, with_simulation_data=True) == [(f"{user_task}'s simulation_data",
                                                               "task-data/node-{partition}")]


def test_fedforget_run_passes_node_data_absolute_against_the_apps_directory(tmp_path, monkeypatch):
    app = Path(shutil.copytree(EXAMPLE, tmp_path / "userapp", ignore=shutil.ignore_patterns("runs", "__pycache__")))
    pyproject = app / "pyproject.toml"
    declared = 'test-data = "data/server"'
    pyproject.write_text(pyproject.read_text().replace(declared, declared + '\nnode-data = "data/node-{partition}"'))
    monkeypatch.setenv("FEDFORGET_HOME", str(app))
    planned = plan_run(None, "", "fake", "", app)
    assert f'node-data="{app / "data" / "node-{partition}"}"' in planned.run_config
    given = plan_run(None, "", "fake", "node-data='other/{partition}'", app)
    assert f'node-data="{app / "other" / "{partition}"}"' in given.run_config
