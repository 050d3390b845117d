"""Shared set-up of the forget-service tests: a trained FedSGT store, tokens, a client on the app."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from fedforget.service.app import create_app
from fedforget.service.tokens import create_token
from fedforget.store.copy import copy_store

from .helpers import train_in_process

CHAINS = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2}


def train_service_store(path: Path) -> Path:
    train_in_process(path, 3, **CHAINS)
    return path


def private_copy(trained: Path, parent: Path) -> Path:
    return copy_store(trained, parent / "store")


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
