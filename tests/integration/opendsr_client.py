"""A controller's OpenDSR 2.0 client, written from the specification's text (``specification.md`` and
``security_guidelines.md`` of opengdpr/OpenDSR at 6c080e2f277df3d908ba9dc16c1084638315b210), not from the
service's code: it builds requests with the field names of section 7.1.1 and checks every answer by the rules
of sections 6.3, 7.3, 7.6, 8.3 and 9.2, and the signature as section 8.8 and the security guidelines say (the
X-OpenDSR-Processor-Domain header in a whitelist, the certificate from discovery issued by a trusted CA to that
domain, the X-OpenDSR-Signature over the raw body with SHA-256, before the body is parsed)."""

from __future__ import annotations

import base64
import datetime
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
STATUSES = {"pending", "in_progress", "completed", "cancelled"}
REQUEST_TYPES = {"access", "portability", "erasure"}


class SpecViolation(AssertionError):
    """The processor's answer breaks a rule of the specification."""


def when(text: str) -> datetime.datetime:
    if not isinstance(text, str) or not RFC3339.fullmatch(text):
        raise SpecViolation(f"not an RFC 3339 date string: {text!r}")
    return datetime.datetime.fromisoformat(text.upper().replace("Z", "+00:00"))


def new_request(records: list[str], domain: str, **fields: Any) -> dict[str, Any]:
    """Section 7.1.1: an erasure request; identities travel in the processor's extension (section 7.1.2)."""
    body: dict[str, Any] = {"regulation": "gdpr", "subject_request_id": str(uuid.uuid4()),
                            "subject_request_type": "erasure", "submitted_time": "2018-10-02T15:00:00Z",
                            "api_version": "2.0", "extensions": {domain: {"records": records}}}
    body.update(fields)
    return body


@dataclass
class Answer:
    status: int
    raw: bytes
    json: Any
    headers: httpx.Headers


class OpenDSRController:
    """One controller talking to one processor: ``base`` is where the processor's domain is reached (the test's
    DNS), ``domain`` the one whitelisted processor domain, ``ca`` the trusted certificate authority."""

    def __init__(self, base: str, token: str | None, domain: str, ca: x509.Certificate) -> None:
        self.base, self.token, self.domain, self.ca = base.rstrip("/"), token, domain, ca
        self._cert: x509.Certificate | None = None

    def _headers(self) -> dict[str, str]:
        out = {"Accept": "application/json"}
        if self.token is not None:
            out["Authorization"] = f"Bearer {self.token}"
        return out

    def call(self, method: str, path: str, body: bytes | None = None, signed: bool = True) -> Answer:
        headers = self._headers()
        if body is not None:
            headers["Content-Type"] = "application/json"
        r = httpx.request(method, self.base + path, content=body, headers=headers, timeout=120)
        if signed:
            self.verify(r.content, r.headers)  # section 8.8, step 4: before the payload is parsed
        return Answer(r.status_code, r.content, json.loads(r.content) if r.content else None, r.headers)

    # -- section 8.8 and the security guidelines ----------------------------------------------------------
    def certificate(self) -> x509.Certificate:
        if self._cert is None:
            d = self.call("GET", "/discovery", signed=False)
            url = urlsplit(d.json["processor_certificate"])
            if url.hostname != self.domain:
                raise SpecViolation(f"processor_certificate is not on the processor's domain: {url.geturl()}")
            pem = httpx.get(self.base + url.path.removeprefix(urlsplit(self.base).path), timeout=30).content
            cert = x509.load_pem_x509_certificates(pem)[0]
            now = datetime.datetime.now(datetime.UTC)
            if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
                raise SpecViolation("the processor's certificate is not valid now")
            try:
                cert.verify_directly_issued_by(self.ca)  # issued by the trusted CA
            except (ValueError, TypeError, InvalidSignature):
                raise SpecViolation("the processor's certificate was not issued by the trusted CA") from None
            if cert.issuer == cert.subject:
                raise SpecViolation("a self-signed certificate MUST NOT be used (section 4.1)")
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            if self.domain not in san.get_values_for_type(x509.DNSName):
                raise SpecViolation("the processor's domain is not in its certificate's SAN")
            self._cert = cert
        return self._cert

    def check_signature(self, data: bytes, signature_b64: str) -> None:
        key = self.certificate().public_key()
        signature = base64.b64decode("".join(signature_b64.split()), validate=True)
        try:
            if isinstance(key, rsa.RSAPublicKey):
                key.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
            elif isinstance(key, ec.EllipticCurvePublicKey):
                key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
            else:
                raise SpecViolation("the certificate's key is neither RSA nor ECDSA (FIPS 186-4)")
        except InvalidSignature:
            raise SpecViolation("X-OpenDSR-Signature does not verify over the body") from None

    def verify(self, raw: bytes, headers: httpx.Headers) -> None:
        if headers.get("X-OpenDSR-Processor-Domain") != self.domain:
            raise SpecViolation(f"X-OpenDSR-Processor-Domain is {headers.get('X-OpenDSR-Processor-Domain')!r}, "
                                f"not the whitelisted {self.domain!r}")
        if "X-OpenDSR-Signature" not in headers:
            raise SpecViolation("no X-OpenDSR-Signature header")
        self.check_signature(raw, headers["X-OpenDSR-Signature"])

    # -- the endpoints --------------------------------------------------------------------------------------
    def discovery(self) -> dict[str, Any]:
        """Section 6.3."""
        a = self.call("GET", "/discovery")
        assert a.status == 200, a.raw
        d = a.json
        for field in ("api_version", "supported_identities", "supported_subject_request_types",
                      "processor_certificate"):
            if field not in d:
                raise SpecViolation(f"discovery lacks the REQUIRED {field}")
        if not set(d["supported_subject_request_types"]) <= REQUEST_TYPES:
            raise SpecViolation(f"unknown subject request types {d['supported_subject_request_types']}")
        for pair in d["supported_identities"]:
            if set(pair) != {"identity_type", "identity_format"}:
                raise SpecViolation(f"a supported identity is not an identity_type/identity_format pair: {pair}")
        return d

    def submit(self, body: dict[str, Any] | bytes) -> Answer:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        a = self.call("POST", "/requests", raw)
        if a.status == 201:
            self.check_created(a, raw)
        else:
            self.check_error(a)
        return a

    def check_created(self, a: Answer, sent: bytes) -> None:
        """Section 7.3."""
        d = a.json
        for field in ("controller_id", "expected_completion_time", "received_time", "encoded_request",
                      "subject_request_id", "processor_signature"):
            if field not in d:
                raise SpecViolation(f"the response lacks the REQUIRED {field}")
        when(d["expected_completion_time"]), when(d["received_time"])
        if base64.b64decode(d["encoded_request"], validate=True) != sent:
            raise SpecViolation("encoded_request is not the Base64 of the entire request body")
        if d["subject_request_id"] != json.loads(sent)["subject_request_id"]:
            raise SpecViolation("subject_request_id is not the request's")
        # processor_signature: the signature of the response body without it (the processor documents the
        # serialisation: keys sorted, no spaces, ASCII)
        rest = {k: v for k, v in d.items() if k != "processor_signature"}
        self.check_signature(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode(),
                             d["processor_signature"])

    def status(self, subject_request_id: str, path: str = "/requests/") -> Answer:
        """Section 8.3."""
        a = self.call("GET", path + subject_request_id)
        if a.status != 200:
            self.check_error(a)
            return a
        d = a.json
        for field in ("controller_id", "expected_completion_time", "subject_request_id", "request_status"):
            if field not in d:
                raise SpecViolation(f"the status lacks the REQUIRED {field}")
        when(d["expected_completion_time"])
        if d["request_status"] not in STATUSES or d["subject_request_id"] != subject_request_id:
            raise SpecViolation(f"bad status answer {d}")
        return a

    def cancel(self, subject_request_id: str) -> Answer:
        """Section 9.2: 202 with its fields, or an error."""
        a = self.call("DELETE", f"/requests/{subject_request_id}")
        if a.status == 202:
            for field in ("controller_id", "received_time", "subject_request_id", "processor_signature"):
                if field not in a.json:
                    raise SpecViolation(f"the cancellation lacks the REQUIRED {field}")
        else:
            self.check_error(a)
        return a

    @staticmethod
    def check_error(a: Answer) -> None:
        """Sections 7.5, 7.6: an error object whose code is the HTTP status."""
        error = (a.json or {}).get("error")
        if not isinstance(error, dict) or error.get("code") != a.status or not isinstance(error["code"], int):
            raise SpecViolation(f"not an error object with code {a.status}: {a.raw[:300]!r}")
        for detail in error.get("errors", []):
            if not {"message", "domain", "reason"} <= set(detail):
                raise SpecViolation(f"an error detail lacks message/domain/reason: {detail}")
