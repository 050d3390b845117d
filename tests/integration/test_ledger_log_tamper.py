"""An attacker with write access to a store edits its ledger behind the coordinator's back, through a
connection of its own (so no log trigger sees it), or rewrites its files: every such edit is refused by every
command that reads the store, exit 1 with one line, and the refused commands write nothing.

The edits are generated, not picked: for every table of the ledger's schema, one cell of every column of a
row changed, a row deleted, a row copied with one value changed; for the log itself, an entry rewritten with
its hash recomputed (at the start, in the middle, at the end), deleted, swapped, the tail cut back cleanly
(frontier and heads made to match), the newest head deleted; the manifest's identity fields edited; the whole
store rolled back to a backup after a later forget was signed. A writer without the key appends entries the
way a run does: for every logged table, every insert, delete and change of a column the allow-list
(``fedforget.store.log_rules``) does not grant is refused by the whole check. Negative controls: an untouched
copy passes every command, and a store written before the log adopts one on its first command and passes
after it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fedforget.inprocess import run_in_process
from fedforget.store.ledger import SCHEMA
from fedforget.store.log_record import record_path
from fedforget.store.merkle import Frontier, leaf_hash
from fedforget.store.secret_files import SECRETS_ENV
from fedforget.store.store import IDENTITY_FIELDS, MANIFEST_DIGEST, REGISTERED_FIELDS

from .helpers import as_written_before_the_log, copy_store, invoke, train_in_process

LEDGER = "ledger.sqlite"
CHAINS = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2}


def schema_tables() -> dict[str, list[str]]:
    """Every table a ledger holds (as its schema creates it) → its columns, so a table added later is covered."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {n: [r[1] for r in db.execute(f'PRAGMA table_info("{n}")')] for n in names}
    finally:
        db.close()


TABLES = schema_tables()


@dataclass
class Signed:
    """A trained store the coordinator has forgotten from, and what it recorded about it outside the store."""

    path: Path
    record: dict[str, Any]
    unforgotten: int


@pytest.fixture(scope="module")
def secrets_env(tmp_path_factory):
    """One secrets directory (receipt key, outside head records) for the module's fixture and its tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRETS_ENV, str(tmp_path_factory.mktemp("secrets")))
        yield


@pytest.fixture(scope="module")
def signed(tmp_path_factory, secrets_env) -> Signed:
    """Training entries, a forget by sample, a retrain, a forget by record, their purges, a receipt, heads."""
    path = tmp_path_factory.mktemp("tamper-log") / "store"
    store = train_in_process(path, 3, **CHAINS)
    partitions = store.manifest()["partitions"]
    steps = [["forget", "--store", str(path), "--sample", str(partitions["1"][0][0])], "retrain",
             ["forget", "--store", str(path), "--record", f"node-2:{partitions['2'][0][0]}"],
             ["receipt", "1", "--store", str(path), "--no-verify"]]
    for argv in steps:
        if argv == "retrain":  # the ServerApp's retrain, in process
            run_in_process({**store.manifest()["config"], "store": str(path), "action": "retrain"}, 3)
            continue
        code, out, err = invoke(argv)
        assert code == 0, (argv, out[-2000:], err[-2000:])
    record = json.loads(record_path(path).read_text())
    return Signed(path, record, int(partitions["0"][0][0]))


def place(signed: Signed, path: Path, record: bool = True) -> Path:
    """A copy of the signed store at ``path``, with the coordinator's outside record of it (as if signed there)."""
    copy_store(signed.path, path.parent, path.name)
    if record:
        target = record_path(path)
        target.write_text(json.dumps({**signed.record, "store": str(path.resolve())}))
        target.chmod(0o600)
    return path


@pytest.fixture
def store(signed, tmp_path) -> Path:
    return place(signed, tmp_path / "store")


def commands(path: Path, sample: int) -> list[list[str]]:
    s = str(path)
    return [["status", "--store", s], ["samples", "--store", s, "--client", "0"],
            ["purge", "--store", s, "--check"], ["receipt", "1", "--store", s, "--no-verify"],
            ["forget", "--store", s, "--sample", str(sample)]]


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def assert_refused(path: Path, sample: int) -> None:
    """Every command exits 1 with one line saying the store is not what it claims, and writes nothing."""
    before = digest(path)
    for argv in commands(path, sample):
        code, out, err = invoke(argv)
        lines = err.strip().splitlines()
        assert code == 1, (argv, code, out[-500:], err[-2000:])
        assert len(lines) == 1 and lines[0].startswith("fedforget: error: the store is not what it claims"), \
            (argv, err[-2000:])
        assert digest(path) == before, argv


# -- edits, through a connection of the attacker's own ------------------------------------------------------
def connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path / LEDGER, isolation_level=None)


def changed(value: Any) -> list[Any]:
    """Values that differ from ``value``, most plausible first (a JSON cell stays JSON)."""
    if isinstance(value, bool) or isinstance(value, int):
        return [value + 1, value + 1_000_003, -value - 7]
    if isinstance(value, float):
        return [value + 1.5]
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except ValueError:
            return [value + "x", "x"]
        if isinstance(data, dict):
            return [json.dumps({**data, "tampered": 1}, sort_keys=True), value + "x"]
        if isinstance(data, list):
            return [json.dumps([*data, "tampered"]), value + "x"]
        return [json.dumps(data + 1) if isinstance(data, (int, float)) and not isinstance(data, bool)
                else json.dumps("tampered"), value + "x"]
    return ["x", 7]


def first_row(db: sqlite3.Connection, table: str, where: str = "1") -> tuple[str, tuple, list[str], tuple]:
    """The table's first row (matching ``where``): (WHERE clause, its parameters, column names, values)."""
    cols = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
    pk = [r[1] for r in sorted(db.execute(f'PRAGMA table_info("{table}")'), key=lambda r: r[5]) if r[5]]
    try:
        row = db.execute(f'SELECT rowid, * FROM "{table}" WHERE {where} ORDER BY rowid LIMIT 1').fetchone()
        assert row is not None, f"the fixture's store holds no row of {table}: the edits would be vacuous"
        return "rowid=?", (row[0],), cols, tuple(row[1:])
    except sqlite3.OperationalError:  # WITHOUT ROWID: its primary key names the row
        row = db.execute(f'SELECT * FROM "{table}" WHERE {where} ORDER BY {", ".join(pk)} LIMIT 1').fetchone()
        assert row is not None, f"the fixture's store holds no row of {table}: the edits would be vacuous"
        return " AND ".join(f'"{c}"=?' for c in pk), tuple(row[cols.index(c)] for c in pk), cols, tuple(row)


Edit = Callable[[sqlite3.Connection], None]


def behind_the_log(edit: Edit) -> Callable[[Path], None]:
    """``edit`` made through a connection of the attacker's own (no log trigger sees it)."""
    def apply(path: Path) -> None:
        db = connect(path)
        try:
            edit(db)
        finally:
            db.close()
    return apply


def update_cell(table: str, column: str, where: str = "1") -> Edit:
    def edit(db: sqlite3.Connection) -> None:
        row, args, cols, values = first_row(db, table, where)
        for value in changed(values[cols.index(column)]):
            try:
                db.execute(f'UPDATE "{table}" SET "{column}"=? WHERE {row}', (value, *args))
                return
            except sqlite3.IntegrityError:
                continue
        raise AssertionError(f"no value of {table}.{column} could be written")
    return edit


def delete_row(table: str) -> Edit:
    def edit(db: sqlite3.Connection) -> None:
        where, args, _, _ = first_row(db, table)
        assert db.execute(f'DELETE FROM "{table}" WHERE {where}', args).rowcount == 1
    return edit


def insert_copy(table: str) -> Edit:
    """A copy of the first row with one value changed (the first column whose change the table accepts)."""
    def edit(db: sqlite3.Connection) -> None:
        _, _, cols, values = first_row(db, table)
        for i, old in enumerate(values):
            for value in changed(old):
                row = list(values)
                row[i] = value
                try:
                    db.execute(f'INSERT INTO "{table}" VALUES({", ".join("?" * len(row))})', row)
                    return
                except sqlite3.IntegrityError:
                    continue
        raise AssertionError(f"no changed copy of a {table} row could be inserted")
    return edit


def log_rows(db: sqlite3.Connection) -> list[tuple[int, str, str]]:
    return db.execute("SELECT seq, entry, leaf FROM log ORDER BY seq").fetchall()


def fix_frontier(db: sqlite3.Connection) -> None:
    """The frontier of the log's stored leaves, as a careful attacker would leave it."""
    frontier = Frontier()
    for _, _, leaf in log_rows(db):
        frontier.append(bytes.fromhex(leaf))
    db.execute("UPDATE log_state SET value=? WHERE key='frontier'", (json.dumps(frontier.to_json()),))


def position(db: sqlite3.Connection, where: str) -> int:
    size = len(log_rows(db))
    return {"first": 0, "second": 1, "middle": size // 2, "next-to-last": size - 2, "last": size - 1}[where]


def rewrite_entry(where: str, rehash: bool = True) -> Callable[[Path], None]:
    """An entry's JSON edited (its time moved); with ``rehash`` its leaf and the frontier are recomputed."""
    def edit(path: Path) -> None:
        db = connect(path)
        try:
            seq = position(db, where)
            entry = json.loads(db.execute("SELECT entry FROM log WHERE seq=?", (seq,)).fetchone()[0])
            entry["at"] += 1.0
            text = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            db.execute("UPDATE log SET entry=? WHERE seq=?", (text, seq))
            if rehash:
                db.execute("UPDATE log SET leaf=? WHERE seq=?", (leaf_hash(text.encode()).hex(), seq))
                fix_frontier(db)
        finally:
            db.close()
    return edit


def delete_entry(where: str) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        db = connect(path)
        try:
            db.execute("DELETE FROM log WHERE seq=?", (position(db, where),))
            fix_frontier(db)
        finally:
            db.close()
    return edit


def swap_entries(a: str, b: str) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        db = connect(path)
        try:
            i, j = position(db, a), position(db, b)
            rows = {seq: (entry, leaf) for seq, entry, leaf in log_rows(db)}
            for seq, other in ((i, j), (j, i)):
                db.execute("UPDATE log SET entry=?, leaf=? WHERE seq=?", (*rows[other], seq))
            fix_frontier(db)
        finally:
            db.close()
    return edit


def truncate(k: int, heads: bool) -> Callable[[Path], None]:
    """The last ``k`` entries cut off cleanly: frontier recomputed, and (``heads``) the heads over them gone."""
    def edit(path: Path) -> None:
        db = connect(path)
        try:
            size = len(log_rows(db))
            db.execute("DELETE FROM log WHERE seq >= ?", (size - k,))
            if heads:
                db.execute("DELETE FROM log_heads WHERE size > ?", (size - k,))
            fix_frontier(db)
        finally:
            db.close()
    return edit


def delete_newest_head(path: Path) -> None:
    db = connect(path)
    try:
        db.execute("DELETE FROM log_heads WHERE size=(SELECT MAX(size) FROM log_heads)")
    finally:
        db.close()


def manifest_edit(key: str, repin: bool = False) -> Callable[[Path], None]:
    """The manifest's ``key`` changed; with ``repin`` the ledger's pins of the manifest rewritten to match."""
    def edit(path: Path) -> None:
        from fedforget.store import Store

        manifest = json.loads((path / "manifest.json").read_text())
        if key == "partitions":  # one sample moved to another client: the subtle edit
            a, b = manifest["partitions"]["0"][0], manifest["partitions"]["1"][1]
            a[0], b[0] = b[0], a[0]
        else:
            value = manifest.get(key)
            manifest[key] = json.loads(changed(json.dumps(value))[0]) if value is not None else "tampered"
        (path / "manifest.json").write_text(json.dumps(manifest))
        if repin:
            db = connect(path)
            try:
                db.execute("UPDATE meta SET value=? WHERE key='manifest-identity'",
                           (json.dumps(Store.manifest_identity(manifest)),))
                db.execute("UPDATE meta SET value=? WHERE key=?",
                           (json.dumps([Store.manifest_digest(manifest)]), MANIFEST_DIGEST))
            finally:
                db.close()
    return edit


def generated_edits() -> list[Any]:
    cases = []
    for table, cols in TABLES.items():
        cases += [pytest.param(behind_the_log(update_cell(table, c)), id=f"update-{table}.{c}") for c in cols]
        cases += [pytest.param(behind_the_log(delete_row(table)), id=f"delete-{table}"),
                  pytest.param(behind_the_log(insert_copy(table)), id=f"insert-changed-{table}")]
    places = ("first", "second", "middle", "next-to-last", "last")
    cases += [pytest.param(rewrite_entry(w), id=f"log-rewrite-rehashed-{w}") for w in places]
    cases += [pytest.param(rewrite_entry("last", rehash=False), id="log-rewrite-last")]
    cases += [pytest.param(delete_entry(w), id=f"log-delete-{w}") for w in places]
    cases += [pytest.param(swap_entries("first", "second"), id="log-swap-first-two"),
              pytest.param(swap_entries("middle", "last"), id="log-swap-middle-last"),
              pytest.param(swap_entries("next-to-last", "last"), id="log-swap-last-two")]
    cases += [pytest.param(truncate(k, heads), id=f"log-truncate-{k}{'-and-heads' if heads else ''}")
              for k in (1, 2, 5) for heads in (False, True)]
    cases += [pytest.param(delete_newest_head, id="log-delete-newest-head")]
    cases += [pytest.param(manifest_edit(k, repin), id=f"manifest-{k}{'-repinned' if repin else ''}")
              for k in (*IDENTITY_FIELDS, *REGISTERED_FIELDS) for repin in (False, True)]
    return cases


@pytest.mark.parametrize("edit", generated_edits())
def test_an_edit_behind_the_log_is_refused_by_every_command(store, signed, edit):
    edit(store)
    assert_refused(store, signed.unforgotten)


def test_a_store_rolled_back_after_a_later_signed_forget_is_refused(signed, tmp_path):
    path = place(signed, tmp_path / "store")
    backup = copy_store(path, tmp_path, "backup").root
    code, _, err = invoke(["forget", "--store", str(path), "--sample", str(signed.unforgotten)])
    assert code == 0, err
    shutil.rmtree(path)
    copy_store(backup, tmp_path, "store")  # the whole store, back over the same path
    assert_refused(path, signed.unforgotten + 1)


def test_an_untouched_copy_passes_every_command(store, signed):
    for argv in commands(store, signed.unforgotten):
        code, out, err = invoke(argv)
        assert code == 0 and err == "", (argv, out[-500:], err[-2000:])


def test_the_fixture_covers_every_table_of_the_schema(signed):
    """The generated edits come from the schema: the trained store holds those tables, each with a row."""
    db = sqlite3.connect(signed.path / LEDGER)
    try:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        empty = [t for t in sorted(names) if db.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() is None]
    finally:
        db.close()
    assert names == set(TABLES) and not empty, (names ^ set(TABLES), empty)


def as_old_store(signed: Signed, path: Path) -> Path:
    """A copy written as stores were before the log: no log tables, no receipts proving log entries, raw record
    names in the requests' specs, and never signed at its path."""
    place(signed, path, record=False)
    with sqlite3.connect(path / LEDGER) as db:
        names = dict(db.execute("SELECT request, json_group_array(record) FROM record_names GROUP BY request"))
    as_written_before_the_log(path)
    shutil.rmtree(path / "receipts")  # this store's receipts prove entries of its log: an old store has neither
    with sqlite3.connect(path / LEDGER) as db:
        for request, records in names.items():
            spec = json.loads(db.execute("SELECT spec FROM requests WHERE id=?", (request,)).fetchone()[0])
            db.execute("UPDATE requests SET spec=? WHERE id=?", (json.dumps({**spec, "records": json.loads(records)}),
                                                                  request))
    assert names, "the fixture's store names no record: the adoption would move nothing"
    return path


def test_a_store_without_a_log_adopts_one_on_its_first_command_and_passes_after(signed, tmp_path):
    path = as_old_store(signed, tmp_path / "store")
    code, out, err = invoke(["status", "--store", str(path)])
    assert code == 0, err
    assert "had no log" in err and len(err.strip().splitlines()) == 1, err
    for argv in commands(path, signed.unforgotten):
        code, out, err = invoke(argv)
        assert code == 0 and err == "", (argv, out[-500:], err[-2000:])


@pytest.mark.parametrize("statement", ["DELETE FROM log_state WHERE key='adopted'",
                                       "UPDATE log_state SET value='{\"at\": 1.0}' WHERE key='adopted'"],
                         ids=["deleted", "rewritten"])
def test_an_adopted_store_whose_adoption_marker_is_edited_is_refused(signed, tmp_path, statement):
    """``status`` says a store was adopted (edits before that cannot be detected) from this marker."""
    path = as_old_store(signed, tmp_path / "store")
    assert invoke(["status", "--store", str(path)])[0] == 0
    db = connect(path)
    try:
        assert db.execute(statement).rowcount == 1
    finally:
        db.close()
    assert_refused(path, signed.unforgotten)


# -- a writer without the key: entries appended as a run appends them ------------------------------------------
def run_entry(kind: str, *statements: str, **fields: Any) -> Callable[[Path], None]:
    """One log entry appended through the ledger's own writer, as a ServerApp run appends it (writer ``run``,
    its ``prev`` and leaf computed, no key): ``statements`` are its changes (logged tables through the log's
    triggers; the unlogged ones, ``forgotten`` and ``record_names``, edited to match), ``kind`` what it declares."""
    def edit(path: Path) -> None:
        from fedforget.store.ledger import Ledger
        from fedforget.store.log import without_head_signer

        with without_head_signer():
            ledger = Ledger(path / LEDGER, create=False)
            try:
                with ledger.transaction(kind, **fields) as db:
                    for statement in statements:
                        db.execute(statement)
            finally:
                ledger.close()
    return edit


def lower_acks(path: Path) -> None:
    """The clients' acknowledgements rewritten by a run so that partition 1 never confirmed request 1."""
    db = connect(path)
    try:
        acks = json.loads(db.execute("SELECT value FROM meta WHERE key='acks'").fetchone()[0])
    finally:
        db.close()
    assert acks["1"]["up_to_request"] >= 1, acks
    acks["1"] = {**acks["1"], "up_to_request": 0, "copies_up_to_request": 0}
    run_entry("acks", f"UPDATE meta SET value='{json.dumps(acks, sort_keys=True)}' WHERE key='acks'")(path)


RETRACT = ("DELETE FROM requests WHERE id=1", "DELETE FROM forgotten WHERE request=1")
INVENT = ("INSERT INTO requests(id, at, kind, spec, samples, units, invalidated, latency_ms) "
          "SELECT 5, at, kind, spec, 0, '[]', '[]', 0 FROM requests WHERE id=1",)
#: what a run's entry does to take a forget back, as a run appends it (every other write a run may not make, to
#: any logged table, is fuzzed below: test_a_run_entry_writing_what_a_run_may_not_is_refused_naming_the_table)
RUN_ENTRIES = [
    *[pytest.param(run_entry(kind, *RETRACT), id=f"retract-a-forget-as-{kind}") for kind in ("retrain", "forget")],
    pytest.param(lower_acks, id="lower-an-acknowledgement"),
    pytest.param(run_entry("artifact", "DELETE FROM meta WHERE key='acks'"), id="drop-the-acknowledgements"),
    pytest.param(run_entry("scrub", "DELETE FROM record_names WHERE request=2", requests=[2]),
                 id="scrub-record-names"),
]


@pytest.mark.parametrize("edit", RUN_ENTRIES)
def test_a_run_without_the_key_cannot_take_back_a_forget(store, signed, edit):
    """What a run appends is judged by what it changes: removing, altering or inventing a request, a purge, an
    acknowledgement or a record name is refused by every command, whatever kind the entry declares."""
    edit(store)
    assert_refused(store, signed.unforgotten)


def as_run(edit: Edit, kind: str = "artifact") -> Callable[[Path], None]:
    """``edit`` made inside one entry appended as a ServerApp run appends it (writer ``run``, no key): the log's
    triggers catch the rows it changes, so the log and the tables agree."""
    def apply(path: Path) -> None:
        from fedforget.store.ledger import Ledger
        from fedforget.store.log import without_head_signer

        with without_head_signer():
            ledger = Ledger(path / LEDGER, create=False)
            try:
                with ledger.transaction(kind) as db:
                    edit(db)
            finally:
                ledger.close()
    return apply


def retract_first_request(db: sqlite3.Connection) -> None:
    """The first forget request deleted with its forgotten samples (the unlogged index edited to match)."""
    delete_row("requests")(db)
    db.execute("DELETE FROM forgotten WHERE request NOT IN (SELECT id FROM requests)")


#: writes the allow-list grants only under a condition the plain edit breaks, forged too: an invalidated artifact
#: made valid without being rebuilt, a meta value of a key no run writes
GUARDED = {("artifacts", "change", "valid"): "valid=0", ("meta", "insert", None): "1"}


def run_may(table: str, op: str, column: str | None) -> bool:
    """Whether the allow-list grants a run ``op`` on ``table`` outright (a table it lacks fails here)."""
    from fedforget.store.log_rules import RUN_WRITES

    rule = RUN_WRITES[table]
    return rule.insert if op == "insert" else False if op == "delete" else column in rule.change


def logged_schema_ops() -> list[tuple[str, str, str | None]]:
    """Every (table, insert | delete | change of one column) of every logged table of the schema."""
    from fedforget.store.log import UNLOGGED

    return [(table, op, column) for table, cols in TABLES.items()
            if table not in UNLOGGED and not table.startswith("sqlite_")
            for op, column in [("insert", None), ("delete", None), *(("change", c) for c in cols)]]


def run_write_cases() -> list[Any]:
    return [pytest.param(table, op, column, id=f"{op}-{table}{'.' + column if column else ''}")
            for table, op, column in logged_schema_ops()
            if not run_may(table, op, column) or (table, op, column) in GUARDED]


def forged(table: str, op: str, column: str | None) -> Edit:
    if op == "insert":
        return insert_copy(table)
    if op == "delete":
        return retract_first_request if table == "requests" else delete_row(table)
    assert column is not None
    return update_cell(table, column, GUARDED.get((table, op, column), "1"))


@pytest.fixture(scope="module")
def forge_base(signed, tmp_path_factory) -> tuple[Path, bytes]:
    """One copy of the signed store for the forged entries, and its ledger's bytes to restore before each."""
    path = place(signed, tmp_path_factory.mktemp("forge") / "store")
    return path, (path / LEDGER).read_bytes()


@pytest.mark.parametrize(("table", "op", "column"), run_write_cases())
def test_a_run_entry_writing_what_a_run_may_not_is_refused_naming_the_table(forge_base, table, op, column):
    """Fuzzed over the schema: an entry appended without the key that inserts, deletes or changes a column of a
    row of any logged table in a way the allow-list does not grant is refused by the whole check, which names
    the table (a table the allow-list lacks fails to generate its cases)."""
    from fedforget.store import Store
    from fedforget.store.check import check_store

    path, ledger = forge_base
    (path / LEDGER).write_bytes(ledger)
    assert check_store(Store.open(path)).ok
    as_run(forged(table, op, column))(path)
    result = check_store(Store.open(path))
    named = [p for p in result.problems if "written without the coordinator's key" in p]
    assert not result.ok and named and f"{table} " in named[0], result.problems


#: granted writes a run makes only when a forget lands while it runs, checked where one does
#: (tests/integration/test_forget_during_retrain_is_purged.py: its stale rebuilds' purges, then marked done)
MADE_ELSEWHERE = {("purged", "insert", None), ("purged", "change", "done")}


def test_every_write_the_allow_list_grants_is_one_a_real_run_made_and_the_check_passes(signed):
    """The fixture's training and retrain (ServerApp runs, no key) made every write the allow-list grants on the
    schema's tables (and the store passes the whole check: the test above and every command's check): the list
    grants no more than runs write."""
    from fedforget.store.log_rules import entry_changes, is_coordinator

    made = set()
    db = sqlite3.connect(signed.path / LEDGER)
    try:
        for (text,) in db.execute("SELECT entry FROM log WHERE seq > 0"):
            entry = json.loads(text)
            if not is_coordinator(entry):
                made |= {(table, op, column) for table, op, column, _, _ in entry_changes(entry["rows"])}
    finally:
        db.close()
    granted = {case for case in logged_schema_ops() if run_may(*case)}
    assert granted - set(MADE_ELSEWHERE) <= made, sorted(granted - made)


def test_a_retracted_forget_is_refused_by_verify_log_verify_and_log_sign_and_no_receipt_is_signed(store, signed,
                                                                                             tmp_path):
    run_entry("artifact", *RETRACT, *INVENT)(store)
    before = digest(store)
    for argv in (["verify", "--store", str(store)], ["log", "sign", "--store", str(store)],
                 ["receipt", "5", "--store", str(store), "--no-verify"]):
        code, _, err = invoke(argv)
        assert code == 1 and "without the coordinator's key" in err and len(err.strip().splitlines()) == 1, \
            (argv, err[-2000:])
    code, out, err = invoke(["log", "verify", "--store", str(store)])
    assert code == 1 and "removes forget request #1" in err, (out[-500:], err[-2000:])
    assert digest(store) == before
    export = tmp_path / "log.jsonl"  # the third party's copy: the log as the store holds it, with the key alone
    db = connect(store)
    try:
        from fedforget.unlearning.log_verify import export_bytes, store_log

        export.write_bytes(export_bytes(store_log(db)))
    finally:
        db.close()
    code, out, err = invoke(["log", "verify", "--log", str(export)])
    assert code == 1 and "log NOT valid" in err and "removes forget request #1" in err, (out[-500:], err[-2000:])


def readopted_at_a_new_path(path: Path) -> None:
    """The log dropped with a request deleted behind it, sqlite_sequence fixed, receipts/ and service.db gone: the
    first command at a new path would adopt a fresh log over the falsified tables."""
    db = connect(path)
    try:
        for table in ("log", "log_heads", "log_state"):
            db.execute(f"DROP TABLE {table}")
        db.execute("DELETE FROM requests WHERE id=2")
        db.execute("DELETE FROM forgotten WHERE request=2")
        db.execute("DELETE FROM record_names WHERE request=2")
        db.execute("UPDATE sqlite_sequence SET seq=1 WHERE name='requests'")
    finally:
        db.close()
    shutil.rmtree(path / "receipts", ignore_errors=True)
    (path / "service.db").unlink(missing_ok=True)


def test_a_log_adopted_again_over_edited_tables_at_a_new_path_is_refused(signed, tmp_path):
    path = place(signed, tmp_path / "moved", record=False)  # never signed at this path
    readopted_at_a_new_path(path)
    assert_refused(path, signed.unforgotten)
    assert "lost the log it was created with" in invoke(["status", "--store", str(path)])[2]


def test_a_store_at_a_new_path_with_another_log_than_its_signed_ones_is_refused(signed, tmp_path):
    """The coordinator's outside record follows the store's identity, not its path: a store moved away whose log
    was started over (its manifest's log marker kept) is refused where it lies now."""
    from fedforget.store.log import LogWriter, logged_row, logged_tables, without_head_signer

    path = place(signed, tmp_path / "moved", record=False)
    db = connect(path)
    try:  # every request gone, then a fresh log as a training run starts one: the tables as a run's entry
        for table in ("requests", "forgotten", "record_names", "purged", "log", "log_heads", "log_state"):
            db.execute(f"DELETE FROM {table}")
        db.execute("DELETE FROM sqlite_sequence WHERE name='requests'")
        rows = [[t, "+", logged_row(t, r)] for t in logged_tables(db) for r in db.execute(f'SELECT * FROM "{t}"')]
        with without_head_signer():
            writer = LogWriter(db)
            writer.append("genesis", {"nonce": "0" * 32, "adopted": False}, [])
            writer.append("artifact", {}, rows)
    finally:
        db.close()
    code, _, err = invoke(["status", "--store", str(path)])
    assert code == 1 and "not one the coordinator signed for this store" in err, err


def test_log_verify_says_what_it_checked_and_checks_the_store_with_store(store, signed, tmp_path):
    export = tmp_path / "log.jsonl"
    assert invoke(["log", "export", "--store", str(store), "--out", str(export)])[0] == 0
    code, out, err = invoke(["log", "verify", "--log", str(export)])
    assert code == 0 and "checked the log alone" in out, (out, err)
    code, out, err = invoke(["log", "verify", "--store", str(store)])
    assert code == 0 and "the store's tables, files and receipts agree with it" in out, (out, err)
    behind_the_log(update_cell("artifacts", "valid"))(store)
    code, out, err = invoke(["log", "verify", "--store", str(store)])
    assert code == 1 and err.strip().splitlines() == [err.strip()] and "not what it claims" in err, (out, err)


def test_a_receipt_of_another_log_in_the_store_is_named_as_such(signed, tmp_path):
    other = as_old_store(signed, tmp_path / "other")  # adopts a log of its own at its first command
    code, _, err = invoke(["receipt", "1", "--store", str(other), "--no-verify"])
    assert code == 0, err
    path = place(signed, tmp_path / "store")
    shutil.copy2(other / "receipts" / "request-1.json", path / "receipts" / "request-1.json")
    code, _, err = invoke(["status", "--store", str(path)])
    assert code == 1 and "issued under another log" in err and "rolled back" not in err, err


@pytest.mark.parametrize("edit", RUN_ENTRIES)
def test_the_services_check_of_what_was_appended_refuses_a_run_entry_that_takes_a_forget_back(store, edit):
    """The forget service's watch holds what was appended since its last check to the same rules: an entry of a
    writer without the key sends it to one whole check, which refuses the entry (a scrub edits no logged table:
    the whole check finds it too)."""
    from fedforget.store import Store
    from fedforget.store.check_changes import StoreWatch

    watch = StoreWatch(Store.open(store))
    try:
        assert watch.check().ok
        edit(store)
        result = watch.check()
        assert watch.runs["full"] == 2 and not result.ok, (watch.runs, result.problems)
        summary = result.summary()
        assert "written without the coordinator's key" in summary or "under no signed head" in summary, summary
    finally:
        watch.close()


def receipt_edit(change: Callable[[dict], None], name: str = "request-1.json") -> Callable[[Path], None]:
    """The store's receipt of request 1 rewritten (no signature is needed to leave a file in a store)."""
    def edit(path: Path) -> None:
        source = path / "receipts" / "request-1.json"
        body = json.loads(source.read_text())
        change(body)
        source.unlink()
        (path / "receipts" / name).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return edit


def _set(*keys: str, value: Any) -> Callable[[dict], None]:
    def change(body: dict) -> None:
        for key in keys[:-1]:
            body = body[key]
        body[keys[-1]] = value
    return change


@pytest.mark.parametrize("edit", [
    pytest.param(receipt_edit(_set("ledger_digest", "request", value="0" * 64)), id="another-request-row"),
    pytest.param(receipt_edit(_set("log", "entry", value=None)), id="says-it-predates-the-log"),
    pytest.param(receipt_edit(_set("log", "entry", value=1)), id="another-entry"),
    pytest.param(receipt_edit(_set("log", "head", "log", value="f" * 64)), id="another-log"),
    pytest.param(receipt_edit(lambda body: None, name="request-2.json"), id="filed-under-another-request"),
    pytest.param(receipt_edit(_set("request", "id", value=9), name="request-9.json"), id="a-request-the-ledger-lacks"),
])
def test_a_receipt_in_the_store_that_the_ledger_does_not_bear_out_is_refused(store, signed, edit):
    edit(store)
    code, _, err = invoke(["status", "--store", str(store)])
    assert code == 1 and "receipts/request-" in err and len(err.strip().splitlines()) == 1, err
