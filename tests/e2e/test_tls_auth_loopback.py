"""The loopback deployment with TLS and SuperNode authentication (`make deploy-up TLS=1 AUTH=1`):
a run trains bit-identically to the in-process runtime over TLS, plain HTTP is refused, and a SuperNode
whose key is not registered is refused while the registered ones serve."""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import urllib.request

import pytest

from fedforget.launch import kill_tree, loopback_deployment, wait_for_nodes
from fedforget.store import Store
from fedforget.unlearning.flwr_runner import app_dir

from ..integration.helpers import artifact_shas, flwr_run_config, train_in_process

pytestmark = pytest.mark.e2e

NODES = 2
CONFIG = {"method": "fedsgt", "task": "digits-mlp", "chains.groups": 2, "chains.budget": 1, "slices-per-client": 1,
          "chains.rounds-per-phase": 1,  # one round per chain position: a message per node, not three
          "lr": 0.02, "local-epochs": 1, "seed": 6}


def _address(fed) -> str:  # noqa: ANN001
    return fed.env["FEDFORGET_DEPLOY_PORT"]


def test_tls_and_node_auth_on_loopback_train_exactly_and_refuse_an_unregistered_node(tmp_path):
    folder = tmp_path / "deploy"
    with loopback_deployment(folder, NODES, tls=True, auth=True) as fed:
        port = _address(fed)
        ca = folder / "deploy" / "certs" / "ca.crt"
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/health", timeout=10,
                                    context=ssl.create_default_context(cafile=str(ca))) as resp:
            assert resp.status == 200
        with pytest.raises(OSError):  # plain HTTP gets no answer from a TLS port
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10)

        store_path = tmp_path / "s"
        proc = fed.flwr_run(flwr_run_config(CONFIG, store_path), timeout=900)
        assert proc.returncode == 0 and "store written to" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
        reference = artifact_shas(train_in_process(tmp_path / "inproc", NODES, **CONFIG))
        assert artifact_shas(Store.open(store_path)) == reference

        rogue_keys = tmp_path / "rogue-keys"
        subprocess.run(["bash", str(app_dir() / "deploy" / "keys.sh"), str(rogue_keys), "1"], check=True,
                       capture_output=True, env=fed.env)
        log = tmp_path / "rogue.log"
        with open(log, "w") as out:
            rogue = subprocess.Popen(
                ["flower-supernode", "--root-certificates", str(ca), "--superlink", f"127.0.0.1:{port}",
                 "--auth-supernode-private-key", str(rogue_keys / "supernode-0"), "--host", "127.0.0.1",
                 "--port", str(int(port) + 9), "--node-config", f"partition-id=0 num-partitions={NODES}"],
                stdout=out, stderr=subprocess.STDOUT, env={**fed.env, "FLWR_HOME": str(tmp_path / "rogue-home")},
                start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and "Failed to activate SuperNode" not in log.read_text():
                time.sleep(0.5)
        finally:
            kill_tree(rogue.pid)
        assert "Failed to activate SuperNode" in log.read_text(), log.read_text()[-2000:]
        wait_for_nodes(fed, NODES, 60)  # control: the registered nodes are still online
        listed = subprocess.run(["flwr", "supernode", "list", fed.connection, "--format", "json"], env=fed.env,
                                capture_output=True, text=True, timeout=60, check=False).stdout
        assert listed.count('"online"') == NODES or listed.lower().count("online") == NODES
    assert not os.path.exists(folder / "deploy" / "superlink.pid")
