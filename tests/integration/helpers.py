"""Run the real ServerApp/ClientApp in process and read back what they stored."""

from __future__ import annotations

import hashlib
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np

from fedforget.inprocess import run_in_process
from fedforget.store import Store

DIGITS = {"task": "digits-mlp", "lr": 0.02, "local-epochs": 2}


def train_in_process(store: Path, num_nodes: int = 3, **overrides: object) -> Store:
    run_in_process({**DIGITS, "store": str(store), **overrides}, num_nodes)
    return Store.open(store)


def served_sha(store: Store) -> str:
    """The sha256 of the first served artifact (fedavg serves exactly one)."""
    ledger = store.ledger()
    try:
        shas = {a["artifact"]: a["sha256"] for a in ledger.artifacts()}
        return shas[ledger.serving()["artifacts"][0]]
    finally:
        ledger.close()


def served_tensors(store: Store | Path) -> dict[str, np.ndarray]:
    """Every served artifact's tensors, keyed ``<artifact>:<tensor name>`` (an ensemble serves several)."""
    store = Store.open(store) if isinstance(store, Path) else store
    ledger = store.ledger()
    try:
        shas = {a["artifact"]: a["sha256"] for a in ledger.artifacts()}
        served = sorted(ledger.serving()["artifacts"])
    finally:
        ledger.close()
    return {f"{a}:{k}": v for a in served for k, v in store.get_arrays(shas[a]).items()}


def same_tensors(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """The same names and, under each, the same bits."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def lineage(store: Store, artifact: str) -> list[str]:
    ledger = store.ledger()
    try:
        return ledger.lineage(artifact)
    finally:
        ledger.close()


def served_ids(store: Store) -> list[str]:
    ledger = store.ledger()
    try:
        return list(ledger.serving()["artifacts"])
    finally:
        ledger.close()


def flwr_run_config(config: dict[str, object], store: Path) -> str:
    """``config`` + ``store`` as a ``flwr run --run-config`` string (TOML values)."""
    parts = [f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in config.items()]
    return " ".join(parts) + f' store="{store}"'


def finished_store(proc, store: Path) -> Store:  # noqa: ANN001
    """The store a ``flwr run`` wrote, after checking the run finished."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "store written to" in proc.stdout, proc.stdout[-3000:]
    return Store.open(store)


def artifact_rows(store: Store) -> dict[str, dict]:
    """Every recorded artifact id → its ledger row."""
    ledger = store.ledger()
    try:
        return {a["artifact"]: a for a in ledger.artifacts()}
    finally:
        ledger.close()


def artifact_shas(store: Store) -> dict[str, str]:
    """Every recorded artifact id → its sha256."""
    return {a: row["sha256"] for a, row in artifact_rows(store).items()}


def copy_store(src: Path, parent: Path, name: str = "store") -> Store:
    """A private copy of a (module-scoped) trained store, so a test can forget and retrain freely."""
    from fedforget.store.copy import copy_store as copy

    copy(src, parent / name)
    return Store.open(parent / name)


def fedforget_cli(env: dict[str, str], *args: str):  # noqa: ANN201
    """Run the installed ``fedforget`` command and require exit 0."""
    import subprocess

    proc = subprocess.run(["fedforget", *args], env={**env, "COLUMNS": "200"}, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """``fedforget ARGV`` in this process: (exit code, stdout, stderr)."""
    from fedforget.unlearning.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def as_written_before_the_log(root: Path) -> None:
    """Make a store look as stores written before the ledger's log did: no log tables, no record names, no
    store id in its manifest (the ledger's pins of the manifest follow)."""
    import json
    import sqlite3

    from fedforget.store.store import MANIFEST_DIGEST

    manifest = json.loads((root / "manifest.json").read_text())
    manifest.pop("store-id", None)
    (root / "manifest.json").write_text(json.dumps(manifest))
    with sqlite3.connect(root / "ledger.sqlite") as db:
        for table in ("log", "log_heads", "log_state", "record_names"):
            db.execute(f"DROP TABLE IF EXISTS {table}")
        db.execute("UPDATE meta SET value=? WHERE key='manifest-identity'",
                   (json.dumps(Store.manifest_identity(manifest)),))
        db.execute("UPDATE meta SET value=? WHERE key=?", (json.dumps([Store.manifest_digest(manifest)]),
                                                         MANIFEST_DIGEST))


def retrain_in_process(store: Store, num_nodes: int = 3) -> None:
    """``fedforget retrain``'s run, in process, on the store's own config."""
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, num_nodes)


def stale_artifacts(store: Store, watermark: int) -> dict[str, str]:
    """Artifacts the retrain with ``watermark`` rebuilt and recorded invalid: id → sha256."""
    return {a: r["sha256"] for a, r in artifact_rows(store).items() if r["watermark"] == watermark and not r["valid"]}


def file_digests(store: Store) -> set[str]:
    """The sha256 of every file under the store but its SQLite files."""
    skip = {"ledger.sqlite", "ledger.sqlite-journal", "service.db"}
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in store.root.rglob("*")
            if p.is_file() and not p.is_symlink() and p.name not in skip}


def training_rows(store: Store) -> int:
    """metrics.jsonl rows that hold values computed on the clients' training samples."""
    from fedforget.store.purge import TRAINING_VALUES

    return sum(any(k in row for k in TRAINING_VALUES) for row in store.metrics())


def example_home(example: Path, home: Path, monkeypatch) -> Path:  # noqa: ANN001 - pytest's MonkeyPatch
    """A copy of an example app's records in ``home``, made its FEDFORGET_HOME (its relative paths resolve
    there), and the app's code on sys.path, as Flower's run of it has."""
    import shutil

    shutil.copytree(example / "data", home / "data")
    monkeypatch.setenv("FEDFORGET_HOME", str(home))
    monkeypatch.syspath_prepend(str(example))
    return home


def example_script(example: Path, name: str):  # noqa: ANN201 - a module
    """``<example>/<name>.py`` loaded from its file under a name of its own: two examples' scripts of the same
    name (``make_data``) never stand in for each other in ``sys.modules``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{example.name.replace('-', '_')}_{name}", example / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
