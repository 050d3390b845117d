"""A user's task that trains its own model as the whole model (``Task(train='all')``, or a list of parameter-name
prefixes): fedavg and replay train every parameter of the user's MLP (or only those named), no LoRA and no
fedforget head; what is served is the user's module with the trained weights, its own output; forget + retrain
is bit for bit training from scratch without the record, and ``verify`` says so (and says not, against a
reference that kept the record). A method that trains LoRA + fedforget's head only refuses such a task in one
line, before any store exists. Run on the example app's committed records (examples/tabular-mlp), with the
app's own ServerApp and fedforget's ClientApp."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.core.record_ids import local_sample_id, store_record_key
from fedforget.federation.record_key import hand_over
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.training.supervised import predict_logits
from fedforget.unlearning.cli import app as cli
from fedforget.unlearning.verify import served_outputs, verify_store

from .helpers import example_home, served_sha
from .test_example_tabular_mlp_app import EXAMPLE, NODES, app_config

RECORD = ("node-1", "patient-1-007")
#: what a method needs on the example's 3 nodes (2 slices each): a chain (SISA) or a cluster (FedCIO) per node or two
METHOD_KEYS: dict[str, dict[str, object]] = {"sisa": {"chains.groups": 3}, "fedcio": {"chains.clusters": 2}}
#: the user's own tasks: a 16 → 32 → 4 MLP whose output is the logits, trained whole or its last layer alone
TASKS = '''
import torch
from torch import nn

from fedforget.client import Task


class Classifier(nn.Module):
    def __init__(self, normed=False):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.BatchNorm1d(32) if normed else nn.Identity()
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def make_model(normed=False):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        return Classifier(normed)


def task(train, backbone=make_model):
    return Task(name="whole-mlp", backbone=backbone, feature_dim=4, lora_targets=[], num_classes=4,
                input_column="features", simulation_data="data/node-{partition}", train=train)


ALL = task("all")
FC2 = task(["fc2"])
NOWHERE = task(["fc9"])
NORMED = task("all", lambda: make_model(normed=True))
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example's records as FEDFORGET_HOME, its app and the user's tasks (``whole_tasks``) on sys.path."""
    example_home(EXAMPLE, tmp_path, monkeypatch)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "whole_tasks.py").write_text(TASKS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    return tmp_path


def run_app(store: Path, task: str, method: str, action: str = "train", **keys: object) -> None:
    from tabular_mlp.client_app import app as client_app
    from tabular_mlp.server_app import app as server_app

    from fedforget.inprocess import run_in_process

    config = {**app_config(), "task": f"whole_tasks:{task}", "method": method, "store": str(store),
              "action": action, **keys}
    run_in_process(config, NODES, server_app=server_app, client_app=client_app)


def served_state(store: Store) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v)) for k, v in store.get_arrays(served_sha(store)).items()}


def served_states(store: Store) -> list[dict[str, torch.Tensor]]:
    """Every served artifact's stored state (an ensemble, FedCIO's clusters or SISA's shards, serves several)."""
    ledger = store.ledger()
    try:
        shas = {a["artifact"]: a["sha256"] for a in ledger.artifacts()}
        served = [shas[a] for a in ledger.serving()["artifacts"]]
    finally:
        ledger.close()
    return [{k: torch.from_numpy(np.array(v)) for k, v in store.get_arrays(sha).items()} for sha in served]


def own_probabilities(state: dict[str, torch.Tensor]) -> np.ndarray:
    """The user's module's own output with ``state``, as probabilities."""
    return torch.softmax(predict_logits(users_model_with(state), server_inputs()).double(), dim=1).numpy()


def served_probabilities(store: Store) -> np.ndarray:
    ledger = store.ledger()
    try:
        probs, why = served_outputs(store, ledger.serving(), ledger.plan(), ledger.artifacts())
    finally:
        ledger.close()
    assert probs is not None, why
    return probs


def server_inputs() -> tuple[torch.Tensor, ...]:
    import pyarrow.parquet as pq

    rows = pq.read_table(EXAMPLE / "data" / "server" / "test.parquet").to_pylist()
    return (torch.tensor([r["features"] for r in rows], dtype=torch.float32),)


def users_model_with(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """The user's own module, built by the user's code, with ``state`` loaded over its init."""
    from whole_tasks import make_model

    model = make_model()
    missing = model.load_state_dict(state, strict=False)
    assert not missing.unexpected_keys, missing
    return model


def from_scratch(home: Path, name: str, key: str, method: str, tombstone: bool, **keys: object) -> Store:
    """The app trained from scratch under the store's record key, node-1 holding the record as deleted (or not:
    the negative control's reference, which trained on it)."""
    root = home / name
    hand_over(root, key)
    if tombstone:
        add_tombstones(root / "clients" / "1", f"local:{RECORD[0]}", [local_sample_id(*RECORD, key)])
    run_app(root, "ALL", method, **keys)
    return Store.open(root)


def scratch_keys(store: Store, method: str, workdir: Path) -> dict[str, object]:
    """What the method's scratch run is given (``verify``'s own rule): FedShard replays the stored shard tree, its
    guarantee being relative to the plan."""
    if method != "fedshard":
        return {}
    plan_file = workdir / "plan.json"
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    plan_file.write_text(json.dumps(store.manifest()["plan"]), encoding="utf-8")
    return {"fedshard.plan-file": str(plan_file)}


@pytest.mark.parametrize("method", ["fedavg", "replay", "fedshard", "sisa", "fedcio"])
def test_a_one_model_method_trains_the_users_whole_model_serves_its_output_and_retrains_exactly(home, method):
    store_root = home / "runs" / method
    keys = METHOD_KEYS.get(method, {})
    run_app(store_root, "ALL", method, **keys)
    store = Store.open(store_root)
    from whole_tasks import make_model

    init = make_model().state_dict()
    states = served_states(store)
    for state in states:  # every parameter of the user's model, under its own names; no LoRA, no head
        assert sorted(state) == sorted(init)
        assert all(not torch.equal(state[k], init[k]) for k in state)  # every one trained
    served = served_probabilities(store)
    own = np.stack([own_probabilities(state) for state in states])
    if len(states) == 1:
        assert np.array_equal(served, own[0])  # what is served is the user's module's own output
    else:  # an ensemble mixes its models' own outputs
        assert (served >= own.min(0) - 1e-12).all() and (served <= own.max(0) + 1e-12).all()
        assert not any(np.array_equal(served, o) for o in own)
    assert store.metrics()[-1]["accuracy"] > 0.8  # the user's MLP learns its task
    trained = served_sha(store)

    result = CliRunner().invoke(cli, ["forget", "--store", str(store_root), "--record", ":".join(RECORD)])
    assert result.exit_code == 0, result.output
    run_app(store_root, "ALL", method, action="retrain", **keys)
    assert served_sha(Store.open(store_root)) != trained
    key = store_record_key(store.manifest())

    def reference(store: Store, workdir: Path, _forgotten: dict) -> tuple[Store, set]:
        scratch = {**keys, **scratch_keys(store, method, workdir)}
        return from_scratch(home, "reference", key, method, tombstone=True, **scratch), set()

    report = verify_store(Store.open(store_root), reference=reference)
    assert report["exact"] is True, report["reason"]

    def kept_the_record(store: Store, workdir: Path, _forgotten: dict) -> tuple[Store, set]:
        scratch = {**keys, **scratch_keys(store, method, workdir)}
        return from_scratch(home, "kept", key, method, tombstone=False, **scratch), set()

    assert verify_store(Store.open(store_root), reference=kept_the_record)["exact"] is False


def test_a_named_subset_trains_only_those_parameters_the_rest_stays_the_init(home):
    store_root = home / "runs" / "fc2"
    run_app(store_root, "FC2", "fedavg")
    store = Store.open(store_root)
    from whole_tasks import make_model

    init = make_model().state_dict()
    state = served_state(store)
    assert sorted(state) == ["fc2.bias", "fc2.weight"]  # only the named parameters are exchanged and stored
    assert all(not torch.equal(state[k], init[k]) for k in state)
    # the nodes trained fc2 alone: the model they trained (in this process, the one cached model the nodes and
    # the server share, which a new round reloads only fc2 of) still holds fc1 bit-identical to the init
    from fedforget.federation import run_setup

    (trained,) = run_setup._MODELS.values()
    held = trained.model.module.state_dict()
    assert all(torch.equal(held[k], init[k]) for k in init if not k.startswith("fc2."))
    whole = users_model_with(state)  # served: the user's module, fc1 as it built it, fc2 trained
    own = torch.softmax(predict_logits(whole, server_inputs()).double(), dim=1).numpy()
    assert np.array_equal(served_probabilities(store), own)
    for command in (["status", "--json"], ["evaluate"]):  # the coordinator reads and serves such a store
        result = CliRunner().invoke(cli, [command[0], "--store", str(store_root), *command[1:]])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("method", ["fedsgt", "s3t", "safe", "protosisa", "hosfl",
                                    "sfl", "zo-sfl"])
def test_a_method_that_trains_lora_only_refuses_the_users_whole_model_in_one_line_before_any_store(home, method):
    store = home / "s"
    with pytest.raises(ConfigError) as refused:
        run_app(store, "ALL", method)
    line = str(refused.value)
    # the split methods refuse every user task (they split fedforget's own models) before the task is read
    why = f"method {method!r} needs a split model" if "sfl" in method else f"method={method!r} cannot train the user's"
    assert "\n" not in line and why in line, line
    assert not store.exists()


@pytest.mark.parametrize(("task", "keys", "message"), [
    ("ALL", {"head-only": True}, "head-only=true trains fedforget's head"),
    ("NOWHERE", {}, "'fc9' names no parameter of the model"),
    ("NORMED", {}, "module 'norm' keeps running statistics"),
])
def test_a_whole_model_task_the_run_cannot_train_is_refused_in_one_line_before_any_store(home, task, keys, message):
    store = home / "s"
    with pytest.raises(ConfigError, match=message) as refused:
        run_app(store, task, "fedavg", **keys)
    assert "\n" not in str(refused.value)
    assert not store.exists()


def test_a_whole_model_task_starts_from_the_users_initial_arrays_and_retrains_from_them(home):
    """``start(initial_arrays=...)`` with the user's own weights (their parameter names): the run starts from them,
    records them, and its retrain starts from them again: bit for bit a scratch run from them without the record."""
    from flwr.app import Array, ArrayRecord, Context
    from flwr.serverapp import Grid, ServerApp
    from tabular_mlp.client_app import app as client_app
    from whole_tasks import make_model

    from fedforget.inprocess import run_in_process
    from fedforget.store.initial_arrays import INITIAL_ARRAYS
    from fedforget.strategies import strategy_for

    own = ArrayRecord({k: Array((v * 0.5).numpy()) for k, v in make_model().state_dict().items()})
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy_for(context.run_config).start(grid=grid, initial_arrays=own,
                                               action=str(context.run_config["action"]))

    def run(root: Path, action: str = "train") -> Store:
        config = {**app_config(), "task": "whole_tasks:ALL", "store": str(root), "action": action}
        run_in_process(config, NODES, server_app=server_app, client_app=client_app)
        return Store.open(root)

    seeded = home / "seeded"
    run_app(seeded, "ALL", "fedavg")
    store = run(home / "runs" / "own")
    assert INITIAL_ARRAYS in store.manifest() and served_sha(store) != served_sha(Store.open(seeded))
    result = CliRunner().invoke(cli, ["forget", "--store", str(store.root), "--record", ":".join(RECORD)])
    assert result.exit_code == 0, result.output
    retrained = served_sha(run(store.root, "retrain"))
    key = store_record_key(store.manifest())
    reference = home / "reference"
    hand_over(reference, key)
    add_tombstones(reference / "clients" / "1", f"local:{RECORD[0]}", [local_sample_id(*RECORD, key)])
    assert served_sha(run(reference)) == retrained
