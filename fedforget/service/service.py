"""The service's one handle on a store: checked before every read, as every CLI command checks it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fedforget.service.group_commit import GroupCommitter
from fedforget.service.metrics import Metrics
from fedforget.service.predict import SERVE_LOCK, ModelCache, current_plan
from fedforget.service.requests_db import RequestsDB
from fedforget.service.tokens import TokenBook
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.check_changes import StoreWatch

#: ``full``: check the whole store before every request (an audit setting: its cost grows with the store)
CHECK_ENV = "FEDFORGET_SERVICE_CHECK"


class StoreRefused(RuntimeError):
    """The store is not what it claims (``fedforget.store.check``); the message is its one line."""


class Service:
    """Store, service.db, tokens, the served-model cache and the metrics of one running service."""

    def __init__(self, store_root: Path) -> None:
        from fedforget.store.log_adopt import adopt_log
        from fedforget.unlearning.log_signer import act_as_coordinator

        act_as_coordinator()
        self.store = Store.open(store_root)
        from fedforget.tasks.user_task import use_app_of

        use_app_of(self.store.manifest())  # a store of a user's app: predict loads that app's task
        self.adopted = adopt_log(self.store) if check_store(self.store).ok else False
        self.full_check = os.environ.get(CHECK_ENV, "") == "full"
        self.watch = StoreWatch(self.store)
        self.check()
        self.db = RequestsDB(self.store)
        self.tokens = TokenBook(self.store.root)
        self.metrics = Metrics()
        self.recovered = self.db.recover()  # requests a crash left accepted, applied now (never twice)
        self._models: ModelCache | None = None
        self._lock = threading.Lock()
        self._receipt_lock = threading.Lock()
        # forgets are committed in groups, one group at a time (``fedforget.service.group_commit``): the ledger
        # serialises writers anyway, and one commit for many callers costs one lock, one fsync, one check
        self.committer = GroupCommitter(self.db, self.check, self._forget_check())
        self.status(accuracy=False)  # the first point of the accuracy history: what training measured

    def check(self) -> None:
        """Raise :class:`StoreRefused` unless the store passes the check every CLI command runs first: whole at
        start, then what changed since the last check (``fedforget.store.check_changes``)."""
        result = check_store(self.store) if self.full_check else self.watch.check()
        if result.unreadable or result.refusals:
            raise StoreRefused(result.summary())

    def _forget_check(self) -> Callable[[Sequence[int]], None] | None:
        """The store method's refusal of ids it never forgets (as ``forget_request`` runs it), or None."""
        from fedforget.methods.registry import store_method

        method = store_method(self.store.manifest())
        if method is None or not method.forget_check:
            return None
        check = method.forget_check
        return lambda samples: check(self.store, samples)

    def models(self) -> ModelCache:
        with self._lock:
            if self._models is None:
                self._models = ModelCache(self.store)
            return self._models

    def status(self, accuracy: bool = True) -> dict[str, Any]:
        """``fedforget status --json``, and a point of the accuracy history when one is known."""
        from fedforget.unlearning.status import store_status

        with SERVE_LOCK:
            info = store_status(self.store, accuracy=accuracy)
        if info["accuracy"] is not None and info["available"]:
            pid = current_plan(self.store)[0]
            ledger = self.store.ledger()
            try:
                last = ledger.last_request()
            finally:
                ledger.close()
            self.db.record_accuracy(pid, info["requests"]["forgotten_samples"], last, info["accuracy"])
        return info

    def receipt(self, ledger_request: int) -> tuple[bytes | None, str | None]:
        """The receipt file's bytes (issued now, without ``verify``, if none was), or (None, why not)."""
        from fedforget.store import StoreError
        from fedforget.store.ledger import LedgerUsageError
        from fedforget.unlearning.receipt import ReceiptKeyError, issue_receipt, read_receipt_file, receipt_path

        path = receipt_path(self.store, ledger_request)
        try:
            with self._receipt_lock:
                if not path.is_file():
                    issue_receipt(self.store, ledger_request, None)
            return read_receipt_file(path), None
        except (ReceiptKeyError, LedgerUsageError, StoreError, ValueError) as exc:
            return None, str(exc)
        except OSError as exc:
            return None, f"cannot issue the receipt: {exc.strerror or exc}"
