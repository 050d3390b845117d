"""A user task may read a record's inputs from a column per number (``Task(input_columns=[...])``): CSV, Parquet
and ``save_to_disk`` files are read into the same rows as the one-column form, stacked in the listed order, and
a file with a missing column, a value that is not a number, a missing value or a non-finite one is refused in
one NodeDataError line naming the file, the column and the row. A Task that names its columns wrongly is
refused when it is defined."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from fedforget.client import Task
from fedforget.core.config import parse_run_config
from fedforget.tasks.local_records import NodeDataError, read_file_rows, read_local_records

NODE = "node-2"
COLUMNS = [f"f{i}" for i in range(5)]
APP = """
from torch import nn
from fedforget.client import Task

def make():
    return nn.Sequential(nn.Linear(5, 8))

COLUMNS = Task(name="cols", backbone=make, feature_dim=8, lora_targets=["0"], num_classes=3,
               input_columns={columns!r})
LIST = Task(name="list", backbone=make, feature_dim=8, lora_targets=["0"], num_classes=3)
"""


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh module (loaded tasks are cached by reference) with a column-per-number and a one-column Task."""
    name = f"colsapp_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP.format(columns=COLUMNS)))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def records(n: int = 6, seed: int = 0) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    values = np.round(rng.normal(size=(n, len(COLUMNS))), 3)
    return {"record_id": [f"r{i}" for i in range(n)], "label": [int(v) for v in rng.integers(0, 3, n)],
            **{c: values[:, j].tolist() for j, c in enumerate(COLUMNS)}}


def csv_text(data: dict[str, list], order: list[str] | None = None) -> str:
    header = ["record_id", "label", *(order or COLUMNS)]
    lines = [",".join(header)] + [",".join(str(data[h][i]) for h in header) for i in range(len(data["record_id"]))]
    return "\n".join(lines) + "\n"


def write(folder: Path, name: str, content: str | pa.Table) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        (folder / name).write_text(content, encoding="utf-8")
    else:
        pq.write_table(content, folder / name)
    return folder


def read(folder: Path, task: str, split: str = "train") -> object:
    return read_local_records(folder, parse_run_config({"task": task}), NODE, 3, split=split)


def refused(folder: Path, task: str, *words: str) -> str:
    with pytest.raises(NodeDataError) as info:
        read(folder, task)
    message = str(info.value)
    assert "\n" not in message and NODE in message, message
    for word in words:
        assert word in message, message
    return message


def test_a_csv_with_a_column_per_number_reads_as_the_one_column_form(tasks, tmp_path):
    data = records(8)
    shuffled = [COLUMNS[i] for i in (3, 0, 4, 1, 2)]  # the file's own column order does not matter
    columns = read(write(tmp_path / "c", "train.csv", csv_text(data, shuffled)), f"{tasks}:COLUMNS")
    packed = {"record_id": data["record_id"], "label": data["label"],
              "features": [[data[c][i] for c in COLUMNS] for i in range(8)]}
    one = read(write(tmp_path / "p", "train.parquet", pa.table(packed)), f"{tasks}:LIST")
    assert columns.record_ids == one.record_ids and columns.digests == one.digests
    assert torch.equal(columns.examples.inputs[0], one.examples.inputs[0])
    assert torch.equal(columns.examples.labels, one.examples.labels)
    assert columns.examples.inputs[0].dtype == torch.float32 and columns.examples.inputs[0].shape == (8, 5)


def test_parquet_integer_and_float_columns_and_a_save_to_disk_folder_read_as_the_csv_does(tasks, tmp_path):
    import datasets

    data = records(7)
    data["f1"] = [int(v * 100) for v in data["f1"]]  # an integer column beside float ones
    from_csv = read(write(tmp_path / "c", "train.csv", csv_text(data)), f"{tasks}:COLUMNS")
    table = pa.table({**data, "f1": pa.array(data["f1"], pa.int32()), "notes": ["x"] * 7})  # an unrelated column
    from_parquet = read(write(tmp_path / "p", "train.parquet", table), f"{tasks}:COLUMNS")
    datasets.Dataset.from_dict(data).save_to_disk(str(tmp_path / "s" / "train"))
    saved = read(tmp_path / "s", f"{tasks}:COLUMNS")
    for other in (from_parquet, saved):
        assert other.digests == from_csv.digests
        assert torch.equal(other.examples.inputs[0], from_csv.examples.inputs[0])


def test_rows_are_stacked_in_the_listed_order_for_the_server_as_in_the_file(tasks, tmp_path):
    data = records(4)
    rows = read_file_rows(write(tmp_path / "s", "test.csv", csv_text(data)), parse_run_config(
        {"task": f"{tasks}:COLUMNS"}), "server", 3, split="test")
    assert rows.record_ids == data["record_id"] and rows.raw.dtype == np.float64
    assert np.array_equal(rows.raw, np.array([[data[c][i] for c in COLUMNS] for i in range(4)]))


def test_spaces_around_csv_numbers_and_exponents_are_numbers(tasks, tmp_path):
    text = "record_id,label,f0,f1,f2,f3,f4\na,0, 1 ,2e-3,-4,+5,.5\n"
    got = read(write(tmp_path / "c", "train.csv", text), f"{tasks}:COLUMNS")
    assert got.examples.inputs[0].tolist() == [[1.0, pytest.approx(0.002), -4.0, 5.0, 0.5]]


# --- refused, in one line naming the file, the column and the row ---------------------------------------------

def test_a_missing_column_is_named_with_the_file(tasks, tmp_path):
    data = records(3)
    del data["f3"]
    header = ["record_id", "label", "f0", "f1", "f2", "f4"]
    text = "\n".join([",".join(header)] + [",".join(str(data[h][i]) for h in header) for i in range(3)]) + "\n"
    folder = write(tmp_path / "c", "train.csv", text)
    refused(folder, f"{tasks}:COLUMNS", str(folder / "train.csv"), "has no column f3")


@pytest.mark.parametrize(("value", "words"), [
    ("abc", ["row 3", "column 'f2'", "'abc'", "not a number"]),
    ("", ["row 3", "column 'f2'", "has no value"]),
    ("1,5", ["row 3", "column 'f2'"]),  # a quoted decimal comma
    ("nan", ["row 3", "column 'f2'", "not a finite number"]),
    ("inf", ["row 3", "column 'f2'", "not a finite number"]),
])
def test_a_csv_value_that_is_not_a_finite_number_is_named_by_row_and_column(tasks, tmp_path, value, words):
    data = records(5)
    text = csv_text(data).splitlines()
    cells = text[3].split(",")
    cells[4] = f'"{value}"' if "," in value else value
    text[3] = ",".join(cells)
    folder = write(tmp_path / "c", "train.csv", "\n".join(text) + "\n")
    refused(folder, f"{tasks}:COLUMNS", str(folder / "train.csv"), *words)


def test_a_null_in_a_parquet_column_is_named_by_row_and_column(tasks, tmp_path):
    data = records(5)
    data["f4"][1] = None
    folder = write(tmp_path / "p", "train.parquet", pa.table(data))
    refused(folder, f"{tasks}:COLUMNS", str(folder / "train.parquet"), "row 2", "column 'f4'", "null")


def test_a_parquet_column_of_text_is_parsed_and_a_word_in_it_named(tasks, tmp_path):
    data = records(4)
    good = read(write(tmp_path / "n", "train.parquet", pa.table(data)), f"{tasks}:COLUMNS")
    as_text = read(write(tmp_path / "t", "train.parquet", pa.table({**data, "f0": [str(v) for v in data["f0"]]})),
                   f"{tasks}:COLUMNS")
    assert as_text.digests == good.digests
    data["f0"] = [str(v) for v in data["f0"]]
    data["f0"][3] = "n/a"
    refused(write(tmp_path / "w", "train.parquet", pa.table(data)), f"{tasks}:COLUMNS", "row 4", "column 'f0'",
            "'n/a'")


def test_a_column_of_another_type_is_refused_naming_it(tasks, tmp_path):
    data = records(3)
    data["f1"] = [True, False, True]
    refused(write(tmp_path / "p", "train.parquet", pa.table(data)), f"{tasks}:COLUMNS", "column 'f1'", "bool")


def test_a_refused_file_trains_nothing_the_records_after_it_are_not_read(tasks, tmp_path):
    """The row named is the first bad one, however many follow."""
    data = records(10_000)
    data["f0"][7_000] = "x"
    data["f0"][9_000] = "y"
    folder = write(tmp_path / "c", "train.csv", csv_text(data))
    refused(folder, f"{tasks}:COLUMNS", "row 7001", "'x'")


# --- the Task --------------------------------------------------------------------------------------------------

def _task(**kw: object) -> Task:
    from torch import nn

    return Task(name="t", backbone=lambda: nn.Linear(2, 2), feature_dim=2, lora_targets=["x"], num_classes=2,
                **kw)  # type: ignore[arg-type]


def test_the_task_keeps_its_columns_in_order_and_its_spec_carries_them():
    task = _task(input_columns=["b", "a", "c"])
    assert task.input_columns == ("b", "a", "c")
    assert task.spec.input_columns == ("b", "a", "c") and task.spec.input_column == ""
    assert _task().spec.input_columns == () and _task().spec.input_column == "features"


@pytest.mark.parametrize(("kw", "message"), [
    ({"input_columns": "f0"}, "names a record's input columns"),
    ({"input_columns": ["f0", ""]}, "names a record's input columns"),
    ({"input_columns": ["f0", 1]}, "names a record's input columns"),
    ({"input_columns": ["f0", "f0"]}, "names 'f0' twice"),
    ({"input_columns": ["f0", "label"]}, "names 'label', which is not an input column"),
    ({"input_columns": ["record_id"]}, "names 'record_id'"),
    ({"input_columns": ["text"]}, "names 'text'"),
    ({"input_columns": ["f0"], "input_column": "values"}, "not both"),
])
def test_a_task_that_names_its_columns_wrongly_is_refused_in_one_line(kw, message):
    with pytest.raises(ValueError, match=message) as info:
        _task(**kw)
    assert "\n" not in str(info.value)
