"""Submit a ``flwr run`` and follow it: a rich progress bar fed by the ServerApp's round lines."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import fedforget
from fedforget.store.secret_files import mkdir_private
from fedforget.store.store import resolve_store_path

#: ANSI escape sequences (CSI such as colours and cursor moves, OSC such as hyperlinks, other escapes such as
#: charset selection): Flower colours its log lines even when they are streamed into a pipe, and a log file
#: must not hold them.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])|\x9b[0-?]*[ -/]*[@-~]")
ROUND_LINE = re.compile(r"round (\d+)/(\d+): test accuracy ([0-9.]+)")
POSITION_LINE = re.compile(r"(\d+)/(\d+) chain positions trained")
STAGE_LINE = re.compile(r"FedShard stage (\d+)/(\d+)")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (what a log file written by fedforget holds)."""
    return ANSI.sub("", text)


def app_dir() -> Path:
    """The Flower app to submit: ``FEDFORGET_HOME``, else this source checkout, else the app manifest an
    installed wheel carries (its FAB holds only the manifest; the ServerApp and ClientApp then import the
    installed package, as Flower's runtime dependency installation is off)."""
    home = os.environ.get("FEDFORGET_HOME")
    package = Path(fedforget.__file__).resolve().parent
    candidates = [Path(home)] if home else []
    candidates += [package.parent, package / "flower_app"]
    for path in candidates:
        if (path / "pyproject.toml").is_file():
            return path
    raise FileNotFoundError("cannot find the fedforget app (pyproject.toml); reinstall fedforget or set "
                            "FEDFORGET_HOME to a checkout")


def flwr_cli() -> str:
    """Flower's CLI of this interpreter's environment (so an installed copy works without an activated
    venv), else whichever ``flwr`` is on the PATH."""
    beside = Path(sys.executable).parent / "flwr"
    return str(beside) if beside.is_file() else "flwr"


def flwr_run(federation: str, run_config: str, store: str, console: Console) -> tuple[int, Path]:
    """Run the app on ``federation`` with ``run_config`` + ``store``; return (exit code, log path)."""
    store_path = resolve_store_path(store)
    mkdir_private(store_path)
    log_path = store_path / "flwr-run.log"
    config = f"{run_config} store={json.dumps(str(store_path))}".strip()  # a TOML basic string
    cmd = [flwr_cli(), "run", str(app_dir()), federation, "--stream", "--run-config", config]
    from fedforget.local_superlink import ports_env

    # this checkout's own local SuperLink (its ports recorded in $FLWR_HOME), never another checkout's
    env = {**os.environ, **ports_env(), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "NO_COLOR": "1"}
    console.print(f"[dim]$ {' '.join(shlex.quote(c) for c in cmd)}[/]")
    from fedforget.local_superlink import ensure_started

    with console.status("starting this checkout's local SuperLink…"):
        ensure_started(federation, env)  # flwr gives its own start-up only 15 s, too few on a loaded machine
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the store stays owner-only
    with open(fd, "w", encoding="utf-8") as log, Progress(
        TextColumn("[bold blue]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[acc]}"), TimeElapsedColumn(), console=console,
    ) as progress:
        bar = progress.add_task(f"{federation}: starting Flower", total=None, acc="")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=app_dir())
        assert proc.stdout is not None
        for line in proc.stdout:
            line = strip_ansi(line)
            log.write(line)
            log.flush()
            match = ROUND_LINE.search(line)
            if match:
                rnd, total, acc = int(match[1]), int(match[2]), float(match[3])
                progress.update(bar, description=f"{federation}: round", completed=rnd, total=total,
                                acc=f"test accuracy {acc:.4f}")
                if rnd > 0:
                    progress.console.print(f"round {rnd}/{total}: test accuracy {acc:.4f}")
            elif (match := POSITION_LINE.search(line)) is not None:
                progress.update(bar, description=f"{federation}: chain positions", completed=int(match[1]),
                                total=int(match[2]), acc="")
            elif (match := STAGE_LINE.search(line)) is not None:
                progress.update(bar, description=f"{federation}: FedShard stages", completed=int(match[1]),
                                total=int(match[2]), acc="")
            elif "ERROR" in line or "Traceback" in line:
                progress.console.print(line.rstrip(), style="red", markup=False, highlight=False)
        code = proc.wait()
    return code, log_path
