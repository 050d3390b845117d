"""The forget service bounds what a client can hold over real HTTP (uvicorn on 127.0.0.1): a request head
past 64 KiB is refused and its connection closed, a body that does not arrive in time is a 408, and
`fedforget serve` on a busy port or with TLS files it cannot use prints one line and exits 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from fedforget.cli_kit.errors import USAGE_EXIT
from fedforget.launch import free_port
from fedforget.service import gate
from fedforget.service.server import MAX_HEADER_BYTES

from .service_helpers import Running, private_copy, self_signed, tokens, train_service_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service-bounds") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    return private_copy(trained, tmp_path)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def read_all(sock: socket.socket, limit_s: float) -> bytes:
    """Everything the server sends until it closes the connection (or ``limit_s`` passes)."""
    sock.settimeout(limit_s)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    return b"".join(chunks)


def send_head(port: int, header_bytes: int) -> tuple[bytes, bool]:
    """A GET /healthz with one header of ``header_bytes``; (the answer, whether the server closed first)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
        sent = 0
        try:
            sock.sendall(head)
            block = b"a" * 65536
            while sent < header_bytes:
                sock.sendall(block[: header_bytes - sent])
                sent += min(len(block), header_bytes - sent)
            sock.sendall(b"\r\nConnection: close\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            return read_all(sock, 5), True
        answer = read_all(sock, 30)
        return answer, False


def test_a_request_head_past_the_bound_is_refused_and_the_connection_closed(store):
    with Running(store) as url:
        port = port_of(url)
        start = time.monotonic()
        answer, cut = send_head(port, 64 * 2**20)  # 64 MiB of header
        assert time.monotonic() - start < 30
        assert cut or answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431")), answer[:200]
        small, _ = send_head(port, MAX_HEADER_BYTES // 2)  # negative control: a head within the bound is served
        assert small.startswith(b"HTTP/1.1 200") and b'{"status":"ok"}' in small


def test_a_body_that_does_not_arrive_in_time_is_408_and_nothing_is_written(store, monkeypatch):
    monkeypatch.setattr(gate, "BODY_SECONDS", 1.0)
    tok = tokens(store)["forget:write"]
    ledger = (store / "ledger.sqlite").read_bytes()
    body = json.dumps({"idempotency_key": "slow", "samples": [1]}).encode()
    with Running(store) as url:
        with socket.create_connection(("127.0.0.1", port_of(url)), timeout=30) as sock:
            sock.sendall(b"POST /v1/forget-requests HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Authorization: Bearer " + tok.encode() + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body[:5])  # then stalls
            start = time.monotonic()
            answer = read_all(sock, 20)
            waited = time.monotonic() - start
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert 0.5 < waited < 10
        detail = json.loads(answer.split(b"\r\n\r\n", 1)[1])["detail"]
        assert "did not arrive within 1 s" in detail and "\n" not in detail
        # negative control: the same body sent at once is applied
        with socket.create_connection(("127.0.0.1", port_of(url)), timeout=30) as sock:
            sock.sendall(b"POST /v1/forget-requests HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nAuthorization: Bearer " + tok.encode() + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            assert read_all(sock, 60).startswith(b"HTTP/1.1 201")
    assert (store / "ledger.sqlite").read_bytes() != ledger


def serve(store, *args: str) -> subprocess.CompletedProcess:  # noqa: ANN001
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "fedforget.unlearning.cli", "serve", "--store", str(store), *args],
                          capture_output=True, text=True, timeout=120, env=env)


def assert_one_line_usage_error(result: subprocess.CompletedProcess, *words: str) -> None:
    out = (result.stdout + result.stderr).strip()
    assert result.returncode == USAGE_EXIT, out
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert out.startswith("fedforget: error: ") and all(w in out for w in words), out


def test_serve_on_a_busy_port_prints_one_line_and_exits_2(store):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        result = serve(store, "--port", str(holder.getsockname()[1]))
    finally:
        holder.close()
    assert_one_line_usage_error(result, "cannot listen on 127.0.0.1", "--port")


@pytest.fixture
def pair(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return self_signed(tmp_path / "a"), self_signed(tmp_path / "b")


@pytest.mark.parametrize("case", ["missing-cert", "missing-key", "garbage-cert", "garbage-key", "mismatched",
                                  "unreadable-key"])
def test_serve_with_tls_files_it_cannot_use_prints_one_line_and_exits_2(store, pair, tmp_path, case):
    (cert, key), (_, other_key) = pair
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a pem file\n")
    if case == "unreadable-key":
        if os.geteuid() == 0:
            pytest.skip("root reads a file whatever its mode")
        key.chmod(0)
    files = {"missing-cert": (tmp_path / "nope.pem", key), "missing-key": (cert, tmp_path / "nope.pem"),
             "garbage-cert": (garbage, key), "garbage-key": (cert, garbage), "mismatched": (cert, other_key),
             "unreadable-key": (cert, key)}[case]
    port = free_port()
    result = serve(store, "--port", str(port), "--tls-cert", str(files[0]), "--tls-key", str(files[1]))
    assert_one_line_usage_error(result)
    if case == "mismatched":
        assert "does not match" in result.stderr
    with pytest.raises(OSError):  # nothing was left listening
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_serve_with_a_good_pair_is_not_refused_by_the_checks(store, pair):
    from fedforget.service.server import check_tls

    (cert, key), _ = pair
    check_tls(cert, key)  # negative control: the checks pass a pair uvicorn serves
