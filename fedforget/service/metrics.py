"""``GET /metrics``: Prometheus text exposition, written by hand (no client library is a dependency).

Counters of requests by route template and status code, a latency histogram per route, and gauges
read from the store when scraped: served accuracy (the cached value ``status`` shows; absent until
measured), artifacts valid and invalid, forget requests and forgotten samples, and the service requests against
their legal clock (open, nearing their deadline, overdue, seconds to the earliest deadline).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

#: latency histogram buckets, seconds
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Request counters and latency histograms, thread-safe (uvicorn runs sync routes in a thread pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.buckets: dict[tuple[str, str], list[int]] = {}
        self.sums: dict[tuple[str, str], float] = defaultdict(float)
        self.counts: dict[tuple[str, str], int] = defaultdict(int)

    def observe(self, method: str, route: str, code: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, code)] += 1
            key = (method, route)
            counts = self.buckets.setdefault(key, [0] * len(BUCKETS))
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
            self.sums[key] += seconds
            self.counts[key] += 1

    def render(self, gauges: dict[str, Any]) -> str:
        """The exposition text: these counters and histograms, then ``gauges`` (name → value or None)."""
        out = ["# HELP fedforget_http_requests_total HTTP requests by route and status code.",
               "# TYPE fedforget_http_requests_total counter"]
        with self._lock:
            for (method, route, code), n in sorted(self.requests.items()):
                out.append(f'fedforget_http_requests_total{{method="{method}",route="{_label(route)}",'
                           f'code="{code}"}} {n}')
            out += ["# HELP fedforget_http_request_duration_seconds Time to answer, by route.",
                    "# TYPE fedforget_http_request_duration_seconds histogram"]
            for (method, route), counts in sorted(self.buckets.items()):
                labels = f'method="{method}",route="{_label(route)}"'
                for bound, n in zip(BUCKETS, counts, strict=True):
                    out.append(f'fedforget_http_request_duration_seconds_bucket{{{labels},le="{bound}"}} {n}')
                out.append(f'fedforget_http_request_duration_seconds_bucket{{{labels},le="+Inf"}} '
                           f"{self.counts[(method, route)]}")
                out.append(f"fedforget_http_request_duration_seconds_sum{{{labels}}} {self.sums[(method, route)]:.6f}")
                out.append(f"fedforget_http_request_duration_seconds_count{{{labels}}} {self.counts[(method, route)]}")
        for name, (help_text, value) in sorted(gauges.items()):
            if value is None:
                continue
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {float(value):g}"]
        return "\n".join(out) + "\n"


def deadline_gauges(deadlines: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """The gauges of ``status``'s ``deadlines`` (``fedforget.unlearning.deadlines``): the seconds to the earliest
    deadline are absent while no request is open."""
    window = f"{deadlines['nearing_days']:g} days"
    return {
        "fedforget_forget_requests_open": ("Service forget requests not yet at their completion point "
                                           f"({deadlines['completion_point']}).", deadlines["open"]),
        "fedforget_forget_requests_nearing_deadline": (f"Open service forget requests due within {window} "
                                                       "(not yet overdue).", deadlines["nearing"]),
        "fedforget_forget_requests_overdue": (f"Open service forget requests past their {deadlines['policy']} "
                                              "deadline.", deadlines["overdue"]),
        "fedforget_forget_requests_seconds_to_deadline": (
            "Seconds to the earliest open request's deadline (negative once it passed; absent when none is open).",
            deadlines["seconds_to_earliest"]),
    }
