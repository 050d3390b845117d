"""Each checkout's managed local SuperLink is its own: ports derived from the checkout's path (stable per
path, different between paths, moved when taken), and `make superlink-stop` stops only the SuperLink on this
checkout's port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psutil

from fedforget import local_superlink as ls
from fedforget.local_superlink import Listener, superlinks_on


def test_port_derivation_is_stable_per_path_and_differs_between_paths(tmp_path):
    a, b = tmp_path / "checkout-a", tmp_path / "checkout-b"
    assert ls.derived_ports(a) == ls.derived_ports(a) == ls.derived_ports(str(a) + "/")
    assert ls.derived_ports(a) != ls.derived_ports(b)
    pairs = {ls.derived_ports(tmp_path / f"c{i}") for i in range(50)}
    assert len(pairs) >= 45  # a hash spread over 2500 pairs
    for http, control in pairs:
        assert control == http + 2 and ls.BASE_PORT <= http < control < 31000
        assert (http, control) != ls.FLOWER_DEFAULT


def test_a_taken_pair_moves_to_the_next_free_one(tmp_path):
    first = ls.derived_ports(tmp_path)
    assert ls.choose_ports(tmp_path, free=lambda p: True) == first
    assert ls.choose_ports(tmp_path, free=lambda p: p not in first) == ls.derived_ports(tmp_path, 1)


def test_the_recorded_pair_is_kept_and_exported(tmp_path, monkeypatch):
    home = tmp_path / ".flwr"
    pair = ls.record_ports(tmp_path, home)
    assert ls.read_ports(home) == pair
    assert ls.record_ports(tmp_path, home) == pair  # even while its own SuperLink holds the ports
    monkeypatch.delenv(ls.HTTP_ENV, raising=False)
    monkeypatch.delenv(ls.CONTROL_ENV, raising=False)
    assert ls.ports_env(home) == {ls.HTTP_ENV: str(pair[0]), ls.CONTROL_ENV: str(pair[1])}


def test_stop_selects_only_the_superlink_listening_on_this_checkouts_port():
    argv = ("/venv/bin/python", "/venv/bin/flower-superlink", "--insecure", "--simulation", "--port")
    mine = Listener(10, (*argv, "21004"), frozenset({21004, 21006}))
    other_checkout = Listener(11, (*argv, "39091"), frozenset({39091, 39093}))
    not_a_superlink = Listener(12, ("python", "-m", "http.server", "--port", "21004"), frozenset({21004}))
    stale_cmdline = Listener(13, (*argv, "21004"), frozenset())  # not listening (any more)
    found = superlinks_on(21004, [other_checkout, mine, not_a_superlink, stale_cmdline])
    assert found == [10]
    assert superlinks_on(21008, [mine, other_checkout]) == []


FAKE = """import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1]))); s.listen(); time.sleep(120)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(pid: int, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in psutil.Process(pid).net_connections()):
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} never listened on {port}")


def test_superlink_stop_stops_this_checkouts_superlink_and_leaves_another_running(tmp_path, capsys):
    script = tmp_path / "flower-superlink"
    script.write_text(FAKE)
    mine_port, other_port = _free_port(), _free_port()
    mine = subprocess.Popen([sys.executable, str(script), "--insecure", "--simulation", "--port", str(mine_port)])
    other = subprocess.Popen([sys.executable, str(script), "--insecure", "--simulation", "--port", str(other_port)])
    try:
        _listening(mine.pid, mine_port)
        _listening(other.pid, other_port)
        home = tmp_path / ".flwr"
        home.mkdir()
        (home / ls.PORTS_FILE).write_text(f"{ls.HTTP_ENV}={mine_port}\n{ls.CONTROL_ENV}={mine_port + 2}\n")
        assert ls.stop(home) == 0
        assert mine.wait(15) is not None and other.poll() is None
        assert f"pid {mine.pid}" in capsys.readouterr().out
        assert ls.stop(home) == 0 and "no local SuperLink" in capsys.readouterr().out
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()


def test_a_superlink_started_ahead_of_flwr_is_the_one_stop_selects(tmp_path):
    (tmp_path / "config.toml").write_text('[superlink.local-simulation]\naddress = ":local:"\n\n'
                                          '[superlink.docker]\naddress = "127.0.0.1:8000"\n')
    assert ls.local_address("local-simulation", tmp_path) == ":local:"
    assert ls.local_address("docker", tmp_path) is None and ls.local_address("nope", tmp_path) is None
    cmd = ls.superlink_command(tmp_path, 21004, 21006)
    assert "--simulation" in cmd and cmd[cmd.index("--control-api-address") + 1] == "127.0.0.1:21006"
    assert superlinks_on(21004, [Listener(7, ("/venv/bin/python", *cmd), frozenset({21004}))]) == [7]


def test_ensure_started_leaves_other_connections_alone(tmp_path, monkeypatch):
    (tmp_path / "config.toml").write_text('[superlink.docker]\naddress = "127.0.0.1:8000"\n')
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(AssertionError("started")))
    env = {"FLWR_HOME": str(tmp_path), ls.HTTP_ENV: "21004", ls.CONTROL_ENV: "21006"}
    ls.ensure_started("docker", env)
    ls.ensure_started("local-simulation", {**env, ls.HTTP_ENV: ""})
