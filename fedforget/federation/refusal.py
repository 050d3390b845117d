"""A run fedforget refuses reaches the user as one line, first, and without a traceback.

Flower logs whatever a ServerApp raises with its traceback ("ServerApp raised an exception", "Simulation
raised an exception", about 40 lines) and then "Exit Code: N ... An unhandled exception occurred": the reason
would come last. A refusal is what the user must fix before a run can write the store (the run config, a store
another run holds or that is damaged, the server's test data); it is logged as one ERROR line beginning
``fedforget:`` where fedforget's entry points (the ServerApp, :func:`fedforget.strategies.strategy_for`,
``start_from_context``, a strategy's ``from_run_config`` and ``start``) let it out, and
:class:`DropRefusedTraceback` drops Flower's records of it. Anything else keeps its traceback.

How a script learns that the run failed: Flower marks it failed (``flwr ls <connection> --run-id N --format
json``: status ``finished:failed``, the reason in ``status-details``), but ``flwr run --stream`` exits 0 whatever the
run's status (flwr/cli/log.py never asks); ``fedforget run`` exits 1 with the line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from logging import ERROR

from flwr.supercore import log

from fedforget.core.config import ConfigError
from fedforget.store.forget_plan import PlanError
from fedforget.store.ledger import LedgerUsageError
from fedforget.store.store import StoreError

#: Set on a refusal once its line is logged, so that nested entry points log it once.
LOGGED = "fedforget_refusal_logged"
#: How every refusal line begins (``fedforget run`` finds it in the run's log by it).
PREFIX = "fedforget: "


class RunRefused(Exception):
    """The run was refused before it wrote anything; its one line is already logged, so Flower's traceback
    of it is dropped."""


class DropRefusedTraceback(logging.Filter):
    """Drop the records that carry a logged refusal (Flower's "ServerApp raised an exception" / "Simulation
    raised an exception" with its traceback), and, once a refusal was logged, Flower's closing "Exit Code: N
    ... An unhandled exception occurred" (flwr/supercore/exit/exit.py): the one line before them says it all.
    Every other record, traceback included, passes."""

    refused = False

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if is_logged(exc):
            return False
        if isinstance(record.args, tuple) and any(is_logged(arg) for arg in record.args):
            return False
        return not (self.refused and record.levelno >= ERROR and str(record.msg).startswith("Exit Code: "))


def is_logged(exc: object) -> bool:
    return isinstance(exc, RunRefused) or (isinstance(exc, BaseException) and getattr(exc, LOGGED, False))


def quiet_refusals(logger: logging.Logger | None = None) -> None:
    """Install :class:`DropRefusedTraceback` on Flower's logger once, marked as having seen a refusal."""
    logger = logger or logging.getLogger("flwr")
    mine = [f for f in logger.filters if isinstance(f, DropRefusedTraceback)]
    if not mine:
        mine = [DropRefusedTraceback()]
        logger.addFilter(mine[0])
    mine[0].refused = True


def refusals() -> tuple[type[Exception], ...]:
    """What a user must fix: each is one line that says what and how (the server's test data error is
    imported here: its module brings torch, which a refusal's import must not)."""
    from fedforget.tasks.server_data import ServerTestError

    return ConfigError, StoreError, ServerTestError, LedgerUsageError, PlanError


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def refusal_line(exc: BaseException) -> str:
    """The line a refusal is logged as (``refused_as``: how a refusal's class words it, when not "run refused")."""
    return f"{PREFIX}{getattr(exc, 'refused_as', 'run refused')}: {one_line(exc)}"


def log_refusal(exc: BaseException, line: str | None = None) -> None:
    """Log ``exc`` as its one line (``line``, else :func:`refusal_line`), unless it already was."""
    if is_logged(exc):
        return
    quiet_refusals()
    log(ERROR, "%s", line or refusal_line(exc))
    try:
        setattr(exc, LOGGED, True)
    except AttributeError:  # an exception type without a __dict__: its traceback stays
        pass


@contextmanager
def refusals_logged() -> Iterator[None]:
    """A refusal raised in the block is logged as one line and raised on, unchanged (its type and message
    stay what callers catch); Flower's traceback of it is then dropped."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, refusals()):
            log_refusal(exc)
        raise
