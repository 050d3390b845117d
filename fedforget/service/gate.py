"""Every HTTP request passes here first: who is asking, with which scope, and a bounded body.

The token is checked before a byte of the body is read, so a caller without the right scope gets 401
or 403 and nothing is parsed or written; the body is then read up to :data:`MAX_BODY` bytes (a
larger ``Content-Length`` is refused at once, a longer stream as soon as it passes the bound), all of
it within :data:`BODY_SECONDS` (a body that stalls or trickles gets 408), so one request costs bounded
time and memory whatever it sends. It also times every request for /metrics.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.routing import Match

from fedforget.core.strict_json import DuplicateKey, no_duplicate_keys
from fedforget.service.metrics import Metrics
from fedforget.service.tokens import Token, TokenBook, TokenError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

MAX_BODY = 2**20  # 1 MiB
#: a batch of forget requests (an import): up to ``schemas.MAX_BATCH_IDS`` record names of up to 20 bytes each
MAX_BATCH_BODY = 4 * 2**20  # 4 MiB
#: routes whose body may be larger than :data:`MAX_BODY`, and what to do past their bound
BODY_BOUNDS: dict[tuple[str, str], tuple[int, str]] = {
    ("POST", "/v1/forget-batches"): (MAX_BATCH_BODY, "split the batch into several batches of fewer ids"),
}
#: the whole body must arrive within this many seconds of the first read (a trickle cannot hold a worker);
#: otherwise 408 and the connection closes
BODY_SECONDS = 30.0
#: (method, route) → the scope a token needs; routes not named here are open (health, sign-in, schema)
ROUTE_SCOPES: dict[tuple[str, str], str] = {
    ("POST", "/v1/forget-requests"): "forget:write",
    ("POST", "/v1/forget-batches"): "forget:write",
    ("GET", "/v1/forget-requests"): "status:read",
    ("GET", "/v1/forget-requests/{request_id}"): "status:read",
    ("GET", "/v1/receipts/{ledger_request}"): "status:read",
    ("POST", "/v1/predict"): "predict",
    ("GET", "/v1/status"): "status:read",
    ("GET", "/metrics"): "status:read",
    ("GET", "/"): "status:read",
    ("POST", "/opendsr/v2/requests"): "forget:write",
    ("GET", "/opendsr/v2/requests/{subject_request_id}"): "status:read",
    ("GET", "/opendsr/v2/status/{subject_request_id}"): "status:read",
    ("DELETE", "/opendsr/v2/requests/{subject_request_id}"): "forget:write",
}
#: routes that answer a browser: without a token they show the sign-in page instead of a JSON 401
CONSOLE_ROUTES = {("GET", "/")}
COOKIE = "fedforget_console"
SESSION_SECONDS = 8 * 3600


class Sessions:
    """Console sessions: a random id (the cookie) → the signed-in token's hash, for at most 8 hours.

    The cookie never holds the token; a revoked token ends its sessions at the next request."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[str, float]] = {}

    def open(self, token: Token) -> str:
        now = time.time()
        self._by_id = {k: v for k, v in self._by_id.items() if v[1] > now}
        sid = secrets.token_urlsafe(32)
        self._by_id[sid] = (token.sha256, now + SESSION_SECONDS)
        return sid

    def token_hash(self, sid: str) -> str | None:
        entry = self._by_id.get(sid)
        return entry[0] if entry and entry[1] > time.time() else None

    def close(self, sid: str) -> None:
        self._by_id.pop(sid, None)


def _cookie(scope: Scope, name: str) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                if k == name:
                    return v
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


async def _json(send: Callable[[Message], Awaitable[None]], status: int, detail: str,
                headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def duplicate_key(body: bytes, content_type: str | None) -> str | None:
    """A key a JSON body's object names twice, or None. Parsers disagree on which value wins (Python's takes
    the last, others the first), and a forget cannot be undone: a body that two readers could read as two
    different requests is refused, never guessed at. A body that is not JSON at all is left to the route."""
    media = (content_type or "").split(";")[0].strip().lower()
    if not (media == "application/json" or media.endswith("+json")):
        return None
    try:
        json.loads(body, object_pairs_hook=no_duplicate_keys)
    except DuplicateKey as exc:
        return exc.key
    except (ValueError, RecursionError):
        return None
    return None


class Gate:
    """ASGI middleware: route template, authentication and scope, body bound, metrics."""

    def __init__(self, app: ASGIApp, tokens: TokenBook | None, sessions: Sessions, metrics: Metrics,
                 routes: list[Any]) -> None:
        self.app, self.tokens, self.sessions, self.metrics = app, tokens, sessions, metrics
        self.routes = routes  # the app's route list (filled as routes are declared)

    def route_of(self, scope: Scope) -> str | None:
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return route.path
        return None

    def methods_of(self, scope: Scope) -> list[str]:
        """Every method the request's path takes, over all its routes (one path may have several: GET and POST);
        empty when no route has that path."""
        methods: set[str] = set()
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.PARTIAL:
                methods |= set(getattr(route, "methods", None) or ())
        return sorted(methods)

    def authenticate(self, scope: Scope, method: str) -> Token | str:
        """The caller's live token, or the one line saying why there is none."""
        if self.tokens is None:
            return "this service has no store"
        auth = _header(scope, b"authorization")
        try:
            if auth is not None:
                kind, _, presented = auth.partition(" ")
                if kind.lower() != "bearer" or not presented.strip():
                    return "the Authorization header must be 'Bearer TOKEN'"
                return self.tokens.lookup(presented.strip()) or "unknown or revoked token"
            sid = _cookie(scope, COOKIE) if method == "GET" else None  # a session only reads
            digest = self.sessions.token_hash(sid) if sid else None
            if digest is not None:
                return self.tokens.by_hash(digest) or "the session's token was revoked; sign in again"
        except TokenError as exc:
            return str(exc)
        return "no token: send 'Authorization: Bearer TOKEN' (`fedforget token create` makes one)"

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        method, route = scope["method"], self.route_of(scope)
        status = [500]

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self._handle(scope, receive, timed_send, method, route)
        finally:
            self.metrics.observe(method, route or "unmatched", status[0], time.perf_counter() - start)

    async def _handle(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                      send: Callable[[Message], Awaitable[None]], method: str, route: str | None) -> None:
        if route is None:
            allowed = self.methods_of(scope)
            if allowed and method == "OPTIONS":
                await send({"type": "http.response.start", "status": 204,
                            "headers": [(b"allow", ", ".join([*allowed, "OPTIONS"]).encode())]})
                await send({"type": "http.response.body", "body": b""})
                return
            if allowed:
                await _json(send, 405, f"{method[:20]} is not a method of this path; it takes {', '.join(allowed)}",
                            [(b"allow", ", ".join(allowed).encode())])
                return
        needed = ROUTE_SCOPES.get((method, route or ""))
        state = scope.setdefault("state", {})
        if needed is not None:
            who = self.authenticate(scope, method)
            problem = None
            if isinstance(who, str):
                problem = (401, who)
            elif needed not in who.scopes:
                problem = (403, f"the token {who.name!r} lacks the scope {needed!r} (it has "
                                f"{', '.join(who.scopes)}); nothing was done")
            if problem and (method, route) in CONSOLE_ROUTES:
                state["auth_problem"] = problem[1]
            elif problem:
                headers = [(b"www-authenticate", b'Bearer realm="fedforget"')] if problem[0] == 401 else []
                await _json(send, problem[0], problem[1], headers)
                return
            else:
                state["token"] = who
        bound, what = BODY_BOUNDS.get((method, route or ""), (MAX_BODY, "send fewer ids or inputs per request"))
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > bound):
            await _json(send, 413, f"the body is over {bound:,} bytes; {what}")
            return
        if method not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        deadline = time.monotonic() + BODY_SECONDS
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                await _json(send, 408, f"the body did not arrive within {BODY_SECONDS:g} s; send it at once",
                            [(b"connection", b"close")])
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > bound:
                await _json(send, 413, f"the body is over {bound:,} bytes; {what}")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, sent = b"".join(chunks), False
        twice = duplicate_key(body, _header(scope, b"content-type"))
        if twice is not None:
            await _json(send, 400, f"the body names the key {twice[:40]!r} twice; send each key once (nothing "
                                   "was done)")
            return

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
