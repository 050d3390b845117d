"""``fedforget receipt``: a signed deletion certificate (request, purged sha256s, serving after, verify),
checkable with ``--check``; any altered byte, or a receipt re-signed with another key, is refused."""

from __future__ import annotations

import json
import os
from unittest.mock import patch

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.receipt import KEY_ENV, sign_receipt

from .helpers import artifact_shas, copy_store, train_in_process

runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("receipt") / "store", 3, method="fedsgt",
                            **{"chains.groups": 3, "chains.budget": 3, "slices-per-client": 2, "local-epochs": 1}).root


@pytest.fixture
def forgotten(trained, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "coordinator.pem"))
    store = copy_store(trained, tmp_path)
    shas = artifact_shas(store)
    result = forget_request(store, samples=[store.manifest()["partitions"]["1"][0][0]])
    return store, result, shas


def _check(path) -> object:  # noqa: ANN001
    return runner.invoke(app, ["receipt", "--check", str(path)])


def test_a_receipt_names_the_request_the_purged_artifacts_the_serving_plan_and_verify(forgotten):
    store, result, shas = forgotten
    out = runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--json"])
    assert out.exit_code == 0, out.output
    receipt = json.loads(out.stdout)
    assert receipt["request"]["id"] == 1 and receipt["request"]["units"] == result.units
    assert {(p["artifact"], p["sha256"]) for p in receipt["purged"]} == {(a, shas[a]) for a in result.invalidated}
    assert receipt["purge_complete"] and receipt["serving_after"] == result.serving
    assert receipt["verify"]["exact"] and receipt["verify"]["outputs_equal"]
    path = store.root / "receipts" / "request-1.json"
    assert json.loads(path.read_text()) == receipt
    checked = _check(path)
    assert checked.exit_code == 0 and "valid" in checked.output


def test_an_altered_receipt_or_one_signed_by_another_key_fails_the_check(forgotten, tmp_path):
    store, _, _ = forgotten
    assert runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--no-verify"]).exit_code == 0
    signed = json.loads((store.root / "receipts" / "request-1.json").read_text())
    tampered = json.loads(json.dumps(signed))
    tampered["purged"][0]["sha256"] = "0" * 64
    forged = sign_receipt({k: v for k, v in tampered.items() if k != "signature"}, Ed25519PrivateKey.generate())
    for name, body, reason in (("tampered", tampered, "altered"), ("forged", forged, "another key")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(body))
        checked = _check(path)
        assert checked.exit_code == 1 and reason in checked.stderr, checked.output
        assert len(checked.stderr.strip().splitlines()) == 1


def test_a_key_inside_the_store_or_an_unknown_request_exits_2(forgotten, monkeypatch):
    store, _, _ = forgotten
    unknown = runner.invoke(app, ["receipt", "7", "--store", str(store.root), "--no-verify"])
    assert unknown.exit_code == 2 and "unknown request 7" in unknown.stderr
    monkeypatch.setenv(KEY_ENV, str(store.root / "key.pem"))
    inside = runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--no-verify"])
    assert inside.exit_code == 2 and "inside the store" in inside.stderr
    assert not (store.root / "key.pem").exists()


def test_a_lost_key_is_an_error_until_new_key_rotates_it_and_old_receipts_check_with_the_kept_public_key(
        forgotten, tmp_path):
    store, _, _ = forgotten
    key = tmp_path / "keys" / "coordinator.pem"
    assert runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--no-verify"]).exit_code == 0
    old_receipt = store.root / "receipts" / "request-1.json"
    key.unlink()  # the machine lost its key; its record and the store's receipt remain
    lost = runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--no-verify"])
    lines = lost.stderr.strip().splitlines()
    assert lost.exit_code == 2 and len(lines) == 1, lost.output
    assert all(w in lines[0] for w in (f"receipt key {key} is missing", "restore it from your backup", "--new-key"))
    assert not key.exists()  # never silently replaced
    alone = runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--new-key"])
    assert alone.exit_code == 2 and "pass --new-key alone" in alone.stderr and not key.exists()
    rotated = runner.invoke(app, ["receipt", "--new-key", "--json"])
    assert rotated.exit_code == 0, rotated.output
    made = json.loads(rotated.stdout)
    assert made["key"] == str(key) and key.is_file() and made["old_public_key"]
    stale = _check(old_receipt)  # the new key did not sign it; the line names the kept key that did
    assert stale.exit_code == 1 and f"--public-key {made['old_public_key']}" in stale.stderr, stale.output
    kept = runner.invoke(app, ["receipt", "--check", str(old_receipt), "--public-key", made["old_public_key"]])
    assert kept.exit_code == 0 and "NOT the coordinator's key" in kept.stdout, kept.output
    assert runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--no-verify"]).exit_code == 0
    assert _check(old_receipt).exit_code == 0  # reissued with the new key


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_receipt_key_path_naming_a_device_or_fifo_exits_2_in_one_line_in_bounded_memory(forgotten, tmp_path,
                                                                                        target):
    from .test_store_security import cli, refused

    store, _, _ = forgotten
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    env_key = {KEY_ENV: target}
    with patch.dict(os.environ, env_key):
        refused(cli(["receipt", "1", "--store", str(store.root), "--no-verify"], timeout=60), target,
                "not a regular file")
        (tmp_path / "r.json").write_text("{}")
        refused(cli(["receipt", "--check", str(tmp_path / "r.json")], timeout=60), target, "not a regular file")
    assert not (store.root / "receipts").exists()
