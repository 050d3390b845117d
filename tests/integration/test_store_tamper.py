"""Every command that reads a store checks it first: a store tampered with, corrupted or half applied is
reported in one line with exit 1 and left unchanged; an untampered store (and one written before the
manifest fingerprint) passes; a request in flight is not tampering; and a SAFE store with nothing left to
serve is a state `status` shows, not a crash."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.unlearning.forget import forget_request

from .helpers import as_written_before_the_log, train_in_process
from .test_cli_fuzz import digest, invoke

CHAINS = {"method": "fedsgt", "chains.groups": 2, "chains.budget": 2, "slices-per-client": 1, "local-epochs": 1}
SAFE = {"method": "safe", "safe.coarse": 2, "safe.fine": 2, "num-rounds": 2, "safe.adapter-steps": 6}


@pytest.fixture(scope="module")
def forgot_one(tmp_path_factory) -> Path:
    """A trained chains store with one forget request applied."""
    root = tmp_path_factory.mktemp("tamper") / "s"
    store = train_in_process(root, 3, **CHAINS)
    forget_request(store, samples=[store.manifest()["partitions"]["1"][0][0]])
    return root


@pytest.fixture
def copy(forgot_one, tmp_path) -> Path:
    root = tmp_path / "s"
    shutil.copytree(forgot_one, root)
    return root


def reading_commands(root: Path) -> list[list[str]]:
    """Every command that reads a store, with arguments it would accept on a sound one."""
    store = str(root)
    return [["status", "--store", store], ["status", "--store", store, "--json"],
            ["samples", "--store", store, "--client", "0"], ["locate", "--store", store, "--sample", "0"],
            ["forget", "--store", store, "--sample", "0"], ["evaluate", "--store", store],
            ["retrain", "--store", store], ["verify", "--store", store], ["audit", "--store", store],
            ["receipt", "1", "--store", store, "--no-verify"], ["purge", "--store", store],
            ["purge", "--store", store, "--check"], ["fairness", "--store", store]]


def assert_reported(root: Path, needle: str, commands: list[list[str]] | None = None) -> None:
    """Each command exits 1 with one line naming the problem, prints nothing on stdout, writes nothing."""
    before = digest(root)
    for argv in commands or reading_commands(root):
        code, out, err = invoke(argv)
        lines = err.strip().splitlines()
        assert code == 1, (argv, code, out[-500:], err[-2000:])
        assert len(lines) == 1 and lines[0].startswith("fedforget: error: the store is not what it claims"), \
            (argv, err[-2000:])
        assert needle in lines[0], (argv, lines[0])
        assert out == "", argv
    assert digest(root) == before


def sql(root: Path, *statements: str) -> None:
    db = sqlite3.connect(root / "ledger.sqlite", isolation_level=None)
    try:
        for statement in statements:
            db.execute(statement)
    finally:
        db.close()


def test_an_untampered_store_passes_the_check_and_every_reading_command_works(copy):
    assert check_store(Store.open(copy)).ok
    for argv in (["status", "--store", str(copy), "--json"], ["samples", "--store", str(copy), "--client", "0"],
                 ["locate", "--store", str(copy), "--sample", "0"], ["purge", "--store", str(copy), "--check"],
                 ["evaluate", "--store", str(copy)]):
        code, out, err = invoke(argv)
        assert code == 0, (argv, err[-2000:])
    assert json.loads(invoke(["status", "--store", str(copy), "--json"])[1])["available"]


def test_deleted_forgotten_rows_are_reported_by_every_reading_command_in_one_line_and_exit_1(copy):
    sql(copy, "DELETE FROM forgotten")
    assert_reported(copy, "request 1 is half applied")


def test_a_served_artifact_pointed_at_another_intact_file_is_reported(copy):
    """The bytes match the new sha256, so only the ledger's history and the file's own header tell."""
    store = Store.open(copy)
    other = store.manifest()["backbone"]["artifact"]  # an intact file of the store, written for something else
    ledger = store.ledger()
    try:
        served = ledger.serving()["artifacts"][0]
    finally:
        ledger.close()
    sql(copy, f"UPDATE artifacts SET sha256='{other}' WHERE artifact='{served}'")
    assert_reported(copy, f"artifact {served} records a sha256 its training never wrote",
                    [["status", "--store", str(copy)], ["evaluate", "--store", str(copy)]])
    sql(copy, f"UPDATE history SET sha256='{other}' WHERE artifact='{served}'")
    assert_reported(copy, f"artifact {served} is recorded with the file of the backbone copy")


@pytest.mark.parametrize("edit", ["UPDATE requests SET spec='[1, 2'", "UPDATE requests SET spec='[1, 2]'",
                                  "UPDATE meta SET value='{\"artifacts\": 7' WHERE key='serving'",
                                  "UPDATE requests SET spec='{\"samples\": [" + "9" * 30 + "]}'",
                                  "UPDATE requests SET spec='{\"samples\": [" + "9" * 100_000 + "]}'"])
def test_a_malformed_json_cell_in_the_ledger_is_reported_not_raised(copy, edit):
    sql(copy, edit)
    check = check_store(Store.open(copy))
    assert check.refusals and len(check.summary()) < 1000
    assert_reported(copy, "ledger.sqlite", [["status", "--store", str(copy)], ["locate", "--store", str(copy),
                                                                             "--sample", "0"]])


def test_a_flipped_byte_in_the_stored_backbone_copy_is_reported(copy):
    sha = Store.open(copy).manifest()["backbone"]["artifact"]
    assert sha, "digits-mlp trains its own backbone: the store keeps a copy"
    path = Store.open(copy).artifact_path(sha)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    assert_reported(copy, "the stored backbone copy")


def test_random_bytes_in_the_middle_of_the_ledger_are_reported_in_one_line(copy):
    path = copy / "ledger.sqlite"
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    for start in range(page, len(data) - page, page):  # every page but the first and the last: tables' pages
        data[start:start + page] = os.urandom(page)
    path.write_bytes(bytes(data))
    assert_reported(copy, "ledger.sqlite is corrupt", [["status", "--store", str(copy)],
                                                       ["purge", "--store", str(copy)],
                                                       ["evaluate", "--store", str(copy)]])


def test_a_corrupt_page_of_the_sample_index_is_reported_in_one_line_by_every_reading_command(copy):
    """The sample index is walked page by page rather than quick-checked (it is linear in the data set)."""
    db = sqlite3.connect(copy / "ledger.sqlite")
    try:
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name='samples'").fetchone()[0]
        page = db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    path = copy / "ledger.sqlite"
    data = bytearray(path.read_bytes())
    data[(root - 1) * page:root * page] = b"\xa5" * page
    path.write_bytes(bytes(data))
    assert_reported(copy, "ledger.sqlite is corrupt")


def test_a_metrics_file_that_is_not_utf8_is_reported_in_one_line(copy):
    with open(copy / "metrics.jsonl", "ab") as fh:
        fh.write(b'{"round": \xff\xfe}\n')
    assert_reported(copy, "metrics.jsonl is not UTF-8", [["status", "--store", str(copy)],
                                                          ["evaluate", "--store", str(copy)]])


@pytest.mark.parametrize("edit", [{"task": "no-such-task"}, {"config.task": "no-such-task"},
                                  {"task": "fmnist-cnn", "config.task": "fmnist-cnn"}, {"num-partitions": 4}])
def test_a_task_or_partition_count_edited_in_the_manifest_is_reported(copy, edit):
    path = copy / "manifest.json"
    manifest = json.loads(path.read_text())
    for key, value in edit.items():
        if key.startswith("config."):
            manifest["config"][key.removeprefix("config.")] = value
        else:
            manifest[key] = value
    path.write_text(json.dumps(manifest))
    assert_reported(copy, "manifest.json", [["status", "--store", str(copy)], ["evaluate", "--store", str(copy)],
                                            ["forget", "--store", str(copy), "--sample", "0"]])


def test_a_store_written_before_the_manifest_fingerprint_still_opens_clean(copy):
    as_written_before_the_log(copy)
    sql(copy, "DELETE FROM meta WHERE key='manifest-identity'")
    assert check_store(Store.open(copy)).ok
    code, out, err = invoke(["status", "--store", str(copy), "--json"])
    assert code == 0, err
    assert json.loads(out)["available"]


def test_a_forget_in_flight_in_another_connection_is_not_reported_as_tampering(copy):
    """The writer's uncommitted request row and forgotten rows are invisible to the check's snapshot."""
    writer = sqlite3.connect(copy / "ledger.sqlite", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO requests(at, kind, spec, samples, units, invalidated, latency_ms) "
                       "VALUES(0, 'sample', '{\"samples\": [0, 1]}', 0, '[]', '[]', 0)")
        writer.execute("INSERT INTO forgotten SELECT sample, unit, 2 FROM samples WHERE sample = 0")
        check = check_store(Store.open(copy))
        assert check.ok, check.problems
        code, _, err = invoke(["samples", "--store", str(copy), "--client", "0", "--json"])
        assert code == 0, err
    finally:
        writer.execute("ROLLBACK")
        writer.close()


@pytest.fixture(scope="module")
def safe_every_clique_hit(tmp_path_factory) -> Path:
    """SAFE, 2 × 2 cliques over 3 nodes: four single-sample forgets that together hit every clique."""
    root = tmp_path_factory.mktemp("safe") / "s"
    store = train_in_process(root, 3, **SAFE)
    cells = store.manifest()["cells"]
    hit: set[str] = set()
    for p in sorted(cells):
        for c in sorted(cells[p], key=int):
            result = forget_request(store, samples=[cells[p][c][0]])
            hit.update(a for a in result.invalidated if "/proto/" not in a)
            if not result.serving["available"]:
                return root
    raise AssertionError(f"the forgets hit only {sorted(hit)}")


def test_status_shows_nothing_served_when_every_safe_clique_is_hit_and_exits_0(safe_every_clique_hit):
    root = safe_every_clique_hit
    assert check_store(Store.open(root)).ok
    code, out, err = invoke(["status", "--store", str(root)])
    assert code == 0, err[-2000:]
    assert "no valid model is left to serve" in out and "fedforget retrain" in out
    code, out, err = invoke(["status", "--store", str(root), "--json"])
    info = json.loads(out)
    assert code == 0 and not info["available"] and info["retrain_required"] and info["accuracy"] is None


def test_evaluate_with_nothing_served_says_so_in_one_line_and_exits_1(safe_every_clique_hit):
    before = digest(safe_every_clique_hit)
    code, out, err = invoke(["evaluate", "--store", str(safe_every_clique_hit)])
    lines = err.strip().splitlines()
    assert code == 1 and out == "" and len(lines) == 1 and "fedforget retrain" in lines[0]
    assert digest(safe_every_clique_hit) == before


def _held_sample(root: Path, partition: str) -> int:
    """A sample of ``partition`` no request has forgotten."""
    ledger = Store.open(root).ledger()
    try:
        gone = {s for ids in ledger.forgotten_by_partition().values() for s in ids}
    finally:
        ledger.close()
    return next(i for s in Store.open(root).manifest()["partitions"][partition] for i in s if i not in gone)


INDEX_EDITS = {  # each a way to make the sample index disagree with the manifest, and what the refusal names
    "a sample moved to another unit": ("UPDATE samples SET unit='2:0' WHERE sample={x}",
                                       "sample {x} is indexed in unit 2:0; the manifest puts it in 1:0"),
    "a samples row deleted": ("DELETE FROM samples WHERE sample={x}", "sample {x} of unit 1:0 is missing"),
    "a samples row added": ("INSERT INTO samples VALUES(1000000, '1:0')", "sample 1000000 is indexed in unit 1:0"),
    "a unit's partition changed": ("UPDATE units SET partition=2 WHERE unit='1:0'", "unit 1:0 is recorded in "
                                   "partition 2"),
    "a unit's size changed": ("UPDATE units SET size=size+1 WHERE unit='1:0'", "unit 1:0 is recorded in partition 1"),
    "a forgotten row moved to another unit": ("UPDATE forgotten SET unit='2:0' WHERE request=1",
                                              "is recorded in unit 2:0; the manifest puts it in 1:0"),
}
#: edits an older invariant reports first (a valid artifact whose lineage now holds the moved forgotten row)
FIRST_LINE = {"a forgotten row moved to another unit": "saw forgotten data"}


@pytest.mark.parametrize("edit", sorted(INDEX_EDITS))
def test_a_sample_index_that_disagrees_with_the_manifest_is_refused_by_every_reading_command(copy, edit):
    """The index is derived; the fingerprinted manifest and the requests' specs say what it must hold."""
    x = _held_sample(copy, "1")
    statement, needle = INDEX_EDITS[edit]
    sql(copy, statement.format(x=x))
    problems = check_store(Store.open(copy)).problems
    assert any(needle.format(x=x) in p for p in problems), problems
    assert_reported(copy, FIRST_LINE.get(edit, needle).format(x=x),
                    reading_commands(copy) + [["forget", "--store", str(copy), "--sample", str(x)]])


def test_a_sample_moved_then_forgotten_is_refused_everywhere_and_verify_fails_on_its_own_reference(copy):
    """The adversary's case: move a sample to another unit, forget it (through the API: the CLI refuses the
    edited store), and no command may call the result clean; verify's from-scratch reference drops the
    sample from its manifest partition, so the served model that still saw it differs from scratch too."""
    from fedforget.unlearning.verify import verify_store

    store = Store.open(copy)
    ledger = store.ledger()
    try:  # a unit a served artifact saw (its sample is moved) and a unit that artifact never saw (the target)
        served = ledger.serving()["artifacts"][0]
        seen = ledger.lineage(served)
        target = next(u for p in range(3) for u in ledger.units_of_partition(p) if u not in seen)
        gone = {s for ids in ledger.forgotten_by_partition().values() for s in ids}
    finally:
        ledger.close()
    partition, slice_ = seen[0].split(":")
    x = next(i for i in store.manifest()["partitions"][partition][int(slice_)] if i not in gone)
    sql(copy, f"UPDATE samples SET unit='{target}' WHERE sample={x}")
    result = forget_request(store, samples=[x])
    assert result.units == [target] and served not in result.invalidated  # forget trusted the edited index
    assert_reported(copy, f"sample {x} is indexed in unit {target}; the manifest puts it in {seen[0]}", [
        ["status", "--store", str(copy)], ["forget", "--store", str(copy), "--sample", str(x)],
        ["purge", "--store", str(copy), "--check"], ["receipt", str(result.request), "--store", str(copy)],
        ["samples", "--store", str(copy), "--client", "1"], ["locate", "--store", str(copy), "--sample", str(x)],
        ["evaluate", "--store", str(copy)], ["verify", "--store", str(copy)]])
    report = verify_store(store)
    assert not report["exact"] and report["index"] and report["reason"] == report["index"][0]
    assert report["forgotten_samples"] == 2  # request 1's sample and x, each in its manifest partition
    assert not next(c for c in report["compared"] if c["artifact"] == served)["equal"], \
        "the reference resolved from the manifest must differ from the served model that saw the sample"


def test_a_safe_sample_moved_to_another_partitions_cell_is_refused(safe_every_clique_hit, tmp_path):
    """SAFE's units are class cells (the manifest's ``cells``, which must split each fingerprinted partition)."""
    root = tmp_path / "s"
    shutil.copytree(safe_every_clique_hit, root)
    cells = Store.open(root).manifest()["cells"]
    parts = sorted(cells, key=int)
    home_p, other_p = parts[0], parts[1]
    home_c = sorted(cells[home_p], key=int)[0]
    x = cells[home_p][home_c][-1]
    target = f"{other_p}:{sorted(cells[other_p], key=int)[0]}"
    sql(root, f"UPDATE samples SET unit='{target}' WHERE sample={x}")
    assert_reported(root, f"sample {x} is indexed in unit {target}; the manifest puts it in {home_p}:{home_c}",
                    [["status", "--store", str(root)], ["locate", "--store", str(root), "--sample", str(x)],
                     ["forget", "--store", str(root), "--sample", str(x)]])


@pytest.mark.parametrize("field", ["rounds-done", "format-version-note", "plan"])
def test_any_manifest_field_edited_after_its_run_wrote_it_is_reported(copy, field):
    """Not only the identity fields: the ledger's log pins the whole manifest as its last run wrote it."""
    path = copy / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest[field] = {"edited": True} if field == "plan" else 7
    path.write_text(json.dumps(manifest))
    assert_reported(copy, "manifest.json", [["status", "--store", str(copy)],
                                            ["forget", "--store", str(copy), "--sample", "0"]])
