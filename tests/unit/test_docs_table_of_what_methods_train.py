"""docs/strategies.md's table of what each method trains says what the methods' declarations say: a method trains
the user's own model (``Task(train='all')`` or a list of prefixes) exactly when its ``no_whole_model`` is None,
and a refusing method's row gives the reason its declaration refuses with."""

from __future__ import annotations

import re
from pathlib import Path

from fedforget.methods.registry import FAMILIES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "strategies.md"


def table_rows() -> dict[tuple[str, ...], str]:
    """Each row's ``method=`` values → its whole-model cell."""
    text = PAGE.read_text(encoding="utf-8").split("## What a method trains", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0] != "`method=`":
            rows[tuple(re.findall(r"`([^`]+)`", cells[0]))] = cells[2]
    return rows


def test_the_table_of_what_each_method_trains_matches_the_declarations():
    rows = table_rows()
    assert sorted(rows) == sorted(m.variants for m in FAMILIES)  # one row per method family, every variant named
    for method in FAMILIES:
        cell = rows[method.variants]
        if method.no_whole_model is None:
            assert cell == "yes", method.name
        else:
            assert cell == f"no: {method.no_whole_model}", method.name
