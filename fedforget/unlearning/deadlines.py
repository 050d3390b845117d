"""Every service request's legal clock, and their counts: what ``fedforget status``, ``/metrics`` and the console
show. Read-only: ``service.db``'s rows and the ledger's states, under the store's deadline settings."""

from __future__ import annotations

from typing import Any

from fedforget.store import Store
from fedforget.store.service_evidence import read_service_rows
from fedforget.unlearning import legal_clock
from fedforget.unlearning.deadline_settings import DeadlineSettings, read_settings
from fedforget.unlearning.legal_clock import POLICIES, clock_summary, request_clock


def request_clocks(store: Store, settings: DeadlineSettings | None = None,
                   at: float | None = None) -> list[dict[str, Any]]:
    """Each service request's clock (``fedforget.unlearning.legal_clock.request_clock``) with its ``id`` and
    ``ledger_request``, in id order; none when the store has no ``service.db``."""
    from fedforget.unlearning.request_states import accepted_state, ledger_states

    settings = settings or read_settings(store.root)
    at = legal_clock.now() if at is None else at
    rows = read_service_rows(store.root)
    if isinstance(rows, str) or not rows[0]:  # no service.db, or the store check says why it cannot be read
        return []
    states = ledger_states(store)
    out = []
    for row in rows[0]:
        rid, accepted_at, ledger_request = int(row[0]), float(row[5]), row[6]
        state = states.get(ledger_request) if ledger_request is not None else None
        clock = request_clock(accepted_at, state or accepted_state(), settings.policy, settings.completion_point, at)
        out.append({"id": rid, "ledger_request": ledger_request, "accepted_at": accepted_at, **clock})
    return out


def deadline_status(store: Store, at: float | None = None) -> dict[str, Any]:
    """The settings in force and the counts over every service request (``status``'s ``deadlines``)."""
    settings = read_settings(store.root)
    at = legal_clock.now() if at is None else at
    summary = clock_summary(request_clocks(store, settings, at), settings.nearing_days, at)
    return {**settings.to_json(), "policy_period": POLICIES[settings.policy], **summary}
