"""Measure the figures again: run the commands of ``benchmarks/results.toml``, one line per benchmark.

``make results`` runs the fast ones (a recorded wall time under ``FAST_SECONDS`` on 2 cores), ``make
results-all`` every one with a command; a command several results share runs once. Results measured by hand
(a GPU, several invocations, code that is gone) are listed with the reason and not run.

    python tools/results_run.py            # the fast subset
    python tools/results_run.py --all      # everything with a command
    python tools/results_run.py --dry-run  # what would run
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_registry import FAST_SECONDS, ROOT, Entry, load  # noqa: E402


def plan(entries: dict[str, Entry], everything: bool) -> list[tuple[str, list[str], int | None]]:
    """(command, the results it writes, typical seconds) in the registry's order, each command once."""
    out: dict[str, tuple[list[str], int | None]] = {}
    for name, entry in entries.items():
        if entry.command and (everything or entry.fast):
            names, seconds = out.setdefault(entry.command, ([], entry.wall_seconds))
            names.append(name)
    return [(command, names, seconds) for command, (names, seconds) in out.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the benchmarks that write docs/results/.")
    parser.add_argument("--all", action="store_true", help=f"every command, not only those under {FAST_SECONDS} s")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = parser.parse_args(argv)
    entries = load()
    todo = plan(entries, args.all)
    skipped = [e for e in entries.values() if e.command and not e.fast and not args.all]
    print(f"{len(todo)} benchmarks to run ({'all' if args.all else f'those under {FAST_SECONDS} s'}); "
          f"{len(skipped)} slower or of unknown time left to `make results-all`, "
          f"{sum(e.by_hand is not None for e in entries.values())} measured by hand")
    failed = []
    for i, (command, names, seconds) in enumerate(todo, 1):
        typical = f"{seconds} s" if seconds is not None else "unknown"
        print(f"[{i}/{len(todo)}] {', '.join(names)} (typically {typical}): {command}", flush=True)
        if args.dry_run:
            continue
        start = time.monotonic()
        rc = subprocess.run(command, shell=True, cwd=ROOT).returncode
        print(f"[{i}/{len(todo)}] {'done' if rc == 0 else f'FAILED (exit {rc})'} in "
              f"{time.monotonic() - start:.0f} s", flush=True)
        if rc:
            failed.append(command)
    if not args.dry_run:
        print("then: python tools/results_staleness.py --write-index (the figures measured again are current)")
    for command in failed:
        print(f"failed: {command}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
