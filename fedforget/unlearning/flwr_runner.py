"""Submit a ``flwr run`` and follow it: a rich progress bar fed by the ServerApp's round lines.

The run belongs to the command that submitted it: a SIGTERM or SIGINT (Ctrl-C) of that command stops it
with ``flwr stop`` (the ServerApp runs in Flower's SuperLink, not as a child of this process, so ending
the ``flwr run`` child alone would leave it running). A ``kill -9`` leaves no chance to do so; the store's
run lock (:mod:`fedforget.store.lock`) then keeps any other run from writing the store beside it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

import fedforget
from fedforget.methods.registry import FAMILIES
from fedforget.store.secret_files import mkdir_private
from fedforget.store.store import resolve_store_path

#: ANSI escape sequences (CSI such as colours and cursor moves, OSC such as hyperlinks, other escapes such as
#: charset selection): Flower colours its log lines even when they are streamed into a pipe, and a log file
#: must not hold them.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])|\x9b[0-?]*[ -/]*[@-~]")
ROUND_LINE = re.compile(r"round (\d+)/(\d+): test accuracy ([0-9.]+)")
#: What ``flwr run`` prints once the SuperLink accepted the run (flwr/cli/run/run.py).
STARTED_LINE = re.compile(r"Successfully started run (\d+)")
#: Bound on ``flwr stop`` after an interruption: the command exits even if the SuperLink does not answer.
STOP_TIMEOUT_S = 60.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived while a Flower run was followed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (what a log file written by fedforget holds)."""
    return ANSI.sub("", text)


def app_dir() -> Path:
    """The Flower app to submit: ``FEDFORGET_HOME``, else fedforget's own (:func:`own_app_dir`)."""
    home = os.environ.get("FEDFORGET_HOME")
    if home and (Path(home) / "pyproject.toml").is_file():
        return Path(home)
    return own_app_dir()


def own_app_dir() -> Path:
    """fedforget's own Flower app: this source checkout, else the app manifest an installed wheel carries (its
    FAB holds only the manifest; the ServerApp and ClientApp then import the installed package, as Flower's
    runtime dependency installation is off)."""
    package = Path(fedforget.__file__).resolve().parent
    for path in (package.parent, package / "flower_app"):
        if (path / "pyproject.toml").is_file():
            return path
    raise FileNotFoundError("cannot find the fedforget app (pyproject.toml); reinstall fedforget or set "
                            "FEDFORGET_HOME to a checkout")


def flwr_cli() -> str:
    """Flower's CLI of this interpreter's environment (so an installed copy works without an activated
    venv), else whichever ``flwr`` is on the PATH."""
    beside = Path(sys.executable).parent / "flwr"
    return str(beside) if beside.is_file() else "flwr"


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Interrupted` in the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_run(proc: subprocess.Popen, run_id: int | None, federation: str, env: dict[str, str],
             app: Path | None = None) -> str:
    """Stop the Flower run ``run_id`` (``flwr stop``) and end the ``flwr run`` child; what happened, in words.

    Further SIGTERM/SIGINT are ignored meanwhile, so the stop request is not cut off; it is bounded by
    :data:`STOP_TIMEOUT_S`.
    """
    from fedforget.process_tree import kill_tree

    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        if run_id is None:
            outcome = "the run had not started (no run id yet)"
        else:
            try:
                stop = subprocess.run([flwr_cli(), "stop", str(run_id), federation], env=env, cwd=app or app_dir(),
                                      capture_output=True, text=True, timeout=STOP_TIMEOUT_S, check=False)
                outcome = (f"stopped Flower run {run_id}" if stop.returncode == 0 else
                           f"`flwr stop {run_id} {federation}` failed (exit {stop.returncode}); run it by hand")
            except (OSError, subprocess.TimeoutExpired) as exc:
                outcome = f"`flwr stop {run_id} {federation}` failed ({type(exc).__name__}); run it by hand"
        kill_tree(proc.pid, timeout=5.0)
        return outcome
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def flwr_run(federation: str, run_config: str, store: str, console: Console,
             app: Path | None = None, home: Path | None = None) -> tuple[int, Path]:
    """Run the app on ``federation`` with ``run_config`` + ``store``; return (exit code, log path). ``app``:
    the Flower app to submit (the one that trained the store: :mod:`fedforget.unlearning.user_app`), else
    fedforget's own (:func:`app_dir`). ``home``: the ``FEDFORGET_HOME`` a SuperLink started for the run gets
    (the app's directory, which its relative paths mean: :mod:`fedforget.federation.app_home`).

    Everything it prints (the command line, the progress bar, error lines) goes to ``console``: a command
    whose stdout is JSON passes a console on stderr. SIGTERM/SIGINT stop the run and exit 128 + signal
    number with one line (:func:`stop_run`).
    """
    store_path = resolve_store_path(store)
    mkdir_private(store_path)
    log_path = store_path / "flwr-run.log"
    config = f"{run_config} store={json.dumps(str(store_path))}".strip()  # a TOML basic string
    app = app or app_dir()
    cmd = [flwr_cli(), "run", str(app), federation, "--stream", "--run-config", config]
    from fedforget.local_superlink import ports_env

    # this checkout's own local SuperLink (its ports recorded in $FLWR_HOME), never another checkout's
    env = {**os.environ, **ports_env(), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "NO_COLOR": "1"}
    if home is not None:
        env["FEDFORGET_HOME"] = str(home)
    console.print(f"[dim]$ {' '.join(shlex.quote(c) for c in cmd)}[/]")
    from fedforget.local_superlink import ensure_started

    with console.status("starting this checkout's local SuperLink…"):
        ensure_started(federation, env)  # flwr gives its own start-up only 15 s, too few on a loaded machine
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the store stays owner-only
    run_id: int | None = None
    proc: subprocess.Popen | None = None
    try:
        with interruptible(), open(fd, "w", encoding="utf-8") as log, Progress(
            TextColumn("[bold blue]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[acc]}"), TimeElapsedColumn(), console=console,
        ) as progress:
            bar = progress.add_task(f"{federation}: starting Flower", total=None, acc="")
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    cwd=app)
            assert proc.stdout is not None
            for line in proc.stdout:
                line = strip_ansi(line)
                log.write(line)
                log.flush()
                if run_id is None and (started := STARTED_LINE.search(line)) is not None:
                    run_id = int(started[1])
                follow_line(line, progress, bar, federation)
            code = proc.wait()
    except Interrupted as interrupted:
        from fedforget.cli_kit.errors import fail

        outcome = stop_run(proc, run_id, federation, env, app) if proc is not None else "no run was submitted"
        fail(f"interrupted ({interrupted}): {outcome}; nothing half-done is served; its log is {log_path}",
             code=128 + interrupted.signum)
    return code, log_path


#: A refusal line the ServerApp logged (fedforget.federation.refusal), as ``flwr run --stream`` prints it.
REFUSAL_LINE = re.compile(r"ERROR\s*:\s*(fedforget: .*\S)")


def refusal_in_log(log_path: Path) -> str | None:
    """The first refusal line of a run's log (without its ``fedforget:``), None if the run logged none."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = REFUSAL_LINE.search(text)
    return found[1].removeprefix("fedforget: ") if found else None


@functools.cache
def progress_lines() -> tuple[tuple[re.Pattern[str], str], ...]:
    """Each method's progress lines (its declared ``progress``), compiled once, in registry order."""
    return tuple((re.compile(pattern), label) for method in FAMILIES for pattern, label in method.progress.items())


def method_progress(line: str) -> tuple[str, int, int] | None:
    """(label, done, total) of the first method progress line ``line`` holds, else None."""
    for pattern, label in progress_lines():
        if (match := pattern.search(line)) is not None:
            return label, int(match[1]), int(match[2])
    return None


def follow_line(line: str, progress: Progress, bar: TaskID, federation: str) -> None:
    """Move the progress bar on a round line or a method's progress line; echo error lines."""
    match = ROUND_LINE.search(line)
    if match:
        rnd, total, acc = int(match[1]), int(match[2]), float(match[3])
        progress.update(bar, description=f"{federation}: round", completed=rnd, total=total,
                        acc=f"test accuracy {acc:.4f}")
        if rnd > 0:
            progress.console.print(f"round {rnd}/{total}: test accuracy {acc:.4f}")
    elif (found := method_progress(line)) is not None:
        label, done, total = found
        progress.update(bar, description=f"{federation}: {label}", completed=done, total=total, acc="")
    elif "ERROR" in line or "Traceback" in line:
        progress.console.print(line.rstrip(), style="red", markup=False, highlight=False)
