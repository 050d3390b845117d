"""``fedforget serve``: the app under uvicorn, on 127.0.0.1 unless told otherwise, TLS when given a pair."""

from __future__ import annotations

import sys
from pathlib import Path

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def serve(store_root: Path, host: str = "127.0.0.1", port: int = 8080, tls_cert: Path | None = None,
          tls_key: Path | None = None) -> None:
    """Run until SIGINT/SIGTERM. Requests a crash left accepted are applied before the first is served."""
    import uvicorn

    from fedforget.service.app import create_app

    app = create_app(store_root, tls=tls_cert is not None)
    if host not in LOOPBACK and tls_cert is None:
        print(f"fedforget serve: listening on {host} without TLS: put it behind a TLS proxy or pass --tls-cert/"
              "--tls-key (tokens travel in every request)", file=sys.stderr)
    uvicorn.run(app, host=host, port=port, ssl_certfile=str(tls_cert) if tls_cert else None,
                ssl_keyfile=str(tls_key) if tls_key else None, log_level="info", server_header=False)
