"""``fedforget log export`` and ``fedforget log verify``: the ledger's log checked by a third party, with the
coordinator's public key alone, on a copy of the log, without the store's artifacts or its tables.

An export is JSON lines: a header (``format``, ``log``, ``entries``, ``heads``), one line per entry
(``seq``, ``leaf``, ``entry``: its canonical text) and one per signed head (``head``). Verifying replays the
entries (each is whole, in order and chained to the one before: ``fedforget.store.log_check.replay``), checks
every head's root against the entries under it and its signature against the given key, and checks each
receipt given: its signature, its inclusion proof against its own head (:func:`receipt_proof`, which
``fedforget receipt --check`` runs too), and that its head is this log's: the log's first ``size`` entries give
the head's root, so the log only grew since the receipt was issued.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedforget.store.bounded_read import read_bounded
from fedforget.store.log import COORDINATOR_KINDS, HEAD_FORMAT, canonical
from fedforget.store.log_check import Replay, _signed, replay
from fedforget.store.log_proof import LOG_FIELD
from fedforget.store.merkle import leaf_hash, verify_inclusion

EXPORT_FORMAT = "fedforget-log-export/1"
#: An export holds the log's entries (an adopted store's genesis holds its rows as they were); far below this.
MAX_EXPORT_BYTES = 512 * 2**20
#: No tree this log can grow to needs a longer audit path.
MAX_PROOF = 64


class LogInputError(ValueError):
    """The input is not a log (or not a receipt): the user must fix what they passed (exit 2)."""


class LogProofError(ValueError):
    """A proof failed: the log, a head or a receipt is not what it claims (exit 1)."""


@dataclass
class LogCopy:
    """A log as read from an export or a store: ``(seq, entry text, stored leaf hex)`` and the signed heads."""

    entries: list[tuple[int, str, str]] = field(default_factory=list)
    heads: list[dict[str, Any]] = field(default_factory=list)


# -- reading -----------------------------------------------------------------------------------
def store_log(db: sqlite3.Connection) -> LogCopy:
    """The log of an open ledger (inside the caller's read snapshot)."""
    entries = [(int(s), str(e), str(lf)) for s, e, lf in db.execute("SELECT seq, entry, leaf FROM log ORDER BY seq")]
    heads = []
    for size, text in db.execute("SELECT size, head FROM log_heads ORDER BY size"):
        try:
            head = json.loads(text)
        except ValueError:
            head = None
        heads.append(head if isinstance(head, dict) else {"size": size, "unreadable": True})
    return LogCopy(entries, heads)


def read_store(root: Path) -> LogCopy:
    """The log of the store at ``root``, read through a read-only connection (nothing is written or adopted)."""
    path = Path(root) / "ledger.sqlite"
    if not path.is_file():
        raise LogInputError(f"{root} is not a store (no ledger.sqlite); pass the store directory or --log FILE")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise LogInputError(f"cannot open {path}: {exc}") from None
    try:
        db.execute("BEGIN")
        if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='log'").fetchone() is None:
            raise LogInputError(f"the store {root} has no log yet: any writing command (`fedforget log sign --store "
                                f"{root}`) starts one")
        return store_log(db)
    except sqlite3.DatabaseError as exc:
        raise LogInputError(f"cannot read the log of {root}: {exc}") from None
    finally:
        db.close()


def export_bytes(log: LogCopy) -> bytes:
    """The export of ``log``: what :func:`parse_export` reads back."""
    log_id = log.entries[0][2] if log.entries else None
    lines = [{"format": EXPORT_FORMAT, "log": log_id, "entries": len(log.entries), "heads": len(log.heads)}]
    lines += [{"seq": s, "leaf": leaf, "entry": text} for s, text, leaf in log.entries]
    lines += [{"head": head} for head in log.heads]
    return "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")


def parse_export(data: bytes, name: str) -> LogCopy:
    """An export's entries and heads; :class:`LogInputError` when it is not one."""
    try:
        lines = data.decode("utf-8").splitlines()
        header = json.loads(lines[0]) if lines else None
    except (UnicodeDecodeError, ValueError):
        header = None
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise LogInputError(f"{name} is not a log export ({EXPORT_FORMAT}); make one with `fedforget log export "
                            "--store S --out FILE`")
    out = LogCopy()
    for number, line in enumerate(lines[1:], start=2):
        try:
            item = json.loads(line)
        except ValueError:
            raise LogInputError(f"{name} line {number} is not JSON: it is not a log export") from None
        if isinstance(item, dict) and set(item) == {"seq", "leaf", "entry"} and isinstance(item["seq"], int) \
                and isinstance(item["leaf"], str) and isinstance(item["entry"], str) and not out.heads:
            out.entries.append((item["seq"], item["entry"], item["leaf"]))
        elif isinstance(item, dict) and set(item) == {"head"} and isinstance(item["head"], dict):
            out.heads.append(item["head"])
        else:
            raise LogInputError(f"{name} line {number} is neither an entry nor a head: it is not a log export")
    if header.get("entries") != len(out.entries) or header.get("heads") != len(out.heads):
        raise LogProofError(f"{name} holds {len(out.entries)} entries and {len(out.heads)} heads, its header says "
                            f"{header.get('entries')} and {header.get('heads')}: it was cut or extended")
    return out


def read_export(path: Path) -> LogCopy:
    return parse_export(read_bounded(path, MAX_EXPORT_BYTES, "log export"), str(path))


# -- a receipt's proof, standalone -------------------------------------------------------------
def _hex32(value: Any) -> bytes:
    if not isinstance(value, str) or len(value) != 64:
        raise ValueError("not a sha256")
    return bytes.fromhex(value)


def head_problem(head: Any, public: bytes | frozenset[bytes]) -> str | None:
    """Why ``head`` is not a head signed by ``public`` (or one of those keys) (None: it is)."""
    keys = public if isinstance(public, frozenset) else frozenset({public})
    if not isinstance(head, dict) or head.get("format") != HEAD_FORMAT or not isinstance(head.get("size"), int) \
            or head["size"] < 1 or not isinstance(head.get("log"), str) or not isinstance(head.get("root"), str):
        return "is not a log head"
    if not _signed(head, lambda key: key in keys):
        return "is not signed by the key it is checked against"
    return None


def receipt_proof(body: dict[str, Any], public: bytes) -> dict[str, Any] | None:
    """Check a signed receipt's ``log`` section with the public key alone: its head is signed by ``public``, its
    entry hashes to its leaf, the proof puts that leaf at its position under the head's root, and the entry is
    the ``forget`` entry of the receipt's request with the spec the receipt states. Returns what it proved
    (None: the receipt carries no log section); raises :class:`LogProofError` naming what failed."""
    section = body.get(LOG_FIELD)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise LogProofError("its log section is not one")
    head = section.get("head")
    problem = head_problem(head, public)
    if problem:
        raise LogProofError(f"the log head it was issued under {problem}")
    proved = {"log": head["log"], "size": head["size"], "root": head["root"], "entry": section.get("entry")}
    if section.get("entry") is None:
        return proved  # the request predates the log: the head still pins the log it was issued under
    seq, text, proof = section.get("entry"), section.get("text"), section.get("proof")
    try:
        if not isinstance(seq, int) or not isinstance(text, str) or not isinstance(proof, list) \
                or len(proof) > MAX_PROOF:
            raise ValueError("malformed")
        leaf, path, root = _hex32(section.get("leaf")), [_hex32(p) for p in proof], _hex32(head["root"])
    except ValueError:
        raise LogProofError("its log section is malformed (entry, text, leaf, proof)") from None
    if leaf_hash(text.encode("utf-8")) != leaf:
        raise LogProofError(f"its log entry {seq} does not hash to the leaf it names: the entry was edited")
    if not verify_inclusion(seq, head["size"], leaf, path, root):
        raise LogProofError(f"its inclusion proof does not put entry {seq} under the signed head of {head['size']} "
                            "entries")
    try:
        entry = json.loads(text)
        ok = isinstance(entry, dict) and canonical(entry) == text.encode("utf-8")
    except ValueError:
        ok = False
    request = body.get("request") or {}
    if not ok or entry.get("kind") != "forget" or entry.get("seq") != seq or entry.get("request") != request.get("id"):
        raise LogProofError(f"its log entry {seq} is not the forget entry of request #{request.get('id')}")
    specs = [json.loads(r[2][3]) for r in entry.get("rows") or [] if isinstance(r, list) and len(r) == 3
             and r[:2] == ["requests", "+"] and isinstance(r[2], list) and len(r[2]) > 3 and r[2][0] == request["id"]]
    if request.get("spec") not in specs:
        raise LogProofError(f"its request's spec is not the one its log entry {seq} recorded")
    return proved


# -- a whole log -------------------------------------------------------------------------------
@dataclass
class Checked:
    """What :func:`verify_log` proved."""

    log: str | None
    entries: int
    heads: int
    signed: int
    receipts: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"valid": True, "log": self.log, "entries": self.entries, "heads": self.heads,
                "signed_entries": self.signed, "unsigned_entries": self.entries - self.signed,
                "receipts": self.receipts}


def verify_log(log: LogCopy, public: bytes | frozenset[bytes],
               receipts: list[tuple[str, dict[str, Any], bytes]] = ()) -> Checked:
    """Check ``log`` and the receipts ``(name, body, the key its signature was checked with)`` against it with
    ``public`` alone (several keys: the coordinator's before and after a rotation; a receipt's head must be
    signed by the receipt's own key); raises :class:`LogProofError` on the first failed proof."""
    proved = []
    for name, body, signer in receipts:
        try:
            got = receipt_proof(body, signer)
        except LogProofError as exc:
            raise LogProofError(f"receipt {name}: {exc}") from None
        if got is None:
            raise LogProofError(f"receipt {name} carries no log proof; issue it again (`fedforget receipt "
                                f"{body['request']['id']} --store S`) to have one")
        proved.append((name, body["request"]["id"], got))
    sizes = {h["size"] for h in log.heads if isinstance(h.get("size"), int)} | {p["size"] for _, _, p in proved}
    problems: list[str] = []
    done = replay(iter(log.entries), sizes, problems, Replay())
    if problems:
        raise LogProofError(problems[0].replace("the ledger's log", "the log"))
    if not log.entries:
        raise LogProofError("the log holds no entries")
    newest = 0
    for head in log.heads:
        problem = head_problem(head, public)
        if problem:
            raise LogProofError(f"the log's head at {head.get('size')} entries {problem}")
        if head["log"] != done.log_id:
            raise LogProofError(f"the log's head at {head['size']} entries names another log")
        if head["size"] > done.size:
            raise LogProofError(f"the log was cut back: a signed head covers {head['size']} entries, it holds "
                                f"{done.size}")
        if done.roots.get(head["size"]) != head["root"]:
            raise LogProofError(f"the log's first {head['size']} entries are not the ones its head signed")
        newest = max(newest, head["size"])
    if newest == 0:
        raise LogProofError("no head of the log is signed: nothing in it is vouched for by the key")
    unsigned = sorted(done.signed_sizes - {h["size"] for h in log.heads})
    if unsigned:
        raise LogProofError(f"the log's entry {unsigned[0] - 1} says the coordinator wrote it, but no head the "
                            "coordinator signed follows it")
    late = [seq for seq, kind in done.kinds.items() if kind in COORDINATOR_KINDS and seq >= newest]
    if late:
        raise LogProofError(f"the log's entry {late[0]} ({done.kinds[late[0]]}) is under no signed head")
    out = []
    for name, request, got in proved:
        if got["log"] != done.log_id:
            raise LogProofError(f"receipt {name} was issued under another log than this one")
        if got["size"] > done.size:
            raise LogProofError(f"receipt {name} was issued under a head of {got['size']} entries; the log holds "
                                f"{done.size}: it was rolled back past the receipt")
        if done.roots.get(got["size"]) != got["root"]:
            raise LogProofError(f"the log's first {got['size']} entries are not the ones receipt {name}'s head "
                                "signed: the log was rewritten")
        inserted = done.requested.get(request)
        if got["entry"] is None and inserted != 0:
            raise LogProofError(f"receipt {name} says its request predates the log, but " + (
                "the log never recorded it" if inserted is None else f"the log's entry {inserted} recorded it"))
        if got["entry"] is not None and got["entry"] != inserted:
            raise LogProofError(f"receipt {name} proves entry {got['entry']}, but the entry that recorded request "
                                f"#{request} is " + ("none" if inserted is None else str(inserted)))
        out.append({"receipt": name, "request": request, "entry": got["entry"], "head_size": got["size"]})
    return Checked(done.log_id, done.size, len(log.heads), newest, out)
