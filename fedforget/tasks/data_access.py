"""Who may read a task's training rows: a node, inside its own handler; never the server or the coordinator.

The ServerApp and every coordinator command run in the *serving role*; a ClientApp handler runs in the *node
role* (the in-process runtime calls handlers from inside the ServerApp, so the node role replaces the
serving role for exactly the handler's call). The loaders of the training pool ask
:func:`require_training_rows` first, so a server-side read of training rows fails at once instead of
passing unnoticed. Outside both roles (tests, benchmarks, ``fedforget data split``) nothing is refused:
those are the data's owner at work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

SERVING, NODE = "serving", "node"
_ROLE: ContextVar[str | None] = ContextVar("fedforget_data_role", default=None)


class TrainingRowsRefused(RuntimeError):
    """Training rows were asked for in the serving role."""


@contextmanager
def _role(role: str) -> Iterator[None]:
    token = _ROLE.set(role)
    try:
        yield
    finally:
        _ROLE.reset(token)


def serving_role() -> AbstractContextManager[None]:
    """The ServerApp's and the coordinator's role: training rows are refused."""
    return _role(SERVING)


def node_role() -> AbstractContextManager[None]:
    """A node's role, for one handler call: it reads its own rows."""
    return _role(NODE)


def current_role() -> str | None:
    return _ROLE.get()


def require_training_rows(what: str) -> None:
    """Raise :class:`TrainingRowsRefused` when called in the serving role."""
    if _ROLE.get() == SERVING:
        raise TrainingRowsRefused(f"{what} reads clients' training rows, which the server and the coordinator "
                                  "never do; only a node reads its own, inside its handler")
