"""A node's own records (its ``data-dir``) as the examples it trains on, read on the node alone.

A data directory holds one file per split: ``train.parquet``, ``train.csv`` or a Hugging Face ``datasets`` directory
written by ``save_to_disk`` at ``train/`` (and the same for ``test``). Its columns are ``record_id`` (text),
``label`` (an integer class) and the inputs the task's model reads, in the form the task's own data set stores them:
``text`` for a text task (tokenized by ``TaskSpec.encode_text``, as the loader tokenizes) or ``pixels`` (a flat list
of numbers, scaled by ``TaskSpec.scale_raw``, as the loader scales); a user task names its own column of number
lists, or a column per number (``TaskSpec.input_columns``, stacked in their order into the same rows). The node's
records get sample ids ``local_sample_id(node, record id, key)`` (the store's record key, None for a store of
unkeyed ids), so the examples come in sample-id order and carry those ids (:func:`read_local_records`). A reader
that needs the file's own row order (a server's test set) uses :func:`read_file_rows` and :func:`encode_rows`; one
that only needs to know which records it holds, :func:`read_record_index`, which reads neither inputs nor torch.

The files are the node owner's, but anything could be placed there: every file is opened without following
a symbolic link, must be a regular file of at most :data:`MAX_DATA_BYTES`, and at most :data:`MAX_RECORDS`
records (a Parquet file's unpacked size is checked against :data:`MAX_UNPACKED_BYTES` from its footer before
any page is read), so reading takes bounded time and memory. Parquet and CSV are read by pyarrow from the
opened file itself (no copy into a dataset cache, no path looked up twice); a ``save_to_disk`` directory by
``datasets.load_from_disk``, which memory-maps it. Anything wrong is one :class:`NodeDataError` line that
names the node and what to do.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from fedforget.core.config import RunConfig
from fedforget.core.record_ids import check_record_id, local_sample_id
from fedforget.tasks.node_data_error import MAX_INPUT_VALUES, NodeDataError
from fedforget.tasks.node_data_error import quote as _quote

if TYPE_CHECKING:
    import torch

    from fedforget.tasks.base import Examples, TaskSpec

#: Largest data file (or ``save_to_disk`` directory, all its files together) a node reads.
MAX_DATA_BYTES = 1 * 2**30
#: Largest unpacked size of the columns read, as a Parquet footer declares it and as they are decoded.
MAX_UNPACKED_BYTES = 4 * 2**30
#: Most pixel values in one split (each becomes a float64 before scaling): 2 GiB of them.
MAX_PIXEL_VALUES = MAX_INPUT_VALUES
#: Most records in one split of a node's data (the run config's ``train-size`` bound).
MAX_RECORDS = 10_000_000
#: Longest text of one record, in characters (tokenizers truncate far below this).
MAX_TEXT_CHARS = 100_000
SPLITS = ("train", "test")
FORMATS = ("parquet", "csv")
RECORD_ID, LABEL, TEXT, PIXELS = "record_id", "label", "text", "pixels"
DOCS = "see docs/operations/data.md"
_CSV_INTEGER = re.compile(r"-?[0-9]{1,18}")


@dataclass
class LocalRecords:
    """One split of a node's records: ``record_ids[i]`` is the record of row ``i`` of ``examples``.

    Rows are in sample-id order and ``examples.ids`` are the sample ids; ``digests`` maps each record id to
    the sha256 of its label and raw inputs, so a node can tell which records changed between two reads.
    """

    record_ids: list[str]
    examples: Examples
    digests: dict[str, str]


def task_num_classes(cfg: RunConfig) -> int:
    """How many classes the task's labels range over: the spec's declared count where it has one (a
    positive ``num_classes``), else the count the task's loader reports, which loads the shipped data."""
    from fedforget.tasks.registry import get_task, load_task_data

    declared = int(getattr(get_task(cfg.task), "num_classes", 0) or 0)
    return declared if declared > 0 else load_task_data(cfg).num_classes


def input_column(spec: TaskSpec) -> str:
    """The column holding a record's inputs for this task: the task's own (a user task's), else ``text`` or
    ``pixels``; NodeDataError if neither."""
    if spec.input_column:
        return spec.input_column
    if spec.encode_text is not None:
        return TEXT
    if spec.scale_raw is not None:
        return PIXELS
    raise NodeDataError(f"task {spec.name} reads no node-owned records (it has no raw input form); use a task "
                        f"that takes text or pixels, {DOCS}")


def input_columns(spec: TaskSpec) -> tuple[str, ...]:
    """The columns holding a record's inputs: a user task's columns of one number each, in the order they are
    stacked, else the one column of :func:`input_column`."""
    return tuple(spec.input_columns) or (input_column(spec),)


@dataclass
class FileRows:
    """One split file's records in file order, checked, inputs still raw (pixels float64 or texts); ``column``
    names the input column (the listed ones, joined by commas, for a task with a column per number)."""

    source: Path
    column: str
    record_ids: list[str]
    labels: np.ndarray
    raw: Any


def read_file_rows(data_dir: Path, cfg: RunConfig, who: str, num_classes: int, split: str = "train") -> FileRows:
    """Split ``split`` of ``data_dir`` in file order, every column checked; ``who`` (``node node-3``, ``server``)
    starts each refusal. ``num_classes`` bounds the labels (``0..num_classes-1``)."""
    _check_arguments(split, num_classes)
    from fedforget.tasks.registry import get_task

    spec = get_task(cfg.task)
    columns = input_columns(spec)
    source = find_split_file(Path(data_dir), split, who)
    labelled = spec.targets is None  # a sequence task's targets come from its inputs: its records hold no label
    table = _read_table(source, [RECORD_ID, *([LABEL] if labelled else []), *columns], who)
    name = f"{who}: {source}"
    record_ids = _record_ids(table.column(RECORD_ID), name)
    labels = _labels(table.column(LABEL), num_classes, name) if labelled else np.zeros(len(record_ids), np.int64)
    if spec.input_columns:
        from fedforget.tasks.number_columns import stack_number_columns

        return FileRows(source, ",".join(columns), record_ids, labels, stack_number_columns(table, columns, name))
    column = columns[0]
    raw: Any = _texts(table.column(TEXT), name) if column == TEXT else _pixels(table.column(column), name)
    return FileRows(source, column, record_ids, labels, raw)


def encode_rows(rows: FileRows, cfg: RunConfig, who: str) -> tuple[torch.Tensor, ...]:
    """The rows' raw inputs as the model's input tensors, by the task's own ``encode_text`` or ``scale_raw``."""
    from fedforget.tasks.registry import get_task

    return _encode(get_task(cfg.task), rows.column, rows.raw, f"{who}: {rows.source}")


def read_local_records(data_dir: Path, cfg: RunConfig, node: str, num_classes: int,
                       split: str = "train", key: str | None = None) -> LocalRecords:
    """Split ``split`` of the records in ``data_dir`` as node ``node``'s examples for ``cfg.task``.

    ``num_classes`` bounds the labels (``0..num_classes-1``); :func:`task_num_classes` gives the task's.
    ``key``: the store's record key its sample ids are keyed with (None: unkeyed).
    """
    import torch

    from fedforget.tasks.base import Examples
    from fedforget.tasks.sequence_targets import with_targets

    who = f"node {node}"
    rows = read_file_rows(data_dir, cfg, who, num_classes, split)
    order, sample_ids = _sample_id_order(node, rows.record_ids, f"{who}: {rows.source}", key)
    rows.record_ids = [rows.record_ids[i] for i in order]
    rows.labels = rows.labels[order]
    rows.raw = [rows.raw[i] for i in order] if rows.column == TEXT else rows.raw[order]
    inputs = encode_rows(rows, cfg, who)
    digests = {r: _digest(int(y), x) for r, y, x in zip(rows.record_ids, rows.labels.tolist(), rows.raw, strict=True)}
    examples = Examples(inputs, torch.from_numpy(rows.labels), torch.from_numpy(sample_ids))
    return LocalRecords(rows.record_ids, with_targets(cfg, examples), digests)


@dataclass
class RecordIndex:
    """A split's record ids, sample ids and labels in sample-id order, without its inputs."""

    record_ids: list[str]
    sample_ids: np.ndarray
    labels: np.ndarray


def read_record_index(data_dir: Path, node: str, num_classes: int, split: str = "train",
                      key: str | None = None) -> RecordIndex:
    """Which records node ``node`` holds, their sample ids and labels, reading only the ``record_id`` and
    ``label`` columns: what a node answers about its data without loading torch or the task (the same
    checks as :func:`read_local_records` on those columns)."""
    _check_arguments(split, num_classes)
    who = f"node {node}"
    source = find_split_file(Path(data_dir), split, who)
    table = _read_table(source, [RECORD_ID, LABEL], who)
    name = f"{who}: {source}"
    record_ids = _record_ids(table.column(RECORD_ID), name)
    labels = _labels(table.column(LABEL), num_classes, name)
    order, sample_ids = _sample_id_order(node, record_ids, name, key)
    return RecordIndex([record_ids[i] for i in order], sample_ids, labels[order])


def _sample_id_order(node: str, record_ids: list[str], name: str,
                     key: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(the row order that sorts by sample id, the sorted sample ids); NodeDataError if two ids collide."""
    sample_ids = np.fromiter((local_sample_id(node, r, key) for r in record_ids), dtype=np.int64,
                             count=len(record_ids))
    order = np.argsort(sample_ids, kind="stable")
    sample_ids = sample_ids[order]
    clash = np.flatnonzero(sample_ids[1:] == sample_ids[:-1])
    if len(clash):
        a, b = record_ids[order[clash[0]]], record_ids[order[clash[0] + 1]]
        raise NodeDataError(f"{name}: records {_quote(a)} and {_quote(b)} get the same sample id; rename one of them")
    return order, sample_ids


def _check_arguments(split: str, num_classes: int) -> None:
    """A caller's mistake (not the data's): ValueError."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be at least 1, got {num_classes}")


def find_split_file(data_dir: Path, split: str, where: str) -> Path:
    """The one file (or ``save_to_disk`` directory) holding ``split``; NodeDataError if none or several."""
    if not data_dir.is_dir():
        what = "is not a directory" if data_dir.exists() else "does not exist"
        raise NodeDataError(f"{where}: data directory {data_dir} {what}; point data-dir (a server: test-data) at "
                            f"a directory in the node data format ({DOCS})")
    names = [f"{split}.{ext}" for ext in FORMATS] + [split]
    found = [data_dir / n for n in names if os.path.lexists(data_dir / n)]
    if not found:
        raise NodeDataError(f"{where}: {data_dir} holds no {' or '.join(names)}; write the node's {split} records "
                            f"there ({DOCS})")
    if len(found) > 1:
        raise NodeDataError(f"{where}: {data_dir} holds {' and '.join(p.name for p in found)}; keep one of them")
    return found[0]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


def _open_file(path: Path, where: str) -> BinaryIO:
    """``path`` opened for reading: a regular file (not a link, fifo or device) of at most MAX_DATA_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NodeDataError(f"{where}: {path} is a symbolic link; place the file itself there") from None
        raise NodeDataError(f"{where}: {path} cannot be opened ({exc.strerror}); make it readable") from None
    info = os.fstat(fd)
    reason = ("is not a regular file" if not stat.S_ISREG(info.st_mode) else
              "is empty" if info.st_size == 0 else
              f"is {info.st_size:,} bytes, over the {MAX_DATA_BYTES:,} a node reads" if info.st_size > MAX_DATA_BYTES
              else "")
    if reason:
        os.close(fd)
        raise NodeDataError(f"{where}: {path} {reason}; {DOCS}")
    return os.fdopen(fd, "rb")


def _read_table(path: Path, columns: list[str], where: str) -> Any:
    """The ``columns`` of a split file, as a pyarrow Table."""
    if path.suffix in (".parquet", ".csv"):
        with _open_file(path, where) as fh:
            try:
                table = _read_parquet(fh, columns, path, where) if path.suffix == ".parquet" else \
                    _read_csv(fh, columns, path, where)
            except NodeDataError:
                raise
            except Exception as exc:  # any parser error of a file a user placed is one line
                raise NodeDataError(f"{where}: {path} is not readable {path.suffix[1:]} ({_one_line(exc)})") from None
    else:
        table = _read_saved(path, columns, where)
    if table.num_rows == 0:
        raise NodeDataError(f"{where}: {path} holds no records; write at least one")
    table = _decode_dictionaries(table)
    if table.num_rows > MAX_RECORDS:
        raise NodeDataError(f"{where}: {path} holds {table.num_rows:,} records, over the {MAX_RECORDS:,} a node "
                            "reads; split the data")
    return table


def _decode_dictionaries(table: Any) -> Any:
    """Dictionary-encoded columns (pandas categoricals) as their plain values."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(field.type.value_type))
    return table


def _missing(names: list[str], columns: list[str], path: Path, where: str) -> None:
    absent = [c for c in columns if c not in names]
    if absent:
        has = ", ".join(names[:8]) or "none"
        raise NodeDataError(f"{where}: {path} has no column {', '.join(absent)} (it has {has}); add it ({DOCS})")


def declared_unpacked_bytes(meta: Any) -> int:
    """The unpacked size of a Parquet file's row groups, as its footer declares it."""
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def _read_parquet(fh: BinaryIO, columns: list[str], path: Path, where: str) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(fh)
    meta = pf.metadata
    if meta.num_rows > MAX_RECORDS:
        raise NodeDataError(f"{where}: {path} holds {meta.num_rows:,} records, over the {MAX_RECORDS:,} a node "
                            "reads; split the data")
    unpacked = declared_unpacked_bytes(meta)
    if unpacked > MAX_UNPACKED_BYTES:
        raise NodeDataError(f"{where}: {path} unpacks to {unpacked:,} bytes, over the {MAX_UNPACKED_BYTES:,} a node "
                            "reads; split the data")
    _missing(list(pf.schema_arrow.names), columns, path, where)
    batches, decoded = [], 0
    for batch in pf.iter_batches(batch_size=65_536, columns=columns):  # a footer may understate: count as read
        decoded += batch.nbytes
        if decoded > MAX_UNPACKED_BYTES:
            raise NodeDataError(f"{where}: {path} unpacks to over {MAX_UNPACKED_BYTES:,} bytes, the most a node "
                                "reads; split the data")
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=pf.schema_arrow.empty_table().select(columns).schema)


def _read_csv(fh: BinaryIO, columns: list[str], path: Path, where: str) -> Any:
    """Every column as text (a record id ``007`` stays ``007``); labels and pixels are parsed here."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    parse = pcsv.ParseOptions(newlines_in_values=True)
    header = pcsv.open_csv(fh, parse_options=parse).schema.names  # the first block only
    _missing(list(header), columns, path, where)
    fh.seek(0)
    # only the columns used are converted: an unrelated column cannot make the file unreadable
    reader = pcsv.open_csv(fh, parse_options=parse,
                           convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in columns},
                                                               include_columns=columns, strings_can_be_null=False))
    batches, rows = [], 0
    for batch in reader:
        rows += batch.num_rows
        if rows > MAX_RECORDS:
            raise NodeDataError(f"{where}: {path} holds over {MAX_RECORDS:,} records, the most a node reads; "
                                "split the data")
        batches.append(batch)
    table = pa.Table.from_batches(batches, schema=reader.schema)
    if LABEL not in columns:
        return table
    return table.set_column(table.schema.get_field_index(LABEL), LABEL, _csv_labels(table.column(LABEL), path, where))


def _csv_labels(column: Any, path: Path, where: str) -> Any:
    import pyarrow as pa

    values = column.to_pylist()
    for i, v in enumerate(values):
        if not _CSV_INTEGER.fullmatch(v):
            raise NodeDataError(f"{where}: {path} row {i + 1}: label {_quote(v)} is not a class number; labels are "
                                "whole numbers 0, 1, … in ASCII digits")
    return pa.array([int(v) for v in values], type=pa.int64()) if values else pa.array([], type=pa.int64())


def _read_saved(path: Path, columns: list[str], where: str) -> Any:
    """A ``save_to_disk`` directory: plain files only (no links), MAX_DATA_BYTES in all, one Dataset."""
    if path.is_symlink() or not path.is_dir():
        raise NodeDataError(f"{where}: {path} is not a directory written by datasets' save_to_disk; {DOCS}")
    if os.path.lexists(path / "dataset_dict.json"):
        raise NodeDataError(f"{where}: {path} holds several splits (a DatasetDict); save each split as its own "
                            "Dataset")
    total = 0
    for entry in os.scandir(path):
        if not entry.is_file(follow_symlinks=False):
            raise NodeDataError(f"{where}: {entry.path} is not a regular file (a link or a folder); a save_to_disk "
                                "directory holds plain files only")
        total += entry.stat(follow_symlinks=False).st_size
    if total > MAX_DATA_BYTES:
        raise NodeDataError(f"{where}: {path} holds {total:,} bytes, over the {MAX_DATA_BYTES:,} a node reads; "
                            "split the data")
    try:
        import datasets

        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # any loader error of a folder a user placed is one line
        raise NodeDataError(f"{where}: {path} is not readable by datasets.load_from_disk ({_one_line(exc)})") from None
    if not isinstance(loaded, datasets.Dataset):
        raise NodeDataError(f"{where}: {path} holds several splits (a DatasetDict); save each split as its own "
                            "Dataset")
    _missing(list(loaded.column_names), columns, path, where)
    return loaded.select_columns(columns).with_format("arrow")[:]


def _record_ids(column: Any, name: str) -> list[str]:
    import pyarrow as pa

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise NodeDataError(f"{name}: record_id is of type {column.type}; write record ids as text (strings)")
    if column.null_count:
        raise NodeDataError(f"{name}: {column.null_count} record(s) have no record_id; give every record one")
    ids = column.to_pylist()
    seen: set[str] = set()
    for i, rid in enumerate(ids):
        try:
            check_record_id(rid)
        except ValueError as exc:
            raise NodeDataError(f"{name}: row {i + 1}: {exc}") from None
        if rid in seen:
            raise NodeDataError(f"{name}: record id {_quote(rid)} appears twice; record ids must be unique")
        seen.add(rid)
    return ids


def _labels(column: Any, num_classes: int, name: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_integer(column.type):
        raise NodeDataError(f"{name}: label is of type {column.type}; labels are whole class numbers "
                            f"0..{num_classes - 1}")
    if column.null_count:
        raise NodeDataError(f"{name}: {column.null_count} record(s) have no label; give every record one")
    low, high = pc.min_max(column).values()
    for value in (low.as_py(), high.as_py()):
        if not 0 <= value < num_classes:
            raise NodeDataError(f"{name}: label {value} is outside the task's classes 0..{num_classes - 1}")
    return column.to_numpy().astype(np.int64)


def _texts(column: Any, name: str) -> list[str]:
    import pyarrow as pa

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise NodeDataError(f"{name}: text is of type {column.type}; a text task reads strings")
    if column.null_count:
        raise NodeDataError(f"{name}: {column.null_count} record(s) have no text; give every record its text")
    texts = column.to_pylist()
    for i, text in enumerate(texts):
        if len(text) > MAX_TEXT_CHARS:
            raise NodeDataError(f"{name}: row {i + 1}: the text is over {MAX_TEXT_CHARS:,} characters; shorten it")
    return texts


def _pixels(column: Any, name: str) -> np.ndarray:
    """Pixels as float64 ``(records, values)``: Parquet/``datasets`` list columns, or CSV text such as
    ``[0, 3, 16]`` or ``0 3 16``."""
    import pyarrow as pa

    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        rows, total = [], 0
        for i, text in enumerate(column.to_pylist()):
            rows.append(_csv_pixels(text, i, name))
            total += len(rows[-1])
            _pixel_bound(total, name)
        sizes = {len(r) for r in rows}
        if len(sizes) > 1:
            raise NodeDataError(f"{name}: records hold {min(sizes)} to {max(sizes)} pixel values; every record "
                                "needs the task's count")
        return np.stack(rows).reshape(len(rows), -1)
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        raise NodeDataError(f"{name}: pixels is of type {kind}; write each record's pixels as one flat list of "
                            "numbers")
    value_type = kind.value_type
    if not (pa.types.is_integer(value_type) or pa.types.is_floating(value_type)):
        raise NodeDataError(f"{name}: pixels hold {value_type} values; pixel values are numbers")
    array = column.combine_chunks()
    if array.null_count:
        raise NodeDataError(f"{name}: {array.null_count} record(s) have no pixels; give every record its pixels")
    sizes = np.diff(np.asarray(array.offsets)) if not pa.types.is_fixed_size_list(kind) else \
        np.full(len(array), kind.list_size)
    if len(sizes) and sizes.min() != sizes.max():
        raise NodeDataError(f"{name}: records hold {sizes.min()} to {sizes.max()} pixel values; every record needs "
                            "the task's count")
    values = array.flatten()
    _pixel_bound(len(values), name)
    if values.null_count:
        raise NodeDataError(f"{name}: a pixel value is missing (null); every pixel needs a number")
    flat = values.to_numpy(zero_copy_only=False).astype(np.float64)
    return flat.reshape(len(array), int(sizes[0]) if len(sizes) else 0)


def _pixel_bound(count: int, name: str) -> None:
    if count > MAX_PIXEL_VALUES:
        raise NodeDataError(f"{name}: over {MAX_PIXEL_VALUES:,} pixel values in all, the most a node reads; split "
                            "the data")


def _csv_pixels(text: str, row: int, name: str) -> np.ndarray:
    tokens = text.strip().removeprefix("[").removesuffix("]").replace(",", " ").split()
    try:
        return np.array(tokens, dtype=np.float64)
    except ValueError:
        raise NodeDataError(f"{name}: row {row + 1}: pixels {_quote(text)} are not numbers separated by commas or "
                            "spaces") from None


def _encode(spec: TaskSpec, column: str, raw: Any, name: str) -> tuple[torch.Tensor, ...]:
    """Raw inputs → the model's input tensors, by the task's own code."""
    import torch
    if column == TEXT:
        assert spec.encode_text is not None
        try:
            return tuple(spec.encode_text(list(raw)))
        except Exception as exc:  # a text the tokenizer refuses (e.g. a lone surrogate)
            raise NodeDataError(f"{name}: the task's tokenizer refused a text ({_one_line(exc)})") from None
    assert spec.scale_raw is not None
    if not np.isfinite(raw).all():
        raise NodeDataError(f"{name}: a pixel value is not a finite number (NaN or infinite); fix the data")
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = spec.scale_raw(raw)
    except ValueError as exc:
        raise NodeDataError(f"{name}: {raw.shape[1]} pixel values per record do not fit task {spec.name}'s input "
                            f"({_one_line(exc)}); {DOCS}") from None
    if not np.isfinite(scaled).all():
        raise NodeDataError(f"{name}: pixel values overflow once scaled; write them as the data set stores them")
    return (torch.from_numpy(np.ascontiguousarray(scaled)),)


def _digest(label: int, raw: str | np.ndarray) -> str:
    """sha256 of a record's label and raw inputs (text as UTF-8, pixels as little-endian float64)."""
    payload = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw.astype("<f8").tobytes()
    return hashlib.sha256(b"fedforget-record-digest\0%d\0" % label + payload).hexdigest()
