"""An in-process runtime: the real ServerApp and ClientApp objects, a Grid that calls clients directly.

For fast tests and benchmarks (no Ray, no processes). Each node keeps its own Context (with
``partition-id`` / ``num-partitions`` in ``node_config``, like the simulation engine), and a
ClientApp exception comes back as an error reply, as it would from a real SuperNode.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.task_identity import TaskIdentity

import fedforget.methods.registry  # noqa: F401 - hands the methods to the run config's parser, as the apps do
from fedforget.tasks.data_access import node_role

CLIENT_APP_RAISED_EXCEPTION = 2
#: The source checkout's app manifest; absent in an installed copy, which never reads it.
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def default_run_config() -> dict[str, object]:
    """The run-config defaults, flattened as ``flwr run`` starts from (``safe.coarse``).

    They come from the package's typed config, so an installed copy needs no source checkout; a unit
    test keeps ``[tool.flwr.app.config]`` in the pyproject equal to them, key for key and type for type.
    """
    from fedforget.core.config import declared_defaults

    return declared_defaults()


class InProcessGrid(Grid):
    """A Grid whose nodes are ClientApp calls in this process."""

    SERVER_NODE_ID = 1

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: Mapping[str, object],
                 node_configs: Sequence[Mapping[str, object]] = ()) -> None:
        self.client_app = client_app
        first = 1000
        extra = list(node_configs) + [{}] * (num_nodes - len(node_configs))
        self.contexts = {
            first + i: Context(run_id=1, node_id=first + i,
                               node_config={"partition-id": i, "num-partitions": num_nodes, **extra[i]},
                               state=RecordDict(), run_config=dict(run_config))
            for i in range(num_nodes)
        }
        self._replies: dict[str, Message] = {}
        self._run = None

    # Grid's abstract API -------------------------------------------------------------------------
    def set_run(self, run) -> None:  # noqa: ANN001
        self._run = run

    @property
    def run(self):  # noqa: ANN201
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # noqa: ANN001, ANN201
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            msg_id = str(uuid.uuid4())
            msg.metadata.__dict__["_message_id"] = msg_id
            dst = msg.metadata.dst_node_id
            if dst not in self.contexts:
                raise ValueError(f"no node {dst}")
            try:
                with node_role():  # a node's call: it reads its own rows, the ServerApp around it none
                    reply = self.client_app(msg, self.contexts[dst])
            except Exception as exc:  # a raising ClientApp becomes an error reply, as in Flower
                reply = Message(Error(code=CLIENT_APP_RAISED_EXCEPTION, reason=f"{type(exc).__name__}: {exc}"),
                                reply_to=msg)
            reply.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            self._replies[msg_id] = reply
            ids.append(msg_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def run_in_process(run_config: Mapping[str, object], num_nodes: int,
                   server_app: ServerApp | None = None, client_app: ClientApp | None = None,
                   node_configs: Sequence[Mapping[str, object]] = ()) -> None:
    """Run the app once with ``num_nodes`` in-process nodes; overrides merge into the defaults.

    ``node_configs``: each node's own node config (``node-name``, ``data-dir``), as ``--node-config`` gives
    a SuperNode; the partition keys are set here."""
    if server_app is None or client_app is None:
        from fedforget.client_app import app as default_client
        from fedforget.server_app import app as default_server

        server_app = server_app or default_server
        client_app = client_app or default_client
    config = {**default_run_config(), **run_config}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, InProcessGrid.SERVER_NODE_ID, 1
    grid = InProcessGrid(client_app, num_nodes, config, node_configs)
    context = Context(run_id=1, node_id=InProcessGrid.SERVER_NODE_ID, node_config={}, state=RecordDict(),
                      run_config=config)
    server_app(grid, context)
