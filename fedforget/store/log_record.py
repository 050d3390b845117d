"""Where the coordinator records each head it signs, outside the store: what makes a rollback visible.

Two records: one keyed by the store's path (the newest head signed there), and one keyed by the store's identity,
the random ``store-id`` its manifest holds from its creation (fingerprinted with the manifest), listing every log
the coordinator signed for that store wherever it lay. A store opened at a new path whose log is none of those,
while one of them held forget requests, had its log replaced (a log adopted again over edited tables): refused.
A copy of a store shares its identity and its log, so copies at several paths are checked by their paths.


A store copied back from a backup, or its log cut back, is a store whose every file agrees with itself; only
something kept elsewhere can tell. Each signing writes ``<secrets>/logs/<sha256 of the store's path>.json``
(owner-only, like the signing key): the store's path, its log's id, the size and root of the head, and whether
a forget request lay under it. The store check compares the log with it: the log must still hold that many
entries with that root (the log only grows), and a store whose log is another one at that path must not
hide forget requests the coordinator signed. The record only grows: concurrent coordinators take its lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedforget.store.atomic import atomic_write_json
from fedforget.store.bounded_read import read_bounded
from fedforget.store.secret_files import mkdir_private, secrets_dir

MAX_RECORD_BYTES = 64 * 2**10


def store_id(store_root: Path) -> str | None:
    """The ``store-id`` of the store's manifest (None: a store created before stores had one), read once per
    version of the manifest file."""
    from fedforget.store.store import MANIFEST, MAX_MANIFEST_BYTES

    path = Path(store_root) / MANIFEST
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _ids:
        try:
            manifest = json.loads(read_bounded(path, MAX_MANIFEST_BYTES, "manifest").decode("utf-8"))
            found = manifest.get("store-id") if isinstance(manifest, dict) else None
        except (OSError, ValueError):
            found = None
        if len(_ids) > 64:
            _ids.clear()
        _ids[key] = found if isinstance(found, str) else None
    return _ids[key]


_ids: dict[tuple[str, int, int, int], str | None] = {}


def identity_path(identity: str) -> Path:
    """Where the logs signed for the store with ``store-id`` ``identity`` are recorded."""
    return secrets_dir() / "logs" / f"id-{hashlib.sha256(identity.encode()).hexdigest()[:32]}.json"


def record_path(store_root: Path) -> Path:
    where = os.path.realpath(store_root)
    return secrets_dir() / "logs" / f"{hashlib.sha256(where.encode()).hexdigest()[:32]}.json"


def read_record(store_root: Path, path: Path | None = None) -> dict[str, Any] | None:
    """The last head the coordinator recorded for the store at this path (None: none recorded here); ``path``:
    its :func:`record_path`, when the caller keeps it."""
    path = path or record_path(store_root)
    try:
        data = json.loads(read_bounded(path, MAX_RECORD_BYTES, "log record").decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"unreadable": str(path)}
    return data if isinstance(data, dict) else {"unreadable": str(path)}


def write_record(store_root: Path, head: dict[str, Any], requests: bool) -> None:
    """Record ``head`` for the store (unless a larger one of the same log is recorded already)."""
    path = record_path(store_root)
    mkdir_private(path.parent)
    lock = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = read_record(store_root)
        if old and old.get("log") == head["log"] and int(old.get("size", 0)) >= int(head["size"]):
            return
        atomic_write_json(path, {"store": os.path.realpath(store_root), "log": head["log"], "size": head["size"],
                                 "root": head["root"], "at": head["at"],
                                 "requests": bool(requests or (old or {}).get("log") == head["log"]
                                                  and (old or {}).get("requests"))})
        identity = store_id(store_root)
        if identity is not None:
            _note_log(identity, str(head["log"]), requests)
    finally:
        os.close(lock)


def _note_log(identity: str, log: str, requests: bool) -> None:
    """Add ``log`` (with whether a forget request lay under its head) to the store identity's record."""
    path = identity_path(identity)
    logs = dict(signed_logs(identity) or {})
    if logs.get(log) is True or (log in logs and not requests):
        return
    logs[log] = bool(requests or logs.get(log))
    atomic_write_json(path, {"store-id": identity, "logs": logs})


def signed_logs(identity: str) -> dict[str, bool] | None:
    """log id → whether a forget request lay under a head the coordinator signed for it, for the store with
    ``store-id`` ``identity`` (None: none recorded; ``{}`` when the record is unreadable)."""
    path = identity_path(identity)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _logs:  # the service asks before every request: the file is read when it changed
        try:
            data = json.loads(read_bounded(path, MAX_RECORD_BYTES, "log record").decode("utf-8"))
        except (OSError, ValueError):
            data = None
        logs = data.get("logs") if isinstance(data, dict) else None
        if len(_logs) > 64:
            _logs.clear()
        _logs[key] = {str(k): bool(v) for k, v in logs.items()} if isinstance(logs, dict) else {}
    return _logs[key]


_logs: dict[tuple[str, int, int, int], dict[str, bool]] = {}


def record_problems(store_root: Path, log_id: str | None, size: int, root_at: Mapping[int, str],
                    has_log: bool, path: Path | None = None) -> list[str]:
    """What the record kept outside the store says is wrong with this store's log (``root_at``: size → root of
    the log's first ``size`` entries, for the sizes :func:`recorded_size` names; ``path``: the record's
    :func:`record_path`, when the caller keeps it)."""
    identity = store_id(store_root)
    logs = signed_logs(identity) if identity is not None else None
    if logs and log_id not in logs and any(logs.values()):
        return [f"the ledger's log is not one the coordinator signed for this store (store id {identity[:16]}, "
                "whose log held forget requests): its log was replaced"]
    record = read_record(store_root, path)
    if record is None:
        return []
    if "unreadable" in record:
        return [f"the coordinator's record of this store's log ({record['unreadable']}) is unreadable; restore it "
                "or remove it"]
    if not has_log or record.get("log") != log_id:
        if record.get("requests"):
            return ["the ledger's log is not the one the coordinator signed for this store (it recorded a log with "
                    "forget requests here): the store was replaced or rolled back"]
        return []
    want = int(record.get("size", 0))
    if size < want:
        return [f"the ledger's log was rolled back: the coordinator signed {want} entries, it holds {size}"]
    if root_at.get(want) != record.get("root"):
        return [f"the ledger's first {want} entries are not the ones the coordinator signed: the log was rewritten"]
    return []


def recorded_size(store_root: Path) -> int | None:
    record = read_record(store_root)
    size = record.get("size") if record else None
    return size if isinstance(size, int) else None
