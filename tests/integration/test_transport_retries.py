"""Lost messages are re-sent (safe: replies are pure functions of message and partition); a
ClientApp that raises is not, and neither are endless failures."""

from __future__ import annotations

import pytest
from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.supercore.task_identity import TaskIdentity

from fedforget.client_app import app as client_app
from fedforget.federation import messaging
from fedforget.federation.failover import REJOIN_ENV
from fedforget.federation.messaging import NodeFailure
from fedforget.inprocess import InProcessGrid, default_run_config
from fedforget.server_app import app as server_app
from fedforget.store import Store

from .helpers import DIGITS, served_sha, train_in_process


class LossyGrid(InProcessGrid):
    """Loses the replies of the first ``losses`` train messages it carries: they come back as
    ``code`` errors, or (``silent``) never come back at all."""

    def __init__(self, *args, losses: int, code: int = ErrorCode.REPLY_MESSAGE_UNAVAILABLE, silent: bool = False,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.losses = losses
        self.code = code
        self.silent = silent
        self.lost = 0

    def push_messages(self, messages):
        ids = list(super().push_messages(messages))
        for mid in ids:
            reply = self._replies[mid]
            if reply.metadata.message_type == "train.fedavg" and self.lost < self.losses:
                self.lost += 1
                if self.silent:
                    del self._replies[mid]
                else:
                    self._replies[mid] = Message(Error(code=self.code, reason="object-push session expired"),
                                                 reply_to=_as_instruction(reply, mid))
        return ids


def _as_instruction(reply: Message, message_id: str) -> Message:
    """The instruction ``reply`` answers, rebuilt so an error reply can point at it."""
    msg = Message(RecordDict(), dst_node_id=reply.metadata.src_node_id, message_type=reply.metadata.message_type)
    msg.metadata.__dict__["_message_id"] = message_id
    return msg


def _run(store, num_nodes: int, grid_kwargs: dict) -> Store:
    config = {**default_run_config(), **DIGITS, "store": str(store), "num-rounds": 2}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, InProcessGrid.SERVER_NODE_ID, 1
    grid = LossyGrid(client_app, num_nodes, config, **grid_kwargs)
    server_app(grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config))
    return Store.open(store)


def test_lost_replies_are_resent_and_the_result_is_unchanged(tmp_path):
    clean = served_sha(train_in_process(tmp_path / "clean", num_nodes=3, **{"num-rounds": 2}))
    lossy = _run(tmp_path / "lossy", 3, {"losses": 2})
    assert served_sha(lossy) == clean


def test_a_reply_that_never_comes_is_asked_for_again(tmp_path, monkeypatch):
    monkeypatch.setattr(messaging, "MIN_PATIENCE_S", 0.2)
    clean = served_sha(train_in_process(tmp_path / "clean", num_nodes=3, **{"num-rounds": 2}))
    silent = _run(tmp_path / "silent", 3, {"losses": 1, "silent": True})
    assert served_sha(silent) == clean


def test_a_transport_failure_that_persists_excludes_the_partition_and_leaves_the_model_unbuilt(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.setenv(REJOIN_ENV, "1")
    store = _run(tmp_path / "s", 1, {"losses": 100})
    ledger = store.ledger()
    try:
        assert ledger.get_meta("unbuilt") == {"artifacts": ["fedavg/global"], "partitions": [0]}
        assert not ledger.serving()["available"]
    finally:
        ledger.close()


def test_a_client_exception_is_redone_once_and_the_result_is_unchanged(tmp_path):
    clean = served_sha(train_in_process(tmp_path / "clean", num_nodes=2, **{"num-rounds": 2}))
    redone = _run(tmp_path / "s", 2, {"losses": 1, "code": ErrorCode.CLIENT_APP_RAISED_EXCEPTION})
    assert served_sha(redone) == clean


def test_a_client_exception_on_every_node_stops_the_run(tmp_path):
    with pytest.raises(NodeFailure, match="every ClientApp failed"):
        _run(tmp_path / "s", 2, {"losses": 100, "code": ErrorCode.CLIENT_APP_RAISED_EXCEPTION})
