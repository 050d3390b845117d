"""Every result under ``docs/results/`` names the code that made it: the commit a benchmark ran on
(``+dirty`` when tracked files differed), or, for figures measured before benchmarks recorded it,
``unrecorded`` with the commit that brought the figures into the repository; and the results index
lists every file once."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
SHA = re.compile(r"^[0-9a-f]{40}(\+dirty)?$")


def provenance_problem(result: dict) -> str | None:
    """Why ``result`` does not name the commit behind it, or None when it does."""
    commit = result.get("commit")
    machine = result.get("machine")
    if isinstance(machine, dict):
        commit = machine.get("commit", commit)
        if commit == "unrecorded":
            return None if SHA.match(str(machine.get("committed-in", ""))) else "unrecorded without committed-in"
    if commit is None:
        return "no commit"
    return None if SHA.match(str(commit)) else f"commit {commit!r} is not a sha"


def test_every_result_names_the_commit_behind_it() -> None:
    problems = {}
    for path in sorted(RESULTS.glob("*.json")):
        why = provenance_problem(json.loads(path.read_text(encoding="utf-8")))
        if why:
            problems[path.name] = why
    assert not problems


def test_a_result_without_a_commit_is_caught() -> None:
    """Negative controls: no commit, a made-up one, and 'unrecorded' without where it came from."""
    assert provenance_problem({"machine": {"cores": 2}}) == "no commit"
    assert provenance_problem({"machine": {"commit": "main"}}) is not None
    assert provenance_problem({"machine": {"commit": "unrecorded"}}) is not None
    assert provenance_problem({"machine": {"commit": "a" * 40 + "+dirty"}}) is None


def test_the_results_index_lists_every_result_file() -> None:
    index = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted(RESULTS.iterdir()) if p.suffix in (".json", ".png")
               and f"results/{p.name}" not in index]
    assert not missing
