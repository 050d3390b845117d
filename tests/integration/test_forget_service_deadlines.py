"""Each service request carries its legal clock: its deadline (one calendar month after it was accepted, or 45
days), the state that completes it and whether it got there; status, /metrics and the console count the open,
nearing and overdue ones. The deadline is read, never written: a request past its deadline is shown by moving
the service's clock forward (its accepted time is sealed in service.db and in the ledger's log, so editing it
is refused by the store check, as it should be)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from fedforget.service.deadline_writer import write_settings
from fedforget.service.requests_db import SERVICE_DB
from fedforget.store import Store
from fedforget.unlearning import legal_clock
from fedforget.unlearning.cli import app as cli_app
from fedforget.unlearning.deadline_settings import DeadlineSettings, settings_history
from fedforget.unlearning.legal_clock import deadline

from .service_helpers import bearer, client, private_copy, tokens, train_service_store

runner = CliRunner()
DAY = 86400


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("deadlines") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    monkeypatch.delenv("FEDFORGET_RECEIPT_KEY", raising=False)
    return private_copy(trained, tmp_path)


def sample_of(store, partition: int) -> int:  # noqa: ANN001
    return Store.open(store).manifest()["partitions"][str(partition)][0][0]


def forget(c, tok: dict[str, str], store, key: str, partition: int) -> dict:  # noqa: ANN001
    r = c.post("/v1/forget-requests", json={"idempotency_key": key, "samples": [sample_of(store, partition)]},
               headers=bearer(tok["forget:write"]))
    assert r.status_code == 201, r.text
    return r.json()


def status_json(store) -> dict:  # noqa: ANN001
    result = runner.invoke(cli_app, ["status", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["deadlines"]


def test_a_request_shows_its_gdpr_deadline_and_completes_once_purged(store):
    tok = tokens(store)
    c = client(store)
    made = forget(c, tok, store, "dsr-1", 1)
    got = c.get(f"/v1/forget-requests/{made['id']}", headers=bearer(tok["status:read"])).json()
    assert got["deadline"] == deadline(got["accepted_at"], "gdpr") == made["deadline"]
    assert got["deadline"] - got["accepted_at"] >= 28 * DAY
    assert got["deadline_policy"] == "gdpr" and got["completion_point"] == "purged"
    assert got["complete"] and got["completed_at"] == got["applied_at"]
    assert got["seconds_left"] is None and not got["overdue"]
    listed = c.get("/v1/forget-requests", headers=bearer(tok["status:read"])).json()["requests"]
    assert [(r["id"], r["deadline"], r["complete"]) for r in listed] == [(got["id"], got["deadline"], True)]
    assert status_json(store) | {"earliest_deadline": None} == {
        "policy": "gdpr", "completion_point": "purged", "nearing_days": 7.0, "requests": 1, "open": 0, "nearing": 0,
        "overdue": 0, "completed_late": 0, "earliest_deadline": None, "seconds_to_earliest": None,
        "policy_period": legal_clock.POLICIES["gdpr"]}


def test_a_request_past_its_deadline_is_overdue_in_the_api_status_metrics_and_console(store, monkeypatch):
    tok = tokens(store)
    c = client(store)
    made = forget(c, tok, store, "dsr-2", 2)
    # its node never acknowledges: open under the acknowledged completion point
    assert runner.invoke(cli_app, ["deadlines", "--store", str(store), "--complete-at", "acknowledged",
                                   "--policy", "ccpa"]).exit_code == 0
    due = made["accepted_at"] + 45 * DAY
    read = bearer(tok["status:read"])
    monkeypatch.setattr(legal_clock, "now", lambda: due - 2 * DAY)  # two days left: nearing
    got = c.get(f"/v1/forget-requests/{made['id']}", headers=read).json()
    assert got["deadline"] == due and not got["complete"] and got["completed_at"] is None
    assert got["seconds_left"] == pytest.approx(2 * DAY) and not got["overdue"]
    near = status_json(store)
    assert (near["open"], near["nearing"], near["overdue"]) == (1, 1, 0)

    monkeypatch.setattr(legal_clock, "now", lambda: due + 3600)  # an hour past
    got = c.get(f"/v1/forget-requests/{made['id']}", headers=read).json()
    assert got["overdue"] and got["seconds_left"] == pytest.approx(-3600)
    late = status_json(store)
    assert (late["open"], late["nearing"], late["overdue"]) == (1, 0, 1)
    assert late["seconds_to_earliest"] == pytest.approx(-3600)
    text = runner.invoke(cli_app, ["status", "--store", str(store)]).output
    assert "1 open" in text and "1 overdue" in text and "ccpa" in text
    assert c.get("/v1/status", headers=read).json()["deadlines"]["overdue"] == 1
    metrics = c.get("/metrics", headers=read).text
    assert "fedforget_forget_requests_overdue 1\n" in metrics
    assert "fedforget_forget_requests_open 1\n" in metrics
    assert "fedforget_forget_requests_nearing_deadline 0\n" in metrics
    assert "fedforget_forget_requests_seconds_to_deadline -3600\n" in metrics
    page = c.get("/", headers=read)
    assert page.status_code == 200, page.text
    assert "<b id=overdue>1</b>" in page.text and f"id='service-request-{made['id']}' class=overdue" in page.text


def test_with_no_request_open_metrics_has_no_earliest_deadline(store):
    tok = tokens(store)
    c = client(store)
    metrics = c.get("/metrics", headers=bearer(tok["status:read"])).text
    assert "fedforget_forget_requests_open 0\n" in metrics
    assert "fedforget_forget_requests_seconds_to_deadline" not in metrics


def test_changing_the_policy_rewrites_no_request_evidence(store):
    tok = tokens(store)
    c = client(store)
    made = forget(c, tok, store, "dsr-3", 0)

    def evidence() -> tuple[list, bytes]:
        db = sqlite3.connect(store / SERVICE_DB)
        try:
            rows = db.execute("SELECT * FROM requests ORDER BY id").fetchall()
        finally:
            db.close()
        return rows, (store / "ledger.sqlite").read_bytes()

    c.get(f"/v1/forget-requests/{made['id']}", headers=bearer(tok["status:read"]))  # issues its receipt once
    before = evidence()
    write_settings(store, DeadlineSettings(policy="ccpa"))
    got = c.get(f"/v1/forget-requests/{made['id']}", headers=bearer(tok["status:read"])).json()
    assert got["deadline"] == made["accepted_at"] + 45 * DAY != made["deadline"]
    assert evidence() == before
    assert c.get("/healthz").status_code == 200  # the store check still passes


@pytest.mark.parametrize(("args", "why"), [
    (["--policy", "hipaa"], "unknown deadline policy 'hipaa': use one of gdpr, ccpa"),
    (["--nearing-days", "-1"], "nearing window"),
    (["--complete-at", "applied"], "unknown completion point 'applied'"),
])
def test_bad_deadline_settings_are_one_line_exit_2_and_write_nothing(store, args, why):
    before = (store / SERVICE_DB).exists()
    result = runner.invoke(cli_app, ["deadlines", "--store", str(store), *args])
    assert result.exit_code == 2 and why in result.output and result.output.strip().count("\n") == 0, result.output
    assert (store / SERVICE_DB).exists() == before and settings_history(store) == []


def test_the_deadlines_command_shows_and_records_the_settings(store):
    shown = runner.invoke(cli_app, ["deadlines", "--store", str(store), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.output)["policy"] == "gdpr", shown.output
    assert not (store / SERVICE_DB).exists()  # showing writes nothing
    set_ = runner.invoke(cli_app, ["deadlines", "--store", str(store), "--nearing-days", "3", "--json"])
    out = json.loads(set_.output)
    assert (out["policy"], out["nearing_days"], len(out["history"])) == ("gdpr", 3.0, 1)
    assert status_json(store)["nearing_days"] == 3.0
