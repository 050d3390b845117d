"""docs/strategies.md's table of what each method trains says what the methods' declarations say: a method trains
the user's own model (``Task(train='all')`` or a list of prefixes) exactly when its declaration's
``whole_model_refusal(variant)`` is None, and a refusing method's row gives the reason it refuses with. A family's
variants may answer apart (the chains: SISA and FedCIO train it, FedSGT and S3T do not), each in one row."""

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
    named = sorted(v for variants in rows for v in variants)
    assert named == sorted(v for m in FAMILIES for v in m.variants)  # every variant in exactly one row
    for method in FAMILIES:
        for variant in method.variants:
            cell = next(cell for variants, cell in rows.items() if variant in variants)
            refusal = method.whole_model_refusal(variant)
            assert cell == ("yes" if refusal is None else f"no: {refusal}"), variant
