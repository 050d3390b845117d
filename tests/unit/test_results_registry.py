"""``benchmarks/results.toml`` covers every result under ``docs/results/``: each JSON has an entry whose script
exists and which either gives the command that writes it again (with its wall time, or ``unknown``) or says why
it is measured by hand; ``make results`` runs the fast commands once each."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from results_registry import FAST_SECONDS, Entry, load, problems  # noqa: E402
from results_run import plan  # noqa: E402


def test_every_result_has_an_entry_whose_paths_exist() -> None:
    assert problems(load()) == []


def test_a_missing_or_broken_entry_is_named(tmp_path: Path) -> None:
    """Negative controls: a JSON without an entry, an entry without a JSON, a script that is not there, an entry
    with neither a command nor a reason, a command without seconds."""
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "here.py").write_text("")
    for name in ("listed", "unlisted", "vague", "untimed"):
        (tmp_path / "docs" / "results" / f"{name}.json").write_text("{}")
    (tmp_path / "benchmarks" / "results.toml").write_text(
        '[listed]\nscript = "benchmarks/gone.py"\ncommand = "python benchmarks/gone.py"\nseconds = 3\n'
        '[vague]\nscript = "benchmarks/here.py"\n'
        '[untimed]\nscript = "benchmarks/here.py"\ncommand = "python benchmarks/here.py"\n'
        '[orphan]\nscript = "benchmarks/here.py"\nby-hand = "gone"\n')
    assert problems(load(tmp_path / "benchmarks" / "results.toml"), tmp_path) == [
        "unlisted: docs/results/unlisted.json has no entry", "orphan: no docs/results/orphan.json",
        "listed: benchmarks/gone.py does not exist",
        "untimed: a command needs seconds (a number or \"unknown\")",
        "vague: give either a command or a by-hand reason"]


def test_make_results_runs_the_fast_commands_once_each() -> None:
    def entry(name: str, command: str | None, seconds: int | str | None) -> Entry:
        return Entry(name, "b.py", (), command, seconds, None if command else "by hand")

    entries = {e.name: e for e in (entry("a", "python b.py --x", 10), entry("a2", "python b.py --x", 10),
                                   entry("slow", "python b.py --slow", FAST_SECONDS),
                                   entry("unknown", "python b.py --u", "unknown"), entry("gpu", None, None))}
    assert plan(entries, everything=False) == [("python b.py --x", ["a", "a2"], 10)]
    assert [c for c, _, _ in plan(entries, everything=True)] == ["python b.py --x", "python b.py --slow",
                                                                 "python b.py --u"]
    assert all(e.fast == (e.name in {"a", "a2"}) for e in entries.values())
