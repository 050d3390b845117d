"""The ClientApp: Flower handlers that dispatch to the methods' client-side work.

Flower 1.42 starts a fresh ClientApp process for every message, so every import here is paid per
message. This module therefore imports only flwr and the method registry (declarations whose hooks import
their code when called), so each handler imports its module when a message arrives: the partition query and
forgetting pay flwr + numpy (``client_site``, ``forget_client``), LoRA training and evaluation pay
torch + peft, and nothing pays for another method's stack. ``tests/unit/test_client_app_imports.py``
keeps it that way. The handlers are the registry's (:func:`fedforget.methods.registry.client_handlers`).
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedforget.federation.carried_config import carried_run_config
from fedforget.methods.registry import client_handlers
from fedforget.tasks.data_access import node_role

app = ClientApp()

Handler = Callable[[Message, Context], Message]


def lazy_handler(target: Handler) -> Handler:
    """``target`` under the node's role, reading the run's config the message carries; it imports its code on its
    first message."""

    def handle(msg: Message, context: Context) -> Message:
        # a node reads its own training rows (the in-process server around it reads none), and trains by the
        # strategy the server started, whose config the message carries
        with node_role(), carried_run_config(msg, context):
            return target(msg, context)

    handle.__name__ = handle.__qualname__ = target.__name__
    handle.__doc__ = f"Dispatch to {target.__module__}.{target.__qualname__}."
    return handle


def register(client_app: ClientApp, handlers: dict[str, Handler]) -> None:
    """``@app.<category>(<action>)`` for every message type; a bare category is Flower's default action."""
    for message_type, target in sorted(handlers.items()):
        category, _, action = message_type.partition(".")
        decorate = getattr(client_app, category)
        (decorate(action) if action else decorate())(lazy_handler(target))


register(app, client_handlers())
