"""A faithful train.chain reply passes the reply check however many tensors it carries (a transformer's
LoRA has dozens, each framed with its long name), and one with smuggled extra bytes still fails."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedforget.federation.failover import check_chain_reply
from fedforget.federation.messaging import PARTITION_KEY


def _reply(arrays: dict[str, np.ndarray]) -> Message:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    content = RecordDict({"arrays": ArrayRecord({k: Array(v.copy()) for k, v in arrays.items()}),
                          "metrics": MetricRecord({PARTITION_KEY: 0, "num-examples": 5, "train-loss": 0.1})})
    return Message(content, dst_node_id=1, message_type="train.chain")


def test_a_faithful_reply_with_many_long_named_tensors_is_accepted_and_smuggled_bytes_are_not():
    name = "base_model.model.encoder.layer.{i}.attention.self.{t}.lora_{ab}.weight"
    sent = {name.format(i=i, t=t, ab=ab): np.zeros((8, 384) if ab == "A" else (384, 8), np.float32)
            for i in range(6) for t in ("query", "value") for ab in "AB"}
    sent["head.weight"] = np.zeros((2, 384), np.float32)
    assert check_chain_reply(_reply(sent), 0, sent, 100) is None
    smuggled = {**sent, "head.weight": np.zeros((2, 384), np.float32),
                "extra": np.zeros(4096, np.float32)}
    assert "oversized" in str(check_chain_reply(_reply(smuggled), 0, sent, 100))
