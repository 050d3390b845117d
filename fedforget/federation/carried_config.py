"""The run's config, carried by every message the server sends: the strategy as it was built is what the
nodes train by.

A ServerApp may build a strategy in code (``FedSGT(groups=4, lr=0.05)``) with values its app's run config does
not hold; the nodes would otherwise read their settings from the app's run config (``context.run_config``) and
train by other values than the server plans with. So the server's Grid adds the run's resolved config to each
message it pushes (:class:`~fedforget.federation.messaging.ReliableGrid`), and the ClientApp hands a handler the
node's context with that config in place of the app's for the message (:func:`carried_run_config`). What is
not in a message (a message from a server that carries none) is read from the app's run config, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from flwr.app import ConfigRecord, Context, Message

#: the record of a message that holds the run's config (Flower's run-config keys, resolved)
RUN_CONFIG_RECORD = "fedforget.run-config"

Value = bool | int | float | str


def carry(message: Message, run_config: Mapping[str, Value]) -> Message:
    """``message`` with the run's config added (once: a message sent again keeps the one it has)."""
    if RUN_CONFIG_RECORD not in message.content:
        message.content[RUN_CONFIG_RECORD] = ConfigRecord(dict(run_config))
    return message


@contextmanager
def carried_run_config(msg: Message, context: Context) -> Iterator[None]:
    """For one handler call: the node's ``context.run_config`` is the message's carried config over the app's
    (restored after: a simulated node's context outlives the message)."""
    carried = msg.content.config_records.get(RUN_CONFIG_RECORD)
    if carried is None:
        yield
        return
    own = context.run_config
    context.run_config = {**own, **dict(carried)}
    try:
        yield
    finally:
        context.run_config = own
