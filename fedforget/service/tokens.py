"""Bearer tokens of the forget service: created once by ``fedforget token create``, kept hashed.

A token is shown once, when it is created; the service keeps only its sha256 (the token is 256
random bits, so a fast hash is enough: there is nothing to guess), with its name and scopes, in
``<secrets dir>/service-tokens/<store key>.json``: the coordinator's secrets directory of the
receipt key (``receipt.secrets_dir``: ``$FEDFORGET_SECRETS``, else ``~/.config/fedforget``), outside
any checkout and any store, directory 0700 and file 0600, refused while others may read it. The
store key is a digest of the store's absolute path, so each store has its own tokens. Writers take
an ``flock`` and replace the file atomically; the service re-reads it when it changes, so a
revocation holds from the next request on.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedforget.store.atomic import atomic_write_bytes
from fedforget.store.bounded_read import read_bounded
from fedforget.store.secret_files import mkdir_private, open_to_others
from fedforget.unlearning.receipt import secrets_dir

SCOPES = ("forget:write", "status:read", "predict")
PREFIX = "ffs_"
MAX_NAME = 64
MAX_TOKENS_BYTES = 4 * 2**20


class TokenError(ValueError):
    """A token command cannot do what was asked (bad scope or name, unknown token); one line says why."""


@dataclass(frozen=True)
class Token:
    """A stored token: its name, scopes and hash (never the token itself)."""

    name: str
    scopes: tuple[str, ...]
    sha256: str
    created_at: float
    revoked_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "scopes": list(self.scopes), "sha256": self.sha256,
                "created_at": self.created_at, "revoked_at": self.revoked_at}


def store_key(store_root: Path) -> str:
    """The per-store file name: sha256 of the store's resolved absolute path (first 16 hex digits)."""
    return hashlib.sha256(str(Path(store_root).resolve()).encode("utf-8")).hexdigest()[:16]


def tokens_path(store_root: Path) -> Path:
    return secrets_dir() / "service-tokens" / f"{store_key(store_root)}.json"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _read(path: Path) -> dict[str, Any]:
    """The token file's contents; none yet when it is absent. Anything else at its name (a directory, a fifo, a
    device) is refused, never taken for "no tokens": a write would replace it or fail half way."""
    try:
        data = read_bounded(path, MAX_TOKENS_BYTES, "token file")
    except FileNotFoundError:
        return {"tokens": []}
    except OSError as exc:
        raise TokenError(f"the token file {exc}; it is not one fedforget wrote, move it aside") from None
    if open_to_others(path):
        raise TokenError(f"the token file {path} is open to others; run `chmod 600 {path}` and revoke its tokens")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except ValueError:
        raise TokenError(f"the token file {path} is not JSON; move it aside and create the tokens again") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("tokens"), list):
        raise TokenError(f"the token file {path} holds no token list")
    return parsed


def _tokens(data: dict[str, Any]) -> list[Token]:
    return [Token(str(t["name"]), tuple(t["scopes"]), str(t["sha256"]), float(t["created_at"]),
                  None if t.get("revoked_at") is None else float(t["revoked_at"])) for t in data["tokens"]]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time (``token create`` from two shells must not lose one of the two)."""
    mkdir_private(path.parent)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_scopes(scopes: list[str]) -> tuple[str, ...]:
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise TokenError(f"unknown scope(s) {', '.join(unknown)}; scopes are {', '.join(SCOPES)}" if unknown else
                         f"name at least one --scope ({', '.join(SCOPES)})")
    return tuple(s for s in SCOPES if s in scopes)


def create_token(store_root: Path, name: str, scopes: list[str]) -> tuple[str, Token]:
    """A new token (returned once, never stored) and its stored record; names are unique among live tokens."""
    if not name or len(name) > MAX_NAME or not all(c.isalnum() or c in "-_.@" for c in name):
        raise TokenError(f"a token name is 1..{MAX_NAME} letters, digits or - _ . @ (it is recorded as who asked)")
    wanted = check_scopes(scopes)
    path = tokens_path(store_root)
    with _locked(path):
        data = _read(path)
        if any(t.name == name and t.revoked_at is None for t in _tokens(data)):
            raise TokenError(f"a live token named {name!r} exists; revoke it first or pick another name")
        token = PREFIX + secrets.token_urlsafe(32)
        record = Token(name, wanted, token_hash(token), time.time())
        data["store"] = str(Path(store_root).resolve())
        data["tokens"].append(record.to_json())
        atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return token, record


def list_tokens(store_root: Path) -> list[Token]:
    return _tokens(_read(tokens_path(store_root)))


def revoke_token(store_root: Path, name: str) -> Token:
    """Revoke the live token named ``name`` (kept, marked revoked, so the record of who asked stays)."""
    path = tokens_path(store_root)
    with _locked(path):
        data = _read(path)
        for entry in data["tokens"]:
            if entry["name"] == name and entry.get("revoked_at") is None:
                entry["revoked_at"] = time.time()
                atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))
                return _tokens({"tokens": [entry]})[0]
    raise TokenError(f"no live token named {name!r} (`fedforget token list` shows them)")


class TokenBook:
    """The service's view of the token file, re-read whenever the file changes (mtime and size)."""

    def __init__(self, store_root: Path) -> None:
        self.path = tokens_path(store_root)
        self._seen: tuple[int, int] | None = None
        self._by_hash: dict[str, Token] = {}

    def _refresh(self) -> None:
        try:
            info = self.path.stat()
            stamp = (info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        if stamp != self._seen:
            tokens = _tokens(_read(self.path)) if stamp != (0, 0) else []
            self._by_hash = {t.sha256: t for t in tokens if t.revoked_at is None}
            self._seen = stamp

    def by_hash(self, digest: str) -> Token | None:
        """The live token with this sha256 (a console session names its token so)."""
        self._refresh()
        return self._by_hash.get(digest)

    def lookup(self, presented: str) -> Token | None:
        """The live token ``presented`` is, or None (compared by hash, in constant time per candidate)."""
        self._refresh()
        digest = token_hash(presented)
        for known, token in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return token
        return None
