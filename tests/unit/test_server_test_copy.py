"""A test-only copy is used only when it is whole and is the key's own; anything else reads as absent."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from fedforget.core.config import ConfigError, RunConfig, parse_run_config
from fedforget.tasks import server_data
from fedforget.tasks.server_data import META, TENSORS, copy_key, read_copy

KEY = copy_key(RunConfig(task="digits-mlp"))


def _tensors(n: int = 5) -> dict[str, torch.Tensor]:
    return {"input.0": torch.rand(n, 64), "labels": torch.arange(n, dtype=torch.int64) % 3,
            "ids": torch.arange(n, dtype=torch.int64) * 7}


def _write(folder: Path, tensors: dict[str, torch.Tensor], key: dict[str, object] = KEY, num_classes: object = 3,
           **meta_over: object) -> bytes:
    folder.mkdir(parents=True, exist_ok=True)
    blob = save(tensors)
    (folder / TENSORS).write_bytes(blob)
    meta = {"key": key, "num_classes": num_classes, "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(),
            "strides": {name: list(t.stride()) for name, t in tensors.items()}, **meta_over}
    (folder / META).write_text(json.dumps(meta), encoding="utf-8")
    return blob


def test_a_whole_copy_of_the_key_reads_back_as_written(tmp_path: Path) -> None:
    tensors = _tensors()
    _write(tmp_path, tensors)
    got = read_copy(tmp_path, KEY)
    assert got is not None and got.num_classes == 3  # the negative control of every refusal below
    assert torch.equal(got.examples.inputs[0], tensors["input.0"])
    assert torch.equal(got.examples.ids, tensors["ids"]) and torch.equal(got.examples.labels, tensors["labels"])


def test_an_absent_copy_reads_as_absent(tmp_path: Path) -> None:
    assert read_copy(tmp_path / "nothing", KEY) is None


def test_a_copy_of_another_key_is_not_used(tmp_path: Path) -> None:
    _write(tmp_path, _tensors(), key=copy_key(RunConfig(task="digits-mlp", test_size=100)))
    assert read_copy(tmp_path, KEY) is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "empty"])
def test_a_torn_tensor_file_is_not_used(tmp_path: Path, damage: str) -> None:
    blob = _write(tmp_path, _tensors())
    path = tmp_path / TENSORS
    if damage == "flip":
        path.write_bytes(blob[:-3] + bytes([blob[-3] ^ 1]) + blob[-2:])
    elif damage == "truncate":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "extend":
        path.write_bytes(blob + b"\0")
    else:
        path.write_bytes(b"")
    assert read_copy(tmp_path, KEY) is None


@pytest.mark.parametrize("meta", ["{", "[]", "null", '{"key": 1}', "\xff", ""])
def test_an_unreadable_description_is_not_used(tmp_path: Path, meta: str) -> None:
    _write(tmp_path, _tensors())
    (tmp_path / META).write_text(meta, encoding="latin-1")
    assert read_copy(tmp_path, KEY) is None


def test_a_huge_description_is_not_read(tmp_path: Path) -> None:
    _write(tmp_path, _tensors())
    (tmp_path / META).write_bytes(b" " * (server_data.MAX_META_BYTES + 1))
    assert read_copy(tmp_path, KEY) is None


I64 = torch.int64


@pytest.mark.parametrize("tensors", [
    {"input.0": torch.rand(3, 2), "labels": torch.zeros(3, dtype=I64)},  # no ids
    {"input.0": torch.rand(3, 2), "labels": torch.zeros(3, dtype=I64), "ids": torch.zeros(3),},  # float ids
    {"input.0": torch.rand(3, 2), "labels": torch.zeros(3, dtype=torch.int32), "ids": torch.zeros(3, dtype=I64)},
    {"input.0": torch.rand(2, 2), "labels": torch.zeros(3, dtype=I64), "ids": torch.zeros(3, dtype=I64)},
    {"input.1": torch.rand(3, 2), "labels": torch.zeros(3, dtype=I64), "ids": torch.zeros(3, dtype=I64)},
    {"labels": torch.zeros(3, dtype=I64), "ids": torch.zeros(3, dtype=I64)},
    {"input.0": torch.rand(3, 2), "labels": torch.full((3,), 3, dtype=I64),
     "ids": torch.zeros(3, dtype=I64)},  # a label outside num_classes=3
    {"input.0": torch.rand(3, 2), "labels": torch.full((3,), -1, dtype=I64),
     "ids": torch.zeros(3, dtype=I64)},
], ids=["no-ids", "float-ids", "int32-labels", "short-input", "input-gap", "no-input", "label-high", "label-neg"])
def test_a_digest_true_copy_that_is_not_a_test_split_is_not_used(tmp_path: Path, tensors: dict) -> None:
    _write(tmp_path, tensors)
    assert read_copy(tmp_path, KEY) is None


@pytest.mark.parametrize("num_classes", [0, -1, True, 2.5, "10", None])
def test_a_copy_with_a_bad_class_count_is_not_used(tmp_path: Path, num_classes: object) -> None:
    _write(tmp_path, {"input.0": torch.rand(3, 2), "labels": torch.zeros(3, dtype=torch.int64),
                      "ids": torch.zeros(3, dtype=torch.int64)}, num_classes=num_classes)
    assert read_copy(tmp_path, KEY) is None


@pytest.mark.parametrize("size", [0, -1, 10**13, "12", None])
def test_a_copy_that_claims_an_impossible_size_is_not_read(tmp_path: Path, size: object) -> None:
    _write(tmp_path, _tensors(), bytes=size)
    assert read_copy(tmp_path, KEY) is None


def test_a_copy_keeps_the_layout_the_loader_gave_its_tensors(tmp_path: Path) -> None:
    """A (N, 1, H, W) batch whose channel stride is 1 reads as channels-last to convolutions."""
    images = torch.rand(4, 1, 3, 3).as_strided((4, 1, 3, 3), (9, 1, 3, 1))
    tensors = {"input.0": images, "labels": torch.zeros(4, dtype=I64), "ids": torch.arange(4)}
    _write(tmp_path, {k: v.contiguous() for k, v in tensors.items()},
           strides={k: list(v.stride()) for k, v in tensors.items()})
    got = read_copy(tmp_path, KEY)
    assert got is not None and got.examples.inputs[0].stride() == (9, 1, 3, 1)
    assert torch.equal(got.examples.inputs[0], images)


@pytest.mark.parametrize("strides", [None, [], {"input.0": [64, 1]}, "x",
                                     {"input.0": [1, 1], "labels": [1], "ids": [1]},  # overlapping rows
                                     {"input.0": [64, 2], "labels": [1], "ids": [1]},  # gaps
                                     {"input.0": [64, -1], "labels": [1], "ids": [1]},
                                     {"input.0": [64], "labels": [1], "ids": [1]},
                                     {"input.0": [64, True], "labels": [1], "ids": [1]}])
def test_a_copy_with_impossible_strides_is_not_used(tmp_path: Path, strides: object) -> None:
    _write(tmp_path, _tensors(), strides=strides)
    assert read_copy(tmp_path, KEY) is None


def test_the_key_names_what_the_test_split_depends_on_and_nothing_else() -> None:
    base = RunConfig(task="digits-mlp")
    assert copy_key(base) == copy_key(RunConfig(task="digits-mlp", seed=9, num_rounds=7, train_size=300,
                                                partitioner="iid"))
    assert copy_key(base) != copy_key(RunConfig(task="digits-mlp", test_size=100))
    assert copy_key(base) != copy_key(RunConfig(task="digits-mlp-perm"))
    val = RunConfig(task="rt-smollm-val")
    assert copy_key(val) != copy_key(val.with_keys({"train-size": 500}))  # its validation rows come from train-size
    hf = RunConfig(task="hf").with_keys({"hf.dataset": "a", "hf.model": "m"})
    for key, value in (("hf.dataset", "b"), ("hf.model", "n"), ("hf.input-column", "x"), ("hf.label-column", "y")):
        assert copy_key(hf) != copy_key(hf.with_keys({key: value}))


@pytest.mark.parametrize("bad", ["   ", "a\nb", "x\0y", "d\x7f", "p" * 5000])
def test_a_test_data_value_that_is_no_path_is_refused_in_one_line(bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_run_config({"task": "digits-mlp", "test-data": bad})
    assert "test-data" in str(err.value) and "\n" not in str(err.value) and len(str(err.value)) < 300


def test_test_data_defaults_to_the_tasks_own_test_split() -> None:
    assert parse_run_config({"task": "digits-mlp"}).test_data == ""
    assert parse_run_config({"task": "digits-mlp", "test-data": "/data/server"}).test_data == "/data/server"
