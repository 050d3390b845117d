"""OpenDSR 2.0 routes under ``/opendsr/v2``: the integrators' erasure API over the service's own forget requests.

A request submitted here is a ``service.db`` request under the idempotency key ``opendsr:<subject_request_id>``
(``fedforget.service.opendsr_book``), applied by the same call ``POST /v1/forget-requests`` makes, so it shows
in ``GET /v1/forget-requests`` and ``fedforget status``. Every answer is signed (``opendsr_signing``); every
refusal is the specification's error object. docs/operations/service.md says how states map and what is not
built.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from fedforget.service.group_commit import Submission
from fedforget.service.opendsr_book import OpenDSRBook, SubjectRequest, body_sha256, service_key
from fedforget.service.opendsr_schemas import (
    API_VERSION,
    BASE,
    SUPPORTED_TYPES,
    UUID4,
    CancelOut,
    DiscoveryOut,
    ErrorOut,
    FedforgetExtension,
    OpenDSRRequest,
    StatusOut,
    SubmitOut,
    rfc3339,
)
from fedforget.service.opendsr_signing import Signer, SigningUnavailable, canonical_json, load_signer
from fedforget.service.requests_db import IdempotencyConflict, ServiceRequest, canonical_spec, same_spec
from fedforget.service.schemas import RECORD_EXPECTED, Invalid, Problem
from fedforget.service.service import Service, StoreRefused
from fedforget.unlearning.deadline_settings import read_settings
from fedforget.unlearning.legal_clock import deadline
from fedforget.unlearning.request_states import ledger_states

CERT_ROUTE = f"{BASE}/certificate.pem"
TAGS: list[str | Enum] = ["opendsr"]
#: the schema says a subject_request_id is a lowercase UUID v4; the route checks it itself, so that a malformed
#: one gets the specification's 400 error object rather than the service's 422
SUBJECT_ID = Annotated[str, PathParam(json_schema_extra={"pattern": UUID4.pattern},
                                      description="The controller's subject_request_id (a lowercase UUID v4).")]


class OpenDSRError(Exception):
    """A refusal in the specification's form (section 7.6): HTTP ``code``, one line, a reason."""

    def __init__(self, code: int, message: str, reason: str = "IllegalArgumentException",
                 domain: str = "Validation") -> None:
        super().__init__(message)
        self.code, self.message, self.reason, self.domain = code, " ".join(message.split()), reason, domain


def _signed(status: int, content: dict[str, Any], signer: Signer | None, body_signature: bool = False) -> Response:
    """``content`` as the canonical JSON body, with the X-OpenDSR headers; ``body_signature``: add
    ``processor_signature``, the signature of the body's canonical bytes without that field."""
    headers = {}
    if signer is not None:
        if body_signature:
            content = {**content, "processor_signature": signer.sign(canonical_json(content))}
        body = canonical_json(content)
        headers = {"X-OpenDSR-Processor-Domain": signer.domain, "X-OpenDSR-Signature": signer.sign(body)}
    else:
        body = canonical_json(content)
    if status >= 400:
        headers.update({"Cache-Control": "no-store", "Pragma": "no-cache"})
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _error(exc: OpenDSRError, signer: Signer | None) -> Response:
    return _signed(exc.code, {"error": {"code": exc.code, "message": exc.message, "errors": [
        {"domain": exc.domain, "reason": exc.reason, "message": exc.message}]}}, signer)


def _parse(raw: bytes) -> OpenDSRRequest:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise OpenDSRError(400, "the body is not JSON (UTF-8)", "MalformedJson") from None
    if not isinstance(data, dict):
        raise OpenDSRError(400, "the body must be a JSON object (section 7.1.1)", "MalformedJson")
    try:
        return OpenDSRRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise OpenDSRError(400, f"{where}: {first.get('msg', 'invalid')}", "IllegalArgumentException") from None


def _records(body: OpenDSRRequest, domain: str) -> list[str]:
    if body.subject_request_type not in SUPPORTED_TYPES:
        known = body.subject_request_type in ("access", "portability")
        raise OpenDSRError(400, f"subject_request_type: {body.subject_request_type[:40]!r} is "
                                f"{'not supported' if known else 'unknown'}; this processor fulfils "
                                f"{', '.join(SUPPORTED_TYPES)} only (see discovery)", "UnsupportedRequestType")
    if body.subject_identities:
        raise OpenDSRError(400, "subject_identities: this processor resolves no identity type (discovery lists "
                                f"none); name the records in extensions[{domain!r}].records", "UnsupportedIdentity")
    if body.status_callback_urls:
        raise OpenDSRError(400, "status_callback_urls: callbacks are not supported by this processor; leave them "
                                "out and poll the request's status", "UnsupportedCallback")
    ours = body.extensions.get(domain)
    if ours is None:
        raise OpenDSRError(400, f"extensions[{domain!r}]: name the records to erase, "
                                "{\"records\": [\"NODE:RECORD_ID\", ...]}", "MissingRecords")
    try:
        return FedforgetExtension.model_validate(ours).records
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get("loc", ())
        where = ".".join(str(p) for p in loc)
        # a record's own validator repeats the text it was given; an error names no identity (section 7.6)
        said = RECORD_EXPECTED if len(loc) == 2 and loc[0] == "records" else first.get("msg", "invalid")
        raise OpenDSRError(400, f"extensions[{domain!r}].{where}: {said}") from None


def unknown_record(manifest: dict[str, Any], records: list[str], domain: str) -> OpenDSRError:
    """The refusal of ``records`` the store does not hold, naming the first one by its position only: an error
    names no identity (section 7.6)."""
    from fedforget.store.ledger import LedgerUsageError
    from fedforget.store.records import record_sample_id

    def held(record: str) -> bool:
        try:
            record_sample_id(manifest, record)
        except LedgerUsageError:
            return False
        return True

    at = next((i for i, record in enumerate(records) if not held(record)), 0)
    return OpenDSRError(400, f"extensions[{domain!r}].records.{at}: not a record of this store's training data (a "
                             "node it has, and a record that node's data holds); the record is not repeated here",
                        "UnknownRecord")


def request_status(svc: Service, row: ServiceRequest) -> tuple[str, float, int | None]:
    """The OpenDSR status of a service request, when it completed or is expected to, and its ledger request once
    its receipt can be issued (purged)."""
    # a request not yet completed is expected done by its deadline: the store's legal clock, as /v1 and status
    # show it (fedforget cannot know when the operator propagates to the clients or retrains; the deadline is
    # the bound an operator running this API commits to)
    due = deadline(row.accepted_at, read_settings(svc.store.root).policy)
    if row.ledger_request is None:
        return "pending", due, None
    state = ledger_states(svc.store, row.ledger_request).get(row.ledger_request)
    if state is None or not (row.no_op or same_spec(state["spec"], row.spec)):  # as /v1 refuses it
        raise OpenDSRError(503, "service.db does not match the ledger for this request; put back this store's "
                                "own service.db", "StoreMismatch", "Processor")
    flags, acks = state["states"], state["acknowledgements"]
    if not flags["purged"]:
        return "in_progress", due, None
    if not acks["owners"]:  # no client holds the samples: the purge finished it
        return "completed", float(state["applied_at"]), row.ledger_request
    done = [t for t, ok in ((state["acknowledged_at"], flags["acknowledged"]),
                            (state["retrained_at"], flags["retrained"])) if ok and t is not None]
    if done:
        return "completed", float(min(done)), row.ledger_request
    return "in_progress", due, row.ledger_request


def add_opendsr_routes(app: FastAPI, service: Callable[[], Service]) -> None:
    """Declare the OpenDSR routes on ``app`` (on the app itself: the Gate reads its route list), over the
    service ``service()`` returns (503 while the store is refused)."""
    books: dict[str, OpenDSRBook] = {}

    def ready() -> tuple[Service, Signer]:
        try:
            signer = load_signer()
        except SigningUnavailable as exc:
            raise OpenDSRError(503, str(exc), "SigningUnavailable", "Processor") from None
        try:
            svc = service()
        except HTTPException as exc:
            raise OpenDSRError(exc.status_code, str(exc.detail), "StoreRefused", "Processor") from None
        return svc, signer

    def book(svc: Service) -> OpenDSRBook:
        key = str(svc.store.root)
        if key not in books:
            books[key] = OpenDSRBook(svc.store.root)
        return books[key]

    def answer(handler: Callable[[], Response]) -> Response:
        try:
            return handler()
        except OpenDSRError as exc:
            try:
                signer: Signer | None = load_signer()
            except SigningUnavailable:
                signer = None
            return _error(exc, signer)

    def known(subject_request_id: str) -> None:
        if not UUID4.fullmatch(subject_request_id):
            raise OpenDSRError(400, "subject_request_id: expected a lowercase UUID v4")

    def row_of(svc: Service, subject_request_id: str) -> ServiceRequest:
        row = svc.db.by_key(service_key(subject_request_id))
        if row is None:
            raise OpenDSRError(404, f"no request {subject_request_id}", "NotFound", "Request")
        return row

    #: what the service's Gate and query check answer before a route runs keep the /v1 form ({"detail"})
    errors: dict[int, dict[str, Any]] = {code: {"model": ErrorOut, "description": why} for code, why in (
        (400, "The request breaks the specification or asks what this processor does not do (section 7.5)."),
        (404, "No request with this subject_request_id."),
        (503, "The store is refused by its check, or no signing key and certificate are in place."))}
    errors.update({code: {"model": Invalid if code == 422 else Problem, "description": why} for code, why in (
        (401, "No token, or an unknown or revoked one (the service's {\"detail\"} form)."),
        (403, "The token lacks the route's scope (the service's form)."),
        (408, "The body did not arrive in time (the service's form)."),
        (413, "The body is over the service's bound (the service's form)."),
        (422, "A query parameter the route does not take (the service's form)."))})

    def refusals(*codes: int) -> dict[int | str, dict[str, Any]]:
        return {code: errors[code] for code in codes}

    @app.get(BASE + "/discovery", tags=TAGS, response_model=DiscoveryOut, responses=refusals(422, 503))
    def discovery() -> Response:
        """Section 6: what this processor supports, and where its signing certificate is (no token: a controller
        checking a signature reads it, section 8.8)."""
        def run() -> Response:
            _, signer = ready()
            return _signed(200, {"api_version": API_VERSION, "supported_identities": [],
                                 "supported_subject_request_types": list(SUPPORTED_TYPES),
                                 "processor_certificate": f"https://{signer.domain}{CERT_ROUTE}"}, signer)
        return answer(run)

    @app.get(BASE + "/certificate.pem", tags=TAGS, responses={200: {"content": {"application/x-pem-file": {}},
                                                     "description": "The signing certificate chain (PEM)."},
                                               **refusals(422, 503)})
    def certificate() -> Response:
        """The certificate OpenDSR answers are signed with (no token: a certificate is public)."""
        def run() -> Response:
            _, signer = ready()
            return Response(signer.cert_pem, media_type="application/x-pem-file")
        return answer(run)

    @app.post(BASE + "/requests", tags=TAGS, status_code=201, response_model=SubmitOut,
                 responses=refusals(400, 401, 403, 408, 413, 422, 503),
                 openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                     "schema": OpenDSRRequest.model_json_schema()}}}})
    async def submit(request: Request) -> Response:
        """Section 7: an erasure of the records named in the fedforget extension, applied before the answer
        (scope forget:write); the same subject_request_id again is the same request."""
        raw = await request.body()

        def run() -> Response:
            from fedforget.store import StoreError
            from fedforget.store.forget_plan import PlanError
            from fedforget.store.ledger import LedgerUsageError
            from fedforget.store.records import record_sample_ids

            svc, signer = ready()
            body = _parse(raw)
            records = _records(body, signer.domain)
            digest = body_sha256(canonical_json(body.model_dump(mode="json")))
            controller = request.state.token.name
            sid = body.subject_request_id
            held = book(svc).get(sid)
            if held is not None and (held.body_sha256 != digest or held.controller_id != controller):
                raise OpenDSRError(400, f"subject_request_id {sid} was sent before with another body or by another "
                                        "controller; use a new id for a new request", "DuplicateRequestId")
            try:
                spec = canonical_spec([], [], [], record_sample_ids(svc.store.manifest(), records))
                # committed in the service's next group, as a /v1 submission is (fedforget.service.group_commit)
                (done,) = svc.committer.submit([Submission(spec, service_key(sid), controller)])
                if isinstance(done.outcome, BaseException) or done.outcome is None:
                    raise done.outcome or RuntimeError("the group commit left a submission without an outcome")
                row, _ = done.outcome
            except IdempotencyConflict:
                raise OpenDSRError(400, f"subject_request_id {sid} was sent before with another body; use a new id "
                                        "for a new request", "DuplicateRequestId") from None
            except LedgerUsageError:
                raise unknown_record(svc.store.manifest(), records, signer.domain) from None
            except (StoreRefused, StoreError, PlanError) as exc:
                raise OpenDSRError(503, str(exc), "StoreRefused", "Processor") from None
            held = book(svc).add(SubjectRequest(sid, digest, controller, row.accepted_at))
            if held.body_sha256 != digest or held.controller_id != controller:
                raise OpenDSRError(400, f"subject_request_id {sid} was sent before with another body or by another "
                                        "controller; use a new id for a new request", "DuplicateRequestId")
            _, due, _ = request_status(svc, row)
            return _signed(201, {"controller_id": row.asked_by, "expected_completion_time": rfc3339(due),
                                 "received_time": rfc3339(row.accepted_at),
                                 "encoded_request": base64.b64encode(raw).decode(),
                                 "subject_request_id": sid}, signer, body_signature=True)
        return await run_in_threadpool(answer, run)

    def status_answer(subject_request_id: str) -> Response:
        def run() -> Response:
            known(subject_request_id)
            svc, signer = ready()
            row = row_of(svc, subject_request_id)
            status, due, ledger_request = request_status(svc, row)
            out: dict[str, Any] = {"controller_id": row.asked_by, "expected_completion_time": rfc3339(due),
                                   "subject_request_id": subject_request_id, "request_status": status,
                                   "api_version": API_VERSION}
            if ledger_request is not None:
                out["results_url"] = f"https://{signer.domain}/v1/receipts/{ledger_request}"
            return _signed(200, out, signer)
        return answer(run)

    @app.get(BASE + "/requests/{subject_request_id}", tags=TAGS, response_model=StatusOut,
             responses=refusals(400, 401, 403, 404, 422, 503))
    def status(subject_request_id: SUBJECT_ID) -> Response:
        """Section 8: the request's status (scope status:read)."""
        return status_answer(subject_request_id)

    @app.get(BASE + "/status/{subject_request_id}", tags=TAGS, response_model=StatusOut,
             responses=refusals(400, 401, 403, 404, 422, 503))
    def status_alias(subject_request_id: SUBJECT_ID) -> Response:
        """Section 3.1's ``/status`` endpoint: the same answer as ``GET /requests/{subject_request_id}``."""
        return status_answer(subject_request_id)

    @app.delete(BASE + "/requests/{subject_request_id}", tags=TAGS, status_code=202, response_model=CancelOut,
                   responses=refusals(400, 401, 403, 404, 422, 503))
    def cancel(subject_request_id: SUBJECT_ID) -> Response:
        """Section 9: cancellation, allowed only while pending. A forget is applied before its submission is
        answered, so a request is never pending when a controller can name it: always 400 (scope forget:write)."""
        def run() -> Response:
            known(subject_request_id)
            svc, _ = ready()
            status, _, _ = request_status(svc, row_of(svc, subject_request_id))
            now = "being applied now" if status == "pending" else f"{status}, not pending"
            raise OpenDSRError(400, f"request {subject_request_id} is {now}: a forget is applied before its "
                                    "submission is answered, and an applied forget cannot be undone",
                               "NotPending", "Request")
        return answer(run)


