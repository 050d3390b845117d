"""The HTTP contract: request and response bodies (pydantic), with their bounds."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

#: at most this many ids (samples + slices + clients) in one forget request, inputs in one prediction
MAX_IDS = 10_000
MAX_INPUTS = 128
ID = Annotated[int, Field(ge=0, le=2**63 - 1)]
SLICE = Annotated[str, StringConstraints(min_length=3, max_length=41, pattern=r"^\s*\d{1,19}:\d{1,19}\s*$")]
KEY = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]


class ForgetBody(BaseModel):
    """What to forget, and the caller's idempotency key: the same key again is the same request."""

    model_config = ConfigDict(extra="forbid")
    idempotency_key: KEY = Field(description="Printable ASCII, 1..200 characters; one request per key.")
    samples: list[ID] = Field(default_factory=list, max_length=MAX_IDS, description="Sample ids (train split).")
    slices: list[SLICE] = Field(default_factory=list, max_length=MAX_IDS, description="PARTITION:SLICE units.")
    clients: list[ID] = Field(default_factory=list, max_length=MAX_IDS, description="Whole clients.")

    @model_validator(mode="after")
    def _names_something(self) -> ForgetBody:
        total = len(self.samples) + len(self.slices) + len(self.clients)
        if total == 0:
            raise ValueError("name something to forget: samples, slices or clients")
        if total > MAX_IDS:
            raise ValueError(f"at most {MAX_IDS} ids in one request (samples + slices + clients)")
        return self


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
    receipt: dict[str, Any] | None = Field(None, description="The signed receipt (once purged), as written.")
    receipt_error: str | None = None


class ForgetRequestList(BaseModel):
    requests: list[ForgetRequestOut]


class PredictBody(BaseModel):
    """Inputs in the task's own form: pixel arrays for vision tasks, strings for text tasks."""

    model_config = ConfigDict(extra="forbid")
    inputs: list[Any] = Field(min_length=1, max_length=MAX_INPUTS)
    raw: bool = Field(False, description="Vision: pixel values as the data set stores them (digits 0..16, "
                                         "Fashion-MNIST 0..255) instead of the model's scale.")


class PredictOut(BaseModel):
    plan_id: str = Field(description="sha256 over the serving plan and the served artifacts' sha256s.")
    task: str
    predictions: list[int]
    probabilities: list[list[float]]


class Health(BaseModel):
    status: str


class Problem(BaseModel):
    detail: str
