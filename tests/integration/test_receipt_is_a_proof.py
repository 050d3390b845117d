"""A receipt is a proof: it carries its request's forget entry and an inclusion proof under a signed log head,
which a third party checks with the coordinator's public key and an exported log alone (no store, no key);
an edited proof, entry or log, or another key, is refused; a store rolled back past its newest receipt is
refused by the store check."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.log import head_signer, set_head_signer
from fedforget.store.merkle import leaf_hash
from fedforget.unlearning.receipt import (
    KEY_ENV,
    SECRETS_ENV,
    load_or_create_key,
    public_pem,
    receipt_bytes,
    sign_receipt,
)

from .helpers import copy_store, invoke, train_in_process


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A trained store whose run signed nothing, as a ServerApp's (it holds no key), whatever earlier tests in
    this process made it."""
    before = head_signer()
    set_head_signer(None)
    try:
        return train_in_process(tmp_path_factory.mktemp("proof") / "store", 3,
                                **{"train-size": 300, "num-rounds": 1, "slices-per-client": 2}).root
    finally:
        set_head_signer(before)


@pytest.fixture
def issued(trained, tmp_path, monkeypatch):
    """A copy of the store with request 1 (a record) forgotten and its receipt issued; the coordinator's key and
    secrets in tmp_path."""
    monkeypatch.setenv(SECRETS_ENV, str(tmp_path / "secrets"))
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "coordinator.pem"))
    store = copy_store(trained, tmp_path)
    sid = store.manifest()["partitions"]["1"][0][0]
    code, _, err = invoke(["forget", "--store", str(store.root), "--record", f"node-1:{sid}"])
    assert code == 0, err
    code, out, err = invoke(["receipt", "1", "--store", str(store.root), "--no-verify", "--json"])
    assert code == 0, err
    return store, json.loads(out), f"node-1:{sid}"


def public_key_file(where: Path) -> Path:
    path = where / "coordinator.pub.pem"
    path.write_bytes(public_pem(load_or_create_key()))
    return path


def export(store: Store, out: Path) -> Path:
    code, _, err = invoke(["log", "export", "--store", str(store.root), "--out", str(out)])
    assert code == 0, err
    return out


def resigned(receipt: dict, path: Path, key=None) -> Path:  # noqa: ANN001
    """``receipt`` signed again (by the coordinator's key unless ``key``): only the proof can refuse it."""
    body = {k: v for k, v in receipt.items() if k != "signature"}
    path.write_bytes(receipt_bytes(sign_receipt(body, key or load_or_create_key())))
    return path


def refused(argv: list[str], code: int, *words: str) -> None:
    got, out, err = invoke(argv)
    assert got == code, out + err
    assert len(err.strip().splitlines()) == 1 and all(w in err for w in words), err


def test_a_receipt_carries_its_forget_entry_its_inclusion_proof_and_the_signed_head(issued):
    store, receipt, record = issued
    log = receipt["log"]
    entry = json.loads(log["text"])
    assert entry["kind"] == "forget" and entry["request"] == 1 and entry["seq"] == log["entry"]
    assert leaf_hash(log["text"].encode()).hex() == log["leaf"] and log["proof"]
    assert log["head"]["size"] > log["entry"] and log["head"]["signature"]["algorithm"] == "ed25519"
    assert record not in log["text"]  # the log holds commitments, never the record's name
    (opening,) = receipt["record_openings"]
    assert opening["record"] == record and receipt["request"]["spec"]["records"] == [opening["commitment"]]
    with sqlite3.connect(store.root / "ledger.sqlite") as db:  # issuing appended a receipt entry, signed
        kind, = db.execute("SELECT json_extract(entry, '$.kind') FROM log ORDER BY seq DESC LIMIT 1").fetchone()
        size, = db.execute("SELECT MAX(size) FROM log_heads").fetchone()
    assert kind == "receipt" and size == log["head"]["size"]
    code, out, err = invoke(["receipt", "--check", str(store.root / "receipts" / "request-1.json"), "--json"])
    assert code == 0, err
    assert json.loads(out)["log_proof"]["entry"] == log["entry"]


def test_a_third_party_verifies_a_receipt_with_an_exported_log_and_the_public_key_alone(issued, tmp_path,
                                                                                        monkeypatch):
    store, _, _ = issued
    third = tmp_path / "third-party"
    third.mkdir()
    pub = public_key_file(third)
    log = export(store, third / "log.jsonl")
    assert log.stat().st_mode & 0o077 == 0
    shutil.copy(store.root / "receipts" / "request-1.json", third / "receipt.json")
    shutil.rmtree(store.root)  # no store, no coordinator key, no secrets: the key's public half and the files
    monkeypatch.setenv(SECRETS_ENV, str(tmp_path / "empty"))
    monkeypatch.delenv(KEY_ENV)
    monkeypatch.chdir(third)
    code, out, err = invoke(["log", "verify", "--log", "log.jsonl", "--public-key", str(pub), "--receipt",
                             "receipt.json", "--json"])
    assert code == 0, err
    checked = json.loads(out)
    assert checked["valid"] and checked["unsigned_entries"] == 0 and checked["receipts"][0]["request"] == 1
    code, out, err = invoke(["receipt", "--check", "receipt.json", "--public-key", str(pub)])
    assert code == 0 and "is in the log under the signed head" in out, out + err


def test_a_flipped_proof_hash_an_edited_entry_or_spec_in_a_re_signed_receipt_is_refused(issued, tmp_path):
    store, receipt, _ = issued
    pub, log = public_key_file(tmp_path), export(store, tmp_path / "log.jsonl")
    flipped = json.loads(json.dumps(receipt))
    flipped["log"]["proof"][0] = ("0" if flipped["log"]["proof"][0][0] != "0" else "1") + flipped["log"]["proof"][0][1:]
    edited = json.loads(json.dumps(receipt))
    edited["log"]["text"] = edited["log"]["text"].replace('"kind":"forget"', '"kind":"forget","note":"x"')
    rehashed = json.loads(json.dumps(edited))
    rehashed["log"]["leaf"] = leaf_hash(rehashed["log"]["text"].encode()).hex()
    spec = json.loads(json.dumps(receipt))
    spec["request"]["spec"]["samples"] = [0]
    for name, body, why in (("flipped", flipped, "inclusion proof"), ("edited", edited, "does not hash"),
                            ("rehashed", rehashed, "inclusion proof"), ("spec", spec, "spec is not the one")):
        path = resigned(body, tmp_path / f"{name}.json")
        refused(["receipt", "--check", str(path), "--public-key", str(pub)], 1, "NOT valid", why)
        refused(["log", "verify", "--log", str(log), "--public-key", str(pub), "--receipt", str(path)], 1, why)


def test_a_log_export_with_an_edited_entry_or_another_key_is_refused(issued, tmp_path):
    store, _, _ = issued
    pub, log = public_key_file(tmp_path), export(store, tmp_path / "log.jsonl")
    receipt = store.root / "receipts" / "request-1.json"
    lines = log.read_text().splitlines()
    forget = next(i for i, line in enumerate(lines) if '\\"kind\\":\\"forget\\"' in line)
    item = json.loads(lines[forget])
    for name, text, leaf in (("entry", item["entry"].replace('"request":1', '"request":2'), item["leaf"]),
                             ("rehashed", item["entry"].replace('"request":1', '"request":2'), None)):
        edited = dict(item, entry=text, leaf=leaf or leaf_hash(text.encode()).hex())
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join([*lines[:forget], json.dumps(edited, sort_keys=True), *lines[forget + 1:]]) + "\n")
        refused(["log", "verify", "--log", str(path), "--public-key", str(pub)], 1, "log NOT valid")
    other = tmp_path / "other.pem"
    other.write_bytes(public_pem(Ed25519PrivateKey.generate()))
    refused(["log", "verify", "--log", str(log), "--public-key", str(other)], 1, "not signed by the key")
    refused(["log", "verify", "--log", str(log), "--public-key", str(other), "--receipt", str(receipt)], 1,
            "another key")
    forged = resigned(json.loads(receipt.read_text()), tmp_path / "forged.json", Ed25519PrivateKey.generate())
    refused(["log", "verify", "--log", str(log), "--public-key", str(pub), "--receipt", str(forged)], 1,
            "another key")
    assert invoke(["log", "verify", "--log", str(log), "--public-key", str(pub), "--receipt", str(receipt)])[0] == 0


def test_a_receipt_whose_head_the_log_never_reached_is_refused_as_a_rollback(issued, tmp_path):
    store, _, _ = issued
    pub = public_key_file(tmp_path)
    log = export(store, tmp_path / "log.jsonl")
    lines = log.read_text().splitlines()
    header = json.loads(lines[0])
    entries = [ln for ln in lines[1:] if '"seq"' in ln]
    kept = entries[:len(entries) - 2]  # cut back past the receipt's head, with only heads it covers
    heads = [ln for ln in lines[1:] if '"head"' in ln and json.loads(ln)["head"]["size"] <= len(kept)]
    header.update(entries=len(kept), heads=len(heads))
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join([json.dumps(header), *kept, *heads]) + "\n")
    refused(["log", "verify", "--log", str(cut), "--public-key", str(pub), "--receipt",
             str(store.root / "receipts" / "request-1.json")], 1, "rolled back past the receipt")


def test_bad_input_exits_2_in_one_line(issued, tmp_path):
    store, _, _ = issued
    pub = public_key_file(tmp_path)
    (tmp_path / "notes.txt").write_text("hello\n")
    for log, why in ((tmp_path / "notes.txt", "not a log export"), (tmp_path / "missing", "does not exist"),
                     (Path("/dev/zero"), "not a regular file"), (tmp_path, "directory")):
        refused(["log", "verify", "--log", str(log), "--public-key", str(pub)], 2, why)
    refused(["log", "verify", "--public-key", str(pub)], 2, "--log FILE")
    refused(["log", "verify", "--log", str(tmp_path / "notes.txt"), "--public-key", str(tmp_path / "notes.txt")], 2,
            "not a PEM")
    code, _, err = invoke(["log", "verify", "--store", str(store.root), "--public-key", str(pub)])
    assert code == 0, err


def test_log_sign_signs_a_training_runs_entries_and_status_counts_none_unsigned(trained, tmp_path, monkeypatch):
    monkeypatch.setenv(SECRETS_ENV, str(tmp_path / "secrets"))
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "coordinator.pem"))
    store = copy_store(trained, tmp_path)
    code, out, err = invoke(["log", "sign", "--store", str(store.root), "--json"])
    assert code == 0, err
    with sqlite3.connect(store.root / "ledger.sqlite") as db:
        size, = db.execute("SELECT COUNT(*) FROM log").fetchone()
    assert json.loads(out)["size"] == size
    code, out, err = invoke(["status", "--store", str(store.root), "--json"])
    assert code == 0 and json.loads(out)["log"]["unsigned"] == 0, err


def test_a_store_rolled_back_past_its_newest_receipt_is_refused(trained, tmp_path, monkeypatch):
    monkeypatch.setenv(SECRETS_ENV, str(tmp_path / "secrets"))
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "coordinator.pem"))
    store = copy_store(trained, tmp_path)
    sid = store.manifest()["partitions"]["1"][0][0]
    assert invoke(["forget", "--store", str(store.root), "--sample", str(sid)])[0] == 0
    backup = tmp_path / "ledger.backup"
    shutil.copy(store.root / "ledger.sqlite", backup)
    assert invoke(["receipt", "1", "--store", str(store.root), "--no-verify"])[0] == 0
    assert check_store(Store.open(store.root)).ok  # the control: as issued, the store checks
    shutil.copy(backup, store.root / "ledger.sqlite")  # the ledger from before the receipt's entry
    shutil.rmtree(tmp_path / "secrets" / "logs")  # and no outside record of the log to tell it
    check = check_store(Store.open(store.root))
    assert not check.ok and "rolled back past a receipt" in check.summary(), check.summary()


def test_a_receipt_naming_records_goes_with_the_scrub_and_is_issued_again_without_them(issued):
    from fedforget.store.acks import record_acks, request_acks
    from fedforget.unlearning.scrub import scrub_complete

    store, receipt, record = issued
    path = store.root / "receipts" / "request-1.json"
    assert record in path.read_text()  # the control: issued before the request is complete, it names the record
    ledger = store.ledger()
    try:
        ledger.finish_retrain(1, [])
        record_acks(ledger, {1: 1})  # the node that held the record deleted it up to request 1
        pending = request_acks(ledger).get(1, {}).get("pending")
    finally:
        ledger.close()
    assert not pending
    assert scrub_complete(store).receipts == [1]  # what the retrain or propagation that completes it runs
    assert not path.exists()
    code, out, err = invoke(["receipt", "1", "--store", str(store.root), "--no-verify", "--json"])
    assert code == 0, err
    again = json.loads(out)
    assert "record_openings" not in again and record not in path.read_text()
    assert again["log"]["entry"] == receipt["log"]["entry"]
    assert again["log"]["head"]["size"] > receipt["log"]["head"]["size"]
    assert check_store(Store.open(store.root)).ok


def test_a_log_signed_before_and_after_a_new_key_verifies_with_both_public_keys_only(issued, tmp_path):
    store, _, _ = issued
    receipt = store.root / "receipts" / "request-1.json"
    code, out, err = invoke(["receipt", "--new-key", "--json"])
    assert code == 0, err
    made = json.loads(out)
    assert invoke(["log", "sign", "--store", str(store.root)])[0] == 0  # a head signed by the new key
    log = export(store, tmp_path / "log.jsonl")
    old, new = made["old_public_key"], made["public_key"]
    refused(["log", "verify", "--log", str(log), "--public-key", new], 1, "not signed by the key")
    refused(["log", "verify", "--log", str(log), "--public-key", old], 1, "not signed by the key")
    code, out, err = invoke(["log", "verify", "--log", str(log), "--public-key", new, "--public-key", old,
                             "--receipt", str(receipt), "--json"])
    assert code == 0, err
    assert json.loads(out)["receipts"][0]["request"] == 1


def test_a_receipt_that_hides_its_forget_entry_is_refused_against_the_log(issued, tmp_path):
    store, receipt, _ = issued
    pub, log = public_key_file(tmp_path), export(store, tmp_path / "log.jsonl")
    hidden = json.loads(json.dumps(receipt))
    hidden["log"] = {"head": receipt["log"]["head"], "entry": None}  # as if the request predated the log
    path = resigned(hidden, tmp_path / "hidden.json")
    code, _, err = invoke(["receipt", "--check", str(path), "--public-key", str(pub)])
    assert code == 0, err  # alone it only pins the head
    refused(["log", "verify", "--log", str(log), "--public-key", str(pub), "--receipt", str(path)], 1,
            "predates the log", f"entry {receipt['log']['entry']}")
