"""fedforget's request states map onto OpenDSR's statuses as the service page says: accepted is pending, applied
is in progress, purged completes a request no client holds, and one clients hold completes once they all
acknowledged or a retrain covered it; an unfinished request is due at its deadline under the store's legal clock
(one calendar month after it was received, by default)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from fedforget.service import opendsr
from fedforget.service.opendsr import request_status
from fedforget.service.requests_db import ServiceRequest
from fedforget.unlearning.legal_clock import deadline

RECEIVED = 1_000_000.0  # 1970-01-12: due 1970-02-12, 31 days later
DUE = deadline(RECEIVED, "gdpr")


def row(ledger_request: int | None) -> ServiceRequest:
    return ServiceRequest(1, "opendsr:x", {}, "controller", RECEIVED, ledger_request, False, None)


def state(purged: bool, owners: list[int], acknowledged: bool = False, retrained: bool = False) -> dict[str, Any]:
    return {"spec": {}, "states": {"purged": purged, "acknowledged": acknowledged, "retrained": retrained},
            "acknowledgements": {"owners": owners}, "applied_at": RECEIVED + 1,
            "acknowledged_at": RECEIVED + 50 if acknowledged else None,
            "retrained_at": RECEIVED + 70 if retrained else None}


@pytest.mark.parametrize(("ledger", "expected"), [
    (None, ("pending", DUE, None)),
    (state(purged=False, owners=[]), ("in_progress", DUE, None)),
    (state(purged=True, owners=[]), ("completed", RECEIVED + 1, 7)),
    (state(purged=True, owners=[0, 2]), ("in_progress", DUE, 7)),
    (state(purged=True, owners=[0], acknowledged=True), ("completed", RECEIVED + 50, 7)),
    (state(purged=True, owners=[0], retrained=True), ("completed", RECEIVED + 70, 7)),
    (state(purged=True, owners=[0], acknowledged=True, retrained=True), ("completed", RECEIVED + 50, 7)),
])
def test_each_fedforget_state_maps_to_its_opendsr_status_and_time(monkeypatch, tmp_path, ledger, expected):
    monkeypatch.setattr(opendsr, "ledger_states", lambda store, only: {7: ledger} if ledger else {})
    svc = SimpleNamespace(store=SimpleNamespace(root=tmp_path))  # no service.db: the default clock
    assert request_status(svc, row(None if ledger is None else 7)) == expected  # type: ignore[arg-type]
