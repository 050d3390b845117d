"""A store written before the log existed adopts one: its first command that may write starts the log with a
genesis entry over the store's tables as they are, and says so once. Edits made before that moment cannot be
detected; everything after it can."""

from __future__ import annotations

from fedforget.store.log import has_log
from fedforget.store.store import Store

ADOPTED = ("this store had no log: its log now starts with a genesis entry over the store's current state "
           "(edits made before now cannot be detected; every later one can)")


def adopt_log(store: Store) -> bool:
    """Start the store's log when it has none (True: it was adopted now)."""
    ledger = store.ledger()
    try:
        if has_log(ledger.db):
            return False
        with ledger.transaction("sign", reason="adopted"):
            pass
        return True
    finally:
        ledger.close()
