"""The ClientApp: Flower handlers that dispatch to the methods' client-side work.

Flower 1.42 starts a fresh ClientApp process for every message, so every import here is paid per
message. This module therefore imports only flwr at the top and each handler imports the module it
dispatches to: the partition query and forgetting pay flwr + numpy (``client_site``,
``forget_client``), LoRA training and evaluation pay torch + peft, and nothing pays for another
method's stack. ``tests/unit/test_client_app_imports.py`` keeps it that way.
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    from fedforget.strategies import client_site

    return client_site.describe(msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    from fedforget.strategies import client_work

    return client_work.train_adapter(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    from fedforget.strategies import client_work

    return client_work.evaluate_adapter(msg, context)


@app.train("chain")
def train_chain(msg: Message, context: Context) -> Message:
    from fedforget.strategies import chain_client

    return chain_client.train_chain_position(msg, context)


@app.query("forget")
def forget(msg: Message, context: Context) -> Message:
    from fedforget.strategies import forget_client

    return forget_client.forget_samples(msg, context)


# -- HO-SFL and the split baselines; hosfl_client is imported on first use -------------
@app.train("forward")
def split_forward(msg: Message, context: Context) -> Message:
    from fedforget.strategies import hosfl_client

    return hosfl_client.forward(msg, context)


@app.train("zo")
def split_zo(msg: Message, context: Context) -> Message:
    from fedforget.strategies import hosfl_client

    return hosfl_client.zo_phase(msg, context)


@app.train("backprop")
def split_backprop(msg: Message, context: Context) -> Message:
    from fedforget.strategies import hosfl_client

    return hosfl_client.backprop(msg, context)


# -- SAFE; safe_client is imported on first use -----------------------------------------
@app.train("safe")
def safe_train(msg: Message, context: Context) -> Message:
    from fedforget.strategies import safe_client

    return safe_client.train_cliques(msg, context)


@app.query("safeproto")
def safe_prototypes(msg: Message, context: Context) -> Message:
    from fedforget.strategies import safe_client

    return safe_client.prototype_sums(msg, context)


@app.query("safeforget")
def safe_forget(msg: Message, context: Context) -> Message:
    from fedforget.strategies import safe_client

    return safe_client.forget_samples(msg, context)
