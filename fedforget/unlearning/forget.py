"""``fedforget forget``: resolve ids to units, record the request, invalidate, re-plan serving, purge.

No torch, no Flower: the whole request is one SQLite transaction in the ledger, so it takes
milliseconds and a crash leaves it applied or absent, never half. The bytes of what it invalidated
are deleted right after the commit (``store.purge``); a crash in between leaves the purge pending,
finished by the next ``forget`` or ``fedforget purge``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedforget.core.chains import describe_invalidation
from fedforget.core.slicing import UnitId
from fedforget.store import Store
from fedforget.store.ledger import ForgetResult, LedgerUsageError
from fedforget.store.purge import complete_purges
from fedforget.strategies.registry import entry_for_plan, resolve


def parse_slices(texts: Sequence[str]) -> list[str]:
    """``3:1`` → canonical unit ids; raises LedgerUsageError with the expected form otherwise."""
    out = []
    for text in texts:
        try:
            out.append(str(UnitId.parse(text.strip())))
        except ValueError as exc:
            raise LedgerUsageError(str(exc)) from None
    return out


def refuse_safe_shard_ids(store: Store, samples: Sequence[int]) -> None:
    """A SAFE safe-shard id is server data, not a client's: say so instead of "unknown sample"."""
    shard = set(store.manifest().get("safe-shard-ids") or [])
    named = sorted({int(s) for s in samples} & shard)
    if named:
        shown = ", ".join(map(str, named[:5])) + (" …" if len(named) > 5 else "")
        raise LedgerUsageError(f"sample id(s) {shown} are in the server-held safe shard, not in any client's data; "
                               "the safe shard never receives forget requests (nothing was changed)")


def forget_request(store: Store, samples: Sequence[int] = (), slices: Sequence[str] = (),
                   clients: Sequence[int] = (), audit_before: bool = False) -> ForgetResult:
    """Apply the request (one transaction), then purge what it invalidated.

    ``audit_before`` measures the membership-inference audit on the model served *before* this
    request, between the commit and the purge: the only moment both that model and the request exist.
    """
    refuse_safe_shard_ids(store, samples)
    ledger = store.ledger()
    try:
        before = {"serving": ledger.serving(), "artifacts": ledger.artifacts()} if audit_before else None
        result = ledger.forget(samples=samples, slices=parse_slices(slices), clients=clients)
        plan = ledger.plan()
        result.affected = describe_invalidation(plan, result.invalidated)
        entry = entry_for_plan(plan.get("kind")) if plan else None
        if entry is not None and entry.forget_detail and result.request is not None:
            detail = resolve(entry.forget_detail)
            result.affected.update(detail(plan, result.units, result.new_samples, result.serving))
    finally:
        ledger.close()
    if before is not None and result.request is not None:
        from fedforget.unlearning.audit import record_audit_before

        record_audit_before(store, result.request, before["serving"], before["artifacts"])
    result.purged = complete_purges(store).to_json()  # also finishes a purge a crash left pending
    return result
