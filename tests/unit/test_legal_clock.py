"""The legal clock's arithmetic, in UTC: gdpr is one calendar month (the same date next month, or its last day),
ccpa 45 days; a request counts as complete at the configured state; the counts say open, nearing, overdue."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fedforget.unlearning.legal_clock import add_month, clock_summary, completed_at, deadline, request_clock


def utc(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("accepted", "due"), [
    (utc(2026, 3, 5, 14, 30), utc(2026, 4, 5, 14, 30)),  # same date and time of day next month
    (utc(2026, 1, 31, 9), utc(2026, 2, 28, 9)),  # no 31 February: the month's last day
    (utc(2028, 1, 31, 9), utc(2028, 2, 29, 9)),  # leap year
    (utc(2028, 1, 29), utc(2028, 2, 29)),
    (utc(2027, 1, 29), utc(2027, 2, 28)),
    (utc(2026, 2, 28), utc(2026, 3, 28)),  # the last day of February is not "end of month" in March
    (utc(2026, 3, 31, 23, 59, 59), utc(2026, 4, 30, 23, 59, 59)),
    (utc(2026, 12, 15), utc(2027, 1, 15)),  # across the year
    (utc(2026, 12, 31), utc(2027, 1, 31)),
])
def test_gdpr_deadline_is_one_calendar_month_clamped_to_the_months_last_day(accepted, due):
    assert deadline(accepted, "gdpr") == due


def test_gdpr_deadline_reads_the_date_in_utc_whatever_the_local_timezone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14: 31 January 23:00 UTC is 1 February there
    time.tzset()
    try:
        assert deadline(utc(2026, 1, 31, 23), "gdpr") == utc(2026, 2, 28, 23)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_ccpa_deadline_is_45_days_across_a_leap_day():
    assert deadline(utc(2028, 2, 1), "ccpa") == utc(2028, 3, 17)
    assert deadline(utc(2026, 2, 1), "ccpa") - utc(2026, 2, 1) == 45 * 86400


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="gdpr, ccpa"):
        deadline(0.0, "hipaa")


def test_add_month_keeps_the_time_of_day():
    assert add_month(datetime(2026, 5, 31, 7, 8, 9, tzinfo=UTC)) == datetime(2026, 6, 30, 7, 8, 9, tzinfo=UTC)


def state(purged: bool = False, owners: tuple[int, ...] = (), acknowledged: bool = False,
          retrained: bool = False) -> dict[str, Any]:
    return {"states": {"purged": purged, "acknowledged": acknowledged, "retrained": retrained},
            "acknowledgements": {"owners": list(owners)}, "applied_at": 10.0,
            "acknowledged_at": 20.0 if acknowledged else None, "retrained_at": 30.0 if retrained else None}


@pytest.mark.parametrize(("ledger", "point", "done"), [
    (state(), "purged", None),  # applied, purge pending
    (state(purged=True), "purged", 10.0),
    (state(purged=True, owners=(0,)), "acknowledged", None),  # a client still holds its samples
    (state(purged=True, owners=(0,), acknowledged=True), "acknowledged", 20.0),
    (state(purged=True), "acknowledged", 10.0),  # no client holds them: nothing to acknowledge
    (state(purged=True, owners=(0,), acknowledged=True), "retrained", None),
    (state(purged=True, retrained=True), "retrained", 30.0),
])
def test_a_request_is_complete_once_it_reached_the_completion_point(ledger, point, done):
    assert completed_at(ledger, point) == done


def test_a_request_clock_counts_down_then_shows_overdue():
    accepted = utc(2026, 1, 31)
    due = utc(2026, 2, 28)
    before = request_clock(accepted, state(), "gdpr", "purged", due - 3600)
    assert before["deadline"] == due and before["seconds_left"] == 3600 and not before["overdue"]
    after = request_clock(accepted, state(), "gdpr", "purged", due + 60)
    assert after["seconds_left"] == -60 and after["overdue"] and not after["complete"]
    done = request_clock(accepted, state(purged=True), "gdpr", "purged", due + 60)
    assert done["complete"] and done["completed_at"] == 10.0 and done["seconds_left"] is None and not done["overdue"]


def test_the_summary_counts_open_nearing_overdue_and_the_earliest_deadline():
    now = 1_000_000.0
    clocks = [{"deadline": now - 10, "complete": False, "completed_at": None},  # overdue
              {"deadline": now + 3 * 86400, "complete": False, "completed_at": None},  # nearing
              {"deadline": now + 20 * 86400, "complete": False, "completed_at": None},  # open, not near
              {"deadline": now - 100, "complete": True, "completed_at": now - 50}]  # completed late
    out = clock_summary(clocks, 7, now)
    assert out == {"requests": 4, "open": 3, "nearing": 1, "overdue": 1, "completed_late": 1,
                   "earliest_deadline": now - 10, "seconds_to_earliest": -10}
    assert clock_summary([], 7, now)["seconds_to_earliest"] is None
