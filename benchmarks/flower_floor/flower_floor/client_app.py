"""A ClientApp that replies at once: Flower's process start and transport, and nothing else."""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    return Message(RecordDict({"info": ConfigRecord({"ok": 1})}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    metrics = MetricRecord({"num-examples": 1})
    return Message(RecordDict({"arrays": msg.content["arrays"], "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1, "accuracy": 0.0})}), reply_to=msg)
