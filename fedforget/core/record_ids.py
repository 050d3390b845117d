"""Records as their owners know them: ``NODE:RECORD_ID``, and the sample id the ledger keeps for one.

A node names itself in its node config (``node-name``, by default ``node-<partition-id>``) and its records
by the ids in its own data. The ledger indexes integer sample ids, so each record gets one that every side
computes alone, with no table to exchange or keep in step:

- the shipped tasks' public sets already number their rows: a record id there *is* the sample id, written
  in digits (``node-0:17`` is sample 17);
- a node's own data (``data-dir``) gets ``hmac-sha256(key, node, record id)`` cut to 63 bits, so that
  removing one record never renumbers another and two nodes may both have a record ``"17"``. A clash inside
  one federation is refused at registration. The key is the store's own (drawn when training creates it,
  kept in its manifest's ``record-ids``, handed to the nodes in the registration query): the ledger's log
  holds sample ids, and without the key a guessed record id cannot be matched against them. Stores written
  before the key have no ``record-ids`` and keep their unkeyed ``sha256(node, record id)``.

A public set's row number stays the sample id: the row is the public data set's, so keying it would hide
nothing a reader of the log could not find by reading that public set.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from typing import Any

from fedforget.core.ids import QUOTED_CHARS

#: How a record's sample id is derived, as the manifest names it per node.
PUBLIC_RECORDS = "public"  # the shipped task's row number
LOCAL_RECORDS = "local"  # hmac-sha256(store key, node, record id) >> 1 (sha256 without a key: older stores)
#: The manifest field naming how a node's own records are keyed: ``{"scheme": KEYED, "key": hex}``; absent
#: on stores written before keyed ids (their ids are the unkeyed sha256).
RECORD_IDS = "record-ids"
KEYED = "hmac-sha256"
_KEY = re.compile(r"[0-9a-f]{64}")

NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: Longest record id accepted (characters); ids are printable text without control characters.
MAX_RECORD_ID = 256


def default_node_name(partition: int) -> str:
    """The name of a node whose node config names none."""
    return f"node-{partition}"


def check_node_name(name: str) -> str:
    """``name`` if it is a valid node name; ValueError with one line otherwise."""
    if not NODE_NAME.fullmatch(name):
        raise ValueError(f"node name {name[:QUOTED_CHARS]!r} must be 1-64 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    return name


def check_record_id(record_id: str) -> str:
    """``record_id`` if it is a usable record id; ValueError with one line otherwise."""
    if not record_id:
        raise ValueError("a record id is empty")
    if len(record_id) > MAX_RECORD_ID:
        raise ValueError(f"record id {record_id[:QUOTED_CHARS]!r}… is longer than {MAX_RECORD_ID} characters")
    if not record_id.isprintable():
        raise ValueError(f"record id {record_id[:QUOTED_CHARS]!r} holds control or non-printable characters")
    return record_id


def local_sample_id(node: str, record_id: str, key: str | None = None) -> int:
    """The ledger's sample id of a node-owned record: the first 63 bits of hmac-sha256(key, node, record id),
    or of sha256(node, record id) for a store without a key (``key=None``)."""
    message = b"fedforget-record\0" + node.encode() + b"\0" + record_id.encode()
    digest = (hashlib.sha256(message) if key is None else hmac.new(bytes.fromhex(key), message, hashlib.sha256))
    return int.from_bytes(digest.digest()[:8], "big") >> 1


def draw_record_key() -> str:
    """A fresh store's record key: 32 random bytes, hex."""
    return secrets.token_hex(32)


def check_record_key(key: Any) -> str:
    """``key`` if it is a record key (64 lowercase hex digits); ValueError with one line otherwise."""
    if not (isinstance(key, str) and _KEY.fullmatch(key)):
        raise ValueError("a record key is 64 lowercase hex digits")
    return key


def record_ids_field(key: str) -> dict[str, str]:
    """The manifest's ``record-ids`` of a store whose nodes' records are keyed with ``key``."""
    return {"scheme": KEYED, "key": check_record_key(key)}


def store_record_key(manifest: Mapping[str, Any]) -> str | None:
    """The record key of a store (None: its ids are unkeyed); ValueError when ``record-ids`` is not one."""
    field = manifest.get(RECORD_IDS)
    if field is None:
        return None
    if not (isinstance(field, dict) and set(field) == {"scheme", "key"} and field["scheme"] == KEYED):
        raise ValueError(f"the manifest's {RECORD_IDS} is not {{'scheme': '{KEYED}', 'key': HEX}}")
    try:
        return check_record_key(field["key"])
    except ValueError as exc:
        raise ValueError(f"the manifest's {RECORD_IDS}: {exc}") from None


def parse_record(text: str) -> tuple[str, str]:
    """``NODE:RECORD_ID`` as (node, record id), split at the first colon; ValueError with one line otherwise."""
    node, sep, record_id = text.partition(":")
    if not sep:
        raise ValueError(f"record {text[:QUOTED_CHARS]!r} is not NODE:RECORD_ID (for example node-0:17)")
    return check_node_name(node), check_record_id(record_id)
