"""``fedforget verify`` in process runs the Flower app that trained the store: a store trained by a user's app
folder (``Forgettable(ClippedFedAvg(clip=0.05))`` built in its ServerApp, which fedforget's own app cannot
rebuild from the stored keys) and retrained through it after a forget is exact, its reference the app's
ServerApp and ClientApp from ``[tool.flwr.app.components]``. Negative control: the app's code edited to another
clip (name and version unchanged) trains another reference, and verify reports the served artifacts differ. An
app gone from its folder, or at another version, is refused in one line before any run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedforget.core.config import ConfigError
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.verify import verify_store

from .app_folder import NODES, server_app, write_app
from .helpers import invoke, served_ids

MODULE = "clipped_verify_app"


def _retrain(store: Store, folder: Path) -> None:
    """``fedforget retrain``'s run through the app: the stored config, ``action=retrain``."""
    config = {**store.manifest()["config"], "store": str(store.root), "action": "retrain"}
    run_in_process(config, NODES, server_app=server_app(folder, MODULE))


def test_a_store_of_a_users_subclass_verifies_exactly_in_process_and_an_edited_app_does_not(tmp_path):
    folder = write_app(tmp_path / "app", MODULE)
    path = tmp_path / "store"
    run_in_process({"store": str(path), "action": "train"}, NODES, server_app=server_app(folder, MODULE))
    store = Store.open(path)
    assert store.manifest()["app"]["dir"] == str(folder.resolve())
    assert store.manifest()["replay-strategy"]["attributes"]["clip"] == 0.05
    shown = invoke(["status", "--store", str(path), "--json"])  # the subclass, which replay.strategy does not name
    assert json.loads(shown[1])["replay_strategy"]["class"].endswith("ClippedFedAvg")
    assert json.loads(shown[1])["replay_strategy"]["attributes"]["clip"] == 0.05
    assert "ClippedFedAvg, a subclass" in invoke(["status", "--store", str(path)])[1]
    forget_request(store, samples=[store.manifest()["partitions"]["0"][0][0]])
    _retrain(store, folder)
    assert served_ids(store)

    report = verify_store(Store.open(path))
    assert report["exact"] is True, report["reason"]
    assert report["served"] == report["served_equal"] >= 1 and report["outputs"]["equal"] is True

    write_app(folder, MODULE, clip=0.5)  # the app's code now clips elsewhere; its name and version are the same
    edited = verify_store(Store.open(path))
    assert edited["exact"] is False
    assert edited["served"] >= 1 and edited["served_equal"] < edited["served"]  # the served artifacts compared
    assert edited["reason"].startswith("served artifact(s) differ from scratch"), edited["reason"]


def test_an_app_gone_or_at_another_version_is_refused_in_one_line_before_any_run(tmp_path, monkeypatch):
    folder = write_app(tmp_path / "app", MODULE + "_gone")
    path = tmp_path / "store"
    run_in_process({"store": str(path), "action": "train"}, NODES, server_app=server_app(folder, MODULE + "_gone"))
    started = []
    monkeypatch.setattr("fedforget.inprocess.run_in_process", lambda *a, **k: started.append(a))
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "1.0.0"', 'version = "2.0.0"'))
    with pytest.raises(ConfigError, match="now holds tester/clipped-verify-app-gone 2.0.0") as refused:
        verify_store(Store.open(path))
    assert "\n" not in str(refused.value)
    pyproject.unlink()
    with pytest.raises(ConfigError, match="is no longer at") as refused:
        verify_store(Store.open(path))
    assert "\n" not in str(refused.value) and not started
