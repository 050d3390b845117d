"""``fedforget forget``: resolve ids to units, record the request, invalidate, re-plan serving, purge.

No torch, no Flower: the whole request is one SQLite transaction in the ledger, so it takes
milliseconds and a crash leaves it applied or absent, never half. The bytes of what it invalidated
are deleted right after the commit (``store.purge``); a crash in between leaves the purge pending,
finished by the next ``forget`` or ``fedforget purge``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fedforget.core.slicing import UnitId
from fedforget.methods.registry import entry_for_plan, store_method
from fedforget.store import Store
from fedforget.store.ledger import ForgetResult, LedgerUsageError
from fedforget.store.purge import complete_purges


def parse_slices(texts: Sequence[str]) -> list[str]:
    """``3:1`` → canonical unit ids; raises LedgerUsageError with the expected form otherwise."""
    out = []
    for text in texts:
        try:
            out.append(str(UnitId.parse(text.strip())))
        except ValueError as exc:
            raise LedgerUsageError(str(exc)) from None
    return out


def forget_request(store: Store, samples: Sequence[int] = (), slices: Sequence[str] = (),
                   clients: Sequence[int] = (), audit_before: bool = False,
                   records: Sequence[str] = (), log_fields: Mapping[str, Any] | None = None) -> ForgetResult:
    """Apply the request (one transaction), then purge what it invalidated.

    ``records`` (``NODE:RECORD_ID``) are resolved against the manifest into sample ids before anything is
    written (:func:`fedforget.store.records.record_sample_ids`); the request's spec keeps their keyed commitments.
    ``log_fields`` go into the request's log entry (the forget service's ``via``: who asked, under which key).
    ``audit_before`` measures the membership-inference audit on the model served *before* this
    request, between the commit and the purge: the only moment both that model and the request exist.
    """
    from fedforget.unlearning.log_signer import act_as_coordinator

    act_as_coordinator()
    manifest = store.manifest()
    named: dict[str, int] = {}
    if records:
        from fedforget.store.records import record_sample_ids

        named = record_sample_ids(manifest, records)
        samples = [*samples, *named.values()]
    method = store_method(manifest)
    if method is not None and method.forget_check:  # ids this method never forgets are refused before any change
        method.forget_check(store, samples)
    ledger = store.ledger()
    try:
        before = {"serving": ledger.serving(), "artifacts": ledger.artifacts()} if audit_before else None
        result = ledger.forget(samples=samples, slices=parse_slices(slices), clients=clients, records=records,
                               log_fields=log_fields)
        plan = ledger.plan()
        result.affected = {"groups": [], "sequences": []}
        entry = entry_for_plan(plan.get("kind")) if plan else None
        if entry is not None and entry.forget_detail:
            result.affected.update(entry.forget_detail(plan, result))
    finally:
        ledger.close()
    result.records = named
    if before is not None and result.request is not None:
        from fedforget.unlearning.audit import record_audit_before

        record_audit_before(store, result.request, before["serving"], before["artifacts"])
    result.purged = complete_purges(store, method).to_json()  # also finishes a purge a crash left pending
    return result
