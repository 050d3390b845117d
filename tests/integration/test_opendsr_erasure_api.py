"""The forget service speaks OpenDSR 2.0 under /opendsr/v2 to a controller written from the specification
(``opendsr_client``), over real HTTP on 127.0.0.1: every answer signed by a key a private CA certified (made here,
never committed), an erasure is one forget request of the service (seen by /v1 and `fedforget status`), a
replayed id is the same request, and what the processor refuses is the specification's error object."""

from __future__ import annotations

import datetime
import json
import os
import uuid
from pathlib import Path

import httpx
import pytest

from fedforget.service.gate import MAX_BODY
from fedforget.service.opendsr_signing import CERT_FILE, KEY_FILE
from fedforget.store import Store

from .opendsr_client import OpenDSRController, SpecViolation, new_request
from .service_helpers import OPENDSR_DOMAIN as DOMAIN
from .service_helpers import Running, bearer, private_ca, private_copy, tokens, train_service_store


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One trained store served on 127.0.0.1 for the module, its tokens, the CA, the secrets folder."""
    root = tmp_path_factory.mktemp("opendsr")
    store = private_copy(train_service_store(root / "trained"), root)
    secrets = root / "secrets"
    before = {k: os.environ.get(k) for k in ("FEDFORGET_SECRETS", "FEDFORGET_RECEIPT_KEY")}
    os.environ["FEDFORGET_SECRETS"] = str(secrets)
    os.environ.pop("FEDFORGET_RECEIPT_KEY", None)
    ca = private_ca(secrets)
    tok = tokens(store)
    try:
        with Running(store) as url:
            yield {"url": url, "store": store, "tok": tok, "ca": ca, "secrets": secrets}
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def controller(served, scope: str = "all", token: str | None = "") -> OpenDSRController:  # noqa: ANN001
    return OpenDSRController(served["url"] + "/opendsr/v2", served["tok"][scope] if token == "" else token, DOMAIN,
                             served["ca"])


def record_of(store: Path, partition: int, at: int) -> str:
    return f"node-{partition}:{Store.open(store).manifest()['partitions'][str(partition)][0][at]}"


def v1_requests(served) -> list[dict]:  # noqa: ANN001
    r = httpx.get(served["url"] + "/v1/forget-requests", headers=bearer(served["tok"]["all"]), timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["requests"]


def ledger_count(store: Path) -> int:
    ledger = Store.open(store).ledger()
    try:
        return len(ledger.request_specs())
    finally:
        ledger.close()


def test_discovery_lists_erasure_and_a_certificate_on_the_processors_domain_without_a_token(served):
    d = controller(served, token=None).discovery()
    assert d["supported_subject_request_types"] == ["erasure"] and d["api_version"] == "2.0"
    assert d["processor_certificate"] == f"https://{DOMAIN}/opendsr/v2/certificate.pem"


def test_an_erasure_is_one_forget_request_seen_by_v1_and_a_replay_is_the_same_request(served):
    c = controller(served, "forget:write")
    body = new_request([record_of(served["store"], 1, 0)], DOMAIN)
    before = ledger_count(served["store"])
    first = c.submit(body)
    assert first.status == 201, first.raw
    assert first.json["controller_id"] == "forget-write"
    assert when_of(first.json["received_time"]) <= when_of(first.json["expected_completion_time"])
    [row] = [r for r in v1_requests(served) if r["idempotency_key"] == f"opendsr:{body['subject_request_id']}"]
    assert row["state"] in ("purged", "acknowledged", "retrained") and ledger_count(served["store"]) == before + 1
    assert (served["store"] / "opendsr.db").stat().st_mode & 0o777 == 0o600
    again = c.submit(json.dumps(body, indent=2).encode())  # the same body, other bytes
    assert again.status == 201 and again.json["received_time"] == first.json["received_time"]
    assert ledger_count(served["store"]) == before + 1
    assert len([r for r in v1_requests(served) if r["idempotency_key"] == row["idempotency_key"]]) == 1
    status = controller(served, "status:read").status(body["subject_request_id"])
    assert status.status == 200 and status.json["request_status"] in ("in_progress", "completed")
    if status.json["request_status"] == "completed":
        assert status.json["results_url"].endswith(f"/v1/receipts/{row['ledger_request']}")
    alias = controller(served, "status:read").status(body["subject_request_id"], path="/status/")
    assert alias.json == status.json
    info = httpx.get(served["url"] + "/v1/status", headers=bearer(served["tok"]["all"]), timeout=60).json()
    assert info["requests"]["total"] == ledger_count(served["store"])


def when_of(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_replayed_id_with_another_body_is_refused_and_forgets_nothing_more(served):
    c = controller(served, "forget:write")
    body = new_request([record_of(served["store"], 2, 0)], DOMAIN)
    assert c.submit(body).status == 201
    count = ledger_count(served["store"])
    for changed in ({**body, "submitted_time": "2019-01-01T00:00:00Z"},
                    {**body, "extensions": {DOMAIN: {"records": [record_of(served["store"], 2, 1)]}}}):
        a = c.submit(changed)
        assert a.status == 400 and "another body" in a.json["error"]["message"]
    assert ledger_count(served["store"]) == count


def test_a_request_submitted_through_v1_under_its_key_is_visible_to_opendsr(served):
    sid = str(uuid.uuid4())
    r = httpx.post(served["url"] + "/v1/forget-requests", headers=bearer(served["tok"]["forget:write"]), timeout=120,
                   json={"idempotency_key": f"opendsr:{sid}", "records": [record_of(served["store"], 0, 0)]})
    assert r.status_code == 201, r.text
    assert controller(served, "status:read").status(sid).json["controller_id"] == "forget-write"


def test_expected_completion_time_is_the_requests_deadline_under_the_stores_legal_clock(served):
    from fedforget.service.deadline_writer import write_settings
    from fedforget.service.opendsr_schemas import rfc3339
    from fedforget.unlearning.deadline_settings import DeadlineSettings, read_settings

    before = read_settings(served["store"])
    write_settings(served["store"], DeadlineSettings(policy="ccpa"))  # read by the running service per answer
    try:
        c = controller(served, "forget:write")
        body = new_request([record_of(served["store"], 2, 0)], DOMAIN)
        first = c.submit(body)
        assert first.status == 201, first.raw
        [row] = [r for r in v1_requests(served) if r["idempotency_key"] == f"opendsr:{body['subject_request_id']}"]
        assert row["deadline_policy"] == "ccpa" and row["deadline"] == row["accepted_at"] + 45 * 86400
        status = controller(served, "status:read").status(body["subject_request_id"]).json
        assert status["request_status"] == "in_progress"  # purged; its node has not acknowledged yet
        for answer in (first.json, status):  # open: its deadline, one source with /v1
            assert answer["expected_completion_time"] == rfc3339(row["deadline"])
    finally:
        write_settings(served["store"], before)


def test_cancellation_is_refused_because_a_request_is_applied_before_it_is_answered(served):
    c = controller(served, "forget:write")
    body = new_request([record_of(served["store"], 0, 1)], DOMAIN)
    assert c.submit(body).status == 201
    a = c.cancel(body["subject_request_id"])
    assert a.status == 400 and "not pending" in a.json["error"]["message"]
    assert c.cancel(str(uuid.uuid4())).status == 404


@pytest.mark.parametrize("case", ["bad json", "not an object", "number id", "uppercase id", "unknown type",
                                  "access", "identities", "callbacks", "no extension", "bad record",
                                  "unknown field", "bad time", "version 1"])
def test_what_breaks_the_specification_or_is_not_supported_is_a_400_error_object(served, case):
    c = controller(served, "forget:write")
    body = new_request([record_of(served["store"], 1, 2)], DOMAIN)
    bad: dict | bytes = {
        "bad json": b'{"subject_request_id": ', "not an object": b"[1, 2]",
        "number id": {**body, "subject_request_id": 12345},
        "uppercase id": {**body, "subject_request_id": body["subject_request_id"].upper()},
        "unknown type": {**body, "subject_request_type": "rectification"},
        "access": {**body, "subject_request_type": "access"},
        "identities": {**body, "subject_identities": [{"identity_type": "email", "identity_value": "a@b.c",
                                                       "identity_format": "raw"}]},
        "callbacks": {**body, "status_callback_urls": ["https://controller.test/cb"]},
        "no extension": {**body, "extensions": {"other-processor.test": {"id": 1}}},
        "bad record": {**body, "extensions": {DOMAIN: {"records": [17]}}},
        "unknown field": {**body, "property_id": "1"},
        "bad time": {**body, "submitted_time": "yesterday"},
        "version 1": {**body, "api_version": "1.0"},
    }[case]
    count = ledger_count(served["store"])
    a = c.submit(bad)
    assert a.status == 400, a.raw
    assert ledger_count(served["store"]) == count


def test_an_unknown_or_malformed_record_is_a_400_naming_its_place_not_the_record_and_nothing_is_forgotten(served):
    count = ledger_count(served["store"])
    held = record_of(served["store"], 1, 4)
    for records, at in (([held, "node-1:no-such-record"], 1), ([held, "no-colon-here"], 1)):
        a = controller(served, "forget:write").submit(new_request(records, DOMAIN))
        assert a.status == 400 and f"records.{at}:" in a.json["error"]["message"], a.raw
        assert records[at].encode() not in a.raw  # an error names no identity (section 7.6)
    assert ledger_count(served["store"]) == count


def test_a_malformed_status_id_is_400_and_an_unknown_one_404(served):
    c = controller(served, "status:read")
    assert c.status("not-a-uuid").status == 400
    assert c.status(str(uuid.uuid4())).status == 404


def test_a_body_over_the_services_bound_and_missing_or_weak_tokens_are_refused_before_anything_is_read(served):
    url = served["url"] + "/opendsr/v2/requests"
    huge = b'{"regulation": "' + b"x" * (MAX_BODY + 1) + b'"}'
    r = httpx.post(url, content=huge, headers={**bearer(served["tok"]["forget:write"]),
                                               "Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 413
    body = json.dumps(new_request([record_of(served["store"], 1, 3)], DOMAIN)).encode()
    assert httpx.post(url, content=body, timeout=60).status_code == 401
    assert httpx.post(url, content=body, headers=bearer(served["tok"]["status:read"]), timeout=60).status_code == 403
    assert httpx.delete(url + f"/{uuid.uuid4()}", headers=bearer(served["tok"]["status:read"]),
                        timeout=60).status_code == 403


def test_a_controller_refuses_an_answer_signed_by_another_key(served, tmp_path):
    other = private_ca(tmp_path / "other")  # the processor's key is still the served one: its CA is not trusted
    c = OpenDSRController(served["url"] + "/opendsr/v2", served["tok"]["all"], DOMAIN, other)
    with pytest.raises(SpecViolation, match="trusted CA"):
        c.discovery()


def test_a_signing_key_open_to_others_is_refused_with_503_and_nothing_is_forgotten(served):
    key = served["secrets"] / KEY_FILE
    count = ledger_count(served["store"])
    key.chmod(0o644)
    try:
        c = controller(served, "forget:write")
        r = c.call("POST", "/requests", json.dumps(new_request([record_of(served["store"], 2, 2)], DOMAIN)).encode(),
                   signed=False)
        assert r.status == 503 and "chmod 600" in r.json["error"]["message"]
    finally:
        key.chmod(0o600)
    assert ledger_count(served["store"]) == count


def test_an_rsa_key_signs_as_well(served, tmp_path):
    secrets = served["secrets"]
    saved = {name: (secrets / name).read_bytes() for name in (KEY_FILE, CERT_FILE)}
    ca = private_ca(secrets, rsa_key=True)
    try:
        c = OpenDSRController(served["url"] + "/opendsr/v2", served["tok"]["all"], DOMAIN, ca)
        assert c.discovery()["supported_subject_request_types"] == ["erasure"]
    finally:
        for name, data in saved.items():
            (secrets / name).write_bytes(data)


def test_the_spec_client_notices_a_tampered_body(served):
    c = controller(served, "status:read")
    a = c.call("GET", "/discovery")
    with pytest.raises(SpecViolation):
        c.verify(a.raw.replace(b"erasure", b"access"), a.headers)
