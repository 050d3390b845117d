"""The HTTP contract: request and response bodies (pydantic), with their bounds."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from fedforget.core.record_ids import MAX_RECORD_ID, NODE_NAME

#: at most this many ids (samples + records + slices + clients) in one forget request, inputs in one prediction
MAX_IDS = 10_000
MAX_INPUTS = 128
#: the ledger keeps ids in SQLite INTEGER columns: 0 <= id < 2**63
ID_LIMIT = 2**63
ID_EXPECTED = "expected an integer id, 0 <= id < 2**63 (a JSON number: not a boolean, string or float)"
SLICE_EXPECTED = "expected a slice 'PARTITION:SLICE', two ids 0 <= id < 2**63 in ASCII digits (e.g. '3:1')"
RECORD_EXPECTED = "expected a record 'NODE:RECORD_ID' (a string, e.g. 'node-0:17')"
#: a node name (64) + ':' + a record id (fedforget.core.record_ids.MAX_RECORD_ID)
MAX_RECORD_CHARS = 64 + 1 + MAX_RECORD_ID
#: what the schema says of a record (the validator, :func:`fedforget.core.record_ids.parse_record`, holds more:
#: a record id of printable characters)
RECORD_PATTERN = f"^{NODE_NAME.pattern}:.{{1,{MAX_RECORD_ID}}}$"
#: longest text ``predict`` takes for a text task
MAX_TEXT_CHARS = 10_000
_DIGITS = re.compile(r"[0-9]{1,19}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _strict_id(value: Any, handler: ValidatorFunctionWrapHandler) -> int:
    """A JSON integer in the ledger's range; a boolean, a string ("1_8") or a float (1.0) is refused, never cast."""
    try:
        return handler(value)
    except ValidationError:
        raise PydanticCustomError("id", f"{ID_EXPECTED}, got {{got}}", {"got": _shown(value)}) from None


def _strict_slice(value: Any, handler: ValidatorFunctionWrapHandler) -> str:
    """'P:S' with ASCII digits only (no Unicode digits, signs, spaces or underscores), each part an id."""
    text = value if isinstance(value, str) else ""
    parts = text.split(":")
    if len(parts) != 2 or not all(_DIGITS.fullmatch(p) and int(p) < ID_LIMIT for p in parts):
        raise PydanticCustomError("slice", f"{SLICE_EXPECTED}, got {{got}}", {"got": _shown(value)})
    return handler(value)


def _strict_record(value: Any, handler: ValidatorFunctionWrapHandler) -> str:
    """'NODE:RECORD_ID' as :func:`fedforget.core.record_ids.parse_record` reads it (split at the first colon)."""
    from fedforget.core.record_ids import parse_record

    if not isinstance(value, str):
        raise PydanticCustomError("record", f"{RECORD_EXPECTED}, got {{got}}", {"got": _shown(value)})
    try:
        parse_record(value)
    except ValueError as exc:
        raise PydanticCustomError("record", "{why}", {"why": str(exc)}) from None
    return handler(value)


def digits_only(value: Any) -> Any:
    """An integer in a URL as the URL spells it: ASCII digits only ('1_8', '+1', ' 1' are refused, not read)."""
    if isinstance(value, str) and not _DIGITS.fullmatch(value):
        raise PydanticCustomError("digits", "expected ASCII digits, got {got}", {"got": _shown(value)})
    return value


def url_id(value: Any, handler: ValidatorFunctionWrapHandler) -> int:
    """An id in a URL (path or query): ASCII digits, 0 <= id < 2**63."""
    try:
        return handler(digits_only(value))
    except (ValidationError, PydanticCustomError):
        raise PydanticCustomError("id", "expected an integer id, 0 <= id < 2**63 in ASCII digits, got {got}",
                                  {"got": _shown(value)}) from None


class _NegativeZero(int):
    """The JSON literal ``-0``, which Python reads as 0."""


def negative_zero_at(body: bytes) -> str | None:
    """Where a JSON body spells an integer ``-0`` (``samples.0``), or None. Python's parser reads it as 0, so an id
    field would take it as id 0; a forget cannot be undone, so it is refused, never read as an id."""
    if b"-0" not in body:
        return None
    try:
        parsed = json.loads(body, parse_int=lambda t: _NegativeZero(0) if t.startswith("-") and int(t) == 0 else int(t))
    except (ValueError, RecursionError):
        return None  # not JSON: the route says why
    stack: list[tuple[str, Any]] = [("", parsed)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, _NegativeZero):
            return where or "body"
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack += [(f"{where}.{k}" if where else str(k), v) for k, v in reversed(list(items))]
    return None


ID = Annotated[int, Field(strict=True, ge=0, lt=ID_LIMIT), WrapValidator(_strict_id)]
SLICE = Annotated[str, StringConstraints(min_length=3, max_length=39, pattern=r"^[0-9]{1,19}:[0-9]{1,19}$"),
                  WrapValidator(_strict_slice)]
RECORD = Annotated[str, StringConstraints(min_length=3, max_length=MAX_RECORD_CHARS, pattern=RECORD_PATTERN),
                   WrapValidator(_strict_record)]
KEY = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]


class ForgetBody(BaseModel):
    """What to forget, and the caller's idempotency key: the same key again is the same request."""

    model_config = ConfigDict(extra="forbid", strict=True)
    idempotency_key: KEY = Field(description="Printable ASCII, 1..200 characters; one request per key.")
    samples: list[ID] = Field(default_factory=list, max_length=MAX_IDS, description="Sample ids (train split).")
    slices: list[SLICE] = Field(default_factory=list, max_length=MAX_IDS, description="PARTITION:SLICE units.")
    clients: list[ID] = Field(default_factory=list, max_length=MAX_IDS, description="Whole clients.")
    records: list[RECORD] = Field(default_factory=list, max_length=MAX_IDS,
                                  description="Records as their owners know them, 'NODE:RECORD_ID' (split at the "
                                              "first colon; a node's name, then its record id as written).")

    @model_validator(mode="after")
    def _names_something(self) -> ForgetBody:
        total = len(self.samples) + len(self.slices) + len(self.clients) + len(self.records)
        if total == 0:
            raise ValueError("name something to forget: samples, records, slices or clients")
        if total > MAX_IDS:
            raise ValueError(f"at most {MAX_IDS} ids in one request (samples + records + slices + clients)")
        return self


#: ids in one batch (``POST /v1/forget-batches``): each becomes its own forget request, all in one commit
MAX_BATCH_IDS = 100_000


class ForgetBatchBody(BaseModel):
    """Many forget requests in one call (an import): each sample or record is its own request, under the key
    ``<idempotency_key>/<its position>`` (samples first, then records), all committed together."""

    model_config = ConfigDict(extra="forbid", strict=True)
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=180, pattern=r"^[\x21-\x7e]+$")] = \
        Field(description="Printable ASCII, 1..180 characters; the batch's requests are keyed '<key>/<position>'.")
    # no max_length: the count is bounded with the sum below (one line saying what to do), the bytes by the Gate
    samples: list[ID] = Field(default_factory=list, description=f"Sample ids, one request each (with records at "
                                                                 f"most {MAX_BATCH_IDS:,}).")
    records: list[RECORD] = Field(default_factory=list, description=f"Records 'NODE:RECORD_ID', one request each "
                                                                     f"(with samples at most {MAX_BATCH_IDS:,}).")

    @model_validator(mode="after")
    def _names_something(self) -> ForgetBatchBody:
        total = len(self.samples) + len(self.records)
        if total == 0:
            raise ValueError("name something to forget: samples or records")
        if total > MAX_BATCH_IDS:
            raise ValueError(f"at most {MAX_BATCH_IDS:,} ids in one batch (samples + records); split it into "
                             "several batches")
        return self


class BatchItemOut(BaseModel):
    """One request of a batch: its service request and ledger request, or why it was refused (alone)."""

    position: int
    id: int | None = None
    ledger_request: int | None = None
    no_op: bool = False
    created: bool = False
    error: str | None = Field(default=None, description="Why this one was refused (nothing of it was written).")


class ForgetBatchOut(BaseModel):
    """A batch's requests in position order, once the commit holding them is durable."""

    idempotency_key: str
    created: int = Field(description="Requests this call created (0 when every key was used before).")
    refused: int
    requests: list[BatchItemOut]


class States(BaseModel):
    accepted: bool
    applied: bool
    purged: bool
    acknowledged: bool
    retrained: bool


class ForgetRequestOut(BaseModel):
    """A service request, its ledger request and its state (derived from the ledger when read)."""

    id: int
    idempotency_key: str
    asked_by: str = Field(description="The name of the token that submitted it.")
    spec: dict[str, list[Any]]
    ledger_request: int | None = Field(description="The ledger request that applied it (for a no-op: the one "
                                                   "that had already forgotten what it names).")
    no_op: bool
    state: str = Field(description="accepted, applied, purged, acknowledged or retrained (the furthest reached).")
    states: States
    accepted_at: float
    applied_at: float | None
    acknowledged_at: float | None
    retrained_at: float | None
    receipt_url: str | None
    record_openings: list[dict[str, str]] = Field(
        default_factory=list, description="Each named record's opening (record, key, commitment): the ledger "
        "keeps only the commitment; the opening, kept until the request is complete, proves the record was "
        "forgotten.")
    receipt: dict[str, Any] | None = Field(None, description="The signed receipt (once purged), as written.")
    receipt_error: str | None = None
    deadline: float = Field(description="When the request is due under the store's legal clock "
                                   "(epoch seconds, UTC): accepted_at plus one calendar month (gdpr) or 45 days "
                                   "(ccpa); `fedforget deadlines` sets the policy.")
    deadline_policy: str = Field(description="The legal clock it runs on: gdpr or ccpa.")
    completion_point: str = Field(description="The state that completes it: purged, acknowledged or "
                                                           "retrained (`fedforget deadlines --complete-at`).")
    complete: bool = Field(description="Whether it reached its completion point.")
    completed_at: float | None = Field(description="When it reached its completion point (purged: when it "
                                                         "was applied, the purge following at once).")
    seconds_left: float | None = Field(description="Seconds to its deadline while open (negative once "
                                                         "overdue); null once complete.")
    overdue: bool = Field(description="Open past its deadline.")


class ForgetRequestList(BaseModel):
    requests: list[ForgetRequestOut]


_NUMBERS = {"type": "array", "items": {"type": "number"}}
#: one ``predict`` input as the schema shows it; read by :func:`fedforget.service.inputs.model_inputs`, which
#: refuses with one line what the task does not take (a shape, a non-finite number, a text for a vision task)
PREDICT_INPUT = Annotated[Any, WithJsonSchema({
    "anyOf": [{"type": "string", "maxLength": MAX_TEXT_CHARS, "description": "One text (text tasks)."},
              {**_NUMBERS, "description": "Pixel values, flat (vision tasks)."},
              {"type": "array", "items": _NUMBERS, "description": "Pixel values as rows (H x W)."},
              {"type": "array", "items": {"type": "array", "items": _NUMBERS},
               "description": "Pixel values as channels of rows (C x H x W)."}]})]


class PredictBody(BaseModel):
    """Inputs in the task's own form: pixel arrays for vision tasks, strings for text tasks."""

    model_config = ConfigDict(extra="forbid", strict=True)
    inputs: list[PREDICT_INPUT] = Field(min_length=1, max_length=MAX_INPUTS)
    raw: bool = Field(False, description="Vision: pixel values as the data set stores them (digits 0..16, "
                                         "Fashion-MNIST 0..255) instead of the model's scale.")


class PredictOut(BaseModel):
    plan_id: str = Field(description="sha256 over the serving plan and the served artifacts' sha256s.")
    task: str
    predictions: list[int]
    probabilities: list[list[float]]
    outputs: list[Any] | None = Field(None, description="The task's own prediction per input (a label, a value, "
                                                        "the top k: Task(prediction=...)); absent for a task "
                                                        "without one.")


class Health(BaseModel):
    status: str


class Problem(BaseModel):
    """Every refusal: one line saying what to do."""

    detail: str = Field(description="One line: what was wrong and what is expected.")


class FieldProblem(BaseModel):
    field: str = Field(description="Where: body.samples.0, path.request_id, query.after, ...")
    message: str


class Invalid(Problem):
    """A request the contract refuses (422): the first problem in ``detail``, each one in ``errors``."""

    errors: list[FieldProblem] = Field(default_factory=list, description="At most 20 problems, one per field.")
