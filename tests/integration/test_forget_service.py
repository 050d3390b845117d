"""The forget service over HTTP (FastAPI's TestClient): forget, idempotency, scopes, bounds, states,
receipts, predictions from the plan served now, status, metrics, the checked-in OpenAPI schema."""

from __future__ import annotations

import json
import sqlite3
import stat

import pytest
from typer.testing import CliRunner

from fedforget.service.openapi import SCHEMA_FILE, schema_text
from fedforget.service.requests_db import SERVICE_DB
from fedforget.service.schemas import MAX_IDS
from fedforget.service.tokens import tokens_path
from fedforget.store import Store
from fedforget.unlearning.cli import app as cli_app

from .service_helpers import bearer, client, private_copy, tokens, train_service_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service") / "store")


@pytest.fixture
def secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    monkeypatch.delenv("FEDFORGET_RECEIPT_KEY", raising=False)
    return tmp_path / "secrets"


@pytest.fixture
def store(trained, tmp_path, secrets):
    return private_copy(trained, tmp_path)


@pytest.fixture
def tok(store):
    return tokens(store)


def sample_of(store, partition: int, slice_: int = 0) -> int:  # noqa: ANN001
    return Store.open(store).manifest()["partitions"][str(partition)][slice_][0]


def ledger_requests(store) -> list[tuple[int, str]]:  # noqa: ANN001
    ledger = Store.open(store).ledger()
    try:
        return [(r["request"], json.dumps(r["spec"])) for r in ledger.requests()]
    finally:
        ledger.close()


def service_rows(store) -> int:  # noqa: ANN001
    path = store / SERVICE_DB
    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
    finally:
        db.close()


def test_a_forget_is_applied_and_a_repeated_idempotency_key_returns_the_same_request(store, tok):
    c = client(store)
    body = {"idempotency_key": "dsr-1", "samples": [sample_of(store, 1)]}
    first = c.post("/v1/forget-requests", json=body, headers=bearer(tok["forget:write"]))
    assert first.status_code == 201, first.text
    data = first.json()
    assert data["ledger_request"] == 1 and data["asked_by"] == "forget-write" and not data["no_op"]
    assert data["states"]["applied"] and data["states"]["purged"] and data["state"] == "purged"
    again = c.post("/v1/forget-requests", json=body, headers=bearer(tok["forget:write"]))
    assert again.status_code == 200 and again.json()["id"] == data["id"]
    assert len(ledger_requests(store)) == 1 and service_rows(store) == 1  # negative control: not a second request


def test_a_reused_key_with_another_body_is_refused_and_writes_nothing(store, tok):
    c = client(store)
    w = bearer(tok["forget:write"])
    assert c.post("/v1/forget-requests", json={"idempotency_key": "k", "samples": [sample_of(store, 0)]},
                  headers=w).status_code == 201
    other = c.post("/v1/forget-requests", json={"idempotency_key": "k", "samples": [sample_of(store, 2)]}, headers=w)
    assert other.status_code == 409 and "another body" in other.json()["detail"]
    assert len(ledger_requests(store)) == 1 and service_rows(store) == 1


@pytest.mark.parametrize("who", ["status:read", "predict"])
def test_a_token_without_forget_write_gets_403_and_nothing_is_written(store, tok, who):
    ledger_before = (store / "ledger.sqlite").read_bytes()
    c = client(store)
    response = c.post("/v1/forget-requests", json={"idempotency_key": "x", "samples": [sample_of(store, 1)]},
                      headers=bearer(tok[who]))
    assert response.status_code == 403
    assert "forget:write" in response.json()["detail"] and "\n" not in response.json()["detail"]
    assert (store / "ledger.sqlite").read_bytes() == ledger_before and service_rows(store) == 0


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer ffs_not-a-token"}, {"Authorization": "Basic x"}],
                         ids=["none", "unknown", "not-bearer"])
def test_no_token_or_a_wrong_one_is_401(store, tok, headers):
    c = client(store)
    for method, path in (("post", "/v1/forget-requests"), ("get", "/v1/status"), ("post", "/v1/predict"),
                         ("get", "/metrics"), ("get", "/v1/forget-requests/1")):
        response = getattr(c, method)(path, headers=headers, **({"json": {}} if method == "post" else {}))
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert service_rows(store) == 0


def test_a_revoked_token_is_refused_from_the_next_request(store, tok):
    c = client(store)
    assert c.get("/v1/status", headers=bearer(tok["status:read"])).status_code == 200
    result = CliRunner().invoke(cli_app, ["token", "revoke", "--store", str(store), "--name", "status-read"])
    assert result.exit_code == 0, result.output
    assert c.get("/v1/status", headers=bearer(tok["status:read"])).status_code == 401


@pytest.mark.parametrize(("body", "field"), [
    ({"idempotency_key": "a", "samples": ["x"]}, "body.samples.0"),
    ({"idempotency_key": "a"}, "body"),
    ({"samples": [1]}, "body.idempotency_key"),
    ({"idempotency_key": "a", "samples": [1], "extra": 1}, "body.extra"),
    ({"idempotency_key": "a", "slices": ["banana"]}, "body.slices.0"),
    ({"idempotency_key": "a", "samples": [-1]}, "body.samples.0"),
    ({"idempotency_key": "a", "samples": list(range(MAX_IDS + 1))}, "body.samples"),
], ids=["not-int", "nothing", "no-key", "unknown-field", "bad-slice", "negative", "too-many"])
def test_bad_bodies_are_422_naming_the_field_and_write_nothing(store, tok, body, field):
    response = client(store).post("/v1/forget-requests", json=body, headers=bearer(tok["forget:write"]))
    assert response.status_code == 422
    assert response.json()["detail"].startswith(field), response.json()
    assert service_rows(store) == 0 and ledger_requests(store) == []


def test_unknown_ids_are_422_with_the_ledgers_one_line_and_release_the_key(store, tok):
    c = client(store)
    w = bearer(tok["forget:write"])
    bad = c.post("/v1/forget-requests", json={"idempotency_key": "k", "samples": [10**9]}, headers=w)
    assert bad.status_code == 422 and "unknown sample id" in bad.json()["detail"]
    assert service_rows(store) == 0
    good = c.post("/v1/forget-requests", json={"idempotency_key": "k", "samples": [sample_of(store, 0)]}, headers=w)
    assert good.status_code == 201


def test_an_oversized_body_is_413_before_it_is_read(store, tok):
    c = client(store)
    huge = b"[" + b"1," * 2**20 + b"1]"
    response = c.post("/v1/forget-requests", content=huge, headers={**bearer(tok["forget:write"]),
                                                                   "content-type": "application/json"})
    assert response.status_code == 413 and service_rows(store) == 0


def test_an_unknown_request_id_is_404_with_one_line(store, tok):
    response = client(store).get("/v1/forget-requests/42", headers=bearer(tok["status:read"]))
    assert response.status_code == 404 and "unknown forget request 42" in response.json()["detail"]


def test_a_request_shows_its_state_and_a_receipt_the_cli_checks(store, tok, tmp_path):
    c = client(store)
    sid = c.post("/v1/forget-requests", json={"idempotency_key": "r", "slices": ["2:1"]},
                 headers=bearer(tok["forget:write"])).json()["id"]
    data = c.get(f"/v1/forget-requests/{sid}", headers=bearer(tok["status:read"])).json()
    assert data["state"] == "purged" and data["receipt"]["request"]["id"] == data["ledger_request"]
    assert data["receipt"]["purge_complete"] and data["receipt_url"] == f"/v1/receipts/{data['ledger_request']}"
    listed = c.get("/v1/forget-requests", headers=bearer(tok["status:read"])).json()["requests"]
    assert [r["id"] for r in listed] == [sid]
    raw = c.get(data["receipt_url"], headers=bearer(tok["status:read"]))
    assert raw.status_code == 200
    path = tmp_path / "receipt.json"
    path.write_bytes(raw.content)
    checked = CliRunner().invoke(cli_app, ["receipt", "--check", str(path), "--store", str(store), "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.output)["valid"] is True


def test_predict_answers_from_the_new_plan_right_after_a_forget(store, tok):
    from fedforget.federation.serve import serving_probabilities
    from fedforget.service.predict import current_plan
    from fedforget.tasks.registry import load_task_data
    from fedforget.unlearning.evaluate import stored_config

    handle = Store.open(store)
    cfg = stored_config(handle)
    data = load_task_data(cfg)
    x = data.test.inputs[0][:5]
    c = client(store)
    p = bearer(tok["predict"])
    before = c.post("/v1/predict", json={"inputs": x.tolist()}, headers=p).json()
    assert before["plan_id"] == current_plan(handle)[0] and len(before["predictions"]) == 5
    c.post("/v1/forget-requests", json={"idempotency_key": "f", "samples": [sample_of(store, 0)]},
           headers=bearer(tok["forget:write"]))
    after = c.post("/v1/predict", json={"inputs": x.tolist()}, headers=p).json()
    assert after["plan_id"] != before["plan_id"]  # negative control: the plan moved on, so must the answer's id
    pid, plan, serving, artifacts = current_plan(handle)
    expected = serving_probabilities(cfg, data.num_classes, handle, plan, serving, artifacts, (x,))
    assert after["plan_id"] == pid
    assert after["probabilities"] == [[float(v) for v in row] for row in expected]
    raw = c.post("/v1/predict", json={"inputs": (x * 16).reshape(5, 8, 8).tolist(), "raw": True}, headers=p).json()
    assert raw["predictions"] == after["predictions"]


def test_predict_refuses_inputs_of_another_shape_and_answers_409_when_nothing_is_served(store, tok):
    c = client(store)
    p = bearer(tok["predict"])
    wrong = c.post("/v1/predict", json={"inputs": [[0.0] * 10]}, headers=p)
    assert wrong.status_code == 422 and "inputs[0]" in wrong.json()["detail"]
    c.post("/v1/forget-requests", json={"idempotency_key": "all", "clients": [0, 1, 2]},
           headers=bearer(tok["forget:write"]))
    gone = c.post("/v1/predict", json={"inputs": [[0.0] * 64]}, headers=p)
    assert gone.status_code == 409 and "nothing is served" in gone.json()["detail"]


def test_status_is_what_the_cli_status_json_shows(store, tok):
    served = client(store).get("/v1/status", headers=bearer(tok["status:read"])).json()
    cli = json.loads(CliRunner().invoke(cli_app, ["status", "--store", str(store), "--json"]).output)
    assert served == cli


def test_metrics_count_requests_by_route_and_code_and_show_the_store(store, tok):
    c = client(store)
    c.get("/v1/status", headers=bearer(tok["status:read"]))
    c.get("/v1/status", headers=bearer(tok["predict"]))
    text = c.get("/metrics", headers=bearer(tok["status:read"])).text
    assert 'fedforget_http_requests_total{method="GET",route="/v1/status",code="200"} 1' in text
    assert 'fedforget_http_requests_total{method="GET",route="/v1/status",code="403"} 1' in text
    assert 'fedforget_http_request_duration_seconds_count{method="GET",route="/v1/status"} 2' in text
    assert "fedforget_artifacts_valid 9" in text and "fedforget_artifacts_invalid 0" in text
    assert "fedforget_served_accuracy " in text


def test_tokens_are_kept_hashed_and_owner_only_outside_the_store(store, tok, secrets):
    path = tokens_path(store)
    assert secrets in path.parents and store not in path.parents
    text = path.read_text()
    assert all(t not in text for t in tok.values())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    listed = CliRunner().invoke(cli_app, ["token", "list", "--store", str(store), "--json"])
    assert {t["name"] for t in json.loads(listed.output)["tokens"]} == {"forget-write", "status-read", "predict", "all"}
    bad = CliRunner().invoke(cli_app, ["token", "create", "--store", str(store), "--name", "x", "--scope", "root"])
    assert bad.exit_code == 2 and "unknown scope" in bad.output


def test_the_running_apps_openapi_schema_is_the_checked_in_one(store, tok):
    served = client(store).get("/openapi.json").json()
    assert schema_text(served) == SCHEMA_FILE.read_text(encoding="utf-8"), \
        "regenerate it: python -m fedforget.service.openapi --write"


def test_record_names_and_openings_are_read_only_with_the_forget_scope(store, tok):
    """A status:read token (what Prometheus scrapes with) sees every request's state, never a raw record name or
    its opening key: those belong to the scope that submits forgets."""
    c = client(store)
    record = f"node-1:{sample_of(store, 1)}"
    made = c.post("/v1/forget-requests", json={"idempotency_key": "r", "records": [record]},
                  headers=bearer(tok["forget:write"]))
    assert made.status_code == 201, made.text
    [opening] = made.json()["record_openings"]
    rid, ledger_request = made.json()["id"], made.json()["ledger_request"]
    reads = {"list": "/v1/forget-requests", "one": f"/v1/forget-requests/{rid}",
             "receipt": f"/v1/receipts/{ledger_request}"}
    for name, path in reads.items():
        seen = c.get(path, headers=bearer(tok["status:read"]))
        assert record not in seen.text and opening["key"] not in seen.text, (name, seen.text[:300])
        assert seen.status_code == (403 if name == "receipt" else 200), (name, seen.text)
    refused = c.get(reads["receipt"], headers=bearer(tok["status:read"])).json()["detail"]
    assert "forget:write" in refused and "\n" not in refused
    one = c.get(reads["one"], headers=bearer(tok["status:read"])).json()
    assert one["state"] == "purged" and one["receipt"] is None and "forget:write" in one["receipt_error"]
    # negative control: a token holding the forget scope too reads them
    both = c.get(reads["one"], headers=bearer(tok["all"])).json()
    assert [o["record"] for o in both["record_openings"]] == [record]
    assert both["receipt"]["record_openings"][0]["key"] == opening["key"]
    assert c.get(reads["receipt"], headers=bearer(tok["all"])).status_code == 200


def test_options_answers_every_method_of_the_path_and_another_method_is_405_naming_them(store):
    c = client(store)
    both = c.options("/v1/forget-requests")
    assert (both.status_code, both.headers["allow"]) == (204, "GET, POST, OPTIONS")
    assert c.options("/v1/forget-requests/1").headers["allow"] == "GET, OPTIONS"
    wrong = c.delete("/v1/forget-requests")
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "GET, POST")
    assert "it takes GET, POST" in wrong.json()["detail"] and "\n" not in wrong.text
    assert c.options("/nowhere").status_code == 404  # negative control: no such path


def test_the_schema_says_what_the_service_sends(store, tok):
    import re

    c = client(store)
    schema = c.get("/openapi.json").json()
    sent = c.get("/metrics")  # no token: the refusal is JSON, as every route's
    assert sent.status_code == 401 and sent.headers["content-type"] == "application/json" and sent.json()["detail"]
    metrics = schema["paths"]["/metrics"]["get"]["responses"]
    assert list(metrics["200"]["content"]) == ["text/plain"]
    assert all(list(r["content"]) == ["application/json"] for code, r in metrics.items() if code != "200"), metrics
    body = schema["components"]["schemas"]
    pattern = body["ForgetBody"]["properties"]["records"]["items"]["pattern"]
    assert re.fullmatch(pattern, "node-1:MRN-00017") and not re.fullmatch(pattern, "node-1") \
        and not re.fullmatch(pattern, ":17")
    item = body["PredictBody"]["properties"]["inputs"]["items"]
    assert {k.get("type") for k in item["anyOf"]} == {"string", "array"}, item
