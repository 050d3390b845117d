"""A receipt is checked over its exact bytes, names the key it was checked against as what it is, commits to
the ledger rows it certifies, is written owner-only, and is never signed with a key others can read."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.receipt import KEY_ENV, _load_private, receipt_bytes, sign_receipt

from .helpers import copy_store, train_in_process

runner = CliRunner()


@pytest.fixture(scope="module")
def forgotten_once(tmp_path_factory):
    """A trained store with one forget request (fast: two nodes, one round, few samples), its log signed with
    the module's coordinator key."""
    root = tmp_path_factory.mktemp("tamper")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(root / "keys" / "coordinator.pem"))
        store = train_in_process(root / "store", 2, **{"num-rounds": 1, "train-size": 300})
        forget_request(store, samples=[store.manifest()["partitions"]["1"][0][0]])
    return store.root


@pytest.fixture
def issued(forgotten_once, tmp_path, monkeypatch):
    """A private copy of the store, the coordinator's key (this test's copy of it), and request 1's receipt."""
    key = tmp_path / "keys" / "coordinator.pem"
    key.parent.mkdir(mode=0o700)
    shutil.copy2(forgotten_once.parent / "keys" / "coordinator.pem", key)
    monkeypatch.setenv(KEY_ENV, str(key))
    store = copy_store(forgotten_once, tmp_path)
    out = runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--no-verify"])
    assert out.exit_code == 0, out.output
    return store, store.root / "receipts" / "request-1.json"


def check(path, *args: str):  # noqa: ANN001, ANN201
    return runner.invoke(app, ["receipt", "--check", str(path), *args])


def refused_in_one_line(result, code: int, *words: str) -> None:  # noqa: ANN001
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), result.stderr
    assert result.stdout == ""


def mode(path) -> int:  # noqa: ANN001
    return stat.S_IMODE(path.stat().st_mode)


def test_the_receipt_as_written_passes_and_a_reserialised_copy_fails(issued, tmp_path):
    _, path = issued
    assert check(path).exit_code == 0  # the negative control: the bytes as written
    signed = json.loads(path.read_bytes())
    for name, text in (("compact", json.dumps(signed)), ("indent4", json.dumps(signed, indent=4, sort_keys=True)),
                       ("crlf", path.read_text().replace("\n", "\r\n")), ("trailing", path.read_text() + " ")):
        copy = tmp_path / f"{name}.json"
        copy.write_bytes(text.encode("utf-8"))
        refused_in_one_line(check(copy), 1, "NOT valid", "bytes are not the ones written")


def test_a_receipt_with_a_duplicate_key_fails_the_check(issued, tmp_path):
    _, path = issued
    text = path.read_text()
    doubled = tmp_path / "doubled.json"
    first = '{\n  "acknowledgements"'
    doubled.write_text(text.replace(first, '{\n  "purge_complete": false,' + first[1:], 1))
    refused_in_one_line(check(doubled), 1, "NOT valid", "'purge_complete' appears twice")


def test_a_public_key_file_is_named_as_what_it_is_coordinators_or_not(issued, tmp_path, monkeypatch):
    store, path = issued
    attacker = Ed25519PrivateKey.generate()
    (tmp_path / "attacker.pem").write_bytes(attacker.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    forged, mixed = tmp_path / "forged.json", tmp_path / "mixed.json"
    body = {k: v for k, v in json.loads(path.read_bytes()).items() if k != "signature"}
    mixed.write_bytes(receipt_bytes(sign_receipt(body, attacker)))  # its log head is still the coordinator's
    refused = check(mixed, "--public-key", str(tmp_path / "attacker.pem"))
    assert refused.exit_code == 1 and "log head" in refused.stderr, refused.output
    forged.write_bytes(receipt_bytes(sign_receipt({k: v for k, v in body.items() if k != "log"}, attacker)))
    by_attacker = check(forged, "--public-key", str(tmp_path / "attacker.pem"))
    assert by_attacker.exit_code == 0, by_attacker.output
    assert "the key in" in by_attacker.stdout and "attacker.pem (NOT the coordinator's key)" in by_attacker.stdout
    assert "signed by the coordinator's key" not in by_attacker.stdout
    as_json = json.loads(check(forged, "--public-key", str(tmp_path / "attacker.pem"), "--json").stdout)
    assert as_json["valid"] and as_json["coordinator_key"] is False
    coordinator = tmp_path / "coordinator.pub"
    coordinator.write_bytes(_load_private(tmp_path / "keys" / "coordinator.pem").public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    own = check(path, "--public-key", str(coordinator))
    assert own.exit_code == 0 and "coordinator.pub (the coordinator's key)" in own.stdout
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "nowhere.pem"))
    elsewhere = check(forged, "--public-key", str(tmp_path / "attacker.pem"))
    assert elsewhere.exit_code == 0 and "no coordinator key on this machine" in elsewhere.stdout
    assert not (tmp_path / "nowhere.pem").exists()  # a check never creates a key


def test_check_against_the_store_matches_until_its_ledger_is_edited_then_exits_1_in_one_line(issued):
    store, path = issued
    clean = check(path, "--store", str(store.root))
    assert clean.exit_code == 0 and "matches it" in clean.stdout, clean.output  # the negative control
    with sqlite3.connect(store.root / "ledger.sqlite") as db:
        deleted = db.execute("DELETE FROM forgotten WHERE request=1").rowcount
    assert deleted >= 1
    # the store check, which every command runs first, already names it; the receipt's digest would too
    refused_in_one_line(check(path, "--store", str(store.root)), 1, "forgotten rows")


def test_an_edited_purged_row_or_a_served_plan_edited_in_place_is_reported(issued):
    store, path = issued
    with sqlite3.connect(store.root / "ledger.sqlite") as db:
        db.execute("UPDATE purged SET sha256='00' WHERE request=1")
    refused_in_one_line(check(path, "--store", str(store.root)), 1, "purged")
    with sqlite3.connect(store.root / "ledger.sqlite") as db:
        db.execute("DELETE FROM purged WHERE request=1")
    refused_in_one_line(check(path, "--store", str(store.root)), 1, "purged")
    with sqlite3.connect(store.root / "ledger.sqlite") as db:  # a plan that serves less: the log refuses it
        db.execute("UPDATE meta SET value='{\"available\": false, \"artifacts\": []}' WHERE key='serving'")
    refused_in_one_line(check(path, "--store", str(store.root)), 1, "serving")


def test_a_later_request_moves_the_serving_plan_on_without_failing_the_check(issued):
    store, path = issued
    forget_request(store, samples=[store.manifest()["partitions"]["0"][0][0]])
    later = json.loads(check(path, "--store", str(store.root), "--json").stdout)
    assert later["valid"] and later["ledger"] == {"digest": True, "differs": [], "serving": "moved on"}


def test_an_old_receipt_without_a_ledger_digest_still_checks_and_says_so(issued, tmp_path):
    store, path = issued
    body = {k: v for k, v in json.loads(path.read_bytes()).items() if k not in ("signature", "ledger_digest")}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(sign_receipt(body, _load_private(tmp_path / "keys" / "coordinator.pem")), indent=2,
                              sort_keys=True) + "\n", encoding="utf-8")  # as receipts were written before
    result = check(old, "--store", str(store.root))
    assert result.exit_code == 0, result.output
    assert "carries no ledger digest" in result.stdout


def test_receipts_are_written_0600_in_an_owner_only_directory(issued):
    _, path = issued
    assert mode(path) == 0o600 and mode(path.parent) == 0o700


def test_a_signing_key_open_to_others_is_refused_in_one_line_naming_the_chmod_to_run(issued, tmp_path):
    store, path = issued
    key = tmp_path / "keys" / "coordinator.pem"
    key.chmod(0o644)
    before = path.read_bytes()
    path.unlink()
    result = runner.invoke(app, ["receipt", "1", "--store", str(store.root), "--no-verify"])
    refused_in_one_line(result, 2, "open to others", f"chmod 600 {key}")
    assert not path.exists()
    path.write_bytes(before)
    refused_in_one_line(check(path), 2, "chmod 600")
    key.chmod(0o600)
    assert check(path).exit_code == 0


def test_a_check_of_something_that_is_no_receipt_file_exits_2_in_one_line(issued, tmp_path):
    refused_in_one_line(check(tmp_path), 2, "not a regular file")
    (tmp_path / "junk.json").write_bytes(b"[" * 100_000)
    refused_in_one_line(check(tmp_path / "junk.json"), 2, "not JSON")


def test_a_public_key_that_is_no_key_file_exits_2_in_one_line(issued, tmp_path):
    _, path = issued
    refused_in_one_line(check(path, "--public-key", "/dev/zero"), 2, "not a regular file")
    refused_in_one_line(check(path, "--public-key", str(tmp_path / "missing.pem")), 2, "does not exist")
    (tmp_path / "big.pem").write_bytes(b"x" * 100_000)
    refused_in_one_line(check(path, "--public-key", str(tmp_path / "big.pem")), 2, "no PEM key is that large")
