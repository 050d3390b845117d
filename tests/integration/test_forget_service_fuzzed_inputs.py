"""Schemathesis fuzzes every route of the running service (uvicorn on 127.0.0.1, real HTTP) from the
checked-in OpenAPI schema, with valid tokens for each route's scope, in valid and invalid (negative) form:
no answer is a 5xx, and every answer is one the schema describes (status, content type, body). Seeded
(derandomized) and bounded: a few minutes on two cores."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from fedforget.service.gate import ROUTE_SCOPES
from fedforget.service.openapi import SCHEMA_FILE, schema_text

from .service_helpers import Running, private_ca, private_copy, tokens, train_service_store

#: examples per route and mode (valid; invalid where the route takes parameters or a body), well under 3 minutes
EXAMPLES = 100
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service-fuzz") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    monkeypatch.delenv("FEDFORGET_RECEIPT_KEY", raising=False)
    private_ca(tmp_path / "secrets")  # the OpenDSR routes sign with it (503 without)
    return private_copy(trained, tmp_path)


def fuzz(url: str, operation: Any, mode: GenerationMode, auth: dict[str, str], failures: list[str]) -> int:
    """Send ``EXAMPLES`` generated requests to one route; record each failed check as one line."""
    sent = [0]
    checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: schemathesis.Case) -> None:
        sent[0] += 1
        response = case.call(base_url=url, headers=auth, timeout=60)
        try:
            case.validate_response(response, checks=checks, headers=auth)
        except (AssertionError, FailureGroup) as exc:  # one failed check, or several
            failures.append(f"{operation.label} [{mode.value}] {response.status_code}: "
                            f"{' '.join(str(exc).split())[:400]} | {case.as_curl_command(headers=auth, base_url=url)}")

    run()
    return sent[0]


def test_every_fuzzed_request_gets_an_answer_the_schema_describes_and_never_a_5xx(store):
    tok = tokens(store)
    by_scope = {"forget:write": tok["forget:write"], "status:read": tok["status:read"], "predict": tok["predict"]}
    schema = schemathesis.openapi.from_path(SCHEMA_FILE)
    checked_in = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    failures: list[str] = []
    sent: dict[str, int] = {}
    start = time.monotonic()
    with Running(store) as url:
        served = httpx.get(f"{url}/openapi.json", timeout=60).json()
        assert schema_text(served) == SCHEMA_FILE.read_text(encoding="utf-8"), \
            "the served schema is not the checked-in one: python -m fedforget.service.openapi --write"
        operations = [result.ok() for result in schema.get_all_operations()]
        routes = sum(len(methods) for methods in checked_in["paths"].values())
        assert len(operations) == routes, [op.label for op in operations]  # negative control: every route is fuzzed
        for operation in operations:
            scope = ROUTE_SCOPES.get((operation.method.upper(), operation.path))
            auth = {"Authorization": f"Bearer {by_scope[scope]}"} if scope else {}
            spec = checked_in["paths"][operation.path][operation.method.lower()]
            takes_input = bool(spec.get("parameters") or spec.get("requestBody"))
            modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if takes_input else (GenerationMode.POSITIVE,)
            for mode in modes:
                sent[f"{operation.label} {mode.value}"] = fuzz(url, operation, mode, auth, failures)
    elapsed = time.monotonic() - start
    assert not failures, f"{len(failures)} answers broke the contract:\n" + "\n".join(failures[:20])
    assert all(n > 0 for n in sent.values()), sent
    assert elapsed < 180, f"the fuzzer took {elapsed:.0f} s (bound: 180 s)"
