"""The experiment directory: artifacts, manifest, ledger, metrics."""

from fedforget.store.store import Store, StoreError

__all__ = ["Store", "StoreError"]
