"""``fedforget receipt``: a signed deletion certificate for one forget request.

It states what was asked (the request's spec and units), which artifacts it invalidated and purged
(sha256 and purge time), the clients' acknowledgements recorded so far, the serving plan after, and
the result of ``verify``; it is signed with Ed25519 (``cryptography``) by a key the coordinator keeps
outside the store, so whoever holds the store cannot forge or alter a receipt.

The key: ``$FEDFORGET_RECEIPT_KEY`` (a PEM file), else ``receipt-ed25519.pem`` in the coordinator's
secrets directory, outside any checkout: ``$FEDFORGET_SECRETS`` if set, else
``${XDG_CONFIG_HOME:-~/.config}/fedforget/`` (directory 0700, key 0600). It is created on first use,
atomically (``store.secret_files.create_once``: concurrent first uses agree on one key), and refused
while group or others may read or write it, or while it is not a regular file. Its public half is written
next to it (``receipt-ed25519.pub``) when it is created: once that record, or a receipt in the store, says a
key was made, a missing key is an error, never silently replaced (every earlier receipt would stop checking);
:func:`rotate_key` (``fedforget receipt --new-key``) makes a new one on purpose and keeps the old public half
as ``receipt-ed25519.<fingerprint>.pub`` to check earlier receipts with. A key at the old default
``$FEDFORGET_HOME/.keys/receipt-ed25519.pem`` (inside the checkout) is still used while none exists at
the new place, so old receipts keep verifying; a line on stderr says so. Never inside a store.

``--check`` verifies the signature against that key's public half (or ``--public-key FILE``), so a
receipt re-signed with another key is refused too, and requires the file's bytes to be exactly the
ones written (:func:`receipt_bytes`), so one signed body has one accepted file. ``ledger_digest``
(``receipt_ledger``) commits the receipt to the ledger rows it certifies, and ``log``
(``fedforget.store.log_proof``) proves its request's forget entry under a head signed when the receipt was
issued, checkable with the public key alone (``fedforget.unlearning.log_verify``).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from fedforget.core.strict_json import DuplicateKey, no_duplicate_keys
from fedforget.store import Store
from fedforget.store.bounded_read import UnreadableFile, read_bounded
from fedforget.store.ledger import LedgerUsageError
from fedforget.store.secret_files import SECRETS_ENV as SECRETS_ENV
from fedforget.store.secret_files import create_once, open_to_others, secrets_dir
from fedforget.unlearning.receipt_ledger import DIGEST_FIELD, ledger_state

FORMAT = "fedforget-receipt/1"
#: no receipt comes near this (a request's units and purged artifacts); reading more would be unbounded
MAX_RECEIPT_BYTES = 16 * 2**20
MAX_KEY_BYTES = 64 * 2**10  # an Ed25519 PEM is about 120 bytes
KEY_ENV = "FEDFORGET_RECEIPT_KEY"
KEY_NAME = "receipt-ed25519.pem"


class ReceiptError(ValueError):
    """The receipt is malformed, altered, or signed by another key; the message says which."""


class ReceiptKeyError(ValueError):
    """The coordinator's key cannot be used as it is (open to others, unreadable); the operator must fix it."""


_told_legacy: set[Path] = set()


def legacy_key_path() -> Path | None:
    """Where the key was kept before: inside the checkout (``$FEDFORGET_HOME/.keys``)."""
    home = os.environ.get("FEDFORGET_HOME")
    return Path(home) / ".keys" / KEY_NAME if home else None


def primary_key_path() -> Path:
    """Where the key is kept and a new one is made: ``$FEDFORGET_RECEIPT_KEY``, else the secrets directory."""
    if os.environ.get(KEY_ENV):
        return Path(os.path.expanduser(os.environ[KEY_ENV]))
    return secrets_dir() / KEY_NAME


def key_path() -> Path:
    """The key in use: :func:`primary_key_path`, or the old place inside the checkout while only it holds one."""
    path = primary_key_path()
    if os.environ.get(KEY_ENV):
        return path
    legacy = legacy_key_path()
    if not path.exists() and legacy is not None and legacy.is_file():
        if legacy not in _told_legacy:
            _told_legacy.add(legacy)
            print(f"fedforget: using the receipt key at its old place {legacy} (none at {path}); move it there "
                  f"or set {KEY_ENV}", file=sys.stderr)
        return legacy
    return path


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def public_record_path(path: Path) -> Path:
    """Where the public half of the key at ``path`` is recorded when the key is made: ``<stem>.pub`` beside it."""
    record = path.with_suffix(".pub")
    return record if record != path else path.with_name(path.name + ".pub")


def _receipts_in(store_root: Path | None) -> bool:
    """Whether the store holds a receipt (one directory entry is enough: bounded however many there are)."""
    if store_root is None:
        return False
    try:
        with os.scandir(Path(store_root) / "receipts") as entries:
            return any(e.name.startswith("request-") and e.name.endswith(".json") for e in entries)
    except OSError:
        return False


def _made_before(path: Path, store_root: Path | None) -> str | None:
    """What says a key was made at ``path`` before (so a missing one was lost, not never made), else None."""
    record = public_record_path(path)
    if os.path.lexists(record):
        return f"{record} records that one was made"
    if _receipts_in(store_root):
        return f"{Path(store_root) / 'receipts'} holds receipts signed with it"
    return None


def _new_pem() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption())


def public_pem(key) -> bytes:  # noqa: ANN001 - an Ed25519 private or public key
    """The public half of ``key`` as a PEM public key (what ``--public-key`` reads)."""
    from cryptography.hazmat.primitives import serialization

    public = key.public_key() if hasattr(key, "private_bytes") else key
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def fingerprint(key) -> str:  # noqa: ANN001 - an Ed25519 private or public key
    """The first 16 hex digits of the sha256 of the raw public key: how a key is named in file names and lines."""
    import hashlib

    return hashlib.sha256(_public_raw(key)).hexdigest()[:16]


def _record_public(path: Path, key) -> None:  # noqa: ANN001 - an Ed25519PrivateKey
    """Write the public half beside the key unless it is there (best effort: the key works without it)."""
    if os.path.lexists(public_record_path(path)):
        return
    try:
        create_once(public_record_path(path), public_pem(key))
    except OSError:
        pass


def load_or_create_key(store_root: Path | None = None):  # noqa: ANN201 - an Ed25519PrivateKey
    """The coordinator's signing key; refuses one kept inside the store it certifies. A key is made only when
    nothing names one yet: a missing key whose public record, or a receipt in ``store_root``, exists was lost,
    and replacing it silently would make every earlier receipt fail its check."""
    from cryptography.hazmat.primitives import serialization

    path = key_path()
    if store_root is not None and _inside(path, store_root):
        raise LedgerUsageError(f"the receipt key {path} is inside the store; keep it outside (set {KEY_ENV})")
    if os.path.lexists(path):
        key = _load_private(path)
        _record_public(path, key)  # a key made before records existed gets one on its next use
        return key
    made = _made_before(path, store_root)
    if made is not None:
        raise ReceiptKeyError(
            f"the receipt key {path} is missing, but {made}: restore it from your backup to {path}, or make a new key "
            "with `fedforget receipt --new-key` (earlier receipts then check only with `--public-key` and the old "
            "public key, which --new-key keeps beside the new one)")
    key = serialization.load_pem_private_key(create_once(path, _new_pem()), password=None)
    _record_public(path, key)
    return key


def rotate_key() -> tuple[Path, str, Path | None]:
    """Make a new coordinator key on purpose (the old one is lost or was exposed): ``(key path, its fingerprint,
    where the old public half is kept)``. The old public half, from the old key or its record, is kept as
    ``<stem>.<old fingerprint>.pub``: receipts signed before check only with it (``--public-key``)."""
    from cryptography.hazmat.primitives import serialization

    from fedforget.store.atomic import atomic_write_bytes
    from fedforget.store.secret_files import mkdir_private

    path, current = primary_key_path(), key_path()
    old = None
    try:
        if os.path.lexists(current):
            old = serialization.load_pem_private_key(read_bounded(current, MAX_KEY_BYTES, "PEM key"),
                                                     password=None).public_key()
        elif os.path.lexists(public_record_path(path)):
            old = serialization.load_pem_public_key(read_bounded(public_record_path(path), MAX_KEY_BYTES, "PEM key"))
    except OSError as exc:
        raise ReceiptKeyError(f"cannot read the old receipt key to keep its public half: {exc}") from None
    except (ValueError, TypeError):
        old = None  # not a key: nothing it signed can be checked anyway
    kept = None
    if old is not None:
        kept = path.with_name(f"{path.stem}.{fingerprint(old)}.pub")
        create_once(kept, public_pem(old))
    mkdir_private(path.parent)
    pem = _new_pem()
    atomic_write_bytes(path, pem)
    key = serialization.load_pem_private_key(pem, password=None)
    atomic_write_bytes(public_record_path(path), public_pem(key))
    return path, fingerprint(key), kept


#: How many kept public keys ``--check`` compares a receipt's signer with (one per rotation).
MAX_KEPT_KEYS = 100


def kept_key_for(data: bytes) -> Path | None:
    """The kept public half of an earlier coordinator key (``rotate_key``) that signed this receipt, if any."""
    try:
        receipt = parse_receipt(data)
        claimed = base64.b64decode(str(receipt["signature"]["public_key"]), validate=True)
    except (ValueError, TypeError, KeyError):
        return None
    path = primary_key_path()
    try:
        kept = sorted(path.parent.glob(f"{path.stem}.*.pub"))[:MAX_KEPT_KEYS]
    except OSError:
        return None
    for candidate in kept:
        try:
            if load_public_key(candidate) == claimed:
                return candidate
        except (OSError, ReceiptKeyError):
            continue
    return None


def _load_private(path: Path):  # noqa: ANN202 - an Ed25519PrivateKey
    """The key at ``path``, refused while group or others may read or write it (they could forge receipts), and
    unless it is a small regular file (a device such as ``/dev/zero`` is never read)."""
    from cryptography.hazmat.primitives import serialization

    try:
        data = read_bounded(path, MAX_KEY_BYTES, "PEM key")
    except UnreadableFile as exc:
        raise ReceiptKeyError(f"the receipt key {exc}; point {KEY_ENV} at the key's PEM file") from None
    loose = open_to_others(path)
    if loose:
        raise ReceiptKeyError(f"the receipt key {path} is open to others (mode {path.stat().st_mode & 0o777:04o}); run "
                              f"`chmod 600 {path}`, and make a new key (`fedforget receipt --new-key`) if someone else "
                              "may have read it")
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise ReceiptKeyError(f"the receipt key {path} is not an unencrypted PEM Ed25519 private key") from None


def _public_raw(key) -> bytes:  # noqa: ANN001 - an Ed25519 private or public key
    from cryptography.hazmat.primitives import serialization

    public = key.public_key() if hasattr(key, "private_bytes") else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def canonical(body: dict[str, Any]) -> bytes:
    """The signed bytes: sorted keys, no spaces, UTF-8 (any change to any field changes them)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def receipt_bytes(signed: dict[str, Any]) -> bytes:
    """The one byte string a signed receipt is written as (and printed as by ``--json``)."""
    return (json.dumps(signed, indent=2, sort_keys=True) + "\n").encode("utf-8")


def build_receipt(store: Store, request: int, verify_result: dict[str, Any] | None) -> dict[str, Any]:
    """The unsigned body of request ``request``'s receipt, read from one snapshot of the ledger."""
    from fedforget.store.acks import request_acks
    from fedforget.store.log_proof import log_section
    from fedforget.store.purge import purged_rows
    from fedforget.store.record_commitments import openings

    ledger = store.ledger()
    try:
        ledger.db.execute("BEGIN")  # one read snapshot: the digest and the fields agree
        rows = {r["request"]: r for r in ledger.requests()}
        if request not in rows:
            raise LedgerUsageError(f"unknown request {request}: this store has requests 1..{ledger.last_request()} "
                                   "(`fedforget status` counts them)")
        row = rows[request]
        purged = [{"artifact": p["artifact"], "sha256": p["sha256"], "purged_at": p["at"], "done": p["done"]}
                  for p in purged_rows(ledger.db) if p["request"] == request]
        acks = request_acks(ledger).get(request, {"owners": [], "acknowledged": [], "pending": []})
        serving = ledger.serving()
        digest = ledger_state(ledger, request)
        section = log_section(ledger.db, request)
        opened = openings(ledger.db, request)
    finally:
        ledger.close()
    return {
        "format": FORMAT, "store": str(store.root), "issued_at": time.time(),
        "request": {"id": request, "at": row["at"], "kind": row["kind"], "spec": row["spec"],
                    "samples": row["samples"], "units": row["units"], "state": row["state"]},
        "invalidated": row["invalidated"], "purged": purged,
        "purge_complete": all(p["done"] for p in purged),
        "acknowledgements": acks,
        "serving_after": serving,
        DIGEST_FIELD: digest,
        "verify": None if verify_result is None else {
            k: verify_result.get(k) for k in ("exact", "served", "served_equal", "forgotten_samples", "dp_covered",
                                              "not_checked", "files", "serving_plan", "reason")} | {
            "outputs_equal": (verify_result.get("outputs") or {}).get("equal"),
            "served_sha256": sorted(c["sha256"] for c in verify_result.get("compared", []) if c["served"])} | (
            # the reference was trained by the nodes of this federation (absent: in process)
            {"federation": verify_result["federation"], "held": verify_result.get("held")}
            if "federation" in verify_result else {}),
    } | ({"log": section} if section is not None else {}) | ({"record_openings": opened} if opened else {})


def sign_receipt(body: dict[str, Any], key) -> dict[str, Any]:  # noqa: ANN001
    signature = key.sign(canonical(body))
    return {**body, "signature": {"algorithm": "ed25519", "public_key": base64.b64encode(_public_raw(key)).decode(),
                                  "value": base64.b64encode(signature).decode()}}


def sign_head(store: Store, request: int) -> None:
    """Append the ``receipt`` entry of request ``request`` and sign a head over it and everything before it
    (a training run's entries included): the receipt is built under that head."""
    from fedforget.store.log import head_signer

    if head_signer() is None:  # the CLI and the service act as the coordinator before they open a store
        raise RuntimeError("receipts are issued by the coordinator: call "
                           "fedforget.unlearning.log_signer.act_as_coordinator() first")
    from fedforget.store.log import has_log
    from fedforget.store.log_proof import forget_entry

    ledger = store.ledger()
    try:
        if has_log(ledger.db) and ledger.db.execute("SELECT 1 FROM requests WHERE id=?", (request,)).fetchone():
            forget_entry(ledger.db, request)  # a request no coordinator entry inserted is refused before signing
        with ledger.transaction("receipt", request=request):
            pass
    finally:
        ledger.close()


def receipt_path(store: Store, request: int) -> Path:
    """Where request ``request``'s receipt is written: ``<store>/receipts/request-N.json``."""
    return store.root / "receipts" / f"request-{request}.json"


def issue_receipt(store: Store, request: int, verify_result: dict[str, Any] | None) -> tuple[dict[str, Any], Path]:
    """Build, sign and write request ``request``'s receipt (0600, whole or not at all); the CLI and the
    forget service both issue receipts through this one function."""
    from fedforget.store.atomic import atomic_write_bytes
    from fedforget.store.secret_files import mkdir_private

    key = load_or_create_key(store.root)
    sign_head(store, request)
    signed = sign_receipt(build_receipt(store, request, verify_result), key)
    out = receipt_path(store, request)
    atomic_write_bytes(mkdir_private(out.parent) / out.name, receipt_bytes(signed))
    return signed, out


def read_receipt_file(path: Path) -> bytes:
    """A receipt file's bytes, at most :data:`MAX_RECEIPT_BYTES`."""
    return read_bounded(path, MAX_RECEIPT_BYTES, "receipt")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_receipt(data: bytes) -> Any:
    """Parse a receipt's bytes strictly (UTF-8, no duplicate keys, no NaN); ValueError when not JSON at all."""
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=no_duplicate_keys, parse_constant=_no_constant)
    except DuplicateKey as exc:
        raise ReceiptError(f"the key {exc.key!r} appears twice in one object: the receipt was altered") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


def check_receipt(data: bytes, public_key_raw: bytes) -> dict[str, Any]:
    """Raise :class:`ReceiptError` unless ``data`` is a receipt signed by ``public_key_raw``, byte for byte as
    written: the signature covers the fields, and the file must be exactly :func:`receipt_bytes` of them, so
    a re-serialised, re-indented or duplicate-key copy is refused like any other altered byte."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    receipt = parse_receipt(data)
    if not isinstance(receipt, dict) or receipt.get("format") != FORMAT or not isinstance(receipt.get("signature"),
                                                                                            dict):
        raise ReceiptError(f"not a {FORMAT} receipt")
    sig = receipt["signature"]
    body = {k: v for k, v in receipt.items() if k != "signature"}
    try:
        claimed = base64.b64decode(str(sig.get("public_key")), validate=True)
        value = base64.b64decode(str(sig.get("value")), validate=True)
    except ValueError:
        raise ReceiptError("the receipt's signature is not base64") from None
    if claimed != public_key_raw:
        raise ReceiptError("the receipt is signed by another key than the one it is checked against")
    try:
        Ed25519PublicKey.from_public_bytes(public_key_raw).verify(value, canonical(body))
    except (InvalidSignature, ValueError):
        raise ReceiptError("the signature does not match: the receipt was altered after it was signed") from None
    if data != receipt_bytes(receipt):
        raise ReceiptError("its bytes are not the ones written when it was signed (re-serialised or edited: "
                           "spacing, key order, escapes or line ends)")
    if not isinstance(body.get("request"), dict) or not isinstance(body["request"].get("id"), int):
        raise ReceiptError("the receipt names no request id")
    return body


def load_public_key(path: Path | None) -> bytes:
    """Raw public key bytes: from a PEM public (or private) key file, else the coordinator's key."""
    from cryptography.hazmat.primitives import serialization

    if path is None:
        coordinator = coordinator_public_key()
        if coordinator is None:
            raise ReceiptKeyError(f"no coordinator key at {key_path()}; pass --public-key FILE (the coordinator's "
                                  "public key)")
        return coordinator
    data = read_bounded(Path(path), MAX_KEY_BYTES, "PEM key")
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        try:
            key = serialization.load_pem_private_key(data, password=None).public_key()
        except (ValueError, TypeError):
            raise ReceiptKeyError(f"{path} is not a PEM Ed25519 key") from None
    try:
        return _public_raw(key)
    except (ValueError, TypeError):
        raise ReceiptKeyError(f"{path} is not a PEM Ed25519 key") from None


def coordinator_public_key() -> bytes | None:
    """The coordinator's public key when its key is on this machine (never created by a check), else None."""
    path = key_path()
    return _public_raw(_load_private(path)) if os.path.lexists(path) else None


def public_key_pem() -> bytes:
    from cryptography.hazmat.primitives import serialization

    return load_or_create_key().public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo)
