"""A run config's task may name a task of the user's own app as '<module>:<ATTRIBUTE>': a parse checks its form
and imports nothing; loading it imports the module and refuses, in one line, what is not a fedforget Task."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from fedforget.client import Task
from fedforget.core.config import ConfigError, is_user_task, parse_run_config
from fedforget.tasks.local_records import input_column
from fedforget.tasks.registry import get_task

GOOD = """
from torch import nn
from fedforget.client import Task

def make():
    return nn.Sequential(nn.Linear(4, 8))

TASK = Task(name="mine", backbone=make, feature_dim=8, lora_targets=["0"], num_classes=3)
NOT_A_TASK = 42
"""


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh module name on sys.path holding GOOD (unique per test: loaded tasks are cached by reference)."""
    name = f"userapp_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(GOOD))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize("task", ["mlpapp.task:TASK", "a:B", "pkg_1.sub._x:_T2"])
def test_a_module_attribute_reference_is_a_user_task_and_parses_without_importing(task):
    cfg = parse_run_config({"task": task})
    assert cfg.task == task and is_user_task(task)
    assert task.partition(":")[0] not in sys.modules


@pytest.mark.parametrize("task", ["mlpapp.task", "mlpapp.task:", ":TASK", "mlp app:TASK", "a:b:c", "1mod:TASK",
                                  "a..b:TASK", "a:TASK()", "x" * 250 + ":T", "digits"])
def test_anything_else_is_refused_naming_both_forms(task):
    with pytest.raises(ConfigError, match=r"run-config 'task'=.* is not one of: .*digits-mlp.*'<module>:<ATTRIBUTE>'"):
        parse_run_config({"task": task})


def test_the_shipped_tasks_still_parse_and_load_as_before():
    assert parse_run_config({"task": "digits-mlp"}).task == "digits-mlp"
    assert get_task("digits-mlp").name == "digits-mlp" and input_column(get_task("digits-mlp")) == "pixels"


def test_a_user_task_loads_as_a_taskspec_named_by_its_reference(app_module):
    spec = get_task(f"{app_module}:TASK")
    assert spec.name == f"{app_module}:TASK"
    assert (spec.num_classes, spec.input_column, spec.encode_text) == (3, "features", None)
    backbone = spec.load_backbone(parse_run_config({"task": f"{app_module}:TASK"}), 1)
    assert backbone.feature_dim == 8 and backbone.lora_targets == ["0"] and len(backbone.weights_sha256) == 64


def test_a_module_that_cannot_be_imported_is_one_config_error_line():
    refusal = r"cannot import 'no_such_module_here' \(ModuleNotFoundError.*PYTHONPATH"
    with pytest.raises(ConfigError, match=refusal) as exc:
        get_task("no_such_module_here:TASK")
    assert "\n" not in str(exc.value)


def test_a_missing_attribute_or_a_non_task_is_refused(app_module):
    with pytest.raises(ConfigError, match="has no attribute 'MISSING'"):
        get_task(f"{app_module}:MISSING")
    with pytest.raises(ConfigError, match="holds a int, not a fedforget.client.Task"):
        get_task(f"{app_module}:NOT_A_TASK")


def test_a_module_that_raises_on_import_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_userapp.py").write_text("raise RuntimeError('boom\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"RuntimeError: boom second line") as exc:
        get_task("broken_userapp:TASK")
    assert "\n" not in str(exc.value)


def test_a_user_task_has_no_public_data_and_says_where_records_go(app_module):
    cfg = parse_run_config({"task": f"{app_module}:TASK"})
    with pytest.raises(ConfigError, match="data-dir=.*test-data"):
        get_task(cfg.task).load_data(cfg)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"lora_targets": "fc1"}, "lora_targets"), ({"lora_targets": []}, "lora_targets"),
    ({"num_classes": 1}, "num_classes"), ({"input_column": "label"}, "input_column"),
    ({"input_column": "text"}, "encode"), ({"simulation_data": "data/node"}, "{partition}"),
    ({"backbone": "not callable"}, "callable"),
])
def test_a_task_built_wrongly_is_refused_at_definition(kwargs, message):
    base = {"name": "t", "backbone": lambda: None, "feature_dim": 4, "lora_targets": ["fc"], "num_classes": 2}
    with pytest.raises((TypeError, ValueError), match=message):
        Task(**{**base, **kwargs})


def test_features_are_cast_to_float32_or_encoded_by_the_users_code():
    import numpy as np

    plain = Task(name="t", backbone=lambda: None, feature_dim=4, lora_targets=["fc"], num_classes=2)
    rows = np.array([[1.0, 2.0]])
    assert plain.spec.scale_raw(rows).dtype == np.float32
    doubled = Task(name="t", backbone=lambda: None, feature_dim=4, lora_targets=["fc"], num_classes=2,
                   encode=lambda r: (2 * r).astype(np.float32))
    assert doubled.spec.scale_raw(rows).tolist() == [[2.0, 4.0]]


@pytest.mark.parametrize("method", __import__("fedforget.core.config", fromlist=["METHODS"]).METHODS)
def test_every_method_parses_a_user_task_or_refuses_it_in_one_config_error(method):
    """A parse sizes a user task without importing it (like hf's); a method that needs a model it knows refuses."""
    try:
        cfg = parse_run_config({"task": "mlpapp.task:TASK", "method": method})
    except ConfigError as exc:
        assert "\n" not in str(exc)
    else:
        assert cfg.task == "mlpapp.task:TASK" and cfg.num_rounds >= 1
