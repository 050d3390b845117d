"""HO-SFL, SFL and ZO-SFL through the real ServerApp and ClientApp on the in-process Grid."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedforget.client_app import app as client_app
from fedforget.core.config import ConfigError, parse_run_config
from fedforget.inprocess import InProcessGrid, default_run_config
from fedforget.methods.hosfl import client as hosfl_client
from fedforget.methods.hosfl import zo
from fedforget.methods.hosfl.server import client_theta_from_artifact
from fedforget.methods.hosfl.split_model import build_split_model
from fedforget.server_app import app as server_app
from fedforget.store import Store
from fedforget.unlearning.status import store_status
from tests.integration.helpers import served_ids, served_sha, train_in_process

SPLIT = {"task": "digits-mlp", "partitioner": "iid", "lr": 0.02, "hosfl.client-lr": 0.01}


def _run(store: Path, nodes: int, **overrides: object) -> Store:
    return train_in_process(store, num_nodes=nodes, **{**SPLIT, **overrides})


def _replay_all(store: Store) -> dict[int, tuple[int, bool]]:
    """Replay every client's persisted θ_c to the end of the run; (its version, equal to the server's θ_c)."""
    manifest = store.manifest()
    cfg = parse_run_config(manifest["config"])
    info = manifest["split"]
    split = build_split_model(cfg, 10)
    served_sha256 = served_sha(store)
    theta_server = client_theta_from_artifact(store.get_arrays(served_sha256), split.client_names)
    hist = store.get_arrays(info["history"])
    entries = [(hist["seeds"][i].tolist(), hist["vbar"][i].tolist()) for i in range(len(hist["seeds"]))]
    out = {}
    for part in range(manifest["num-partitions"]):
        path = store.root / "clients" / str(part) / f"split-{info['run-tag']}.safetensors"
        theta, version = hosfl_client.load_state(path, split.initial_client)
        replayed = zo.replay(theta, entries[version:], cfg.hosfl.mu, cfg.hosfl.client_lr)
        out[part] = (version, torch.equal(replayed, theta_server))
    return out


def test_hosfl_learns_digits_well_above_chance(tmp_path):
    store = _run(tmp_path / "s", 5, method="hosfl", **{"num-rounds": 40, "hosfl.clients-per-round": 3,
                                                       "hosfl.eval-every": 20})
    rows = [r for r in store.metrics() if "accuracy" in r]
    assert rows[0]["round"] == 0 and rows[-1]["round"] == 40
    assert rows[-1]["accuracy"] >= 0.5 > rows[0]["accuracy"] + 0.3  # chance is 0.1
    assert served_ids(store) == ["hosfl/global"]
    assert store_status(store)["split"]["client_rounds"] == 120


@pytest.mark.parametrize("lora_r", [2, 16])
def test_aggregation_upload_is_p_scalars_whatever_the_client_size(tmp_path, lora_r):
    p, k, batch = 4, 2, 32
    store = _run(tmp_path / "s", 3, method="hosfl", **{
        "hosfl.perturbations": p, "lora-r": lora_r, "lora-alpha": 2 * lora_r, "num-rounds": 3,
        "hosfl.clients-per-round": k, "hosfl.eval-every": 3})
    d_c = store.manifest()["split"]["d_c"]
    assert d_c == lora_r * (64 + 128)  # LoRA A (r x 64) + B (128 x r) on fc1
    for row in store.metrics()[1:]:
        up, down = row["bytes"]["up"], row["bytes"]["down"]
        assert up["aggregation"] == k * p * 4  # P float32 scalars per client, no d_c term
        assert up["activations"] == k * (batch * 128 * 4 + batch * 8)  # z (B x 128 fp32) + labels
        assert down["feedback"] == k * batch * 128 * 4  # λ has z's shape
        # this round's seeds (8P per client) + the (seed, v̄) pairs of rounds the client missed (12P each)
        assert (down["aggregation"] - k * 8 * p) % (12 * p) == 0


def test_sfl_aggregation_traffic_grows_with_the_client_model(tmp_path):
    sizes = {}
    for r in (2, 16):
        store = _run(tmp_path / f"s{r}", 3, method="sfl", **{"lora-r": r, "lora-alpha": 2 * r, "num-rounds": 2,
                                                               "hosfl.clients-per-round": 2, "hosfl.eval-every": 2})
        d_c = store.manifest()["split"]["d_c"]
        row = store.metrics()[-1]
        assert row["bytes"]["up"]["aggregation"] == row["bytes"]["down"]["aggregation"] == 2 * 4 * d_c
        sizes[r] = row["bytes"]["up"]["aggregation"]
    assert sizes[16] == 8 * sizes[2]


def test_seed_replay_brings_every_client_to_the_servers_theta_bit_for_bit(tmp_path):
    store = _run(tmp_path / "s", 4, method="hosfl", **{"hosfl.perturbations": 3},
                 **{"num-rounds": 6, "hosfl.clients-per-round": 2, "hosfl.eval-every": 6})
    result = _replay_all(store)
    assert all(equal for _, equal in result.values()), result
    versions = sorted(v for v, _ in result.values())
    assert versions[0] < 5 and len(set(versions)) > 1  # some clients missed rounds and caught up by replay


def test_in_place_perturbation_breaks_replay(tmp_path, monkeypatch):
    """Negative control: the same run with MeZO-style in-place perturbation drifts."""
    monkeypatch.setattr(hosfl_client, "IN_PLACE_PERTURBATION", True)
    store = _run(tmp_path / "s", 4, method="hosfl", **{"hosfl.perturbations": 3},
                 **{"num-rounds": 6, "hosfl.clients-per-round": 2, "hosfl.eval-every": 6})
    result = _replay_all(store)
    assert not all(equal for _, equal in result.values()), result


class FlakyGrid(InProcessGrid):
    """Never answers the messages named in ``silent``: (message type, partition, round)."""

    def __init__(self, *args: object, silent: set[tuple[str, int, int]]) -> None:
        super().__init__(*args)
        self.silent = silent
        self.swallowed: list[tuple[str, int, int]] = []

    def push_messages(self, messages):  # noqa: ANN001, ANN201
        ids = []
        for msg in messages:
            part = int(self.contexts[msg.metadata.dst_node_id].node_config["partition-id"])
            kind = msg.metadata.message_type
            key = (kind, part, int(msg.content["control"]["round"]) if kind.startswith("train.") else -1)
            if key in self.silent:
                self.swallowed.append(key)
                ids.append(str(uuid.uuid4()))  # pushed, and the node is never heard of again
            else:
                ids.extend(super().push_messages([msg]))
        return ids


def test_a_client_that_dies_mid_round_does_not_stall_the_server(tmp_path):
    silent = {("train.zo", 1, 1), ("train.forward", 2, 2)}
    config = {**default_run_config(), **SPLIT, "method": "hosfl", "store": str(tmp_path / "s"), "num-rounds": 4,
              "hosfl.clients-per-round": 3, "hosfl.perturbations": 3, "round-timeout": 1.0, "hosfl.eval-every": 4}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, InProcessGrid.SERVER_NODE_ID, 1
    grid = FlakyGrid(client_app, 3, config, silent=silent)
    server_app(grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config))
    assert sorted(grid.swallowed) == sorted(silent)
    store = Store.open(tmp_path / "s")
    rows = {r["round"]: r for r in store.metrics()}
    assert rows[2]["forward-ok"] == [0, 1, 2] and rows[2]["second-ok"] == [0, 2] and rows[2]["dropped"] == [1]
    assert rows[2]["bytes"]["up"]["aggregation"] == 2 * 3 * 4  # v̄ is the mean of the two that answered
    assert rows[3]["forward-ok"] == [0, 1] and rows[3]["dropped"] == [2]
    assert rows[4]["dropped"] == [] and "accuracy" in rows[4]
    # the dead clients came back in later rounds and are bit-exact again after replay
    assert all(equal for _, equal in _replay_all(store).values())


def test_zo_sfl_sends_two_activation_sets_and_models(tmp_path):
    store = _run(tmp_path / "s", 3, method="zo-sfl", **{"hosfl.client-lr": 1e-4, "num-rounds": 2,
                                                        "hosfl.clients-per-round": 2, "hosfl.eval-every": 2})
    d_c = store.manifest()["split"]["d_c"]
    row = store.metrics()[-1]
    assert row["bytes"]["up"]["activations"] == 2 * (2 * 32 * 128 * 4 + 32 * 8)
    assert row["bytes"]["down"]["feedback"] == 2 * 4  # one float32 loss scalar per client
    assert row["bytes"]["up"]["aggregation"] == 2 * 4 * d_c
    assert row["accuracy"] == row["accuracy"]  # not NaN at a small step


def test_a_client_that_raises_is_dropped_with_its_reason_and_the_run_goes_on(tmp_path, caplog):
    from flwr.clientapp import ClientApp

    broken = ClientApp()

    @broken.query()
    def query(msg: Message, context: Context) -> Message:
        return client_app(msg, context)

    @broken.train("forward")
    def forward(msg: Message, context: Context) -> Message:
        if int(context.node_config["partition-id"]) == 0:
            raise RuntimeError("out of memory on the client")
        return hosfl_client.forward(msg, context)

    @broken.train("zo")
    def zo_phase(msg: Message, context: Context) -> Message:
        return hosfl_client.zo_phase(msg, context)

    from fedforget.inprocess import run_in_process

    run_in_process({**SPLIT, "method": "hosfl", "store": str(tmp_path / "s"), "num-rounds": 2,
                    "hosfl.clients-per-round": 2, "hosfl.eval-every": 2}, 2, server_app=server_app, client_app=broken)
    rows = Store.open(tmp_path / "s").metrics()
    assert all(r["forward-ok"] == [1] and r["dropped"] == [0] for r in rows[1:])
    assert "out of memory on the client" in caplog.text


@pytest.mark.parametrize(
    ("override", "message"),
    [({"hosfl.clients-per-round": 5}, "'hosfl.clients-per-round'=5 is more than the 3 nodes"),
     ({"hosfl.cut": 3}, "'hosfl.cut'=3 is too deep for task 'digits-mlp'")],
)
def test_bad_split_config_fails_before_anything_is_written(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        _run(tmp_path / "s", 3, method="hosfl", **override)
    assert not (tmp_path / "s").exists()


def test_fedforget_status_shows_traffic_by_direction_and_kind(tmp_path):
    import json

    from typer.testing import CliRunner

    from fedforget.unlearning.cli import app

    _run(tmp_path / "s", 3, method="hosfl", **{"hosfl.perturbations": 5, "num-rounds": 2, "hosfl.clients-per-round": 2,
                                               "hosfl.eval-every": 2})
    runner = CliRunner()
    info = json.loads(runner.invoke(app, ["status", "--store", str(tmp_path / "s"), "--json"]).output)["split"]
    assert info["client_rounds"] == 4 and info["samples"] == 4 * 32
    assert info["bytes_per_client_round"]["up"]["aggregation"] == 20.0  # P = 5 float32 scalars
    assert info["bytes_total"]["down"]["feedback"] == 4 * 32 * 128 * 4
    table = runner.invoke(app, ["status", "--store", str(tmp_path / "s")], env={"COLUMNS": "250"}).output
    assert "split" in table and "up: activations" in table and "(20 B/client-round)" in table
