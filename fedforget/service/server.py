"""``fedforget serve``: the app under uvicorn, on 127.0.0.1 unless told otherwise, TLS when given a pair.

What uvicorn would report with a traceback (a port in use, a certificate it cannot load) is checked
here first and raised as :class:`ServeError`, one line, before the service opens the store.
"""

from __future__ import annotations

import socket
import ssl
import sys
from pathlib import Path
from typing import Any

LOOPBACK = ("127.0.0.1", "::1", "localhost")
#: the largest request head (request line + headers) h11 buffers; a longer one is refused and the connection closed
MAX_HEADER_BYTES = 64 * 1024
#: the bounds every server of this app runs with (tests start theirs with the same): the h11 parser, whose head
#: buffer is bounded (httptools, uvicorn's default when installed, has no such bound), no Server header
SERVER_BOUNDS: dict[str, Any] = {"http": "h11", "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
                                 "server_header": False}


class ServeError(RuntimeError):
    """The service cannot start as asked (port, TLS files); the message is one line saying what to do."""


def check_tls(cert: Path, key: Path) -> None:
    """Load the pair as uvicorn will; :class:`ServeError` if a file is missing, unreadable or they do not match."""
    for what, path in (("--tls-cert", cert), ("--tls-key", key)):
        if not path.is_file():
            raise ServeError(f"{what} {path} is not a file")
        try:
            path.read_bytes()
        except OSError as exc:
            raise ServeError(f"{what} {path} cannot be read ({exc.strerror or exc})") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(cert), str(key))
    except ssl.SSLError as exc:
        why = "the key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(exc) else \
            "they are not a PEM certificate and its PEM private key"
        raise ServeError(f"cannot use --tls-cert {cert} with --tls-key {key}: {why} ({exc.reason or exc})") from None
    except OSError as exc:
        raise ServeError(f"cannot load --tls-cert {cert} / --tls-key {key}: {exc.strerror or exc}") from None


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now, so a port in use is one line here rather than uvicorn's exit."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise ServeError(f"cannot listen on {host}: {exc.strerror or exc} (pass --host with an address)") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (stop what holds it, or pass "
                         "another --port)") from None
    sock.set_inheritable(True)
    return sock


def serve(store_root: Path, host: str = "127.0.0.1", port: int = 8080, tls_cert: Path | None = None,
          tls_key: Path | None = None) -> None:
    """Run until SIGINT/SIGTERM. Requests a crash left accepted are applied before the first is served."""
    import uvicorn

    from fedforget.service.app import create_app

    if (tls_cert is None) != (tls_key is None):
        raise ServeError("pass --tls-cert and --tls-key together (or neither)")
    if tls_cert is not None and tls_key is not None:
        check_tls(tls_cert, tls_key)
    sock = bind(host, port)
    try:
        app = create_app(store_root, tls=tls_cert is not None)
        if host not in LOOPBACK and tls_cert is None:
            print(f"fedforget serve: listening on {host} without TLS: put it behind a TLS proxy or pass --tls-cert/"
                  "--tls-key (tokens travel in every request)", file=sys.stderr)
        config = uvicorn.Config(app, host=host, port=port, ssl_certfile=str(tls_cert) if tls_cert else None,
                                ssl_keyfile=str(tls_key) if tls_key else None, log_level="info", **SERVER_BOUNDS)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
