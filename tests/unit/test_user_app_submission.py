"""The coordinator submits the app that trained a store, with only the run-config keys that app declares
(Flower refuses an override of an undeclared key), and refuses an app that does not declare the keys the
coordinator sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedforget.core.config import ConfigError, parse_run_config
from fedforget.unlearning.user_app import app_run_config

TASK = "mlpapp.task:TASK"


def app(tmp_path: Path, config: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "mlp"\nversion = "1.0.0"\n[tool.flwr.app]\npublisher = "me"\n'
        f"[tool.flwr.app.config]\n{config}\n")
    return tmp_path


def stored(**changes: object) -> dict[str, object]:
    """A manifest's config: every key, auto keys resolved."""
    return {**parse_run_config({"task": TASK, "method": "fedavg", "num-rounds": 3, **changes}).to_dict(),
            "action": "retrain"}


def test_the_stored_config_is_cut_to_the_keys_the_app_declares(tmp_path):
    folder = app(tmp_path, f'method = "fedavg"\ntask = "{TASK}"\nstore = "s"\naction = "train"\nnum-rounds = 3')
    config = {k: v for k, v in stored().items() if k != "store"}
    assert app_run_config(folder, config) == {"method": "fedavg", "task": TASK, "num-rounds": 3, "action": "retrain"}


@pytest.mark.parametrize("missing", ["action", "store"])
def test_an_app_that_does_not_declare_what_the_coordinator_sets_is_refused(tmp_path, missing):
    keys = {"task": f'"{TASK}"', "store": '"s"', "action": '"train"', "num-rounds": "3"}
    folder = app(tmp_path, "\n".join(f"{k} = {v}" for k, v in keys.items() if k != missing))
    with pytest.raises(ConfigError, match=f"declare {missing} in .tool.flwr.app.config."):
        app_run_config(folder, stored())


def test_a_stored_value_the_app_does_not_declare_is_left_to_the_apps_own_code(tmp_path):
    """An app that builds its strategy in code declares only the run's own keys: the coordinator submits those,
    and the app's ServerApp builds the rest (refusing a retrain that builds other values than the store's)."""
    folder = app(tmp_path, 'store = "s"\naction = "train"\nreference = false')
    assert app_run_config(folder, {k: v for k, v in stored(lr=0.5).items() if k != "store"}) == {"action": "retrain",
                                                                                        "reference": False}


def test_a_verify_reference_needs_reference_declared(tmp_path):
    folder = app(tmp_path, f'task = "{TASK}"\nstore = "s"\naction = "train"\nnum-rounds = 3')
    with pytest.raises(ConfigError, match="declare reference in"):
        app_run_config(folder, {**stored(), "action": "train", "reference": True})


class StoredManifest:
    """What store_app reads of a store: its manifest."""

    def __init__(self, manifest: dict) -> None:
        self._manifest = manifest

    def manifest(self) -> dict:
        return self._manifest


def test_the_app_that_trained_a_store_is_submitted_and_fedforgets_own_otherwise(tmp_path):
    from fedforget.unlearning.user_app import store_app

    folder = app(tmp_path, f'task = "{TASK}"')
    assert store_app(StoredManifest({"app": {"dir": str(folder), "name": "me/mlp", "version": "1.0.0"}})) == folder
    assert store_app(StoredManifest({"task": "digits-mlp"})) is None


def test_an_app_gone_or_at_another_version_is_refused_naming_it(tmp_path):
    from fedforget.unlearning.user_app import store_app

    folder = app(tmp_path, f'task = "{TASK}"')
    with pytest.raises(ConfigError, match=r"\(me/mlp 0.9.0\) is no longer at .*gone"):
        store_app(StoredManifest({"app": {"dir": str(tmp_path / "gone"), "name": "me/mlp", "version": "0.9.0"}}))
    with pytest.raises(ConfigError, match=r"now holds me/mlp 1.0.0, not me/mlp 0.9.0"):
        store_app(StoredManifest({"app": {"dir": str(folder), "name": "me/mlp", "version": "0.9.0"}}))
