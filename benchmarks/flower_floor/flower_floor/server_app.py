"""Sends the fedavg job's message pattern to every node and waits for the replies; prints the times."""

from __future__ import annotations

import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


def _round_trip(grid: Grid, nodes: list[int], message_type: str, content: RecordDict) -> float:
    t0 = time.monotonic()
    messages = [Message(content, dst_node_id=n, message_type=message_type) for n in nodes]
    replies = list(grid.send_and_receive(messages, timeout=600))
    errors = [r.error for r in replies if r.has_error()]
    if len(replies) != len(nodes) or errors:
        raise RuntimeError(f"{len(replies)} of {len(nodes)} replies, errors: {errors[:3]}")
    return time.monotonic() - t0


@app.main()
def main(grid: Grid, context: Context) -> None:
    rounds = int(context.run_config["num-rounds"])
    payload = ArrayRecord([np.zeros(int(context.run_config["payload-floats"]), dtype=np.float32)])
    nodes = sorted(grid.get_node_ids())
    t_query = _round_trip(grid, nodes, MessageType.QUERY, RecordDict({"config": ConfigRecord({"q": 1})}))
    per_round = []
    for r in range(1, rounds + 1):  # fedavg: evaluation rides on the next round's train message
        t_round = _round_trip(grid, nodes, MessageType.TRAIN, RecordDict({"arrays": payload}))
        if r == rounds:  # only the last model gets evaluate messages of its own
            t_round += _round_trip(grid, nodes, MessageType.EVALUATE, RecordDict({"arrays": payload}))
        per_round.append(t_round)
    print(f"flower-floor: query {t_query:.3f} s; rounds {' '.join(f'{t:.3f}' for t in per_round)} s", flush=True)
