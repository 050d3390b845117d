"""The experiment directory: artifacts, manifest, ledger, metrics (DESIGN §6)."""

from fedforget.store.store import Store, StoreError

__all__ = ["Store", "StoreError"]
