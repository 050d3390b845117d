"""Shared set-up of the forget-service tests: a trained FedSGT store, tokens, a client on the app."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import uvicorn
from fastapi.testclient import TestClient

from fedforget.launch import free_port
from fedforget.service.app import create_app
from fedforget.service.server import SERVER_BOUNDS
from fedforget.service.tokens import create_token

from .helpers import train_in_process

CHAINS = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2}


def train_service_store(path: Path) -> Path:
    train_in_process(path, 3, **CHAINS)
    return path


def private_copy(trained: Path, parent: Path) -> Path:
    dst = parent / "store"
    shutil.copytree(trained, dst)
    return dst


def tokens(store: Path) -> dict[str, str]:
    """One token per scope, named after it, plus one with every scope ('all')."""
    out = {scope: create_token(store, scope.replace(":", "-"), [scope])[0]
           for scope in ("forget:write", "status:read", "predict")}
    out["all"] = create_token(store, "all", ["forget:write", "status:read", "predict"])[0]
    return out


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def client(store: Path) -> TestClient:
    return TestClient(create_app(store))


class Running:
    """uvicorn serving the app in a thread of this process, with the bounds `fedforget serve` runs with;
    stopped on exit."""

    def __init__(self, store: Path) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(store), host="127.0.0.1", port=self.port,
                                                    log_level="warning", **SERVER_BOUNDS))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.time() + 60
        while not self.server.started:
            assert time.time() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
