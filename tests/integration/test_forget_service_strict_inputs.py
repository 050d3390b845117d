"""The forget service reads ids only as JSON integers in the ledger's range and slices only as ASCII 'P:S':
a boolean, a string, a float or an id past 2**63 is a one-line 422 and nothing is written (a forget cannot
be undone, so nothing is ever cast into an id); predict refuses what float32 cannot hold."""

from __future__ import annotations

import json

import pytest

from fedforget.service.requests_db import SERVICE_DB
from fedforget.store import Store

from .service_helpers import bearer, client, private_copy, tokens, train_service_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service-strict") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    return private_copy(trained, tmp_path)


@pytest.fixture
def tok(store):
    return tokens(store)


def written(store) -> tuple[bytes, bool]:  # noqa: ANN001
    """The ledger's bytes and whether service.db holds a request row."""
    import sqlite3

    rows = False
    if (store / SERVICE_DB).exists():
        db = sqlite3.connect(store / SERVICE_DB)
        rows = db.execute("SELECT COUNT(*) FROM requests").fetchone()[0] > 0
        db.close()
    return (store / "ledger.sqlite").read_bytes(), rows


def one_line_422(response) -> str:  # noqa: ANN001
    assert response.status_code == 422, response.text
    assert "\n" not in response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    return detail


@pytest.mark.parametrize("field", ["samples", "clients"])
@pytest.mark.parametrize("raw", ["true", "false", '"1_8"', '"1"', "1.0", "0.0", "1e2", "9223372036854775808",
                                 "99999999999999999999999", "-1", "null", "[1]", '{"a":1}', "NaN", "Infinity"],
                         ids=["true", "false", "underscored-string", "digit-string", "float-one", "float-zero",
                              "exponent", "2**63", "huge", "negative", "null", "list", "object", "nan", "inf"])
def test_an_id_that_is_not_a_json_integer_in_range_is_422_and_forgets_nothing(store, tok, field, raw):
    before = written(store)
    body = f'{{"idempotency_key": "k", "{field}": [{raw}]}}'
    response = client(store).post("/v1/forget-requests", content=body, headers={
        **bearer(tok["forget:write"]), "content-type": "application/json"})
    detail = one_line_422(response)
    assert detail.startswith(f"body.{field}.0: expected an integer id, 0 <= id < 2**63"), detail
    assert written(store) == before


def test_the_ids_that_booleans_and_strings_would_have_named_exist_so_the_refusal_is_not_vacuous(store, tok):
    # negative control: 0, 1 and 18 are real sample ids, so a cast would have forgotten them
    known = {s for slices in Store.open(store).manifest()["partitions"].values() for sl in slices for s in sl}
    assert {0, 1, 18} <= known
    response = client(store).post("/v1/forget-requests", json={"idempotency_key": "k", "samples": [1]},
                                  headers=bearer(tok["forget:write"]))
    assert response.status_code == 201 and response.json()["spec"]["samples"] == [1]


def test_the_largest_id_is_read_and_refused_by_the_ledger_not_the_server(store, tok):
    response = client(store).post("/v1/forget-requests", json={"idempotency_key": "k", "samples": [2**63 - 1]},
                                  headers=bearer(tok["forget:write"]))
    assert "unknown sample id" in one_line_422(response)


@pytest.mark.parametrize("text", ["\u0661:\u0662", " 1:2", "1:2 ", "+1:2", "1_0:2", "1:2:3", "1:9223372036854775808",
                                  "0x1:2", "1:", ":1"],
                         ids=["arabic-digits", "leading-space", "trailing-space", "sign", "underscore", "three-parts",
                              "2**63", "hex", "no-slice", "no-partition"])
def test_a_slice_that_is_not_ascii_p_colon_s_is_422_and_forgets_nothing(store, tok, text):
    before = written(store)
    response = client(store).post("/v1/forget-requests", json={"idempotency_key": "k", "slices": [text]},
                                  headers=bearer(tok["forget:write"]))
    assert one_line_422(response).startswith("body.slices.0: expected a slice 'PARTITION:SLICE'")
    assert written(store) == before


def test_a_key_and_raw_flag_of_another_json_type_are_422(store, tok):
    c = client(store)
    for body in ({"idempotency_key": 7, "samples": [1]}, {"idempotency_key": True, "samples": [1]}):
        one_line_422(c.post("/v1/forget-requests", json=body, headers=bearer(tok["forget:write"])))
    for raw in ("true", 1, None):
        one_line_422(c.post("/v1/predict", json={"inputs": [[0.0] * 64], "raw": raw}, headers=bearer(tok["predict"])))


@pytest.mark.parametrize("path", ["/v1/forget-requests/9223372036854775808", "/v1/forget-requests/99999999999999999999",
                                  "/v1/forget-requests/1_8", "/v1/forget-requests/-1", "/v1/forget-requests/+1",
                                  "/v1/forget-requests/%D9%A1", "/v1/receipts/9223372036854775808",
                                  "/v1/receipts/1_8", "/v1/forget-requests?after=9223372036854775808",
                                  "/v1/forget-requests?after=1_8", "/v1/forget-requests?limit=1_0"])
def test_an_id_in_a_url_past_2_63_or_not_plain_digits_is_422(store, tok, path):
    response = client(store).get(path, headers=bearer(tok["status:read"]))
    detail = one_line_422(response)
    assert "expected an integer id, 0 <= id < 2**63" in detail or "query.limit: expected ASCII digits" in detail, detail


def test_the_largest_id_in_a_url_is_an_unknown_request_not_an_error(store, tok):
    c = client(store)
    assert c.get(f"/v1/forget-requests/{2**63 - 1}", headers=bearer(tok["status:read"])).status_code == 404
    assert c.get(f"/v1/receipts/{2**63 - 1}", headers=bearer(tok["status:read"])).status_code == 404
    assert c.get(f"/v1/forget-requests?after={2**63 - 1}", headers=bearer(tok["status:read"])).json() == \
        {"requests": []}


@pytest.mark.parametrize("value", ["1e308", "-1e308", "3.5e38", "NaN", "Infinity", "-Infinity", "true", '"1"'],
                         ids=["1e308", "-1e308", "past-float32", "nan", "inf", "-inf", "boolean", "string"])
def test_predict_refuses_what_float32_cannot_hold_and_what_is_not_a_number(store, tok, value):
    row = ", ".join(["0.0"] * 63 + [value])
    response = client(store).post("/v1/predict", content=f'{{"inputs": [[{row}]]}}',
                                  headers={**bearer(tok["predict"]), "content-type": "application/json"})
    assert one_line_422(response).startswith("inputs[0]: ")


def test_predict_refuses_finite_inputs_the_network_overflows_on(store, tok):
    big = 3e38  # within float32, but a layer's sums pass its maximum
    response = client(store).post("/v1/predict", json={"inputs": [[big] * 64]}, headers=bearer(tok["predict"]))
    assert "overflow" in one_line_422(response)
    ok = client(store).post("/v1/predict", json={"inputs": [[1.0] * 64]}, headers=bearer(tok["predict"]))
    assert ok.status_code == 200 and None not in json.loads(ok.text)["probabilities"][0]  # negative control


@pytest.mark.parametrize("body", ['{"idempotency_key": "k", "samples": [5], "samples": [6]}',
                                  '{"idempotency_key": "a", "idempotency_key": "b", "samples": [5]}',
                                  '{"idempotency_key": "k", "samples": [5], "clients": [], "clients": [0]}'],
                         ids=["samples-twice", "key-twice", "empty-then-client"])
def test_a_body_naming_a_key_twice_is_400_and_forgets_nothing(store, tok, body):
    # Python's parser keeps the last value, others the first: one body, two different forgets
    before = written(store)
    response = client(store).post("/v1/forget-requests", content=body, headers={
        **bearer(tok["forget:write"]), "content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert "twice" in response.json()["detail"] and "\n" not in response.text
    assert written(store) == before


def test_a_predict_body_naming_inputs_twice_is_400(store, tok):
    body = '{"inputs": [[0]], "inputs": [' + ",".join(["0"] * 64) + "]}"
    response = client(store).post("/v1/predict", content=body, headers={
        **bearer(tok["predict"]), "content-type": "application/json"})
    assert response.status_code == 400, response.text


def test_the_same_body_with_each_key_once_is_accepted_so_the_refusal_is_not_vacuous(store, tok):
    response = client(store).post("/v1/forget-requests", content='{"idempotency_key": "k", "samples": [6]}',
                                  headers={**bearer(tok["forget:write"]), "content-type": "application/json"})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("field", ["samples", "clients"])
def test_a_negative_zero_id_is_422_and_forgets_nothing(store, tok, field):
    """Python's JSON parser reads ``-0`` as 0: an id spelt so is refused, never read as id 0."""
    before = written(store)
    response = client(store).post("/v1/forget-requests", content=f'{{"idempotency_key": "k", "{field}": [1, -0]}}',
                                  headers={**bearer(tok["forget:write"]), "content-type": "application/json"})
    detail = one_line_422(response)
    assert detail.startswith(f"body.{field}.1: expected an integer id, 0 <= id < 2**63") and "-0" in detail, detail
    assert written(store) == before


def test_a_negative_zero_pixel_is_a_number_so_the_refusal_is_only_of_ids(store, tok):
    row = ", ".join(["-0"] + ["0"] * 63)
    response = client(store).post("/v1/predict", content=f'{{"inputs": [[{row}]]}}',
                                  headers={**bearer(tok["predict"]), "content-type": "application/json"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(("query", "name"), [("after=1&after=0", "after"), ("limit=5&limit=1", "limit"),
                                             ("limit=5&after=0&limit=5", "limit")])
def test_a_query_parameter_given_twice_is_422_naming_it(store, tok, query, name):
    """A framework keeps one of the values (the last); which one the caller meant is not known."""
    response = client(store).get(f"/v1/forget-requests?{query}", headers=bearer(tok["status:read"]))
    assert one_line_422(response).startswith(f"query.{name}: given 2 times"), response.text
    once = client(store).get(f"/v1/forget-requests?{name}=1", headers=bearer(tok["status:read"]))
    assert once.status_code == 200, once.text  # negative control
