"""The ServerApp: read the run config into the method's strategy (:mod:`fedforget.strategies`) and start it.

A refusal (:mod:`fedforget.federation.refusal`) is one ERROR line, first, with Flower's traceback of it dropped.
"""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedforget.core.config import ConfigError, parse_run_config
from fedforget.federation.refusal import (
    DropRefusedTraceback,
    RunRefused,
    log_refusal,
    quiet_refusals,
)
from fedforget.federation.registration import RegistrationRefused
from fedforget.federation.run_action import remove_unwritten_store
from fedforget.strategies import strategy_for
from fedforget.strategies.run_action import RunLockRefused

app = ServerApp()

__all__ = ["DropRefusedTraceback", "NodeDataRefused", "RunConfigRefused", "RunRefused", "StoreLockRefused", "app",
           "main", "quiet_refusals", "refusal_line", "remove_unwritten_store"]


class StoreLockRefused(RunRefused):
    """The store's run lock (:mod:`fedforget.store.lock`) was not taken: another live run holds it, or its
    lock file is unusable."""


class RunConfigRefused(ConfigError, RunRefused):
    """The run config was refused; its one line is already logged, so Flower's traceback of it is dropped.

    Flower marks the run failed (``flwr ls`` shows sub-status ``failed`` with this message as details), but
    ``flwr run --stream`` exits 0 whatever the run's status: the CLI streams the logs and never asks how the
    run ended (``flwr/cli/log.py``), so nothing a ServerApp does gives it a non-zero exit code.
    """


class NodeDataRefused(ConfigError, RunRefused):
    """What a node registered was refused (:class:`~fedforget.federation.registration.RegistrationRefused`):
    its one line, naming the node, is already logged."""


def refusal_line(exc: ConfigError) -> str:
    return (f"fedforget: bad run config: {exc}; fix it in --run-config (keys and values: pyproject.toml "
            "[tool.flwr.app.config]; `fedforget run` checks them before submitting)")


@app.main()
def main(grid: Grid, context: Context) -> None:
    try:
        cfg = parse_run_config(dict(context.run_config))
    except ConfigError as exc:
        log_refusal(exc, refusal_line(exc))  # the one line a user needs; Flower's traceback of it is dropped
        raise RunConfigRefused(str(exc)) from None
    try:  # a refusal inside the run is logged there, one line (fedforget.federation.refusal)
        strategy_for(context.run_config).start(grid=grid, action=cfg.action)
    except RunLockRefused as exc:
        raise StoreLockRefused(str(exc)) from None
    except RegistrationRefused as exc:  # the node's problem, not the run config's
        raise NodeDataRefused(str(exc)) from None
    except ConfigError as exc:  # a config this federation cannot run: its size is known only once nodes answer
        raise RunConfigRefused(str(exc)) from None
