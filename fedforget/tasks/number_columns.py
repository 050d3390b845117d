"""A record's inputs held one number per column (a CSV with a column per feature), stacked into the float64
``(records, values)`` rows a task with a list of numbers per record reads (``Task(input_columns=[...])``).

A column is taken as numbers when Parquet or ``datasets`` stores it so (integers, floats, decimals), or parsed
from text (every CSV column is read as text; a Parquet column of strings is parsed the same way): decimal
numbers such as ``3``, ``-0.5`` or ``1e-3``, spaces around them ignored. The first value that is missing, not a
number, or not finite (NaN, infinite) is refused in one :class:`NodeDataError` line naming the file, the column
and the row (1 = the first record), before anything is trained. The stacked rows are bounded like pixel values:
at most :data:`~fedforget.tasks.node_data_error.MAX_INPUT_VALUES` in one split, checked before they are allocated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedforget.tasks.node_data_error import MAX_INPUT_VALUES, NodeDataError
from fedforget.tasks.node_data_error import quote as _quote

#: Values parsed at once when a text column is searched for its first value that is not a number.
_SEARCH_CHUNK = 4096


def stack_number_columns(table: Any, columns: tuple[str, ...], name: str) -> np.ndarray:  # noqa: ANN401 - a pyarrow Table
    """``columns`` of ``table`` side by side, in their order, as float64 ``(records, len(columns))``; ``name``
    (``node node-1: /data/train.csv``) starts each refusal."""
    count = table.num_rows * len(columns)
    if count > MAX_INPUT_VALUES:
        raise NodeDataError(f"{name}: {table.num_rows:,} records of {len(columns)} input columns are over "
                            f"{MAX_INPUT_VALUES:,} values in all, the most a node reads; split the data")
    rows = np.empty((table.num_rows, len(columns)), dtype=np.float64)
    for j, column in enumerate(columns):
        rows[:, j] = _numbers(table.column(column), column, name)
    return rows


def _numbers(column: Any, label: str, name: str) -> np.ndarray:  # noqa: ANN401 - a pyarrow ChunkedArray
    """One column as float64, every value present and finite."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        values = _parsed(pc.utf8_trim_whitespace(column), label, name)
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        _no_nulls(column, label, name)
        values = column.cast(pa.float64()).to_numpy()
    else:
        raise NodeDataError(f"{name}: column {label!r} holds {kind} values; an input column holds one number per "
                            "record")
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        row = int(bad[0])
        raise NodeDataError(f"{name}: row {row + 1}: column {label!r} holds {values[row]}, not a finite number; fix "
                            "the data")
    return values


def _no_nulls(column: Any, label: str, name: str) -> None:  # noqa: ANN401 - a pyarrow ChunkedArray
    import pyarrow.compute as pc

    if column.null_count:
        row = int(pc.index(pc.is_null(column), True).as_py())
        raise NodeDataError(f"{name}: row {row + 1}: column {label!r} has no value (null); give every record a "
                            "number in every input column")


def _parsed(column: Any, label: str, name: str) -> np.ndarray:  # noqa: ANN401 - a pyarrow ChunkedArray
    """A text column's numbers; the first value that is empty or not a decimal number is refused by its row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    _no_nulls(column, label, name)
    try:
        return pc.cast(column, pa.float64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    text = column.combine_chunks()
    for start in range(0, len(text), _SEARCH_CHUNK):
        chunk = text.slice(start, _SEARCH_CHUNK)
        try:
            pc.cast(chunk, pa.float64())
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        for offset, value in enumerate(chunk.to_pylist()):
            try:
                pc.cast(pa.array([value], pa.string()), pa.float64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                row = start + offset
                what = "has no value" if value == "" else f"holds {_quote(value)}, which is not a number"
                raise NodeDataError(f"{name}: row {row + 1}: column {label!r} {what}; write one decimal number "
                                    "(3, -0.5, 1e-3) per record in every input column") from None
    raise AssertionError("a text column that does not cast holds a value that does not")  # pragma: no cover
