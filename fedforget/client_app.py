"""The ClientApp: Flower handlers that dispatch to the methods' client-side work."""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedforget.strategies import chain_client, client_work

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    return client_work.describe(msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    return client_work.train_adapter(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return client_work.evaluate_adapter(msg, context)


@app.train("chain")
def train_chain(msg: Message, context: Context) -> Message:
    return chain_client.train_chain_position(msg, context)


@app.query("forget")
def forget(msg: Message, context: Context) -> Message:
    return chain_client.forget_samples(msg, context)
# -- HO-SFL and the split baselines (issue 4); hosfl_client is imported on first use -------------
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


# -- SAFE (issue 6); safe_client is imported on first use -----------------------------------------
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
