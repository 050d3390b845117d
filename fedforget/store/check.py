"""Does a store agree with itself? The invariants a crash, a corrupt disk, a concurrent writer or a hand
edit must never break, checked from the files alone: every command that opens a store runs this first
(``fedforget.unlearning.cli.open_store``), and so do the crash campaigns.

- the manifest parses, names a known task, and says what training recorded in the ledger (its
  identity fingerprint; stores written before the fingerprint existed skip this comparison); its
  ``nodes`` table, when present, names each partition of its plan once (``fedforget.store.records``);
- the ledger is a sound SQLite file holding the fedforget tables (``PRAGMA integrity_check`` of every table,
  ``quick_check`` of the forgotten rows;
  the sample index, linear in the data set, is walked page by page instead, see ``UNCHECKED_TABLES``);
- every request is whole: each sample it names is forgotten by it or an earlier request, and its
  recorded sample count matches its ``forgotten`` rows (applied, never half);
- the sample index (``units``, ``samples``, ``forgotten``) says what the manifest's plan and the requests'
  specs say (``fedforget.store.index_check``): a sample moved to another unit would make a request
  invalidate the wrong artifacts while everything else above still holds;
- no valid artifact has seen data forgotten after it was trained (its watermark);
- every served artifact is valid and its bytes match its sha256;
- every artifact's sha256 is the one its training recorded last (``history``), and its file is the
  file of *that* artifact (its safetensors header names it), so pointing one artifact's row at another
  file is caught even though the bytes match the sha256;
- the stored backbone copy's bytes match the sha256 recorded when training wrote it, and so do the initial
  arrays' a run was handed to start from (``fedforget.store.initial_arrays``: a retrain starts from them);
- every artifact the ledger records is an artifact of the plan, stored on disk;
- the ledger keeps the log the store was created with (a manifest with a ``store-id``: never one adopted
  again over its tables), and every receipt in ``receipts/`` is borne out by the ledger and its log
  (``fedforget.store.check_receipts``);
- ``service.db``, when the forget service made one, says who asked for each request what the ledger's log
  recorded (``fedforget.store.service_evidence``);
- ``metrics.jsonl`` is UTF-8 text.

The ledger is read inside one read transaction: a concurrent ``forget`` either committed before the
check began (and is seen whole) or waits for it to end, so a request in flight is never mistaken for a
half-applied one, and its purge cannot delete a file the check is about to hash. The check never
raises on garbage: every unreadable file becomes a problem line.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedforget.store.index_check import index_problems
from fedforget.store.initial_arrays import KIND as INITIAL_ARRAYS_KIND
from fedforget.store.initial_arrays import initial_arrays_problem
from fedforget.store.ledger import LEDGER, Ledger
from fedforget.store.store import (
    ARTIFACTS,
    MANIFEST_DIGEST,
    METADATA_KEY,
    METRICS,
    Store,
    StoreError,
    safetensors_metadata,
)

#: What every refusal tells the operator to do about a store that is not what it claims.
REMEDY = "restore the store from a backup, or re-run training into a new store"
#: Tables only walked, not quick-checked: the sample index is linear in the data set (quick_check of 10⁶
#: samples takes seconds, a walk of its pages milliseconds). Garbage inside a cell that still parses fails
#: the first query that reads it, reported as :func:`corrupt_ledger` says.
UNCHECKED_TABLES = frozenset({"samples"})
#: Tables given SQLite's quick_check only: the other tables get ``integrity_check``, which also compares each
#: index with its table (eight times quick_check's cost: over a second for 10⁶ forgotten rows). Their contents
#: are compared with the manifest and the requests instead (``fedforget.store.index_check``).
QUICK_ONLY_TABLES = frozenset({"forgotten"})
#: A problem quotes what it found (an id, a path); a hand-edited cell may be huge, the line stays short.
MAX_PROBLEM_CHARS = 400


@dataclass
class StoreCheck:
    problems: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    leftover_temp_files: int = 0
    #: problems a retrain repairs (a served artifact's file damaged: it is never served, retrain rebuilds it)
    repairable: list[str] = field(default_factory=list)
    #: the manifest or ledger cannot be read as a store's at all (not JSON, not SQLite, missing): the path
    #: given is probably not a finished run, which the user fixes (exit 2), unlike a store that lies (exit 1)
    unreadable: list[str] = field(default_factory=list)
    #: the replay of the ledger's log the check made (None: no log, or the check stopped before it): the
    #: service continues it with only what is appended later (``fedforget.store.check_changes``)
    log: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def refusals(self) -> list[str]:
        """Problems no command may work around: the ledger, manifest or backbone copy is not what it claims."""
        return [p for p in self.problems if p not in self.repairable]

    def summary(self) -> str:
        """One line naming the first refusal and how many there are, with what to do."""
        if self.unreadable:
            return self.unreadable[0]
        first, more = self.refusals[0][:MAX_PROBLEM_CHARS], len(self.refusals) - 1
        return (f"the store is not what it claims: {first}" + (f" (and {more} more problem(s))" if more else "")
                + f"; {REMEDY}")

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems, "corrupt": self.corrupt,
                "leftover-temp-files": self.leftover_temp_files}


def corrupt_ledger(exc: sqlite3.DatabaseError) -> str:
    """The one line for a ledger page found corrupt while a command reads it."""
    return f"the store is not what it claims: {LEDGER} is corrupt ({str(exc)[:200]}); {REMEDY}"


def corrupt_artifacts(store: Store, ledger: Ledger) -> set[str]:
    """Recorded artifacts whose file is missing or whose bytes no longer match their sha256 (a purged
    artifact's file is gone on purpose: it is not corrupt)."""
    from fedforget.store.purge import purged_artifacts

    gone = purged_artifacts(ledger.db)
    return {a["artifact"] for a in ledger.artifacts() if a["artifact"] not in gone and
            not store.verify_artifact(a["sha256"])}


def check_store(store: Store) -> StoreCheck:
    """Every invariant above; problems are one-line strings, never exceptions."""
    out = StoreCheck()
    manifest = _check_manifest(store, out)
    if manifest is not None and manifest.get("store-id") is not None and _log_dropped(store):
        out.problems += lost_log_problems(None)  # before opening it: opening would add the missing tables
        return out
    try:
        ledger = store.ledger()
    except StoreError as exc:
        out.problems.append(str(exc))
        out.unreadable.append(str(exc))
        return out
    try:
        with ledger.snapshot():
            _check_ledger(store, ledger, manifest, out)
    except sqlite3.DatabaseError as exc:
        out.problems.append(f"{ledger.path.name} is corrupt ({exc})")
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:  # a cell edited by hand
        out.problems.append(f"{ledger.path.name} holds a malformed record ({type(exc).__name__}: {str(exc)[:200]})")
    finally:
        ledger.close()
    _check_metrics(store, out)
    try:
        out.leftover_temp_files = sum(1 for _ in (store.root / ARTIFACTS).glob(".*.tmp"))
    except OSError:
        pass
    return out


def _check_manifest(store: Store, out: StoreCheck) -> dict[str, Any] | None:
    """The parsed manifest when it is a fedforget manifest whose run config parses, else None."""
    from fedforget.core.config import parse_run_config, stored_run_config

    try:
        manifest = store.manifest()
    except StoreError as exc:
        out.problems.append(str(exc))
        out.unreadable.append(str(exc))
        return None
    config = manifest.get("config")
    if config is None:  # created, not yet trained: nothing more to hold it to
        return manifest
    try:
        if not isinstance(config, dict):
            raise ValueError("its config is not a table")
        cfg = parse_run_config(stored_run_config(config), warn=False)
        if "task" in manifest and manifest["task"] != cfg.task:
            raise ValueError(f"its task {manifest['task']!r} is not its config's task {cfg.task!r}")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        out.problems.append(f"{store.root / 'manifest.json'} does not describe a run: {str(exc)[:300]}")
        return None
    if "nodes" in manifest and "partitions" in manifest:
        from fedforget.store.records import store_nodes

        try:
            store_nodes(manifest)
        except ValueError as exc:  # NodesError, or a plan the index check names too
            out.problems.append(f"{store.root / 'manifest.json'} does not describe a run: {str(exc)[:300]}")
    return manifest


def _check_ledger(store: Store, ledger: Ledger, manifest: dict[str, Any] | None, out: StoreCheck) -> None:
    db = ledger.db
    problem = sound_tables(db)
    if problem:
        out.problems.append(f"{ledger.path.name} is corrupt ({problem})")
        return
    if manifest is not None:
        recorded = ledger.get_meta("manifest-identity")
        if recorded is not None and recorded != store.manifest_identity(manifest):
            out.problems.append("manifest.json was edited after training: its task, config, partitions, nodes or "
                                "backbone no longer match what the ledger recorded")
        else:
            whole = ledger.get_meta(MANIFEST_DIGEST)
            if isinstance(whole, list) and store.manifest_digest(manifest) not in whole:
                out.problems.append("manifest.json was edited after its run wrote it: it no longer matches the "
                                    "digest the ledger recorded")
        _check_backbone(store, manifest, out)
        started = initial_arrays_problem(store, manifest)
        if started:
            out.problems.append(started)
    check_artifact_rows(store, ledger, out)
    counts = dict(db.execute("SELECT request, COUNT(*) FROM forgotten GROUP BY request").fetchall())
    check_requests(db, out, counts)
    check_serving(store, ledger, out)
    if manifest is not None:
        out.problems += index_problems(db, manifest)
    problems, out.log = ledger_log_check(store, db)
    if manifest is not None and manifest.get("store-id") is not None:
        problems = lost_log_problems(db) + problems
    out.problems += problems  # after the checks that name what an edit broke
    if out.log is not None:
        out.problems += service_problems(store, out.log)


def _log_dropped(store: Store) -> bool:
    """Whether the ledger file lacks the log's tables (read-only: nothing is created to find out)."""
    try:
        db = sqlite3.connect(f"{(store.root / LEDGER).absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError:
        return False  # not a ledger: the check says what
    finally:
        db.close()
    return "requests" in have and not {"log", "log_heads", "log_state"} <= have


def lost_log_problems(db: sqlite3.Connection | None) -> list[str]:
    """A store whose manifest says it was created with a log (its ``store-id``) must still hold that log: one
    adopted over its tables (or none) would vouch for whatever they were edited to (``db`` None: its tables are
    gone)."""
    from fedforget.store.log import has_log

    if db is None or not has_log(db):
        return ["the ledger lost the log it was created with (its manifest has a store id): the tables it covered "
                "can no longer be checked"]
    if db.execute("SELECT 1 FROM log_state WHERE key='adopted'").fetchone() is not None:
        return ["the ledger's log adopted the store's tables, but the store was created with a log (its manifest "
                "has a store id): the log it was created with was replaced"]
    return []


def service_problems(store: Store, log: Any) -> list[str]:
    """``service.db`` says what the log's ``via`` fields say (``fedforget.store.service_evidence``); inside the
    caller's read transaction on the ledger."""
    from fedforget.store.service_evidence import evidence_problems

    return evidence_problems(store.root, log.vias, log.started if log.adopted else None, log.log_id)


def trusted_key() -> Callable[[bytes], bool] | None:
    """Whether a head's key is the coordinator's, as this process's signer knows (None: it cannot tell)."""
    from fedforget.store.log import head_signer

    signer = head_signer()
    if signer is None:
        return None

    def trusted(public: bytes) -> bool:
        return signer.trusts(public) is not False
    return trusted


def ledger_log_problems(store: Store, db: sqlite3.Connection) -> list[str]:
    """The log and every table it covers agree (``fedforget.store.log_check``), and the log is the one the
    coordinator last signed for this store (``fedforget.store.log_record``) and still holds what the head in its
    newest receipt signed (``fedforget.store.log_proof``)."""
    return ledger_log_check(store, db)[0]


def ledger_log_check(store: Store, db: sqlite3.Connection) -> tuple[list[str], Any]:
    """:func:`ledger_log_problems`, and the log's replay when it was read whole and sound (else None)."""
    from fedforget.store.log import has_log
    from fedforget.store.log_check import log_problems
    from fedforget.store.log_proof import ROLLED_BACK_PAST_RECEIPT, newest_receipt_head
    from fedforget.store.log_record import record_problems, recorded_size

    recorded = recorded_size(store.root)
    receipt = newest_receipt_head(store.root)
    if not has_log(db):
        return record_problems(store.root, None, 0, {}, has_log=False) + (
            [] if receipt is None else [ROLLED_BACK_PAST_RECEIPT + ": the ledger has no log"]), None
    sizes = ({recorded} if recorded else set()) | ({receipt["size"]} if receipt else set())
    problems, log = log_problems(db, trusted_key(), extra_sizes=sizes)
    problems += record_problems(store.root, log.log_id, log.size, log.roots, has_log=True)
    if receipt is not None and not problems and receipt.get("log") == log.log_id and \
            log.roots.get(receipt["size"]) != receipt["root"]:  # one of another log is named below
        why = "" if log.size < receipt["size"] else f" whose first {receipt['size']} give another root"
        problems.append(f"{ROLLED_BACK_PAST_RECEIPT}: the receipt's head signed {receipt['size']} entries, the "
                        f"ledger's log holds {log.size}{why}")
    if not problems:
        from fedforget.store.check_receipts import receipt_problems

        problems += receipt_problems(store.root, db, log)
    return problems, None if problems else log


def sound_tables(db: sqlite3.Connection) -> str | None:
    """SQLite's own check of every table (the sample index walked instead, see ``UNCHECKED_TABLES``)."""
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    for table in tables:
        if table in UNCHECKED_TABLES:
            problem = _walk(db, table)
        else:
            pragma = "quick_check" if table in QUICK_ONLY_TABLES else "integrity_check"
            sound = db.execute(f"PRAGMA {pragma}({_quoted(table)})").fetchone()
            said = " ".join(str(sound[0]).split()) if sound else "no answer"
            problem = None if said == "ok" else f"SQLite {pragma} of {table}: {said[:200]}"
        if problem:
            return problem
    return None


def check_artifact_rows(store: Store, ledger: Ledger, out: StoreCheck) -> None:
    """Each artifact's sha256 and watermark are the ones its training wrote last (a raised watermark would hide
    the forgotten data it saw from the validity check); which recorded files are corrupt."""
    last = "(SELECT h.{0} FROM history h WHERE h.artifact = a.artifact ORDER BY h.rowid DESC LIMIT 1)"
    rewritten = ledger.db.execute(
        f"SELECT a.artifact, a.sha256 != {last.format('sha256')}, a.watermark != {last.format('watermark')} "
        "FROM artifacts a ORDER BY a.artifact").fetchall()
    out.problems += [f"artifact {a} records a sha256 its training never wrote (its history says otherwise)"
                     for (a, sha, _) in rewritten if sha]
    out.problems += [f"artifact {a} records a watermark its training never wrote (its history says otherwise)"
                     for (a, sha, mark) in rewritten if mark and not sha]
    out.corrupt = sorted(corrupt_artifacts(store, ledger))


def check_requests(db: sqlite3.Connection, out: StoreCheck, forgotten_rows: dict[int, int], after: int = 0) -> None:
    """Every request with an id above ``after`` is whole: its ``forgotten`` rows (``forgotten_rows``, request →
    rows) number what it recorded, and each sample it names is forgotten by it or an earlier request."""
    for rid, spec, count in db.execute("SELECT id, spec, samples FROM requests WHERE id > ? ORDER BY id",
                                       (after,)).fetchall():
        rows = forgotten_rows.get(rid, 0)
        if rows != count:
            out.problems.append(f"request {rid} is half applied: {rows} forgotten rows, {count} recorded")
        named = json.loads(spec).get("samples", [])
        for sample in named:
            hit = db.execute("SELECT request FROM forgotten WHERE sample=?", (sample,)).fetchone()
            if hit is None or hit[0] > rid:
                out.problems.append(f"request {rid} names sample {sample}, which is not forgotten")
                break


def check_serving(store: Store, ledger: Ledger, out: StoreCheck) -> None:
    """No valid artifact saw data forgotten after it was trained; what is served is valid and intact; every
    artifact's file is its own; every recorded artifact belongs to the plan."""
    db = ledger.db
    stale = db.execute(
        "SELECT DISTINCT a.artifact FROM artifacts a JOIN lineage l ON l.artifact = a.artifact "
        "JOIN forgotten f ON f.unit = l.unit WHERE a.valid = 1 AND f.request > a.watermark").fetchall()
    out.problems += [f"artifact {a} is valid but saw forgotten data" for (a,) in stale]
    valid = ledger.valid_artifacts()
    served = set(ledger.serving().get("artifacts", []))
    out.problems += [f"served artifact {a} is not valid" for a in sorted(served - valid)]
    damaged = [f"served artifact {a} is corrupt or missing" for a in sorted(served & set(out.corrupt))]
    out.problems += damaged
    out.repairable += damaged
    out.problems += _misfiled_artifacts(store, ledger, set(out.corrupt))
    plan = ledger.plan()
    if plan is not None:
        known = _plan_artifacts(plan)
        if known is not None:
            recorded = {a["artifact"] for a in ledger.artifacts()}
            out.problems += [f"artifact {a} is not in the plan" for a in sorted(recorded - known)]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _walk(db: sqlite3.Connection, table: str) -> str | None:
    """Walk every page of a table's b-tree and of each of its indexes (a count reads page headers only:
    milliseconds per 10⁶ rows, where quick_check takes seconds); they must hold as many rows."""
    rows = db.execute(f"SELECT COUNT(*) FROM {_quoted(table)} NOT INDEXED").fetchone()[0]
    indexes = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name=?",
                                        (table,)) if not str(r[0]).startswith("sqlite_")]
    for index in indexes:
        held = db.execute(f"SELECT COUNT(*) FROM {_quoted(table)} INDEXED BY {_quoted(index)}").fetchone()[0]
        if held != rows:
            return f"index {index} holds {held} rows of {table}'s {rows}"
    return None


def _misfiled_artifacts(store: Store, ledger: Ledger, corrupt: set[str]) -> list[str]:
    """Artifacts whose recorded sha256 names an intact file written for another artifact."""
    from fedforget.store.purge import purged_artifacts

    gone = purged_artifacts(ledger.db) | corrupt
    out = []
    for a in ledger.artifacts():
        if a["artifact"] in gone:
            continue
        owner = _owner(store, a["sha256"])
        if owner is not None and owner != a["artifact"]:
            out.append(f"artifact {a['artifact']} is recorded with the file of {owner}")
    return out


def _owner(store: Store, sha256: str) -> str | None:
    """The artifact id a file's safetensors header names (None when it names none)."""
    meta = safetensors_metadata(store.artifact_path(sha256)) or {}
    try:
        written = json.loads(meta.get(METADATA_KEY, "{}"))
        if written.get("kind") == "backbone":
            return "the backbone copy"
        if written.get("kind") == INITIAL_ARRAYS_KIND:
            return "the initial arrays"
        owner = written.get("artifact")
    except (ValueError, AttributeError):
        return "an unreadable header"
    return owner if owner is None else str(owner)


def _check_backbone(store: Store, manifest: dict[str, Any], out: StoreCheck) -> None:
    """The backbone copy training stored is named by its sha256 (recorded in the manifest when written)."""
    backbone = manifest.get("backbone")
    sha = backbone.get("artifact") if isinstance(backbone, dict) else None
    if not sha:
        return  # a pretrained backbone from the machine's cache: no copy in the store
    if not isinstance(sha, str) or not store.verify_artifact(sha):
        out.problems.append(f"the stored backbone copy {str(sha)[:16]}… is corrupt or missing (its bytes no "
                            "longer match the sha256 recorded when training wrote it)")
        return
    meta = safetensors_metadata(store.artifact_path(sha)) or {}
    try:
        kind = json.loads(meta.get(METADATA_KEY, "{}")).get("kind")
    except (ValueError, AttributeError):
        kind = None
    if kind != "backbone":
        out.problems.append(f"the manifest's backbone copy {sha[:16]}… is not a backbone file")


def _check_metrics(store: Store, out: StoreCheck) -> None:
    try:
        (store.root / METRICS).read_bytes().decode("utf-8")
    except FileNotFoundError:
        return
    except OSError as exc:
        out.problems.append(f"{store.root / METRICS} is unreadable ({exc.strerror or exc})")
    except UnicodeDecodeError:
        out.problems.append(f"{store.root / METRICS} is not UTF-8 text")


def _plan_artifacts(plan: dict[str, Any]) -> set[str] | None:
    """Every artifact id the plan can produce, as its method declares (None: not known)."""
    from fedforget.core.known_methods import for_plan

    entry = for_plan(plan.get("kind"))
    return entry.plan_artifacts(plan) if entry is not None and entry.plan_artifacts else None
