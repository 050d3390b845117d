"""Records as their owners know them: ``NODE:RECORD_ID``, and the sample id the ledger keeps for one.

A node names itself in its node config (``node-name``, by default ``node-<partition-id>``) and its records
by the ids in its own data. The ledger indexes integer sample ids, so each record gets one that every side
computes alone, with no table to exchange or keep in step:

- the shipped tasks' public sets already number their rows: a record id there *is* the sample id, written
  in digits (``node-0:17`` is sample 17);
- a node's own data (``data-dir``) gets ``sha256(node, record id)`` cut to 63 bits, so that removing one
  record never renumbers another and two nodes may both have a record ``"17"``. A clash inside one
  federation is refused at registration.
"""

from __future__ import annotations

import hashlib
import re

from fedforget.core.ids import QUOTED_CHARS

#: How a record's sample id is derived, as the manifest names it per node.
PUBLIC_RECORDS = "public"  # the shipped task's row number
LOCAL_RECORDS = "local"  # sha256(node, record id) >> 1

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


def local_sample_id(node: str, record_id: str) -> int:
    """The ledger's sample id of a node-owned record: the first 63 bits of sha256(node, record id)."""
    digest = hashlib.sha256(b"fedforget-record\0" + node.encode() + b"\0" + record_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def parse_record(text: str) -> tuple[str, str]:
    """``NODE:RECORD_ID`` as (node, record id), split at the first colon; ValueError with one line otherwise."""
    node, sep, record_id = text.partition(":")
    if not sep:
        raise ValueError(f"record {text[:QUOTED_CHARS]!r} is not NODE:RECORD_ID (for example node-0:17)")
    return check_node_name(node), check_record_id(record_id)
