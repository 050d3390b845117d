"""The ClientApp: Flower handlers that dispatch to the methods' client-side work.

Flower 1.42 starts a fresh ClientApp process for every message, so every import here is paid per
message. This module therefore imports only flwr and the method registry (names, no code), and each
handler imports the module it dispatches to when a message arrives: the partition query and
forgetting pay flwr + numpy (``client_site``, ``forget_client``), LoRA training and evaluation pay
torch + peft, and nothing pays for another method's stack. ``tests/unit/test_client_app_imports.py``
keeps it that way. The handlers are the registry's (:func:`fedforget.methods.registry.client_handlers`).
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedforget.methods.registry import client_handlers, resolve
from fedforget.tasks.data_access import node_role

app = ClientApp()

Handler = Callable[[Message, Context], Message]


def lazy_handler(target: str) -> Handler:
    """A handler that imports ``"module:function"`` on its first message and calls it."""

    def handle(msg: Message, context: Context) -> Message:
        with node_role():  # a node reads its own training rows; the in-process server around it reads none
            return resolve(target)(msg, context)

    handle.__name__ = handle.__qualname__ = target.partition(":")[2]
    handle.__doc__ = f"Dispatch to {target}."
    return handle


def register(client_app: ClientApp, handlers: dict[str, str]) -> None:
    """``@app.<category>(<action>)`` for every message type; a bare category is Flower's default action."""
    for message_type, target in sorted(handlers.items()):
        category, _, action = message_type.partition(".")
        decorate = getattr(client_app, category)
        (decorate(action) if action else decorate())(lazy_handler(target))


register(app, client_handlers())
