"""The list of results (``benchmarks/results.toml``): for each JSON under ``docs/results/``, the benchmark that
wrote it, the command that writes it again and how long that took, or why it is not rerun by ``make results``.
Read here once so the staleness tool, the runner and their tests agree on it."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "benchmarks" / "results.toml"
RESULTS = ROOT / "docs" / "results"
#: ``make results`` runs the commands whose recorded wall time is under this (on 2 cores)
FAST_SECONDS = 300


@dataclass(frozen=True)
class Entry:
    """One result: what measured it, how to measure it again."""

    name: str
    script: str | None
    reads: tuple[str, ...]
    command: str | None
    seconds: int | str | None
    by_hand: str | None

    @property
    def paths(self) -> tuple[str, ...]:
        """The files and folders named here (the closure of ``script`` comes on top)."""
        return (*([self.script] if self.script else []), *self.reads)

    @property
    def wall_seconds(self) -> int | None:
        """The recorded wall time, None when unknown."""
        return self.seconds if isinstance(self.seconds, int) else None

    @property
    def fast(self) -> bool:
        """Run by ``make results``: a command whose recorded wall time is under :data:`FAST_SECONDS`."""
        return self.command is not None and self.wall_seconds is not None and self.wall_seconds < FAST_SECONDS


def load(path: Path = REGISTRY) -> dict[str, Entry]:
    """Result name (the JSON's stem) → its entry."""
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    out = {}
    for name, table in raw.items():
        out[name] = Entry(name=name, script=table.get("script"), reads=tuple(table.get("reads", ())),
                          command=table.get("command"), seconds=table.get("seconds"), by_hand=table.get("by-hand"))
    return out


def problems(entries: dict[str, Entry], root: Path = ROOT) -> list[str]:
    """What is wrong with the list: a result without an entry, an entry without a result, a path that does not
    exist, an entry with neither a command nor a reason, or with both."""
    results = {p.stem for p in (root / "docs" / "results").glob("*.json")}
    out = [f"{name}: docs/results/{name}.json has no entry" for name in sorted(results - set(entries))]
    out += [f"{name}: no docs/results/{name}.json" for name in sorted(set(entries) - results)]
    for name, entry in sorted(entries.items()):
        out += [f"{name}: {path} does not exist" for path in entry.paths if not (root / path).exists()]
        if not entry.paths:
            out.append(f"{name}: names no script and no reads")
        if (entry.command is None) == (entry.by_hand is None):
            out.append(f"{name}: give either a command or a by-hand reason")
        if entry.command is not None and entry.wall_seconds is None and entry.seconds != "unknown":
            out.append(f"{name}: a command needs seconds (a number or \"unknown\")")
        if entry.command and entry.script and entry.script not in entry.command:
            out.append(f"{name}: its command does not run {entry.script}")
    return out
