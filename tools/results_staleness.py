"""Which figures under ``docs/results/`` measured code that has changed since: a result is stale when a commit
after the one its JSON records changed a file its benchmark runs.

The files a benchmark runs are its script's import closure (``tools/import_closure.py``) plus the paths its
entry in ``benchmarks/results.toml`` names under ``reads``; the change is ``git diff --name-only <commit> HEAD``
over those files. Only git and ``ast`` are used: nothing is imported or run.

    python tools/results_staleness.py                 # a table: each result, its commit, current or stale
    python tools/results_staleness.py --changed NAME  # the files changed since NAME was measured
    python tools/results_staleness.py --write-index   # rewrite docs/results.md's "code since" column
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_closure import closure  # noqa: E402
from results_registry import ROOT, Entry, load  # noqa: E402

INDEX = ROOT / "docs" / "results.md"
#: the results index's column this tool writes
COLUMN = "code since"
SHORT = 10


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=check, timeout=60)


def recorded_commit(result: dict[str, Any]) -> str | None:
    """The commit a result names (``machine.commit``, else a top-level ``commit``), ``+dirty`` dropped;
    ``"unrecorded"`` as is; None when it names none."""
    machine = result.get("machine")
    commit = machine.get("commit") if isinstance(machine, dict) and "commit" in machine else result.get("commit")
    return str(commit).removesuffix("+dirty") if commit is not None else None


def is_shallow(root: Path = ROOT) -> bool:
    """A clone without its full history (``git clone --depth``): an old commit may be missing from it."""
    return _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"


def commit_known(commit: str, root: Path = ROOT) -> bool:
    return _git(root, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0


def is_ancestor(commit: str, root: Path = ROOT) -> bool:
    return _git(root, "merge-base", "--is-ancestor", commit, "HEAD", check=False).returncode == 0


@functools.cache
def measured_paths(entry: Entry, root: Path = ROOT) -> tuple[str, ...]:
    """The files and folders (relative, sorted) whose change makes ``entry``'s figure stale."""
    script = entry.script
    files = {str(p) for p in closure(root / script, root)} if script and script.endswith(".py") else set()
    return tuple(sorted(files | set(entry.paths)))


def changed_since(commit: str, paths: tuple[str, ...], root: Path = ROOT) -> tuple[list[str], str | None]:
    """The files among ``paths`` that differ between ``commit`` and HEAD, and the first commit after ``commit``
    that changed one of them (None when none differs)."""
    changed = _git(root, "diff", "--name-only", commit, "HEAD", "--", *paths).stdout.split()
    if not changed:
        return [], None
    log = _git(root, "log", "--reverse", "--format=%H", f"{commit}..HEAD", "--", *changed).stdout.split()
    return sorted(changed), (log[0] if log else None)


def staleness(result_json_path: Path | str, entries: dict[str, Entry] | None = None,
              root: Path = ROOT) -> dict[str, Any]:
    """``{"stale": bool | None, "status": ..., "commit": recorded, "since": first changing commit, "changed":
    [files]}``. ``status``: ``current``, ``stale``, ``unrecorded`` (no commit to compare with),
    ``not-an-ancestor`` (the commit is not in HEAD's history), ``shallow`` (missing from a shallow clone) or
    ``no-entry`` (``benchmarks/results.toml`` does not list it); ``stale`` is None unless computed."""
    path = Path(result_json_path)
    entries = load(root / "benchmarks" / "results.toml") if entries is None else entries
    commit = recorded_commit(json.loads(path.read_text(encoding="utf-8")))
    out: dict[str, Any] = {"result": path.stem, "commit": commit, "stale": None, "since": None, "changed": []}
    if commit in (None, "unrecorded"):
        return {**out, "status": "unrecorded"}
    if not commit_known(commit, root):
        return {**out, "status": "shallow" if is_shallow(root) else "not-an-ancestor"}
    if not is_ancestor(commit, root):
        return {**out, "status": "not-an-ancestor"}
    entry = entries.get(path.stem)
    if entry is None:
        return {**out, "status": "no-entry"}
    changed, since = changed_since(commit, measured_paths(entry, root), root)
    return {**out, "status": "stale" if changed else "current", "stale": bool(changed), "since": since,
            "changed": changed}


def cell(state: dict[str, Any]) -> str:
    """The index's text for one result."""
    status = state["status"]
    if status == "stale":  # no count of changed files: it would change with every commit (`--changed NAME` lists them)
        return f"stale since `{state['since'][:SHORT]}`"
    return {"current": "current", "unrecorded": "unrecorded", "no-entry": "not listed in benchmarks/results.toml",
            "not-an-ancestor": "its commit is not in this history",
            "shallow": "its commit is not in this shallow clone"}[status]


def all_states(root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """Result name → :func:`staleness`, for every JSON under ``docs/results/``."""
    entries = load(root / "benchmarks" / "results.toml")
    return {p.stem: staleness(p, entries, root) for p in sorted((root / "docs" / "results").glob("*.json"))}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def index_column(text: str) -> dict[str, str]:
    """Result name → its ``code since`` cell in the index's table (empty when the column is absent)."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("| result |")), None)
    if header is None or COLUMN not in _cells(lines[header]):
        return {}
    at = _cells(lines[header]).index(COLUMN)
    out = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        out[cells[0].strip("`")] = cells[at] if at < len(cells) else ""
    return out


def write_index(text: str, states: dict[str, dict[str, Any]]) -> str:
    """``text`` (the index) with its ``code since`` column (added last when absent) set from ``states``; a row
    with no JSON (a figure only) gets ``—``."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| result |"))
    head = _cells(lines[header])
    if COLUMN not in head:
        head.append(COLUMN)
        lines[header + 1] = "|" + "---|" * len(head)
    at = head.index(COLUMN)
    lines[header] = _row(head)
    for i in range(header + 2, len(lines)):
        if not lines[i].startswith("|"):
            break
        cells = _cells(lines[i])
        cells += [""] * (len(head) - len(cells))
        name = cells[0].strip("`")
        cells[at] = cell(states[name]) if name in states else "—"
        lines[i] = _row(cells)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Which figures measured code that changed since.")
    parser.add_argument("--write-index", action="store_true", help=f"rewrite docs/results.md's '{COLUMN}' column")
    parser.add_argument("--changed", metavar="NAME", help="list the files changed since result NAME was measured")
    args = parser.parse_args(argv)
    if args.changed:
        path = ROOT / "docs" / "results" / f"{args.changed}.json"
        if not path.is_file():
            print(f"no result {args.changed!r}: name a file of docs/results/ without .json", file=sys.stderr)
            return 2
        state = staleness(path)
        print(f"{args.changed}: {cell(state)}")
        print("\n".join(state["changed"]))
        return 0
    states = all_states()
    if args.write_index:
        INDEX.write_text(write_index(INDEX.read_text(encoding="utf-8"), states), encoding="utf-8")
        print(f"wrote the '{COLUMN}' column of {INDEX.relative_to(ROOT)} ({len(states)} results)")
        return 0
    width = max(map(len, states))
    print(f"{'result':<{width}}  {'measured at':<{SHORT}}  code since")
    for name, state in states.items():
        print(f"{name:<{width}}  {(state['commit'] or '—')[:SHORT]:<{SHORT}}  {cell(state)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
