"""``fedforget receipt``: a signed deletion certificate for one forget request.

It states what was asked (the request's spec and units), which artifacts it invalidated and purged
(sha256 and purge time), the clients' acknowledgements recorded so far, the serving plan after, and
the result of ``verify``; it is signed with Ed25519 (``cryptography``) by a key the coordinator keeps
outside the store, so whoever holds the store cannot forge or alter a receipt.

The key: ``$FEDFORGET_RECEIPT_KEY`` (a PEM file), else ``$FEDFORGET_HOME/.keys/receipt-ed25519.pem``,
else ``~/.config/fedforget/receipt-ed25519.pem``; created (0600) on first use, never inside a store.
``--check`` verifies the signature against that key's public half (or ``--public-key FILE``), so a
receipt re-signed with another key is refused too.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

from fedforget.store import Store
from fedforget.store.ledger import LedgerUsageError

FORMAT = "fedforget-receipt/1"
KEY_ENV = "FEDFORGET_RECEIPT_KEY"
KEY_NAME = "receipt-ed25519.pem"


class ReceiptError(ValueError):
    """The receipt is malformed, altered, or signed by another key; the message says which."""


def key_path() -> Path:
    if os.environ.get(KEY_ENV):
        return Path(os.path.expanduser(os.environ[KEY_ENV]))
    if os.environ.get("FEDFORGET_HOME"):
        return Path(os.environ["FEDFORGET_HOME"]) / ".keys" / KEY_NAME
    return Path.home() / ".config" / "fedforget" / KEY_NAME


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def load_or_create_key(store_root: Path | None = None):  # noqa: ANN201 - an Ed25519PrivateKey
    """The coordinator's signing key; refuses one kept inside the store it certifies."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = key_path()
    if store_root is not None and _inside(path, store_root):
        raise LedgerUsageError(f"the receipt key {path} is inside the store; keep it outside (set {KEY_ENV})")
    if path.is_file():
        return serialization.load_pem_private_key(path.read_bytes(), password=None)
    key = Ed25519PrivateKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    return key


def _public_raw(key) -> bytes:  # noqa: ANN001 - an Ed25519 private or public key
    from cryptography.hazmat.primitives import serialization

    public = key.public_key() if hasattr(key, "private_bytes") else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def canonical(body: dict[str, Any]) -> bytes:
    """The signed bytes: sorted keys, no spaces, UTF-8 (any change to any field changes them)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def build_receipt(store: Store, request: int, verify_result: dict[str, Any] | None) -> dict[str, Any]:
    """The unsigned body of request ``request``'s receipt."""
    from fedforget.store.purge import purged_rows

    ledger = store.ledger()
    try:
        rows = {r["request"]: r for r in ledger.requests()}
        if request not in rows:
            raise LedgerUsageError(f"unknown request {request}: this store has requests 1..{ledger.last_request()} "
                                   "(`fedforget status` counts them)")
        row = rows[request]
        purged = [{"artifact": p["artifact"], "sha256": p["sha256"], "purged_at": p["at"], "done": p["done"]}
                  for p in purged_rows(ledger.db) if p["request"] == request]
        from fedforget.store.acks import request_acks

        acks = request_acks(ledger).get(request, {"owners": [], "acknowledged": [], "pending": []})
        serving = ledger.serving()
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
        "verify": None if verify_result is None else {
            k: verify_result.get(k) for k in ("exact", "served", "served_equal", "forgotten_samples", "dp_covered",
                                              "not_checked", "files", "serving_plan", "reason")} | {
            "outputs_equal": (verify_result.get("outputs") or {}).get("equal"),
            "served_sha256": sorted(c["sha256"] for c in verify_result.get("compared", []) if c["served"])},
    }


def sign_receipt(body: dict[str, Any], key) -> dict[str, Any]:  # noqa: ANN001
    signature = key.sign(canonical(body))
    return {**body, "signature": {"algorithm": "ed25519", "public_key": base64.b64encode(_public_raw(key)).decode(),
                                  "value": base64.b64encode(signature).decode()}}


def check_receipt(receipt: Any, public_key_raw: bytes) -> dict[str, Any]:
    """Raise :class:`ReceiptError` unless ``receipt`` is a receipt signed by ``public_key_raw``, unaltered."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

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
        raise ReceiptError("the receipt is signed by another key than the coordinator's")
    try:
        Ed25519PublicKey.from_public_bytes(public_key_raw).verify(value, canonical(body))
    except (InvalidSignature, ValueError):
        raise ReceiptError("the signature does not match: the receipt was altered after it was signed") from None
    return body


def load_public_key(path: Path | None) -> bytes:
    """Raw public key bytes: from a PEM public (or private) key file, else the coordinator's key."""
    from cryptography.hazmat.primitives import serialization

    if path is None:
        if not key_path().is_file():
            raise ReceiptError(f"no coordinator key at {key_path()}; pass --public-key FILE")
        return _public_raw(load_or_create_key().public_key())
    data = Path(path).read_bytes()
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        try:
            key = serialization.load_pem_private_key(data, password=None).public_key()
        except (ValueError, TypeError):
            raise ReceiptError(f"{path} is not a PEM Ed25519 key") from None
    return _public_raw(key)


def public_key_pem() -> bytes:
    from cryptography.hazmat.primitives import serialization

    return load_or_create_key().public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo)
