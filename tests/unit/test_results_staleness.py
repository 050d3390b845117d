"""The results index says, for each figure, whether code it measured changed since (tools/results_staleness.py):
the column matches what git says now, every recorded commit is in HEAD's history, and a change to a file a
benchmark imports (and only such a change) makes its figure stale. Git and ``ast`` only: fast."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from import_closure import closure  # noqa: E402
from results_staleness import (  # noqa: E402
    all_states,
    cell,
    index_column,
    is_shallow,
    recorded_commit,
    staleness,
    write_index,
)

#: Results whose recorded commit is not in HEAD's history, with why; each must still be so (fixing one means
#: taking it off this list). The JSONs keep the commit they recorded.
NOT_IN_HISTORY = {
    "hosfl_learns_llm": "its final runs ran on a lent GPU machine at 9fc1db2d4b, a commit made there that never "
                        "reached this history (the earlier runs' a3a3deea72 is in it)",
}


def _skip_missing_in_shallow_clone(states: dict[str, dict]) -> None:
    missing = sorted(name for name, state in states.items() if state["status"] == "shallow")
    if missing:
        pytest.skip(f"a shallow clone lacks the commits of {', '.join(missing)}: clone with full history")


def test_every_recorded_commit_is_an_ancestor_of_head() -> None:
    states = all_states()
    _skip_missing_in_shallow_clone(states)
    outside = {name for name, state in states.items() if state["status"] == "not-an-ancestor"}
    assert outside == set(NOT_IN_HISTORY)


def test_the_index_column_is_what_git_says_now() -> None:
    """A commit that changes code a figure measured updates the index in the same commit
    (``python tools/results_staleness.py --write-index``), or measures the figure again."""
    states = all_states()
    index = index_column((ROOT / "docs" / "results.md").read_text(encoding="utf-8"))
    expected = {name: cell(state) for name, state in states.items() if state["status"] != "shallow"}
    differs = {name: (index.get(name), want) for name, want in expected.items() if index.get(name) != want}
    assert not differs, "run python tools/results_staleness.py --write-index"
    _skip_missing_in_shallow_clone(states)


def test_the_recorded_commit_is_machine_commit_or_top_level() -> None:
    assert recorded_commit({"machine": {"commit": "a" * 40 + "+dirty"}}) == "a" * 40
    assert recorded_commit({"commit": "b" * 40, "machine": {"cores": 2}}) == "b" * 40
    assert recorded_commit({"machine": {"commit": "unrecorded", "committed-in": "c" * 40}}) == "unrecorded"
    assert recorded_commit({}) is None


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one benchmark importing ``pkg.used`` (not ``pkg.unused``) and its result."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "used.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "unused.py").write_text("Y = 1\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench.py").write_text("from pkg.used import X\n")
    (tmp_path / "benchmarks" / "results.toml").write_text(
        '[bench]\nscript = "benchmarks/bench.py"\ncommand = "python benchmarks/bench.py"\nseconds = 1\n'
        '[old]\nscript = "benchmarks/bench.py"\nby-hand = "by hand"\n')
    (tmp_path / "docs" / "results").mkdir(parents=True)
    measured = _commit(tmp_path, "code")
    (tmp_path / "docs" / "results" / "bench.json").write_text(json.dumps({"machine": {"commit": measured}}))
    (tmp_path / "docs" / "results" / "old.json").write_text(
        json.dumps({"machine": {"commit": "unrecorded", "committed-in": measured}}))
    _commit(tmp_path, "result")
    return tmp_path


def test_a_change_to_an_imported_file_makes_the_figure_stale(repo: Path) -> None:
    result = repo / "docs" / "results" / "bench.json"
    assert staleness(result, root=repo)["status"] == "current"
    (repo / "pkg" / "unused.py").write_text("Y = 2\n")
    _commit(repo, "not measured")
    assert staleness(result, root=repo)["status"] == "current"
    (repo / "pkg" / "used.py").write_text("X = 2\n")
    changer = _commit(repo, "measured code")
    state = staleness(result, root=repo)
    assert state["stale"] and state["since"] == changer and state["changed"] == ["pkg/used.py"]
    assert cell(state) == f"stale since `{changer[:10]}`"
    assert staleness(repo / "docs" / "results" / "old.json", root=repo)["status"] == "unrecorded"


def test_a_commit_outside_head_is_reported(repo: Path) -> None:
    result = repo / "docs" / "results" / "bench.json"
    result.write_text(json.dumps({"machine": {"commit": "f" * 40}}))
    assert staleness(result, root=repo)["status"] == "not-an-ancestor"
    _git(repo, "checkout", "-qb", "side")
    (repo / "pkg" / "unused.py").write_text("Y = 3\n")
    side = _commit(repo, "side")
    _git(repo, "checkout", "-q", "-")
    result.write_text(json.dumps({"machine": {"commit": side}}))
    assert staleness(result, root=repo)["status"] == "not-an-ancestor"
    assert not is_shallow(repo)


def test_the_closure_follows_imports_named_modules_and_packages(tmp_path: Path) -> None:
    """Module-level and in-function imports, ``-m``-style module strings, ``module:attr`` strings, helpers
    beside the script and package ``__init__``s count; ``if TYPE_CHECKING:`` imports and third-party ones don't."""
    for folder in ("pkg/sub", "benchmarks"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("pkg/__init__.py", "pkg/sub/__init__.py", "pkg/a.py", "pkg/typed.py", "pkg/run.py",
                 "pkg/app.py", "pkg/sub/deep.py", "benchmarks/helper.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from .sub import deep\n")
    (tmp_path / "benchmarks" / "bench.py").write_text(
        "import numpy\nfrom typing import TYPE_CHECKING\nimport helper\nfrom pkg.a import f\n"
        "if TYPE_CHECKING:\n    from pkg import typed\n"
        "CMD = ['python', '-m', 'pkg.run']\nAPP = 'pkg.app:app'\n")
    found = {str(p) for p in closure(tmp_path / "benchmarks" / "bench.py", tmp_path)}
    assert found == {"benchmarks/bench.py", "benchmarks/helper.py", "pkg/__init__.py", "pkg/a.py",
                     "pkg/sub/__init__.py", "pkg/sub/deep.py", "pkg/run.py", "pkg/app.py"}


def test_write_index_adds_the_column_then_rewrites_it() -> None:
    text = ("intro\n\n| result | files |\n|---|---|\n| `a` | x |\n| `b` | y |\n| `png_only` | z |\n\nafter\n")
    states = {"a": {"status": "current"}, "b": {"status": "unrecorded"}}
    once = write_index(text, states)
    assert index_column(once) == {"a": "current", "b": "unrecorded", "png_only": "—"}
    assert "|---|---|---|" in once and once.endswith("\nafter\n")
    states["a"] = {"status": "stale", "since": "0123456789abcdef", "changed": ["x.py", "y.py"]}
    twice = write_index(once, states)
    assert index_column(twice)["a"] == "stale since `0123456789`"
    assert twice.count("| result |") == 1 and index_column(text) == {}
