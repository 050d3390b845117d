"""A node's own records: what the reader accepts (Parquet, CSV with or without a BOM, save_to_disk) and every
way a data directory can be wrong, each refused with one NodeDataError line naming the node."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from fedforget.core.config import RunConfig
from fedforget.core.record_ids import local_sample_id
from fedforget.tasks import local_records
from fedforget.tasks.local_records import NodeDataError, read_local_records, read_record_index

DIGITS = RunConfig(task="digits-mlp")
NODE = "node-7"


def rows(n: int = 5, seed: int = 0) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    return {"record_id": [f"r{i}" for i in range(n)], "label": [int(v) for v in rng.integers(0, 10, n)],
            "pixels": [[int(v) for v in rng.integers(0, 17, 64)] for _ in range(n)]}


def write_parquet(folder: Path, data: dict[str, list] | pa.Table, name: str = "train.parquet") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    table = data if isinstance(data, pa.Table) else pa.table(data)
    pq.write_table(table, folder / name)
    return folder


def write_csv(folder: Path, text: str, name: str = "train.csv", bom: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return folder


def csv_text(data: dict[str, list]) -> str:
    lines = ["record_id,label,pixels"]
    lines += [f'{r},{y},"{" ".join(map(str, p))}"' for r, y, p in zip(data["record_id"], data["label"],
                                                                       data["pixels"], strict=True)]
    return "\n".join(lines) + "\n"


def read(folder: Path, **kw: object) -> local_records.LocalRecords:
    return read_local_records(folder, kw.pop("cfg", DIGITS), NODE, kw.pop("num_classes", 10), **kw)  # type: ignore[arg-type]


def refused(folder: Path, *words: str, **kw: object) -> str:
    with pytest.raises(NodeDataError) as info:
        read(folder, **kw)
    message = str(info.value)
    assert "\n" not in message and NODE in message, message
    for word in words:
        assert word in message, message
    return message


# --- what is read ---------------------------------------------------------------------------------------------

def test_parquet_records_come_in_sample_id_order_with_the_tasks_scaled_pixels(tmp_path):
    data = rows(20)
    got = read(write_parquet(tmp_path / "d", data))
    expected_ids = sorted(local_sample_id(NODE, r) for r in data["record_id"])
    assert got.examples.ids.tolist() == expected_ids
    assert [local_sample_id(NODE, r) for r in got.record_ids] == expected_ids
    row = {r: i for i, r in enumerate(data["record_id"])}
    for k, rid in enumerate(got.record_ids):
        pixels = np.asarray(data["pixels"][row[rid]], dtype=np.float64)
        assert torch.equal(got.examples.inputs[0][k], torch.from_numpy((pixels / 16.0).astype(np.float32)))
        assert int(got.examples.labels[k]) == data["label"][row[rid]]
    assert got.examples.labels.dtype == torch.int64 and got.examples.inputs[0].dtype == torch.float32
    assert set(got.digests) == set(data["record_id"])


def test_csv_with_and_without_a_bom_reads_as_the_parquet_does_and_keeps_record_ids_as_text(tmp_path):
    data = rows(12)
    data["record_id"][0] = "007"
    from_parquet = read(write_parquet(tmp_path / "p", data))
    plain = read(write_csv(tmp_path / "c", csv_text(data)))
    bom = read(write_csv(tmp_path / "b", csv_text(data), bom=True))
    lines = ["record_id,label,pixels"] + [f'{r},{y},"[{", ".join(map(str, p))}]"'
                                          for r, y, p in zip(data["record_id"], data["label"], data["pixels"],
                                                             strict=True)]
    bracketed = read(write_csv(tmp_path / "j", "\n".join(lines) + "\n"))
    for other in (plain, bom):
        assert other.record_ids == from_parquet.record_ids and "007" in other.record_ids
        assert torch.equal(other.examples.inputs[0], from_parquet.examples.inputs[0])
        assert torch.equal(other.examples.labels, from_parquet.examples.labels)
        assert other.digests == from_parquet.digests
    assert bracketed.digests == from_parquet.digests


def test_a_save_to_disk_directory_reads_as_the_parquet_does(tmp_path):
    import datasets

    data = rows(8)
    datasets.Dataset.from_dict(data).save_to_disk(str(tmp_path / "s" / "train"))
    assert read(tmp_path / "s").digests == read(write_parquet(tmp_path / "p", data)).digests


def test_the_test_split_is_read_from_its_own_file(tmp_path):
    folder = write_parquet(tmp_path / "d", rows(4, seed=1), name="test.parquet")
    write_parquet(folder, rows(6, seed=2))
    assert len(read(folder, split="test").record_ids) == 4 and len(read(folder).record_ids) == 6


def test_unicode_and_colons_in_record_ids_are_kept_as_written(tmp_path):
    data = rows(3)
    data["record_id"] = ["a:b:c", "café ☕", "x" * 256]
    assert sorted(read(write_parquet(tmp_path / "d", data)).record_ids) == sorted(data["record_id"])


def test_digests_change_for_the_record_that_changed_only(tmp_path):
    data = rows(6)
    before = read(write_parquet(tmp_path / "a", data)).digests
    data["label"][2] = (data["label"][2] + 1) % 10
    data["pixels"][4][0] = 16 - data["pixels"][4][0]
    after = read(write_parquet(tmp_path / "b", data)).digests
    assert {r for r in before if before[r] != after[r]} == {"r2", "r4"}


def test_a_hundred_thousand_records_read_in_seconds(tmp_path):
    n = 100_000
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 17, (n, 64)).astype(np.uint8)
    table = pa.table({"record_id": pa.array([f"rec-{i}" for i in range(n)]),
                      "label": pa.array(rng.integers(0, 10, n)),
                      "pixels": pa.FixedSizeListArray.from_arrays(pa.array(pixels.reshape(-1)), 64)})
    folder = write_parquet(tmp_path / "d", table)
    start = time.monotonic()
    got = read(folder)
    assert time.monotonic() - start < 30
    assert len(got.record_ids) == n and got.examples.inputs[0].shape == (n, 64)


def test_the_record_index_matches_the_full_read_and_needs_no_inputs_column(tmp_path):
    data = rows(30)
    full = read(write_parquet(tmp_path / "d", data))
    index = read_record_index(tmp_path / "d", NODE, 10)
    assert index.record_ids == full.record_ids and index.sample_ids.tolist() == full.examples.ids.tolist()
    assert index.labels.tolist() == full.examples.labels.tolist()
    del data["pixels"]
    assert read_record_index(write_parquet(tmp_path / "bare", data), NODE, 10).record_ids == full.record_ids
    data["record_id"][1] = data["record_id"][0]
    with pytest.raises(NodeDataError, match="appears twice"):
        read_record_index(write_parquet(tmp_path / "dup", data), NODE, 10)


def test_the_record_index_reads_without_torch_or_datasets(tmp_path):
    from tests.unit.test_client_app_imports import heavy_modules_after

    write_parquet(tmp_path / "d", rows(10))
    write_csv(tmp_path / "c", csv_text(rows(10)))
    code = f"""
        from fedforget.tasks.local_records import read_record_index
        assert len(read_record_index({str(tmp_path / "d")!r}, "node-1", 10).record_ids) == 10
        assert len(read_record_index({str(tmp_path / "c")!r}, "node-1", 10).record_ids) == 10
    """
    assert heavy_modules_after(code) == []
    assert "torch" in heavy_modules_after(code + "\n" + f"""
        import fedforget.methods.registry  # as every app does: the run config's parser gets the methods' tables
        from fedforget.tasks.local_records import read_local_records
        from fedforget.core.config import RunConfig
        read_local_records({str(tmp_path / "d")!r}, RunConfig(task="digits-mlp"), "node-1", 10)
    """)


# --- where the data is ----------------------------------------------------------------------------------------

def test_a_missing_data_dir_is_refused(tmp_path):
    refused(tmp_path / "absent", "does not exist", "data-dir")


def test_a_data_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    refused(tmp_path / "f", "is not a directory")


def test_a_data_dir_without_the_split_is_refused(tmp_path):
    folder = write_parquet(tmp_path / "d", rows(), name="test.parquet")
    refused(folder, "train.parquet or train.csv or train")


def test_two_files_for_one_split_are_refused(tmp_path):
    folder = write_parquet(tmp_path / "d", rows())
    write_csv(folder, csv_text(rows()))
    refused(folder, "train.parquet and train.csv", "keep one")


def test_a_symlinked_data_file_is_refused_though_its_target_reads(tmp_path):
    target = write_parquet(tmp_path / "real", rows())
    (tmp_path / "d").mkdir()
    os.symlink(target / "train.parquet", tmp_path / "d" / "train.parquet")
    assert len(read(target).record_ids) == 5
    refused(tmp_path / "d", "symbolic link")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "train.csv")
    refused(tmp_path / "d", "not a regular file")


def test_a_directory_named_like_a_file_is_refused(tmp_path):
    (tmp_path / "d" / "train.parquet").mkdir(parents=True)
    refused(tmp_path / "d", "not a regular file")


@pytest.mark.parametrize("name", ["train.parquet", "train.csv"])
def test_an_empty_file_is_refused(tmp_path, name):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / name).write_bytes(b"")
    refused(tmp_path / "d", "is empty")


def test_a_file_that_is_not_parquet_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.parquet").write_bytes(b"PAR1 not really" * 10)
    refused(tmp_path / "d", "not readable parquet")


def test_a_csv_column_the_task_does_not_read_may_hold_anything(tmp_path):
    """An unused column that looks numeric for the first megabyte and then holds text is not converted."""
    data = rows(15_000)
    lines = csv_text(data).splitlines()
    notes = ["1"] * (len(lines) - 2) + ["two"]
    lines = [lines[0] + ",note"] + [line + f",{v}" for line, v in zip(lines[1:], notes, strict=True)]
    assert len("\n".join(lines)) > 2 * 2**20
    assert read(write_csv(tmp_path / "d", "\n".join(lines) + "\n")).digests == \
        read(write_parquet(tmp_path / "p", data)).digests


def test_a_csv_that_is_not_utf8_or_has_ragged_rows_is_refused(tmp_path):
    good = csv_text(rows(3))
    (tmp_path / "l").mkdir()
    (tmp_path / "l" / "train.csv").write_bytes(good.encode().replace(b"r1", b"r\xe9"))  # latin-1, not UTF-8
    refused(tmp_path / "l", "not readable csv")
    refused(write_csv(tmp_path / "r", good + "extra,1,2,3,4\n"), "not readable csv")


def test_a_parquet_without_records_or_a_csv_with_a_header_only_is_refused(tmp_path):
    empty = pa.table({"record_id": pa.array([], pa.string()), "label": pa.array([], pa.int64()),
                      "pixels": pa.array([], pa.list_(pa.int64()))})
    refused(write_parquet(tmp_path / "p", empty), "holds no records")
    refused(write_csv(tmp_path / "c", "record_id,label,pixels\n"), "holds no records")


def test_a_file_over_the_size_bound_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    folder = write_parquet(tmp_path / "d", rows())
    monkeypatch.setattr(local_records, "MAX_DATA_BYTES", 100)
    refused(folder, "over the 100")


def test_too_many_records_are_refused_in_parquet_and_csv(tmp_path, monkeypatch):
    monkeypatch.setattr(local_records, "MAX_RECORDS", 4)
    refused(write_parquet(tmp_path / "p", rows(5)), "over the 4")
    refused(write_csv(tmp_path / "c", csv_text(rows(5))), "over 4")


def test_a_parquet_that_unpacks_past_the_bound_is_refused_from_its_footer(tmp_path, monkeypatch):
    folder = write_parquet(tmp_path / "d", rows(50))
    monkeypatch.setattr(local_records, "MAX_UNPACKED_BYTES", 10)
    refused(folder, "unpacks to")


def test_a_parquet_whose_footer_understates_its_size_is_refused_while_decoded(tmp_path, monkeypatch):
    folder = write_parquet(tmp_path / "d", rows(50))
    monkeypatch.setattr(local_records, "declared_unpacked_bytes", lambda meta: 0)
    assert len(read(folder).record_ids) == 50
    monkeypatch.setattr(local_records, "MAX_UNPACKED_BYTES", 1000)
    refused(folder, "unpacks to over 1,000 bytes")


def test_too_many_pixel_values_in_all_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(local_records, "MAX_PIXEL_VALUES", 64 * 4)
    refused(write_parquet(tmp_path / "p", rows(5)), "over 256 pixel values")
    refused(write_csv(tmp_path / "c", csv_text(rows(5))), "over 256 pixel values")
    assert len(read(write_parquet(tmp_path / "ok", rows(4))).record_ids) == 4


def test_dictionary_encoded_columns_read_as_their_values(tmp_path):
    import pandas as pd

    data = rows(6)
    frame = pd.DataFrame({"record_id": pd.Categorical(data["record_id"]), "label": data["label"],
                          "pixels": data["pixels"]})
    folder = tmp_path / "d"
    folder.mkdir()
    frame.to_parquet(folder / "train.parquet")
    assert read(folder).digests == read(write_parquet(tmp_path / "p", data)).digests


def test_a_save_to_disk_directory_holding_a_link_or_several_splits_is_refused(tmp_path):
    import datasets

    data = datasets.Dataset.from_dict(rows(4))
    datasets.DatasetDict({"a": data, "b": data}).save_to_disk(str(tmp_path / "dd" / "train"))
    refused(tmp_path / "dd", "several splits")
    data.save_to_disk(str(tmp_path / "ln" / "train"))
    os.symlink("/etc/hostname", tmp_path / "ln" / "train" / "extra")
    refused(tmp_path / "ln", "not a regular file")


# --- columns --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("column", ["record_id", "label", "pixels"])
def test_a_missing_column_is_refused_by_name(tmp_path, column):
    data = rows()
    del data[column]
    refused(write_parquet(tmp_path / "p", data), f"no column {column}")
    header = ",".join(data)
    refused(write_csv(tmp_path / "c", header + "\n" + ",".join("1" for _ in data) + "\n"), f"no column {column}")


def test_a_text_task_needs_a_text_column(tmp_path):
    refused(write_parquet(tmp_path / "d", rows()), "no column text", cfg=RunConfig(task="rt-minilm"), num_classes=2)


def test_a_task_without_a_raw_input_form_is_refused(tmp_path):
    with pytest.raises(NodeDataError, match="no raw input form"):
        read(write_parquet(tmp_path / "d", rows()), cfg=RunConfig(task="fmnist-effnet"))


# --- record ids -----------------------------------------------------------------------------------------------

def test_a_record_id_twice_is_refused(tmp_path):
    data = rows()
    data["record_id"][3] = data["record_id"][1]
    refused(write_parquet(tmp_path / "d", data), "'r1' appears twice")


@pytest.mark.parametrize("bad, words", [("", ("empty",)), ("x" * 257, ("longer than 256",)),
                                        ("a\x00b", ("control",)), ("line\nbreak", ("control",)),
                                        ("\u200b", ("non-printable",))])
def test_unusable_record_ids_are_refused(tmp_path, bad, words):
    data = rows()
    data["record_id"][2] = bad
    message = refused(write_parquet(tmp_path / "d", data), "row 3", *words)
    assert len(message) < 400


def test_a_huge_record_id_is_refused_without_being_echoed_whole(tmp_path):
    data = rows()
    data["record_id"][0] = "y" * 5_000_000
    assert len(refused(write_parquet(tmp_path / "d", data), "longer than")) < 400


def test_record_ids_that_are_not_text_or_missing_are_refused(tmp_path):
    data = rows()
    data["record_id"] = list(range(5))
    refused(write_parquet(tmp_path / "i", data), "record_id is of type int64", "text")
    data["record_id"] = ["a", None, "c", "d", "e"]
    refused(write_parquet(tmp_path / "n", data), "have no record_id")


def test_two_record_ids_with_one_sample_id_are_refused(tmp_path, monkeypatch):
    folder = write_parquet(tmp_path / "d", rows())
    monkeypatch.setattr(local_records, "local_sample_id",
                        lambda node, rid, key=None: 42 if rid in ("r1", "r3") else hash(rid) & (2**62 - 1))
    refused(folder, "'r1' and 'r3' get the same sample id")


# --- labels ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, kind, words", [
    ([1.0, 2.0, 3.0, 4.0, 5.0], pa.float64(), ("label is of type double",)),
    ([1.0, float("nan"), 3.0, 4.0, 5.0], pa.float64(), ("label is of type double",)),
    ([True, False, True, True, False], pa.bool_(), ("label is of type bool",)),
    ([1, -1, 2, 3, 4], pa.int64(), ("label -1 is outside", "0..9")),
    ([1, 10, 2, 3, 4], pa.int8(), ("label 10 is outside",)),
    ([1, 2**64 - 1, 2, 3, 4], pa.uint64(), ("outside",)),
    (["1", "2", "3", "4", "5"], pa.string(), ("label is of type string",)),
    ([1, None, 2, 3, 4], pa.int64(), ("have no label",)),
])
def test_parquet_labels_that_are_not_the_tasks_classes_are_refused(tmp_path, values, kind, words):
    data = rows()
    table = pa.table({"record_id": data["record_id"], "label": pa.array(values, kind), "pixels": data["pixels"]})
    refused(write_parquet(tmp_path / "d", table), *words)


@pytest.mark.parametrize("label, words", [("1.5", ("not a class number",)), ("nan", ("not a class number",)),
                                          ("true", ("not a class number",)), ("", ("not a class number",)),
                                          (" 1", ("not a class number",)), ("١", ("not a class number",)),
                                          ("-3", ("label -3 is outside",)),
                                          ("99999999999999999999", ("not a class number",))])
def test_csv_labels_that_are_not_the_tasks_classes_are_refused(tmp_path, label, words):
    data = rows()
    text = csv_text(data).splitlines()
    text[2] = f'{data["record_id"][1]},{label},"{" ".join(map(str, data["pixels"][1]))}"'
    refused(write_csv(tmp_path / "d", "\n".join(text) + "\n"), *words)


def test_the_class_count_given_bounds_the_labels(tmp_path):
    data = rows()
    data["label"] = [0, 1, 2, 1, 0]
    folder = write_parquet(tmp_path / "d", data)
    assert len(read(folder, num_classes=3).record_ids) == 5
    refused(folder, "label 2 is outside the task's classes 0..1", num_classes=2)


# --- inputs ---------------------------------------------------------------------------------------------------

def test_a_wrong_pixel_count_is_refused(tmp_path):
    data = rows()
    data["pixels"] = [p[:63] for p in data["pixels"]]
    refused(write_parquet(tmp_path / "d", data), "63 pixel values per record do not fit task digits-mlp")


def test_ragged_pixels_are_refused(tmp_path):
    data = rows()
    data["pixels"][1] = data["pixels"][1] + [0]
    refused(write_parquet(tmp_path / "p", data), "64 to 65 pixel values")
    refused(write_csv(tmp_path / "c", csv_text(data)), "64 to 65 pixel values")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_pixels_that_are_not_finite_are_refused(tmp_path, value):
    data = rows()
    data["pixels"] = [[float(v) for v in p] for p in data["pixels"]]
    data["pixels"][2][5] = value
    refused(write_parquet(tmp_path / "p", data), "not a finite number")
    refused(write_csv(tmp_path / "c", csv_text(data)), "not a finite number")


def test_pixels_that_overflow_once_scaled_are_refused(tmp_path):
    data = rows()
    data["pixels"] = [[float(v) for v in p] for p in data["pixels"]]
    data["pixels"][0][0] = 1e300
    refused(write_parquet(tmp_path / "d", data), "overflow")


def test_pixels_of_the_wrong_type_or_missing_are_refused(tmp_path):
    data = rows()
    table = pa.table({"record_id": data["record_id"], "label": data["label"],
                      "pixels": [[str(v) for v in p] for p in data["pixels"]]})
    refused(write_parquet(tmp_path / "s", table), "pixels hold string values")
    table = pa.table({"record_id": data["record_id"], "label": data["label"], "pixels": list(range(5))})
    refused(write_parquet(tmp_path / "i", table), "pixels is of type int64")
    data["pixels"][1] = None
    refused(write_parquet(tmp_path / "n", data), "have no pixels")
    data = rows()
    data["pixels"][1][3] = None
    refused(write_parquet(tmp_path / "v", data), "pixel value is missing")
    refused(write_csv(tmp_path / "c", 'record_id,label,pixels\na,1,"1 2 x"\n'), "row 1", "are not numbers")


def test_a_text_over_the_bound_is_refused_before_tokenizing(tmp_path):
    table = {"record_id": ["a", "b"], "label": [0, 1], "text": ["fine", "w" * 100_001]}
    refused(write_parquet(tmp_path / "d", table), "over 100,000 characters", cfg=RunConfig(task="rt-minilm"),
            num_classes=2)


def test_a_missing_text_is_refused(tmp_path):
    table = {"record_id": ["a", "b"], "label": [0, 1], "text": ["fine", None]}
    refused(write_parquet(tmp_path / "d", table), "have no text", cfg=RunConfig(task="rt-minilm"), num_classes=2)


def test_bad_arguments_are_programming_errors_not_node_data_errors(tmp_path):
    folder = write_parquet(tmp_path / "d", rows())
    with pytest.raises(ValueError, match="split must be one of"):
        read(folder, split="validation")
    with pytest.raises(ValueError, match="num_classes must be at least 1"):
        read(folder, num_classes=0)
