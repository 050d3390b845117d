"""Start and stop real Flower runtimes on this machine: a managed simulation SuperLink and a
loopback deployment, each with its own ``FLWR_HOME`` and ports, for tests and benchmarks.

Both are context managers that stop every process they started (SuperLink, SuperNodes, their
SuperExec and app children, Ray) when the block ends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from fedforget.process_tree import kill_tree
from fedforget.unlearning.flwr_runner import app_dir

LOOPBACK_SCRIPT = "deploy/loopback.sh"
LOCAL_SUPERLINK_GRACE_S = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_block(size: int) -> int:
    """A base port whose next ``size`` ports are all free on 127.0.0.1."""
    for _ in range(200):
        base = free_port()
        if base + size >= 65535:
            continue
        try:
            for port in range(base, base + size):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no block of free ports on 127.0.0.1")


def _processes_with(*needles: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if all(n in cmd for n in needles):
            found.append(proc)
    return found


@dataclass
class FlowerHome:
    """A private ``FLWR_HOME`` with one SuperLink connection, and the environment to use it."""

    home: Path
    connection: str
    env: dict[str, str]

    def run_command(self, run_config: str, extra: list[str] | None = None) -> list[str]:
        """The ``flwr run --stream`` command line for this connection (run it from :func:`app_dir`)."""
        return ["flwr", "run", str(app_dir()), self.connection, "--stream", "--run-config", run_config, *(extra or [])]

    def flwr_run(self, run_config: str, timeout: float, extra: list[str] | None = None) -> subprocess.CompletedProcess:
        """``flwr run --stream``; tried once more if Flower gave up on starting its local SuperLink.

        flwr waits a hard-coded 15 s for the managed SuperLink, which a loaded 2-core machine can
        exceed; the SuperLink usually comes up moments later, and the second try finds it.
        """
        cmd = self.run_command(run_config, extra)
        for attempt in (1, 2):
            proc = subprocess.run(cmd, env=self.env, cwd=app_dir(), capture_output=True, text=True,
                                  timeout=timeout, check=False)
            if attempt == 2 or "Failed to start local SuperLink" not in proc.stdout + proc.stderr:
                return proc
            time.sleep(LOCAL_SUPERLINK_GRACE_S)
        return proc


@dataclass
class LoopbackDeployment(FlowerHome):
    """A running ``deploy/loopback.sh`` deployment: its CLI connection, plus crashing and restarting
    one SuperNode the way an operator's machine would (for the node-failure test and benchmark)."""

    deploy_dir: Path
    script: str

    def _node(self, action: str, index: int) -> None:
        proc = subprocess.run(["bash", self.script, action, str(index)], env=self.env, capture_output=True,
                              text=True, timeout=180, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"loopback.sh {action} {index}: {proc.stderr.strip() or proc.stdout.strip()}")

    def kill_node(self, index: int) -> None:
        """``kill -9`` SuperNode ``index`` with its SuperExec and ClientApp processes (its whole session)."""
        self._node("kill-node", index)

    def restart_node(self, index: int) -> None:
        """Start SuperNode ``index`` again (same partition and state dir, new node id); returns once the
        SuperLink has activated it."""
        self._node("restart-node", index)

    def node_log(self, index: int) -> Path:
        return self.deploy_dir / f"supernode{index}.log"

    def node_messages(self, index: int) -> tuple[int, int]:
        """(messages received, replies sent) by SuperNode ``index`` so far, from its log."""
        log = self.node_log(index)
        text = log.read_text(errors="replace") if log.exists() else ""
        return text.count("Received successfully"), text.count("Sent successfully")

    def kill_node_mid_round(self, index: int, running: Callable[[], bool], after: int = 1,
                            timeout: float = 600.0) -> float:
        """``kill -9`` SuperNode ``index`` as soon as it holds a message it has not answered, past its
        first ``after`` messages (the partition query is the first); returns the monotonic kill time.
        Raises if the reply was already sent when the kill landed, or ``running()`` turns false first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and running():
            received, sent = self.node_messages(index)
            if received > after and received > sent:
                self.kill_node(index)
                killed = time.monotonic()
                received, sent = self.node_messages(index)
                if sent >= received:
                    raise RuntimeError(f"SuperNode {index} answered before the kill landed")
                return killed
            time.sleep(0.05)
        raise RuntimeError(f"SuperNode {index} never held a message to kill it on")


def _base_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"FLWR_HOME": str(home), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                "FLWR_DISABLE_UPDATE_CHECK": "1", "HF_HUB_OFFLINE": "1", "FLWR_TELEMETRY_ENABLED": "0"})
    return env


@contextmanager
def simulation_federation(home: Path, num_nodes: int) -> Iterator[FlowerHome]:
    """Flower's managed local SuperLink (Ray simulation engine) on private ports."""
    home.mkdir(parents=True, exist_ok=True)
    http_port, control_port = free_port(), free_port()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "sim"\n\n[superlink.sim]\naddress = ":local:"\n'
        f"options.num-supernodes = {num_nodes}\noptions.backend.client-resources.num-cpus = 1\n",
        encoding="utf-8",
    )
    env = _base_env(home)
    env.update({"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port), "FLWR_LOCAL_CONTROL_API_PORT": str(control_port)})
    try:
        yield FlowerHome(home, "sim", env)
    finally:
        for proc in _processes_with("flower-superlink", f"--port {http_port}"):
            kill_tree(proc.pid)


@contextmanager
def loopback_deployment(folder: Path, num_nodes: int, ready_timeout: float = 120.0, tls: bool = False,
                        auth: bool = False, data_dir: Path | None = None) -> Iterator[LoopbackDeployment]:
    """One SuperLink and ``num_nodes`` SuperNodes as processes on 127.0.0.1 (deploy/loopback.sh);
    ``tls``: TLS with a private CA, ``auth``: SuperNode authentication (implies TLS); ``data_dir``: each
    SuperNode p trains on its own records in ``data_dir/node-<p>`` (``fedforget data split``'s layout)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port_block(num_nodes + 11)
    home = folder / "cli-home"
    home.mkdir(exist_ok=True)
    tls = tls or auth
    trust = f'root-certificates = "{folder / "deploy" / "certs" / "ca.crt"}"' if tls else "insecure = true"
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\naddress = "127.0.0.1:{port}"\n{trust}\n',
        encoding="utf-8",
    )
    env = _base_env(home)
    env.update({"FEDFORGET_DEPLOY_DIR": str(folder / "deploy"), "FEDFORGET_DEPLOY_PORT": str(port),
                "FEDFORGET_DEPLOY_NODES": str(num_nodes), "FEDFORGET_DEPLOY_TLS": str(int(tls)),
                "FEDFORGET_DEPLOY_AUTH": str(int(auth)), "FEDFORGET_DEPLOY_DATA": str(data_dir or "")})
    script = str(app_dir() / LOOPBACK_SCRIPT)
    fed = LoopbackDeployment(home, "deploy", env, folder / "deploy", script)
    try:
        subprocess.run(["bash", script, "up"], env=env, check=True, capture_output=True, text=True, timeout=120)
        wait_for_nodes(fed, num_nodes, ready_timeout)
        yield fed
    finally:
        subprocess.run(["bash", script, "down"], env=env, check=False, capture_output=True, timeout=120)


def wait_for_nodes(fed: FlowerHome, num_nodes: int, timeout: float) -> None:
    """Poll ``flwr supernode list`` until ``num_nodes`` SuperNodes are online."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["flwr", "supernode", "list", fed.connection, "--format", "json"], env=fed.env,
                             capture_output=True, text=True, check=False, timeout=60)
        online = 0
        try:
            nodes = json.loads(out.stdout).get("nodes", [])
            online = sum(1 for n in nodes if str(n.get("status", "")).lower() == "online")
        except (json.JSONDecodeError, AttributeError):
            pass
        if online >= num_nodes:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {online} of {num_nodes} SuperNodes came online; see the deploy logs")
        time.sleep(1.0)
