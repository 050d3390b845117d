"""The web console at ``/``: server-rendered HTML, read-only, no JavaScript build (none at all).

It shows what a ``status:read`` token may see: the served model (plan id, accuracy, deletions absorbed,
expected deletions left), the service's requests against their legal clock (open, due soon, overdue,
earliest deadline first), every forget request in the ledger (the service's and the CLI's) with its
state, who asked and its receipt, and served accuracy against deletions as an inline SVG drawn here
from the accuracy history the service records. A browser signs in once with a token (``login_page``);
the session cookie is HttpOnly and SameSite=Strict and names a server-side session, never the token.
"""

from __future__ import annotations

import datetime
from html import escape
from typing import Any

STYLE = """body{font:14px system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left}
code{font-size:12px}.state{font-weight:600}.overdue{color:#b71c1c}.muted{color:#777}.card{display:inline-block;margin-right:2em}"""


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


def _when(at: float | None) -> str:
    if at is None:
        return "—"
    return datetime.datetime.fromtimestamp(at, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def login_page(message: str = "") -> str:
    """A form that trades a ``status:read`` token for a session cookie (POST, so no token lands in a URL)."""
    note = f"<p class=muted id=message>{escape(message)}</p>" if message else ""
    return _page("fedforget console: sign in", (
        "<h1>fedforget forget service</h1>"
        "<p>Sign in with a token that has the <code>status:read</code> scope "
        "(<code>fedforget token create --store DIR --scope status:read --name console</code>).</p>"
        f"{note}<form method=post action=/console/session>"
        "<input type=password name=token id=token size=60 autocomplete=off placeholder=ffs_…> "
        "<button type=submit id=signin>Sign in</button></form>"))


def accuracy_svg(history: list[dict[str, Any]], width: int = 560, height: int = 220) -> str:
    """Served accuracy (y) against forgotten samples (x), one point per served plan the service measured."""
    points = sorted((int(h["forgotten"]), float(h["accuracy"])) for h in history)
    if not points:
        return "<p class=muted id=plot>no served accuracy measured yet</p>"
    pad = 40
    xmax = max(max(x for x, _ in points), 1)
    lo = min(0.0, min(y for _, y in points))

    def px(x: float) -> float:
        return pad + (width - 2 * pad) * x / xmax

    def py(y: float) -> float:
        return height - pad - (height - 2 * pad) * (y - lo) / (1.0 - lo or 1.0)

    line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
    dots = "".join(f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='3'><title>{x} forgotten: accuracy {y:.4f}</title>"
                   "</circle>" for x, y in points)
    return (f"<svg id=plot xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role=img "
            "aria-label='served accuracy against forgotten samples'>"
            f"<line x1='{pad}' y1='{height - pad}' x2='{width - pad}' y2='{height - pad}' stroke='#999'/>"
            f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{height - pad}' stroke='#999'/>"
            f"<text x='{pad}' y='{pad - 8}' font-size='11'>accuracy (max 1.0)</text>"
            f"<text x='{width - pad}' y='{height - 8}' font-size='11' text-anchor='end'>forgotten samples "
            f"(max {xmax})</text><text x='{pad - 4}' y='{height - pad + 14}' font-size='11' text-anchor='end'>"
            f"{lo:.1f}</text><polyline fill='none' stroke='#1565c0' stroke-width='2' points='{line}'/>{dots}</svg>")


def _on_nodes_card(nodes: dict[str, Any] | None) -> str:
    """The nodes' evaluation of what is served (``evaluate-on-nodes``), when the run that served it measured one."""
    if not nodes or not isinstance(nodes.get("accuracy"), int | float):
        return ""
    return (f"<div class=card>on the nodes <b id=accuracy-on-nodes>{nodes['accuracy']:.4f}</b> "
            f"({escape(str(nodes.get('examples')))} test records on {escape(str(nodes.get('nodes')))} nodes)</div>")


def _left(seconds: float) -> str:
    """Time to a deadline, in days and hours ('overdue by ...' once it passed)."""
    days, rest = divmod(abs(seconds), 86400)
    text = f"{int(days)} d {int(rest // 3600)} h"
    return f"overdue by {text}" if seconds < 0 else text


def deadlines_section(deadlines: dict[str, Any], clocks: list[dict[str, Any]]) -> str:
    """The service requests against their legal clock: counts, then the open ones, earliest deadline first."""
    if not deadlines or not deadlines.get("requests"):
        return "<p class=muted id=deadlines>no service requests yet</p>"
    cards = (f"<div class=card>open <b id=open>{deadlines['open']}</b></div>"
             f"<div class=card>due within {deadlines['nearing_days']:g} days <b id=nearing>{deadlines['nearing']}"
             f"</b></div><div class=card>overdue <b id=overdue>{deadlines['overdue']}</b></div>")
    note = (f"<p class=muted>{escape(str(deadlines['policy']))} clock ({escape(str(deadlines['policy_period']))}); "
            f"a request is complete once {escape(str(deadlines['completion_point']))}.</p>")
    open_rows = sorted(clocks, key=lambda c: c["deadline"])[:200]
    body = "".join(
        f"<tr id='service-request-{c['id']}'{' class=overdue' if c['overdue'] else ''}><td>{c['id']}</td>"
        f"<td>{'—' if c['ledger_request'] is None else '#' + str(c['ledger_request'])}</td>"
        f"<td>{_when(c['accepted_at'])}</td><td>{_when(c['deadline'])}</td><td>{_left(c['seconds_left'])}</td></tr>"
        for c in open_rows)
    table = ("<table id=open-requests><tr><th>service request</th><th>ledger request</th><th>accepted</th>"
             f"<th>deadline</th><th>left</th></tr>{body}</table>" if open_rows else "")
    return f"<div id=deadlines>{cards}{note}{table}</div>"


def console_page(status: dict[str, Any], plan_id: str | None, rows: list[dict[str, Any]],
                 history: list[dict[str, Any]], clocks: list[dict[str, Any]] | None = None) -> str:
    """The console: ``rows`` are ledger requests (newest first) with ``state``, ``asked_by``, ``receipt``;
    ``clocks`` the open service requests' legal clocks (``fedforget.unlearning.deadlines``)."""
    acc = status.get("accuracy")
    left = status.get("deletions_left")
    req = status.get("requests", {})
    served = (f"<div class=card>plan id <code id=plan-id>{escape(plan_id or 'nothing served')}</code></div>"
              f"<div class=card>served accuracy <b id=accuracy>{'—' if acc is None else f'{acc:.4f}'}</b> "
              "(server's test set)</div>" + _on_nodes_card(status.get("federated_accuracy")) +
              f"<div class=card>deletions absorbed <b id=absorbed>{req.get('total', 0)}</b> requests, "
              f"{req.get('forgotten_samples', 0)} samples</div>"
              f"<div class=card>expected deletions left <b id=left>{'—' if left is None else f'{left:.2f}'}</b></div>")
    if status.get("retrain_required"):
        served += "<p><b>retrain required</b>: nothing valid is left to serve; run <code>fedforget retrain</code></p>"
    body_rows = "".join(
        f"<tr id='request-{r['ledger_request']}'><td>#{r['ledger_request']}</td><td>{escape(r['kind'])}</td>"
        f"<td>{r['samples']}</td><td class=state>{escape(r['state'])}</td><td>{escape(', '.join(r['asked_by']))}</td>"
        f"<td>{_when(r['applied_at'])}</td><td>" + (
            f"<a href='/v1/receipts/{r['ledger_request']}' download='request-{r['ledger_request']}.json'>receipt</a>"
            if r["states"]["purged"] else "—") + "</td></tr>" for r in rows)
    table = ("<table id=requests><tr><th>request</th><th>kind</th><th>samples</th><th>state</th><th>asked by</th>"
             f"<th>applied</th><th>receipt</th></tr>{body_rows}</table>" if rows else
             "<p class=muted id=requests>no forget requests yet</p>")
    return _page("fedforget console", (
        f"<h1>fedforget forget service</h1><p class=muted>store {escape(str(status.get('store')))} · task "
        f"{escape(str(status.get('task')))} · method {escape(str(status.get('method')))}</p>"
        f"<h2>Served model</h2>{served}<h2>Served accuracy against deletions</h2>{accuracy_svg(history)}"
        "<h2>Deadlines</h2>" + deadlines_section(status.get("deadlines") or {}, clocks or []) +
        f"<h2>Forget requests</h2>{table}"
        "<p class=muted>A receipt is the signed JSON file as written; check it with "
        "<code>fedforget receipt --check request-N.json --store DIR</code> (the coordinator's key), or "
        "<code>--public-key FILE</code> elsewhere. States: accepted → applied → purged → acknowledged "
        "(every client holding the samples confirmed) → retrained.</p>"
        "<form method=post action=/console/logout><button type=submit>Sign out</button></form>"))
