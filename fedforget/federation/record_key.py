"""Which record key a run's nodes key their own records' sample ids with (:mod:`fedforget.core.record_ids`).

A training run that creates a store draws a fresh key; a retrain uses the one in the store's manifest (none
for a store written before keyed ids: its ids stay unkeyed). A from-scratch reference of a store
(``verify --federation``, or a test's reference run) must number the same records the same way, so whoever
starts it hands the store's key to the new run first (:func:`hand_over`): a fresh training run at a path
holding :data:`HANDED` uses that key (or none) and removes the file once its manifest records it.
"""

from __future__ import annotations

import json
from pathlib import Path

from fedforget.core.config import ConfigError, RunConfig
from fedforget.core.record_ids import RECORD_IDS, draw_record_key, record_ids_field, store_record_key
from fedforget.store.atomic import atomic_write_json
from fedforget.store.secret_files import mkdir_private
from fedforget.store.store import Store, resolve_store_path

#: In a store directory before its training run: the record key that run uses (``{"record-ids": ...}``).
HANDED = "record-key.json"


def hand_over(root: Path, key: str | None) -> None:
    """Make the next training run at ``root`` key its nodes' records with ``key`` (None: unkeyed, as a store
    written before record keys), as the store it is a reference of did."""
    mkdir_private(Path(root))
    atomic_write_json(Path(root) / HANDED, {RECORD_IDS: None if key is None else record_ids_field(key)})


def run_record_key(cfg: RunConfig) -> str | None:
    """The key this run's nodes key their records with (None: unkeyed)."""
    root = resolve_store_path(cfg.store)
    if cfg.action == "retrain":
        return store_record_key(Store.open(root).manifest())
    handed = root / HANDED
    if not handed.is_file():
        return draw_record_key()
    try:
        data = json.loads(handed.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return store_record_key(data)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{handed} does not hold a record key ({str(exc)[:120]}); remove it") from None


def taken(root: Path) -> None:
    """The run's manifest records its key: the handed-over file has done its work."""
    (Path(root) / HANDED).unlink(missing_ok=True)
