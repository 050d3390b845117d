"""A bad run config under plain `flwr run`: the ServerApp logs one line naming the key, and Flower's
"ServerApp/Simulation raised an exception" record with its traceback is dropped (in process, no Ray); a user's
own ServerApp refuses the same way, and a relative path means the app's directory or the run is refused."""

from __future__ import annotations

import logging
import shutil
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from flwr.app import Context, RecordDict
from flwr.common.logger import FLOWER_LOGGER, log

from fedforget.core.config import ConfigError
from fedforget.inprocess import default_run_config
from fedforget.server_app import DropRefusedTraceback, RunConfigRefused
from fedforget.server_app import app as server_app
from fedforget.tasks.server_data import ServerTestError


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        return "\n".join(logging.Formatter().format(r) for r in self.records)


@pytest.fixture
def flwr_lines():
    handler = Lines()
    FLOWER_LOGGER.addHandler(handler)
    try:
        yield handler
    finally:
        FLOWER_LOGGER.removeHandler(handler)
        for f in [f for f in FLOWER_LOGGER.filters if isinstance(f, DropRefusedTraceback)]:
            FLOWER_LOGGER.removeFilter(f)


def run_server_app(config: dict[str, object]) -> BaseException:
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config)
    with pytest.raises(RunConfigRefused) as caught:
        server_app(None, context)  # the config is refused before the grid is used
    return caught.value


def test_bad_method_logs_one_line_naming_the_key_and_no_traceback(flwr_lines):
    exc = run_server_app({**default_run_config(), "method": "fedsgd"})
    # what Flower's runtimes do with the exception (superlink/runtime/run_serverapp.py, simulation/app.py)
    log(logging.ERROR, "%s raised an exception", "ServerApp", exc_info=exc)
    log(logging.ERROR, "%s raised an exception", "Simulation", exc_info=exc)
    log(logging.ERROR, "An exception occurred !! %s", exc)
    log(logging.ERROR, "Exit Code: 700\n\nAn unhandled exception occurred when running the simulation.")
    errors = [r for r in flwr_lines.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, flwr_lines.text()
    line = errors[0].getMessage()
    assert "'method'" in line and "fedsgd" in line and "--run-config" in line and "\n" not in line
    assert "Traceback" not in flwr_lines.text()


def test_other_exceptions_keep_their_traceback(flwr_lines):
    run_server_app({**default_run_config(), "method": "fedsgd"})  # installs the filter
    try:
        raise RuntimeError("a real bug")
    except RuntimeError as exc:
        log(logging.ERROR, "%s raised an exception", "ServerApp", exc_info=exc)
    assert "Traceback" in flwr_lines.text() and "a real bug" in flwr_lines.text()


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tabular-mlp"


class FlowerRunGrid:
    """A Grid as Flower's runtimes hand it to a ServerApp: its run names the app's FAB; no node answers."""

    run = SimpleNamespace(run_id=1, fab_id="example/tabular-mlp", fab_version="1.0.0", fab_hash="0" * 64)

    def get_node_ids(self) -> list[int]:
        raise AssertionError("the run was to be refused before it reached a node")


def what_flower_logs(exc: BaseException) -> None:
    """What Flower logs for a ServerApp that raised (superlink/runtime/run_serverapp.py, simulation/app.py)."""
    log(logging.ERROR, "%s raised an exception", "ServerApp", exc_info=exc)
    log(logging.ERROR, "Exit Code: 700\n\nAn unhandled exception occurred when running the simulation.")


@pytest.fixture
def user_app(tmp_path, monkeypatch):
    """The example app's ServerApp with its declared run config; its code on sys.path, as Flower puts it."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from flwr.common.config import flatten_dict
    from tabular_mlp.server_app import app

    config = flatten_dict(tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"])
    return app, config


def test_a_user_apps_refusal_is_one_line_first_and_leaves_no_store(flwr_lines, user_app, tmp_path, monkeypatch):
    app, config = user_app
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path))
    store = tmp_path / "runs" / "mine"
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(),
                      run_config={**config, "store": str(store), "test-data": str(tmp_path / "nowhere")})
    with pytest.raises(ServerTestError) as caught:
        app(None, context)  # refused before the grid is used
    what_flower_logs(caught.value)
    errors = [r.getMessage() for r in flwr_lines.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("fedforget: run refused: run-config 'test-data'"), errors
    assert "\n" not in errors[0] and "Traceback" not in flwr_lines.text()
    assert not store.exists()  # the directory its lock made is taken back


def test_a_relative_path_is_refused_when_the_superlinks_home_holds_another_app(flwr_lines, user_app, tmp_path,
                                                                              monkeypatch):
    """A SuperLink started from fedforget's checkout (its FEDFORGET_HOME) runs the user's app: its relative
    ``test-data`` and ``store`` would land in the checkout, so the run is refused and the checkout untouched."""
    app, config = user_app
    checkout = tmp_path / "checkout"
    shutil.copytree(EXAMPLE / "data", checkout / "data")  # what the relative path would find there
    shutil.copy(Path(__file__).resolve().parents[2] / "pyproject.toml", checkout / "pyproject.toml")
    monkeypatch.setenv("FEDFORGET_HOME", str(checkout))
    before = sorted(p.relative_to(checkout) for p in checkout.rglob("*"))
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config)
    with pytest.raises(ConfigError) as caught:
        app(FlowerRunGrid(), context)
    what_flower_logs(caught.value)
    errors = [r.getMessage() for r in flwr_lines.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "is relative to the app's directory" in errors[0], errors
    assert f"FEDFORGET_HOME {checkout} holds fedforget/fedforget, not example/tabular-mlp" in errors[0]
    assert sorted(p.relative_to(checkout) for p in checkout.rglob("*")) == before

    app_dir = tmp_path / "app"  # the app's own directory as FEDFORGET_HOME: the same paths are the app's
    shutil.copytree(EXAMPLE, app_dir, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    monkeypatch.setenv("FEDFORGET_HOME", str(app_dir))
    with pytest.raises(AssertionError, match="reached a node"):
        app(FlowerRunGrid(), context)
