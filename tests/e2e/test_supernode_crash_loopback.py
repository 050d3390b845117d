"""A real SuperNode killed mid-round on the loopback deployment: ``kill -9`` of its whole
process session while it holds a training message (``train.chain`` of a chain method; fedavg's ``train.fedavg``
goes through the same failure rule, its restart is tested in process), then a restart with the same partition and
state dir (a new node id). The run must finish, re-map the partition to the new node and redo its
work, and serve exactly the bytes of an uninterrupted in-process run."""

from __future__ import annotations

import socket
import subprocess

import pytest

from fedforget.launch import kill_tree, loopback_deployment
from fedforget.store import Store
from fedforget.unlearning.flwr_runner import app_dir

from ..integration.helpers import flwr_run_config, train_in_process

pytestmark = pytest.mark.e2e

NODES = 3
VICTIM = 1
CONFIG = {"method": "fedsgt", "task": "digits-mlp", "chains.groups": 2, "chains.budget": 2, "slices-per-client": 1,
          "chains.rounds-per-phase": 1,  # one round per chain position: a message per node, not three
          "lr": 0.02, "local-epochs": 2, "seed": 5}


def _artifacts(store: Store) -> tuple[dict[str, str], list[str]]:
    """(sha256 of every recorded artifact, the served ones)."""
    ledger = store.ledger()
    try:
        return {a["artifact"]: a["sha256"] for a in ledger.artifacts()}, sorted(ledger.serving()["artifacts"])
    finally:
        ledger.close()


def test_supernode_killed_mid_round_is_remapped_after_restart_and_serves_exact_bytes(tmp_path):
    config = CONFIG
    store_path = tmp_path / "s"
    out = tmp_path / "flwr-run.out"
    with loopback_deployment(tmp_path / "deploy", NODES) as fed, open(out, "w") as sink:
        run = subprocess.Popen(fed.run_command(flwr_run_config(config, store_path)), env=fed.env, cwd=app_dir(),
                               stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            fed.kill_node_mid_round(VICTIM, lambda: run.poll() is None)  # past its partition query
            fed.restart_node(VICTIM)
            code = run.wait(timeout=600)
        finally:
            kill_tree(run.pid)
    log = out.read_text(errors="replace")
    assert code == 0 and "store written to" in log, log[-3000:]
    assert f"partition {VICTIM} is back on node" in log, log[-3000:]  # re-mapped by the redo rule
    assert "excluded" not in log
    shas, served = _artifacts(Store.open(store_path))
    reference, reference_served = _artifacts(train_in_process(tmp_path / "inproc", NODES, **config))
    assert served and served == reference_served  # everything built and served, nothing left out
    assert shas == reference  # the same bytes as the uninterrupted in-process run


def test_a_supernode_whose_port_was_taken_while_it_was_down_restarts_on_another(tmp_path):
    """Between a crash and the restart, anything may take the port the dead SuperNode served on (an outgoing
    connection's ephemeral port, on a busy machine); the restart must still bring the node back."""
    with loopback_deployment(tmp_path / "deploy", 1) as fed:
        fed.kill_node(0)
        port = int(fed.env["FEDFORGET_DEPLOY_PORT"]) + 10  # node 0's Runtime API port (loopback.sh)
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the dead one's TIME_WAIT
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            fed.restart_node(0)
        assert "address already in use" in fed.node_log(0).read_text(errors="replace")
