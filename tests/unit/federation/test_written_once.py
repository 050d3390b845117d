"""Who holds which partition is asked in one place (registration, failover and propagation share it), forget
requests are built in one place (a retrain's and ``forget --propagate``'s), and one node handler answers them
for every method. Read with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "fedforget"


@lru_cache(maxsize=1)
def calls() -> dict[str, frozenset[str]]:
    """Called name (a function, a class or a method) → the modules of ``fedforget`` (paths under it) calling it."""
    out: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                out.setdefault(str(called), set()).add(path.relative_to(PACKAGE).as_posix())
    return {name: frozenset(modules) for name, modules in out.items()}


def callers(name: str) -> frozenset[str]:
    return calls().get(name, frozenset())


def test_nodes_are_discovered_in_one_place():
    # messaging's ReliableGrid passes the call through to the runtime's Grid
    assert callers("get_node_ids") == {"federation/discovery.py", "federation/messaging.py"}


def test_forget_requests_have_one_sender_and_one_node_handler():
    assert callers("ForgetSamples") == {"federation/forget_messages.py"}
    assert callers("ForgetAck") == {"federation/forget_client.py"}


def test_a_second_caller_is_seen():
    assert "federation/discovery.py" in callers("send")  # the probe sees a call through a parameter
