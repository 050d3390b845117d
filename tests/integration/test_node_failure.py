"""Node failures and bad replies mid-run, through the real ServerApp and ClientApp on an in-process Grid
that loses nodes the way a deployment does (``NODE_UNAVAILABLE`` error replies, new node ids after a
restart). Rule: redo on the partition's new node, else exclude what needs it; served stays exact."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.supercore.task_identity import TaskIdentity

from fedforget.client_app import app as client_app
from fedforget.federation.failover import REJOIN_ENV
from fedforget.federation.messaging import PARTITION_KEY
from fedforget.inprocess import InProcessGrid, default_run_config, run_in_process
from fedforget.server_app import app as server_app
from fedforget.store import Store

from .helpers import artifact_shas, train_in_process

CONFIG = {"task": "digits-mlp", "lr": 0.02, "local-epochs": 1, "method": "fedsgt", "chains.groups": 2,
          "chains.budget": 2, "slices-per-client": 1, "seed": 4}
CHAIN = "train.chain"


class FaultyGrid(InProcessGrid):
    """Nodes that die (every later message answers NODE_UNAVAILABLE), optionally coming back under a new
    node id with the same partition, as a restarted SuperNode does; or that send malformed replies."""

    def __init__(self, *args, die: dict[int, bool] | None = None, tamper: dict[int, str] | None = None,
                 kinds: tuple[str, ...] = (CHAIN,), raise_once: set[int] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.kinds = kinds  # the message types that die or are tampered with
        self.raise_once = set(raise_once or ())  # partitions whose next such message raises, once
        self.die = dict(die or {})  # partition -> comes back?
        self.tamper = dict(tamper or {})  # partition -> how its chain replies are broken
        self.dead: set[int] = set()

    def _partition(self, node: int) -> int:
        return int(self.contexts[node].node_config["partition-id"])

    def push_messages(self, messages):  # noqa: ANN001, ANN201
        ids = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            part = self._partition(node) if node in self.contexts else None
            kind = msg.metadata.message_type in self.kinds
            if kind and part in self.raise_once:
                self.raise_once.discard(part)
                msg_id = str(uuid.uuid4())
                msg.metadata.__dict__["_message_id"] = msg_id
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="RuntimeError: disk full"),
                                reply_to=msg)
                reply.metadata.__dict__["_message_id"] = str(uuid.uuid4())
                self._replies[msg_id] = reply
                ids.append(msg_id)
                continue
            if node in self.dead or (kind and part in self.die):
                if node not in self.dead and part in self.die:
                    self.dead.add(node)
                    if self.die.pop(part):  # restart: same partition, same disk state, new node id
                        old = self.contexts[node]
                        new_id = max(self.contexts) + 1
                        self.contexts[new_id] = Context(run_id=1, node_id=new_id, node_config=dict(old.node_config),
                                                        state=RecordDict(), run_config=old.run_config)
                msg_id = str(uuid.uuid4())
                msg.metadata.__dict__["_message_id"] = msg_id
                reply = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="node is gone"), reply_to=msg)
                reply.metadata.__dict__["_message_id"] = str(uuid.uuid4())
                self._replies[msg_id] = reply
                ids.append(msg_id)
                continue
            [msg_id] = super().push_messages([msg])
            if kind and part in self.tamper:
                self._replies[msg_id] = self._broken(self._replies[msg_id], self.tamper[part])
            ids.append(msg_id)
        return ids

    def get_node_ids(self):  # noqa: ANN201
        return [n for n in self.contexts if n not in self.dead]

    @staticmethod
    def _broken(reply: Message, how: str) -> Message:
        """The reply with its first tensor record broken (NaN, smuggled bytes, a wrong shape), its
        partition id changed, an implausible received-model evaluation, or its tensors missing; every
        other record kept."""
        if reply.has_error():
            return reply
        records = dict(reply.content.items())
        name = next(k for k, v in records.items() if isinstance(v, ArrayRecord))
        arrays = {k: v.numpy().copy() for k, v in records[name].items()}
        first = next(k for k, v in arrays.items() if np.issubdtype(v.dtype, np.floating))
        if how == "nan":
            arrays[first] = np.full_like(arrays[first], np.nan)
        elif how == "oversized":
            arrays["smuggled"] = np.zeros(4_000_000, dtype=np.float32)
        elif how == "shape":
            arrays[first] = np.zeros((3, 3), dtype=arrays[first].dtype)
        elif how == "partition":
            meta = next(k for k, v in records.items() if not isinstance(v, ArrayRecord) and PARTITION_KEY in v)
            records[meta] = type(records[meta])({**dict(records[meta]), PARTITION_KEY: 99})
        elif how == "received":  # fedavg: an evaluation of the received model on more rows than the test split
            records["metrics"] = type(records["metrics"])({**dict(records["metrics"]), "received-examples": 10**9})
        if how == "malformed":
            del records[name]
        else:
            records[name] = ArrayRecord({k: Array(v) for k, v in arrays.items()})
        out = Message(RecordDict(records), reply_to=reply)  # keep ids of the original reply
        out.metadata.__dict__.update({k: v for k, v in reply.metadata.__dict__.items()})
        return out


def run_with(grid_kwargs: dict, store, action: str = "train", nodes: int = 3,  # noqa: ANN001
             config: dict | None = None) -> Store:
    config = {**default_run_config(), **(CONFIG if config is None else config), "store": str(store), "action": action}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, InProcessGrid.SERVER_NODE_ID, 1
    grid = FaultyGrid(client_app, nodes, config, **grid_kwargs)
    server_app(grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config))
    return Store.open(store)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, str]:
    return artifact_shas(train_in_process(tmp_path_factory.mktemp("ref") / "s", 3, **CONFIG))


def test_a_node_that_restarts_with_a_new_id_is_remapped_and_its_work_redone_exactly(reference, tmp_path):
    store = run_with({"die": {1: True}}, tmp_path / "s")
    assert artifact_shas(store) == reference
    assert store.ledger().get_meta("unbuilt") == {"artifacts": [], "partitions": []}


def test_a_node_that_stays_dead_is_excluded_by_rule_and_what_is_served_is_exact(reference, tmp_path, monkeypatch):
    monkeypatch.setenv(REJOIN_ENV, "1")
    store = run_with({"die": {2: False}}, tmp_path / "s")
    built = artifact_shas(store)
    unbuilt = store.ledger().get_meta("unbuilt")
    assert unbuilt["partitions"] == [2] and unbuilt["artifacts"]
    assert built and set(built).isdisjoint(unbuilt["artifacts"])
    assert set(built) | set(unbuilt["artifacts"]) == set(reference)
    assert all(built[a] == reference[a] for a in built)  # every built artifact is bit-identical
    served = store.ledger().serving()["artifacts"]
    assert served and set(served) <= set(built)
    # the node is back: a retrain builds exactly what was missing
    run_in_process({**CONFIG, "store": str(tmp_path / "s"), "action": "retrain"}, 3)
    assert artifact_shas(store) == reference


@pytest.mark.parametrize("how", ["nan", "oversized", "shape"])
def test_malformed_or_oversized_client_replies_are_rejected_without_crashing_the_run(reference, tmp_path, how):
    store = run_with({"tamper": {0: how}}, tmp_path / "s")
    built = artifact_shas(store)
    unbuilt = store.ledger().get_meta("unbuilt")
    assert unbuilt["partitions"] == [0]
    assert all(built[a] == reference[a] for a in built)
    assert set(built) | set(unbuilt["artifacts"]) == set(reference)
