"""The OpenDSR 2.0 contract as fedforget takes it: the request body, the fedforget extension, the answers.

The text these follow is ``specification.md`` of the OpenDSR repository (``opengdpr/OpenDSR``) at commit
:data:`SPEC_COMMIT`; section numbers below are that text's.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

from fedforget.service.schemas import MAX_IDS, RECORD

#: the pinned commit of the specification's text (its ``master`` of 2020-06-29, without merge markers)
SPEC_COMMIT = "6c080e2f277df3d908ba9dc16c1084638315b210"
API_VERSION = "2.0"
#: section 3.4: URLs start with the major version; fedforget puts them under their own base path
BASE = "/opendsr/v2"
#: section 1.1: GUIDs are lowercase and v4
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
#: section 6.2 and 5.1, 5.2
REQUEST_TYPES = ("access", "portability", "erasure")
SUPPORTED_TYPES = ("erasure",)
IDENTITY_TYPES = ("controller_customer_id", "android_advertising_id", "android_id", "email", "fire_advertising_id",
                  "ios_advertising_id", "ios_vendor_id", "microsoft_advertising_id", "microsoft_publisher_id",
                  "roku_publisher_id", "roku_advertising_id")
IDENTITY_FORMATS = ("raw", "sha1", "md5", "sha256")
STATUSES = ("pending", "in_progress", "completed", "cancelled")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")


def rfc3339(at: float) -> str:
    """``at`` (seconds since the epoch) as an RFC 3339 UTC time, to the second."""
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class OpenDSRRequest(BaseModel):
    """Section 7.1.1: a controller's request. Strict types: a number where a string belongs is refused."""

    model_config = ConfigDict(extra="forbid", strict=True)
    regulation: StrictStr = Field(description="'gdpr' or 'ccpa'.")
    subject_request_id: StrictStr = Field(max_length=36, description="A lowercase UUID v4 the controller made; "
                                                                     "the request's idempotency key.")
    subject_request_type: StrictStr = Field(max_length=40, description="'erasure' (the only type fedforget "
                                                                       "fulfils).")
    submitted_time: StrictStr = Field(max_length=40, description="RFC 3339: when the data subject asked.")
    subject_identities: list[dict[str, Any]] = Field(
        default_factory=list, max_length=100,
        description="Section 5.3 identity objects. fedforget resolves no identity type (discovery lists none): "
                    "a request naming one is refused; name records in extensions instead.")
    api_version: StrictStr | None = Field(default=None, max_length=20, description="'2.0' (major version 2).")
    status_callback_urls: list[StrictStr] = Field(default_factory=list, max_length=20,
                                                  description="Not supported yet: a request naming one is refused; "
                                                              "poll the status route.")
    extensions: dict[str, dict[str, Any]] = Field(
        default_factory=dict, max_length=100,
        description="Keyed by processor domain; fedforget reads its own domain's object: "
                    "{\"records\": [\"NODE:RECORD_ID\", ...]}.")

    @field_validator("regulation")
    @classmethod
    def _regulation(cls, value: str) -> str:
        if value not in ("gdpr", "ccpa"):
            raise ValueError("expected 'gdpr' or 'ccpa'")
        return value

    @field_validator("subject_request_id")
    @classmethod
    def _uuid(cls, value: str) -> str:
        if not UUID4.fullmatch(value):
            raise ValueError("expected a lowercase UUID v4")
        return value

    @field_validator("submitted_time")
    @classmethod
    def _time(cls, value: str) -> str:
        if not valid_time(value):
            raise ValueError("expected an RFC 3339 date-time with a zone, e.g. 2018-10-02T15:00:00Z")
        return value

    @field_validator("api_version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None and value.split(".")[0] != API_VERSION.split(".")[0]:
            raise ValueError(f"this endpoint speaks OpenDSR {API_VERSION} (major version 2)")
        return value

    @field_validator("subject_identities")
    @classmethod
    def _identities(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for item in value:
            if set(item) != {"identity_type", "identity_value", "identity_format"} or \
                    item["identity_type"] not in IDENTITY_TYPES or item["identity_format"] not in IDENTITY_FORMATS \
                    or not isinstance(item["identity_value"], str):
                raise ValueError("expected identity objects {identity_type, identity_value, identity_format} of "
                                 "the types and formats of sections 5.1 and 5.2")
        return value


def valid_time(value: str) -> bool:
    if not _RFC3339.fullmatch(value):
        return False
    try:
        datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


class FedforgetExtension(BaseModel):
    """The object under fedforget's domain in ``extensions``: the records to forget, as their owners name them."""

    model_config = ConfigDict(extra="forbid", strict=True)
    records: list[RECORD] = Field(min_length=1, max_length=MAX_IDS,
                                  description="'NODE:RECORD_ID' strings, as POST /v1/forget-requests takes them.")


class Identity(BaseModel):
    identity_type: str
    identity_format: str


class DiscoveryOut(BaseModel):
    """Section 6.3."""

    api_version: str
    supported_identities: list[Identity]
    supported_subject_request_types: list[str]
    processor_certificate: str


class SubmitOut(BaseModel):
    """Section 7.3 (sent with the X-OpenDSR-Signature and X-OpenDSR-Processor-Domain headers)."""

    controller_id: str
    expected_completion_time: str
    received_time: str
    encoded_request: str
    subject_request_id: str
    processor_signature: str


class StatusOut(BaseModel):
    """Section 8.3."""

    controller_id: str
    expected_completion_time: str
    subject_request_id: str
    request_status: str
    api_version: str | None = None
    results_url: str | None = None


class CancelOut(BaseModel):
    """Section 9.2 (fedforget never sends it: see the cancellation route)."""

    controller_id: str
    received_time: str
    subject_request_id: str
    processor_signature: str
    api_version: str | None = None


class ErrorDetail(BaseModel):
    domain: str
    reason: str
    message: str


class ErrorObject(BaseModel):
    code: int
    message: str
    errors: list[ErrorDetail] = []


class ErrorOut(BaseModel):
    """Sections 7.5 and 7.6."""

    error: ErrorObject
