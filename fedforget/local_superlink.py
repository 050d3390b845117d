"""Each checkout's own managed local SuperLink: its ports, and stopping exactly it.

``flwr run . local-simulation`` talks to whatever answers on ``127.0.0.1:39091`` (HTTP API) and
``:39093`` (Control API), Flower's fixed defaults: a second checkout's run would execute in the first
checkout's SuperLink, with that checkout's code and environment. ``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT``
and ``FLWR_LOCAL_CONTROL_API_PORT`` move it; this module gives each checkout its own pair, derived from
the checkout's path (a hash into 21000..30999, below Linux's ephemeral range, moved to the next free
pair if taken), recorded in ``$FLWR_HOME/local-superlink.env`` (``tools/setup.sh`` writes it and
exports it from ``.venv/bin/activate``), and stops the one SuperLink listening on it (``make
superlink-stop``), never another checkout's.

    python -m fedforget.local_superlink ports ROOT   # print (and record) the pair of checkout ROOT
    python -m fedforget.local_superlink stop         # stop this checkout's SuperLink ($FLWR_HOME)
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

HTTP_ENV = "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"
CONTROL_ENV = "FLWR_LOCAL_CONTROL_API_PORT"
PORTS_FILE = "local-superlink.env"
BASE_PORT = 21000
SLOTS = 2500  # pairs (p, p + 2) at p = BASE_PORT + 4 * slot: 21000..30999
FLOWER_DEFAULT = (39091, 39093)


def derived_ports(checkout: str | os.PathLike[str], offset: int = 0) -> tuple[int, int]:
    """The (HTTP API, Control API) pair of ``checkout``: the same path always gives the same pair."""
    digest = hashlib.sha256(str(Path(checkout).resolve()).encode("utf-8")).digest()
    slot = (int.from_bytes(digest[:8], "big") + offset) % SLOTS
    http = BASE_PORT + 4 * slot
    return http, http + 2


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def choose_ports(checkout: str | os.PathLike[str], free: Callable[[int], bool] = port_free) -> tuple[int, int]:
    """The derived pair, or the next pair both of whose ports are free."""
    for offset in range(SLOTS):
        pair = derived_ports(checkout, offset)
        if all(free(p) for p in pair):
            return pair
    raise RuntimeError(f"no free pair of ports in {BASE_PORT}..{BASE_PORT + 4 * SLOTS - 1}")


def read_ports(flwr_home: Path) -> tuple[int, int] | None:
    """The pair recorded in ``flwr_home``, if any."""
    try:
        lines = (flwr_home / PORTS_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    values = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    try:
        return int(values[HTTP_ENV]), int(values[CONTROL_ENV])
    except (KeyError, ValueError):
        return None


def record_ports(checkout: Path, flwr_home: Path) -> tuple[int, int]:
    """Keep the pair already recorded for this checkout (its SuperLink may be the one holding it), else
    choose one and record it."""
    recorded = read_ports(flwr_home)
    if recorded is not None:
        return recorded
    pair = choose_ports(checkout)
    flwr_home.mkdir(parents=True, exist_ok=True)
    (flwr_home / PORTS_FILE).write_text(
        f"# this checkout's managed local SuperLink ({checkout}); written by tools/setup.sh\n"
        f"{HTTP_ENV}={pair[0]}\n{CONTROL_ENV}={pair[1]}\n", encoding="utf-8")
    return pair


def ports_env(flwr_home: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The two variables for a child ``flwr`` (from the environment, else ``$FLWR_HOME``'s record)."""
    if os.environ.get(HTTP_ENV) and os.environ.get(CONTROL_ENV):
        return {HTTP_ENV: os.environ[HTTP_ENV], CONTROL_ENV: os.environ[CONTROL_ENV]}
    home = flwr_home or os.environ.get("FLWR_HOME")
    pair = read_ports(Path(home)) if home else None
    return {} if pair is None else {HTTP_ENV: str(pair[0]), CONTROL_ENV: str(pair[1])}


def local_address(federation: str, flwr_home: Path) -> str | None:
    """``:local:`` or ``:local-in-memory:`` when connection ``federation`` of ``flwr_home/config.toml`` is
    Flower's managed local SuperLink, else None."""
    import tomllib

    try:
        config = tomllib.loads((flwr_home / "config.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    address = ((config.get("superlink") or {}).get(federation) or {}).get("address")
    return address if address in (":local:", ":local-in-memory:") else None


def default_connection(flwr_home: Path) -> str | None:
    """The connection ``flwr run`` takes when given none: ``[superlink] default`` of ``flwr_home/config.toml``."""
    import tomllib

    try:
        config = tomllib.loads((flwr_home / "config.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    default = (config.get("superlink") or {}).get("default")
    return default if isinstance(default, str) and default else None


def healthy(http_port: int, timeout: float = 0.4) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{http_port}/health", timeout=timeout).is_success
    except httpx.HTTPError:
        return False


def superlink_command(flwr_home: Path, http_port: int, control_port: int, in_memory: bool = False) -> list[str]:
    """The command ``flwr`` itself starts its managed local SuperLink with (flwr/cli/local_superlink.py)."""
    beside = Path(sys.executable).parent / "flower-superlink"
    runtime = flwr_home / "local-superlink"
    cmd = [str(beside) if beside.is_file() else "flower-superlink", "--insecure", "--simulation",
           "--isolation", "subprocess", "--control-api-address", f"127.0.0.1:{control_port}", "--host", "127.0.0.1",
           "--port", str(http_port), "--log-file", str(runtime / "superlink.log"),
           "--log-rotation-interval-hours", "24", "--log-rotation-backup-count", "7"]
    return cmd if in_memory else [*cmd, "--database", str(runtime / "state.db")]


def ensure_started(federation: str, env: dict[str, str], timeout: float = 180.0) -> None:
    """Start this checkout's managed local SuperLink ahead of ``flwr run`` when ``federation`` is one.

    ``flwr`` waits a hard-coded 15 s for the SuperLink it starts and kills it after that; on a loaded
    2-core machine start-up can take longer, and the run fails. Started here (the same command, on this
    checkout's ports, detached like flwr's), it gets ``timeout`` seconds; ``flwr run`` then finds it up.
    Does nothing for other connections, without recorded ports, or when it already answers."""
    import subprocess
    import time

    home = env.get("FLWR_HOME")
    address = local_address(federation, Path(home)) if home else None
    if address is None or not env.get(HTTP_ENV) or not env.get(CONTROL_ENV):
        return
    http, control = int(env[HTTP_ENV]), int(env[CONTROL_ENV])
    if healthy(http):
        return
    (Path(home) / "local-superlink").mkdir(parents=True, exist_ok=True)
    cmd = superlink_command(Path(home), http, control, in_memory=address == ":local-in-memory:")
    proc = subprocess.Popen(cmd, env={**env, "FLWR_DISABLE_UPDATE_CHECK": "1"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if healthy(http):
            return
        time.sleep(0.3)


@dataclass(frozen=True)
class Listener:
    """A process and the local TCP ports it listens on."""

    pid: int
    cmdline: tuple[str, ...]
    ports: frozenset[int]


def superlinks_on(http_port: int, listeners: Iterable[Listener]) -> list[int]:
    """The pids of the ``flower-superlink`` processes listening on ``http_port`` and started with
    ``--port http_port``: exactly this checkout's SuperLink, never one on other ports."""
    out = []
    for proc in listeners:
        argv = list(proc.cmdline)
        is_superlink = any(Path(a).name == "flower-superlink" for a in argv[:3])
        started_here = any(a == "--port" and i + 1 < len(argv) and argv[i + 1] == str(http_port)
                           for i, a in enumerate(argv)) or f"--port={http_port}" in argv
        if is_superlink and started_here and http_port in proc.ports:
            out.append(proc.pid)
    return sorted(out)


def listeners() -> list[Listener]:
    """The processes listening on TCP ports here (psutil)."""
    import psutil

    ports: dict[int, set[int]] = {}
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.pid:
            ports.setdefault(conn.pid, set()).add(conn.laddr.port)
    out = []
    for pid, held in ports.items():
        try:
            out.append(Listener(pid, tuple(psutil.Process(pid).cmdline()), frozenset(held)))
        except psutil.Error:
            continue
    return out


def running_home(http_port: int) -> Path | None:
    """The directory a running SuperLink on ``http_port`` takes relative run-config paths from: its
    ``FEDFORGET_HOME``, else its working directory (None: none runs there, or it cannot be read)."""
    import psutil

    for pid in superlinks_on(http_port, listeners()):
        try:
            proc = psutil.Process(pid)
            home = proc.environ().get("FEDFORGET_HOME")
            return Path(home) if home else Path(proc.cwd())
        except psutil.Error:
            return None
    return None


def stop(flwr_home: Path) -> int:
    """Stop this checkout's SuperLink (and its children: simulation, Ray); 0 also when none runs."""
    from fedforget.process_tree import kill_tree

    pair = read_ports(flwr_home)
    if pair is None:
        print(f"superlink-stop: no ports recorded in {flwr_home / PORTS_FILE}; run `make setup`", file=sys.stderr)
        return 2
    pids = superlinks_on(pair[0], listeners())
    if not pids:
        print(f"superlink-stop: no local SuperLink of this checkout is running (port {pair[0]})")
        return 0
    for pid in pids:
        kill_tree(pid)
    print(f"superlink-stop: stopped this checkout's local SuperLink (pid {', '.join(map(str, pids))}, "
          f"port {pair[0]})")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "ports":
        root = Path(argv[2] if len(argv) > 2 else ".").resolve()
        home = Path(os.environ.get("FLWR_HOME") or root / ".flwr")
        http, control = record_ports(root, home)
        print(http, control)
        return 0
    if len(argv) >= 2 and argv[1] == "stop":
        home = os.environ.get("FLWR_HOME")
        if not home:
            print("superlink-stop: FLWR_HOME is not set; source .venv/bin/activate", file=sys.stderr)
            return 2
        return stop(Path(home))
    print("usage: python -m fedforget.local_superlink ports [ROOT] | stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
