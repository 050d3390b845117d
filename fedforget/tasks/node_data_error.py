"""How a node's records are refused, shared by the readers of each column kind: the error, how a value is quoted
in its one line, and the bound on how many input values a split may hold."""

from __future__ import annotations

from fedforget.core.ids import QUOTED_CHARS

#: Most input values in one split (each becomes a float64 before scaling): 2 GiB of them.
MAX_INPUT_VALUES = 2**28


class NodeDataError(ValueError):
    """A node's data directory cannot be used; the message is one line naming the node and what to do."""


def quote(text: str) -> str:
    """``text`` as a refusal line shows it: cut to a bounded length."""
    return repr(text[:QUOTED_CHARS]) + ("…" if len(text) > QUOTED_CHARS else "")
