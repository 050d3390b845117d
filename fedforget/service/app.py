"""The FastAPI app: routes only; each calls the functions the CLI calls (forget, status, receipts, serving)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response, Security
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.security import HTTPBearer
from pydantic import BeforeValidator, WrapValidator

from fedforget.service.console import console_page, login_page
from fedforget.service.gate import COOKIE, SESSION_SECONDS, Gate, Sessions
from fedforget.service.group_commit import Submission
from fedforget.service.metrics import Metrics, deadline_gauges
from fedforget.service.requests_db import SERVICE_DB, IdempotencyConflict, ServiceRequest, canonical_spec, same_spec
from fedforget.service.schemas import (
    ID_EXPECTED,
    ID_LIMIT,
    BatchItemOut,
    ForgetBatchBody,
    ForgetBatchOut,
    ForgetBody,
    ForgetRequestList,
    ForgetRequestOut,
    Health,
    Invalid,
    PredictBody,
    PredictOut,
    Problem,
    digits_only,
    negative_zero_at,
    url_id,
)
from fedforget.service.service import Service, StoreRefused
from fedforget.unlearning import legal_clock
from fedforget.unlearning.deadline_settings import DeadlineSettings, read_settings
from fedforget.unlearning.request_states import accepted_state, ledger_states

VERSION = "1"
bearer = HTTPBearer(auto_error=False, description="A token from `fedforget token create` (scopes: forget:write, "
                                                  "status:read, predict).")
#: what every route with a token may answer besides its own codes: no/unknown token, missing scope, a body over
#: the bound (the Gate), a parameter it does not take, the store refused by its check
ERRORS = (401, 403, 413, 422, 503)
#: a JSON body: unparseable (400: not UTF-8, nested past the parser's depth, a key named twice), too slow
#: (408, the Gate)
BODY_ERRORS = (400, 408)
_WHY = {400: "The body is not JSON the parser can read (not UTF-8, nested too deep, or a key named twice).",
        401: "No token, or an unknown or revoked one.", 403: "The token lacks the route's scope; nothing was done.",
        404: "No such request.", 408: "The body did not arrive in time; nothing was done.",
        409: "Conflict; see the detail.", 413: "The body is over the bound; nothing was done.",
        422: "The request breaks the contract (the first problem in detail); nothing was written.",
        503: "The store is refused by its check, or this app serves none."}
#: an id in a URL (path or query): ASCII digits only, 0 <= id < 2**63
URL_ID = WrapValidator(url_id)
DIGITS = BeforeValidator(digits_only)


def refusals(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses for ``codes``: each a one-line :class:`Problem` (422 adds the field list)."""
    return {code: {"model": Invalid if code == 422 else Problem, "description": _WHY[code]} for code in sorted(codes)}


def json_refusals(*codes: int) -> dict[int | str, dict[str, Any]]:
    """:func:`refusals` for a route whose answer is not JSON (``/metrics``): its refusals are JSON all the same,
    and the schema says so (a response model would take the route's media type)."""
    return {code: {"description": _WHY[code], "content": {"application/json": {"schema": {
        "$ref": f"#/components/schemas/{'Invalid' if code == 422 else 'Problem'}"}}}} for code in sorted(codes)}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def known_query(request: Request) -> None:
    """Refuse a query parameter the route does not take (a misspelt ``afetr=`` is not silently ignored)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    known = {p.alias for p in dependant.query_params} if dependant is not None else set()
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        takes = f"it takes {', '.join(sorted(known))}" if known else "it takes none"
        raise HTTPException(422, f"query.{_one_line(unknown[0])[:40]}: unknown query parameter ({takes})")
    names = [name for name, _ in request.query_params.multi_items()]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # a framework would keep one of them (the last); which one the caller meant is not known
        raise HTTPException(422, f"query.{_one_line(twice[0])[:40]}: given {names.count(twice[0])} times; send each "
                                 "query parameter once")


async def no_negative_zero(request: Request) -> None:
    """Refuse a body that spells an id ``-0``: Python's JSON parser reads it as 0, and a forget cannot be undone."""
    where = negative_zero_at(await request.body())
    if where is not None:
        raise HTTPException(422, f"body.{where}: {ID_EXPECTED}, got -0 (a negative zero is not an id)")


#: a signed receipt's field holding its records' names and opening keys
OPENINGS = "record_openings"
#: why a status:read token gets no receipt that carries openings
WITHHELD = ("the receipt carries record names and their opening keys: read it with a token that also has "
            "forget:write")


def reads_names(request: Request) -> bool:
    """Whether the caller's token may read raw record names and their openings: they belong to the scope that
    submits forgets, not to status:read (what a metrics scraper or a dashboard holds)."""
    token = getattr(request.state, "token", None)
    return token is not None and "forget:write" in token.scopes


def create_app(store_root: Path | None, tls: bool = False) -> FastAPI:
    """The service for the store at ``store_root`` (``None``: the routes alone, to write the OpenAPI schema)."""
    svc = Service(store_root) if store_root is not None else None
    sessions = Sessions()
    app = FastAPI(title="fedforget forget service", version=VERSION, docs_url=None, redoc_url=None,
                  dependencies=[Depends(known_query)],
                  description="Submit forget requests, poll their state, fetch signed receipts, ask the served model. "
                              "See docs/operations/service.md.")
    app.add_middleware(Gate, tokens=None if svc is None else svc.tokens, sessions=sessions,
                       metrics=Metrics() if svc is None else svc.metrics, routes=app.router.routes)

    def service_root() -> Path:
        return served().store.root

    def served() -> Service:
        """The service, unchecked: a forget's check runs once for its whole group (the group commit)."""
        if svc is None:
            raise HTTPException(503, "this app serves no store")
        return svc

    def service() -> Service:
        if svc is None:
            raise HTTPException(503, "this app serves no store")
        try:
            svc.check()
        except StoreRefused as exc:
            raise HTTPException(503, _one_line(str(exc))) from None
        return svc

    from fedforget.service.opendsr import add_opendsr_routes

    add_opendsr_routes(app, service)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": ".".join(str(p) for p in e.get("loc", ())), "message": _one_line(e.get("msg", ""))}
                  for e in exc.errors()[:20]]
        first = errors[0] if errors else {"field": "body", "message": "invalid"}
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        return JSONResponse(status_code=422, content={"detail": f"{first['field']}: {first['message']}{more}",
                                                      "errors": errors})

    def states_of(s: Service, row: ServiceRequest) -> dict[int, dict[str, Any]]:
        """The ledger state of the one request ``row`` names (none while it is only accepted)."""
        return ledger_states(s.store, row.ledger_request) if row.ledger_request is not None else {}

    def ledger_state(row: ServiceRequest, states: dict[int, dict[str, Any]]) -> dict[str, Any]:
        """The ledger's state of the request ``row`` names; 503 when the ledger holds no such request, or one
        that named something else (a service.db of another store, or edited): the service would otherwise
        report a forget done that this ledger never applied."""
        if row.ledger_request is None:
            return accepted_state()
        state = states.get(row.ledger_request)
        if state is None:  # committed after ``states`` was read: read it again
            state = states_of(service(), row).get(row.ledger_request)
        if state is None or not (row.no_op or same_spec(state["spec"], row.spec)):
            raise HTTPException(503, f"{SERVICE_DB} does not match the ledger: its request {row.id} names ledger "
                                     f"request {row.ledger_request}, which "
                                     f"{'does not exist' if state is None else 'forgot something else'}; put "
                                     f"back this store's own {SERVICE_DB}")
        return state

    def describe(row: ServiceRequest, states: dict[int, dict[str, Any]], receipt: bool,
                 names: bool = True, settings: DeadlineSettings | None = None) -> ForgetRequestOut:
        """``names``: the caller may read raw record names and their openings (:func:`reads_names`); ``settings``:
        the store's deadline settings, when the caller read them for many requests."""
        state = ledger_state(row, states)
        settings = settings or read_settings(service_root())
        clock = legal_clock.request_clock(row.accepted_at, state, settings.policy, settings.completion_point,
                                          legal_clock.now())
        out = ForgetRequestOut(
            id=row.id, idempotency_key=row.idempotency_key, asked_by=row.asked_by,
            spec=row.spec if names else {k: v for k, v in row.spec.items() if k != "records"},
            ledger_request=row.ledger_request, no_op=row.no_op, state=state["state"], states=state["states"],
            accepted_at=row.accepted_at, applied_at=state["applied_at"], acknowledged_at=state["acknowledged_at"],
            retrained_at=state["retrained_at"],
            receipt_url=f"/v1/receipts/{row.ledger_request}" if state["states"]["purged"] else None,
            record_openings=[] if row.no_op or not names else state.get("record_openings", []), **clock)
        if receipt and state["states"]["purged"]:
            data, why = service().receipt(int(row.ledger_request))
            signed = json.loads(data) if data is not None else None
            if signed is not None and not names and OPENINGS in signed:
                signed, why = None, WITHHELD
            out.receipt, out.receipt_error = signed, why
        return out

    @app.post("/v1/forget-requests", status_code=201, response_model=ForgetRequestOut, tags=["forget"],
              responses={200: {"model": ForgetRequestOut, "description": "The key was used before: that request."},
                         **refusals(409, *BODY_ERRORS, *ERRORS)},
              dependencies=[Security(bearer), Depends(no_negative_zero)])
    def submit(body: ForgetBody, request: Request, response: Response) -> ForgetRequestOut:
        """Forget samples, records, slices or clients now (scope forget:write); one request per idempotency key."""
        from fedforget.store import StoreError
        from fedforget.store.forget_plan import PlanError
        from fedforget.store.ledger import LedgerUsageError
        from fedforget.store.records import record_sample_ids

        s = served()  # the store check runs once for the group this request joins
        try:
            records = record_sample_ids(s.store.manifest(), body.records) if body.records else None
            spec = canonical_spec(body.samples, body.slices, body.clients, records)
        except LedgerUsageError as exc:
            raise HTTPException(422, _one_line(str(exc))) from None
        except (StoreError, PlanError) as exc:
            raise HTTPException(503, _one_line(str(exc))) from None
        (done,) = s.committer.submit([Submission(spec, body.idempotency_key, request.state.token.name)])
        row, created = answered(done)
        response.status_code = 201 if created else 200
        return describe(row, done.states if done.states is not None else states_of(s, row), receipt=False)

    def answered(done: Submission) -> tuple[ServiceRequest, bool]:
        """A submission's outcome, or the HTTP refusal its error is."""
        from fedforget.store import StoreError
        from fedforget.store.forget_plan import PlanError
        from fedforget.store.ledger import LedgerUsageError

        outcome = done.outcome
        if isinstance(outcome, IdempotencyConflict):
            raise HTTPException(409, _one_line(str(outcome)))
        if isinstance(outcome, LedgerUsageError):
            raise HTTPException(422, _one_line(str(outcome)))
        if isinstance(outcome, StoreRefused | StoreError | PlanError):
            raise HTTPException(503, _one_line(str(outcome)))
        if isinstance(outcome, BaseException) or outcome is None:
            raise outcome or RuntimeError("the group commit left a submission without an outcome")
        return outcome

    @app.post("/v1/forget-batches", status_code=201, response_model=ForgetBatchOut, tags=["forget"],
              responses={200: {"model": ForgetBatchOut, "description": "Every key was used before: those requests."},
                         **refusals(*BODY_ERRORS, *ERRORS)},
              dependencies=[Security(bearer), Depends(no_negative_zero)])
    def submit_batch(body: ForgetBatchBody, request: Request, response: Response) -> ForgetBatchOut:
        """Forget many samples or records at once (an import; scope forget:write): each is its own forget request,
        keyed '<idempotency_key>/<position>', with the evidence it would have alone, all in one commit. One the
        ledger refuses (an unknown id) or whose key names another body is refused alone, in its item."""
        from fedforget.store import StoreError
        from fedforget.store.forget_plan import PlanError
        from fedforget.store.ledger import LedgerUsageError
        from fedforget.store.records import record_sample_ids

        s = served()
        try:
            named = record_sample_ids(s.store.manifest(), body.records) if body.records else {}
        except LedgerUsageError as exc:
            raise HTTPException(422, f"{_one_line(str(exc))} (nothing of the batch was written)") from None
        except (StoreError, PlanError) as exc:
            raise HTTPException(503, _one_line(str(exc))) from None
        who = request.state.token.name
        specs = [canonical_spec([sample], [], []) for sample in body.samples]
        specs += [canonical_spec([], [], [], {record: named[record]}) for record in body.records]
        subs = [Submission(spec, f"{body.idempotency_key}/{i}", who) for i, spec in enumerate(specs)]
        s.committer.submit(subs)
        items = []
        for i, done in enumerate(subs):
            try:
                row, created = answered(done)
            except HTTPException as exc:
                if exc.status_code == 503:
                    raise
                items.append(BatchItemOut(position=i, error=str(exc.detail)))
                continue
            items.append(BatchItemOut(position=i, id=row.id, ledger_request=row.ledger_request, no_op=row.no_op,
                                      created=created))
        created = sum(item.created for item in items)
        response.status_code = 201 if created else 200
        return ForgetBatchOut(idempotency_key=body.idempotency_key, created=created,
                              refused=sum(item.error is not None for item in items), requests=items)

    @app.get("/v1/forget-requests", response_model=ForgetRequestList, tags=["forget"],
             responses=refusals(*ERRORS), dependencies=[Security(bearer)])
    def list_requests(request: Request, limit: Annotated[int, Query(ge=1, le=1000), DIGITS] = 100,
                      after: Annotated[int, Query(ge=0, lt=ID_LIMIT), URL_ID] = 0) -> ForgetRequestList:
        """The service's forget requests in id order (scope status:read; record names and their openings only with
        forget:write too); page with ``after``."""
        s = service()
        states = ledger_states(s.store)
        names = reads_names(request)
        settings = read_settings(s.store.root)
        return ForgetRequestList(requests=[describe(r, states, receipt=False, names=names, settings=settings)
                                           for r in s.db.list(limit, after)])

    @app.get("/v1/forget-requests/{request_id}", response_model=ForgetRequestOut, tags=["forget"],
             responses=refusals(404, *ERRORS), dependencies=[Security(bearer)])
    def get_request(request: Request,
                    request_id: Annotated[int, PathParam(ge=0, lt=ID_LIMIT), URL_ID]) -> ForgetRequestOut:
        """One request: state, timestamps, who asked, and its signed receipt once it is purged (a receipt carrying
        record names and their openings only with forget:write too)."""
        s = service()
        row = s.db.get(request_id)
        if row is None:
            raise HTTPException(404, f"unknown forget request {request_id} (GET /v1/forget-requests lists them)")
        return describe(row, states_of(s, row), receipt=True, names=reads_names(request))

    @app.get("/v1/receipts/{ledger_request}", tags=["forget"], dependencies=[Security(bearer)],
             responses={200: {"content": {"application/json": {}}, "description": "The receipt file, byte for byte "
                              "as written (check it with `fedforget receipt --check FILE`)."},
                        **refusals(404, 409, *ERRORS)})
    def receipt(request: Request, ledger_request: Annotated[int, PathParam(ge=0, lt=ID_LIMIT), URL_ID]) -> Response:
        """The signed receipt of a ledger request (issued without `verify` on first use if none was); one that
        carries record names and their openings only with forget:write too (403 otherwise)."""
        s = service()
        states = ledger_states(s.store)
        if ledger_request not in states:
            raise HTTPException(404, f"unknown ledger request {ledger_request}")
        if not states[ledger_request]["states"]["purged"]:
            raise HTTPException(409, f"request {ledger_request} is not purged yet; its receipt comes once it is")
        data, why = s.receipt(ledger_request)
        if data is None:
            raise HTTPException(503, _one_line(why or "no receipt"))
        if not reads_names(request) and OPENINGS in json.loads(data):
            raise HTTPException(403, f"{WITHHELD}; nothing was sent")
        return Response(data, media_type="application/json",
                        headers={"content-disposition": f'attachment; filename="request-{ledger_request}.json"'})

    @app.post("/v1/predict", response_model=PredictOut, response_model_exclude_none=True, tags=["serve"],
              dependencies=[Security(bearer)], responses=refusals(409, *BODY_ERRORS, *ERRORS))
    def predict(body: PredictBody) -> PredictOut:
        """The served model's class probabilities and argmax, and the task's own prediction where it has one, with
        the id of the plan that answered."""
        from fedforget.federation.serve import ServingError
        from fedforget.service.inputs import INPUT_SCALE, InputError, model_inputs
        from fedforget.service.predict import PredictionError, task_outputs

        s = service()
        models = s.models()
        try:
            inputs = model_inputs(models.cfg.task, models.example_shape, body.inputs, body.raw)
        except InputError as exc:
            raise HTTPException(422, _one_line(str(exc))) from None
        try:
            pid, probs = models.predict(inputs)
        except ServingError as exc:
            raise HTTPException(409, _one_line(str(exc))) from None
        if probs.ndim > 2:  # a sequence task's (records × positions × classes): no class per record to answer
            raise HTTPException(422, f"task {models.cfg.task!r} is a sequence task (its model predicts each "
                                     "position): /v1/predict answers a class per record; `fedforget evaluate` "
                                     "measures what it serves")
        if not np.isfinite(probs).all():  # finite inputs the network's float32 arithmetic still overflows on
            raise HTTPException(422, f"inputs: the model's float32 arithmetic overflows on them; {INPUT_SCALE}")
        try:
            outputs = task_outputs(models.cfg, probs)
        except PredictionError as exc:
            raise HTTPException(422, f"inputs: {_one_line(str(exc))}") from None
        return PredictOut(plan_id=pid, task=models.cfg.task, predictions=[int(i) for i in probs.argmax(1)],
                          probabilities=[[float(p) for p in row] for row in probs], outputs=outputs)

    @app.get("/v1/status", tags=["status"], responses=refusals(*ERRORS), dependencies=[Security(bearer)])
    def status() -> JSONResponse:
        """What `fedforget status --json` shows."""
        return JSONResponse(json.loads(json.dumps(service().status(), default=str)))

    @app.get("/healthz", response_model=Health, tags=["status"], responses=refusals(413, 422, 503))
    def healthz() -> Health:
        """200 while the store passes its check (no token needed)."""
        service()
        return Health(status="ok")

    @app.get("/metrics", response_class=PlainTextResponse, tags=["status"], responses=json_refusals(*ERRORS),
             dependencies=[Security(bearer)])
    def metrics() -> PlainTextResponse:
        """Prometheus text: requests by route and code, latency histograms, served accuracy, artifacts."""
        s = service()
        info = s.status(accuracy=False)
        arts = info["artifacts"]
        loads = s._models.loads if s._models is not None else 0
        gauges = {
            "fedforget_served_accuracy": ("Test accuracy of the served model (absent until measured).",
                                          info["accuracy"]),
            "fedforget_served_accuracy_on_nodes": (
                "The nodes' example-weighted test accuracy of the served model (absent unless evaluate-on-nodes "
                "measured it).", (info.get("federated_accuracy") or {}).get("accuracy")),
            "fedforget_serving_available": ("1 while a model is served.", int(bool(info["available"]))),
            "fedforget_artifacts_valid": ("Artifacts that saw no forgotten data.", sum(a["valid"] for a in arts)),
            "fedforget_artifacts_invalid": ("Artifacts invalidated by forget requests.",
                                            sum(not a["valid"] for a in arts)),
            "fedforget_artifacts_corrupt": ("Artifacts whose bytes no longer match their sha256.",
                                            len(info["corrupt"])),
            "fedforget_ledger_requests": ("Forget requests in the ledger (CLI and service).",
                                          info["requests"]["total"]),
            "fedforget_forgotten_samples": ("Samples forgotten so far.", info["requests"]["forgotten_samples"]),
            "fedforget_deletions_left": ("Expected further requests until a retrain (delta).", info["deletions_left"]),
            "fedforget_model_loads": ("Served plans loaded by predict since the start.", loads),
            **deadline_gauges(info["deadlines"]),
        }
        return PlainTextResponse(s.metrics.render(gauges), media_type="text/plain; version=0.0.4")

    @app.get("/", response_class=HTMLResponse, tags=["console"], include_in_schema=False)
    def console(request: Request) -> HTMLResponse:
        problem = getattr(request.state, "auth_problem", None)
        if problem is not None:
            return HTMLResponse(login_page("" if problem.startswith("no token") else problem), status_code=401)
        s = service()
        info = s.status()
        from fedforget.service.predict import current_plan

        states = ledger_states(s.store)
        asked = s.db.asked_by_ledger_request()
        rows = [{**st, "asked_by": asked.get(rid, ["cli"])} for rid, st in sorted(states.items(), reverse=True)][:500]
        pid = current_plan(s.store)[0] if info["available"] else None
        from fedforget.unlearning.deadlines import request_clocks

        clocks = [c for c in request_clocks(s.store) if not c["complete"]]
        return HTMLResponse(console_page(info, pid, rows, s.db.accuracy_history(), clocks))

    @app.post("/console/session", include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        presented = (form.get("token") or [""])[0].strip()
        token = svc.tokens.lookup(presented) if svc is not None and presented else None
        if token is None or "status:read" not in token.scopes:
            why = "unknown or revoked token" if token is None else f"the token {token.name!r} lacks status:read"
            return HTMLResponse(login_page(why), status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, sessions.open(token), max_age=SESSION_SECONDS, httponly=True, samesite="strict",
                            secure=tls, path="/")
        return response

    @app.post("/console/logout", include_in_schema=False)
    def sign_out(request: Request) -> Response:
        sessions.close(request.cookies.get(COOKIE, ""))
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    return app
