"""The legal clock of a forget request: when it is due, and whether it reached the state that completes it.

GDPR Article 12(3) gives a controller one month from receipt to act on a data subject's request, the CCPA 45
days. The clock runs from the request's ``accepted_at`` (when the service received it, in ``service.db``) and is
derived when read, never written: the ledger and ``service.db`` keep what happened, the deadline is a view of
them under the store's policy (``fedforget.unlearning.deadline_settings``), so changing the policy rewrites no
evidence.

``gdpr``: one calendar month, the same date and time of day in the next month (UTC), or the last day of that
month when it has no such date (31 January → 28 or 29 February). This is how EU law counts a period in months
(Regulation 1182/71, Article 3(2)(c): the period ends on the day of the last month with the same date, or the
month's last day) and how the data protection authorities read Article 12(3): a request received on 5 March is
due on 5 April. A fixed 30 days would be later than the law for a request received in February and earlier
than needed for one received in a 31-day month. ``ccpa``: 45 days of 86,400 seconds.

The completion point is the state at which a request counts as complete: ``purged`` (applied and every file
it invalidated deleted; the default), ``acknowledged`` (purged, and every client holding its samples confirmed
dropping them; a request no client holds needs no acknowledgement) or ``retrained`` (a retrain covered it).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

#: policy name → what its period is (the one line ``fedforget deadlines`` and the docs show)
POLICIES = {"gdpr": "one calendar month (GDPR Art. 12(3)): the same date next month, or its last day",
            "ccpa": "45 days (CCPA)"}
DEFAULT_POLICY = "gdpr"
#: the states that may complete a request, in the order ``fedforget.unlearning.request_states`` reaches them
COMPLETION_POINTS = ("purged", "acknowledged", "retrained")
DEFAULT_COMPLETION_POINT = "purged"
DEFAULT_NEARING_DAYS = 7.0
CCPA_DAYS = 45


def add_month(at: datetime) -> datetime:
    """``at`` one calendar month later: the same day, or the next month's last day when it has fewer days."""
    year, month = (at.year + 1, 1) if at.month == 12 else (at.year, at.month + 1)
    return at.replace(year=year, month=month, day=min(at.day, calendar.monthrange(year, month)[1]))


def deadline(accepted_at: float, policy: str) -> float:
    """When a request accepted at ``accepted_at`` (epoch seconds) is due under ``policy`` (epoch seconds)."""
    if policy == "gdpr":
        return add_month(datetime.fromtimestamp(accepted_at, UTC)).timestamp()
    if policy == "ccpa":
        return accepted_at + CCPA_DAYS * 86400  # UTC has no daylight saving: a day is 86,400 seconds
    raise ValueError(f"unknown deadline policy {policy!r}: use one of {', '.join(POLICIES)}")


def completed_at(state: Mapping[str, Any], point: str) -> float | None:
    """When a request whose ledger state is ``state`` (``fedforget.unlearning.request_states``) reached ``point``,
    or None.

    The ledger does not time a purge: the purge runs right after the commit that applied the request, so a
    purged request counts as complete when it was applied."""
    flags = state["states"]
    if not flags["purged"] and point != "retrained":
        return None
    if point == "purged":
        return _time(state["applied_at"])
    if point == "acknowledged":
        if not (state.get("acknowledgements") or {}).get("owners"):  # no client holds its samples: nothing to ack
            return _time(state["applied_at"])
        return _time(state["acknowledged_at"]) if flags["acknowledged"] else None
    if point == "retrained":
        return _time(state["retrained_at"]) if flags["retrained"] else None
    raise ValueError(f"unknown completion point {point!r}: use one of {', '.join(COMPLETION_POINTS)}")


def _time(value: Any) -> float | None:  # noqa: ANN401 - a ledger value
    return None if value is None else float(value)


def request_clock(accepted_at: float, state: Mapping[str, Any], policy: str, point: str,
                  now: float) -> dict[str, Any]:
    """One request's clock: its deadline, completion point, whether (and when) it reached it, and seconds left
    (negative once overdue; None once complete)."""
    due = deadline(accepted_at, policy)
    done = completed_at(state, point)
    return {"deadline": due, "deadline_policy": policy, "completion_point": point, "complete": done is not None,
            "completed_at": done, "seconds_left": None if done is not None else due - now,
            "overdue": done is None and now > due}


def clock_summary(clocks: Iterable[Mapping[str, Any]], nearing_days: float, now: float) -> dict[str, Any]:
    """Counts over requests' clocks: open (not complete), nearing (open, due within ``nearing_days``, not yet
    overdue), overdue (open, past due), complete late (completed after their deadline), the earliest open
    deadline and the seconds to it (negative when it passed)."""
    window = nearing_days * 86400
    total = complete_late = 0
    open_due: list[float] = []
    for clock in clocks:
        total += 1
        if clock["complete"]:
            complete_late += clock["completed_at"] > clock["deadline"]
        else:
            open_due.append(clock["deadline"])
    earliest = min(open_due, default=None)
    return {"requests": total, "open": len(open_due), "nearing": sum(now <= d <= now + window for d in open_due),
            "overdue": sum(d < now for d in open_due), "completed_late": complete_late,
            "earliest_deadline": earliest, "seconds_to_earliest": None if earliest is None else earliest - now}


def now() -> float:
    """The clock every deadline is read against (one place, so a test can move it)."""
    return time.time()
