"""Every shipped task is a ``fedforget.client.Task``, the class a user writes, and loads as it did before it was
one: the same sizes, classes, input column and forms, trained parameters and (for the backbone fedforget pretrains)
the same weights hash, source and copy in the store. The fields the shipped tasks use are on the one class: a task
with its own public data (a shipped task's only: an app's task with one is refused in one line), and a user's too,
a backbone built from the run config, its width and LoRA targets read from the built module, its own weights
hash."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from torch import nn

from fedforget.client import Task
from fedforget.core.config import TASKS as CONFIG_TASKS
from fedforget.core.config import ConfigError, HfConfig, RunConfig
from fedforget.tasks.base import Examples, TaskData
from fedforget.tasks.builtin_vision import scale_raw_digits
from fedforget.tasks.local_records import NodeDataError, input_column
from fedforget.tasks.pretrained import pretrained_path
from fedforget.tasks.registry import TASKS, get_task

#: What each shipped task's loaded form held before the shipped tasks were Tasks: default train and test sizes,
#: classes (0: read from the data), the column a node's records hold its inputs in ("": none), whether it encodes
#: text, scales raw rows, names its pool's ids without reading it.
WAS = {
    "digits-mlp": (0, 0, 10, "pixels", False, True, True),
    "digits-mlp-val": (0, 0, 10, "pixels", False, True, True),
    "digits-mlp-perm": (0, 0, 10, "pixels", False, True, True),
    "digits-mlp-perm-val": (0, 0, 10, "pixels", False, True, True),
    "fmnist-cnn": (0, 0, 10, "pixels", False, True, True),
    "fmnist-effnet": (3000, 1000, 10, "", False, False, True),
    "rt-minilm": (4000, 1000, 2, "text", True, False, True),
    "fortunes-minilm": (4000, 1000, 0, "text", True, False, True),
    "rt-smollm": (2000, 500, 2, "text", True, False, True),
    "rt-smollm-val": (2000, 400, 2, "text", True, False, True),
    "hf": (0, 0, 0, "", False, False, False),
}


def _column(name: str) -> str:
    try:
        return input_column(get_task(name))
    except NodeDataError:
        return ""


def test_every_shipped_task_is_a_public_task_and_loads_through_its_spec():
    assert set(TASKS) == set(CONFIG_TASKS) == set(WAS)
    for name, task in TASKS.items():
        assert type(task) is Task and task.name == name
        assert get_task(name) is task.spec  # one loaded form, built once


@pytest.mark.parametrize("name", sorted(WAS))
def test_a_shipped_tasks_loaded_form_is_what_it_was(name):
    spec = get_task(name)
    now = (spec.default_train_size, spec.default_test_size, spec.num_classes, _column(name),
           spec.encode_text is not None, spec.scale_raw is not None, spec.train_ids is not None)
    assert (spec.name, now) == (name, WAS[name])
    assert (spec.trains, spec.input_columns, spec.simulation_data, spec.notes) == ("lora", (), "", {})
    assert spec.loss is None and spec.metric is None


def test_digits_raw_pixels_and_pool_ids_are_the_loaders():
    spec = get_task("digits-mlp")
    raw = np.random.default_rng(0).integers(0, 17, size=(3, 8, 8)).astype(np.float64)
    assert np.array_equal(spec.scale_raw(raw), scale_raw_digits(raw))
    cfg = RunConfig(task="digits-mlp", train_size=300, test_size=50)
    assert np.array_equal(np.sort(spec.train_ids(cfg)), np.sort(spec.load_data(cfg).train.ids.numpy()))


def test_the_backbone_fedforget_pretrains_keeps_its_file_hash_source_and_store_copy():
    backbone = get_task("digits-mlp").load_backbone(RunConfig(task="digits-mlp"), 1)
    file_sha = hashlib.sha256(pretrained_path("digits-mlp").read_bytes()).hexdigest()
    assert (backbone.feature_dim, backbone.lora_targets, backbone.weights_sha256, backbone.source,
            backbone.project_trained) == (64, ["fc1", "fc2"], file_sha, "MLP pretrained on MNIST (8x8) by fedforget",
                                          True)


def _pool(cfg: RunConfig) -> TaskData:
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    import torch

    rows = Examples((torch.from_numpy(x),), torch.tensor([0, 1, 2, 0, 1, 2]), torch.arange(6))
    return TaskData(train=rows, test=rows.subset([0, 1]), num_classes=3)


class Widened(nn.Module):
    """A backbone whose width is known once built, as a Hub model's."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(4, width)
        self.feature_dim = width

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(x)


def test_a_users_backbone_may_read_the_run_config_and_describe_itself_once_built():
    built_for: list[str] = []

    def backbone(cfg: RunConfig) -> nn.Module:
        built_for.append(cfg.hf.model)
        return Widened(6)

    task = Task("own", backbone=backbone, feature_dim=0, lora_targets=lambda module: ["fc"], num_classes=3,
                source=lambda cfg: f"widened {cfg.hf.model}", weights_sha256=lambda module: "f" * 64,
                project_trained=False, notes={"why": "a test"})
    got = task.spec.load_backbone(RunConfig(task="own", tables=(HfConfig(model="m1"),)), 1)
    assert built_for == ["m1"]
    assert (got.feature_dim, got.lora_targets, got.weights_sha256, got.source, got.project_trained) == \
        (6, ["fc"], "f" * 64, "widened m1", False)
    assert task.spec.notes == {"why": "a test"}


def test_a_task_with_public_data_reads_no_node_records_and_takes_its_classes_from_the_data():
    task = Task("pool", backbone=lambda: Widened(6), feature_dim=0, lora_targets=["fc"], num_classes=0,
                input_column="", data=_pool, default_train_size=6, train_ids=lambda cfg: np.arange(6))
    assert task.spec.load_data(RunConfig(task="pool")).num_classes == 3 and task.spec.default_train_size == 6
    assert task.spec.scale_raw is None and task.spec.encode_text is None
    with pytest.raises(NodeDataError, match="reads no node-owned records"):
        input_column(task.spec)


def test_a_users_app_task_with_public_data_is_refused_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "pooled_app.py").write_text(
        "import numpy as np\nfrom torch import nn\nfrom fedforget.client import Task\n"
        "TASK = Task('p', backbone=lambda: nn.Linear(2, 4), feature_dim=4, lora_targets=['x'], num_classes=2,\n"
        "            data=lambda cfg: None)\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="drop data=") as refused:
        get_task("pooled_app:TASK")
    assert "\n" not in str(refused.value)


def test_a_users_backbone_without_an_argument_is_called_bare_and_hashed_over_its_state():
    task = Task("own", backbone=lambda: nn.Linear(2, 4), feature_dim=4, lora_targets=["x"], num_classes=2)
    got = task.spec.load_backbone(RunConfig(task="own"), 1)
    assert got.project_trained and len(got.weights_sha256) == 64 and got.source == "own: the app's own backbone"


@pytest.mark.parametrize(("keys", "message"), [
    ({"num_classes": 0}, "num_classes >= 2"),  # classes read from the data need data
    ({"input_column": ""}, "input_column"),  # reading no node records needs public data
    ({"train_ids": lambda cfg: np.arange(2)}, "Task\\(data=...\\)"),
    ({"default_test_size": 10}, "Task\\(data=...\\)"),
    ({"data": _pool, "default_train_size": -1}, "row counts"),
    ({"data": "pool.csv"}, "must be a function"),
    ({"feature_dim": -1}, "feature_dim >= 1"),
])
def test_public_data_fields_without_their_data_are_refused_at_definition(keys, message):
    base = {"name": "t", "backbone": lambda: nn.Linear(2, 4), "feature_dim": 4, "lora_targets": ["x"],
            "num_classes": 2}
    with pytest.raises((TypeError, ValueError), match=message):
        Task(**{**base, **keys})


def test_feature_dim_zero_needs_a_module_that_reports_its_width():
    task = Task("t", backbone=lambda: nn.Linear(2, 4), feature_dim=0, lora_targets=["x"], num_classes=2)
    with pytest.raises(ValueError, match="give Task\\(feature_dim=...\\)"):
        task.spec.load_backbone(RunConfig(task="t"), 1)
