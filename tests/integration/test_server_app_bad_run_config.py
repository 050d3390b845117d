"""A bad run config under plain `flwr run`: the ServerApp logs one line naming the key, and Flower's
"ServerApp/Simulation raised an exception" record with its traceback is dropped (in process, no Ray)."""

from __future__ import annotations

import logging

import pytest
from flwr.app import Context, RecordDict
from flwr.common.logger import FLOWER_LOGGER, log

from fedforget.inprocess import default_run_config
from fedforget.server_app import DropRefusedTraceback, RunConfigRefused
from fedforget.server_app import app as server_app


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
