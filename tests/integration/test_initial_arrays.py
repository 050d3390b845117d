"""``start(initial_arrays=...)`` in a user's ServerApp: a method that starts from one model (fedavg, replay,
FedShard's first stage, SISA's and FedCIO's chains) starts from the arrays handed instead of the seeded start,
so it serves other bytes (the negative control); the store records them, so a retrain through fedforget's own
app and ``fedforget verify``'s from-scratch reference (in process and ``--federation``) start from them without
being handed them again, and stay exact. Arrays of the wrong shape, and a retrain handed other arrays, are
refused in one line with the store untouched; a method that does not start from one model refuses them, saying
why."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from fedforget.core.config import ConfigError, stored_run_config
from fedforget.federation.run_setup import build_model
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.initial_arrays import INITIAL_ARRAYS
from fedforget.store.lock import LOCK_FILE
from fedforget.strategies import BY_VARIANT, FedAvgLoRA, strategy_for
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.verify import verify_store
from fedforget.unlearning.verify_federation import SCRATCH

from .helpers import artifact_shas, served_ids

NODES = 3
KEYS = {"task": "digits-mlp", "lr": 0.02, "local_epochs": 1, "slices_per_client": 1, "train_size": 300,
        "test_size": 100}
DIGIT_CLASSES = 10


def _run_config(store: Path, variant: str, **keys: object) -> dict[str, object]:
    """The strategy's keys as the Flower run config the nodes (and fedforget's own app) read."""
    strategy = BY_VARIANT[variant](store=str(store), **keys)
    return {k: v for k, v in strategy.config.to_dict().items() if k != "action"}


def _starting_from(initial: ArrayRecord | None) -> ServerApp:
    """A user's ServerApp that hands ``initial`` to the strategy the run config names, for every action."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        action = str(context.run_config.get("action", "train"))
        strategy_for(context.run_config).start(grid=grid, initial_arrays=initial, action=action)

    return app


def _initial_arrays(variant: str, **keys: object) -> ArrayRecord:
    """The seeded start's tensors (names, shapes, dtypes), their values moved: a model of the user's own."""
    cfg = BY_VARIANT[variant](**keys).config
    seeded = build_model(cfg, DIGIT_CLASSES).initial_state
    rng = np.random.default_rng(7)
    return ArrayRecord({name: Array((t.numpy() + rng.normal(0, 0.05, t.shape)).astype(t.numpy().dtype))
                        for name, t in seeded.items()})


def _served_bytes(store: Store) -> dict[str, str]:
    shas = artifact_shas(store)
    return {a: shas[a] for a in served_ids(store)}


def _files(root: Path) -> dict[str, str]:
    """Every file under ``root`` and its sha256, but the run lock (every run takes it): what a refusal must
    leave as it was."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != LOCK_FILE}


def _forget_one_sample(store: Store) -> None:
    forget_request(store, samples=[store.manifest()["partitions"]["0"][0][0]])


@pytest.mark.parametrize("variant", ["fedavg", "replay"])
def test_a_run_from_initial_arrays_serves_other_bytes_and_forget_retrain_verify_start_from_them(tmp_path, variant,
                                                                                             monkeypatch):
    keys = {**KEYS, "num_rounds": 2}
    initial = _initial_arrays(variant, **keys)
    seeded, mine = tmp_path / "seeded", tmp_path / "mine"
    run_in_process(_run_config(seeded, variant, **keys), NODES)
    config = _run_config(mine, variant, **keys)
    run_in_process(config, NODES, server_app=_starting_from(initial))
    store = Store.open(mine)
    assert _served_bytes(store) != _served_bytes(Store.open(seeded))  # the negative control: the start matters
    recorded = store.get_arrays(store.manifest()[INITIAL_ARRAYS])
    assert set(recorded) == set(initial)
    assert all(np.array_equal(recorded[k], initial[k].numpy()) for k in recorded)
    assert check_store(store).ok
    assert verify_store(store)["exact"]  # the reference starts from the recorded arrays too
    with monkeypatch.context() as patched:  # a reference from the seeded start would not be exact
        patched.setattr("fedforget.unlearning.verify.recorded_initial_arrays", lambda _store: None)
        assert not verify_store(store)["exact"]

    _forget_one_sample(store)
    before = _served_bytes(store)
    run_in_process({**config, "action": "retrain"}, NODES)  # fedforget's own app: no arrays handed
    after = Store.open(mine)
    assert served_ids(after) and _served_bytes(after) != before
    assert check_store(after).ok
    result = verify_store(after)
    assert result["exact"], result["reason"]


def _federation_reference(store: Store, _workdir: Path, _forgotten: dict[int, list[int]]) -> tuple[Store, set[int]]:
    """``verify --federation``'s reference with its nodes played in process: fedforget's own app trains the
    store's recorded config (``reference=true``) into the scratch store inside the store, handed no arrays."""
    area = store.root / SCRATCH
    shutil.rmtree(area, ignore_errors=True)
    area.mkdir(mode=0o700)
    config = {**stored_run_config(store.manifest()["config"]), "action": "train", "reference": True,
              "store": str(area / "store")}
    run_in_process(config, NODES)
    return Store.open(area / "store"), set()


def test_a_verify_federation_reference_starts_from_the_arrays_the_verified_store_recorded(tmp_path, monkeypatch):
    keys = {**KEYS, "num_rounds": 1}
    store_root = tmp_path / "store"
    config = _run_config(store_root, "fedavg", **keys)
    run_in_process(config, NODES, server_app=_starting_from(_initial_arrays("fedavg", **keys)))
    _forget_one_sample(Store.open(store_root))
    run_in_process({**config, "action": "retrain"}, NODES)
    result = verify_store(Store.open(store_root), reference=_federation_reference)
    assert result["exact"] and result["held"]["equal"], result["reason"]
    monkeypatch.setattr("fedforget.federation.starting_model.verified_store", lambda _cfg: None)
    assert not verify_store(Store.open(store_root), reference=_federation_reference)["exact"]  # from the seed


def test_a_retrain_handed_other_initial_arrays_is_refused_with_the_store_untouched(tmp_path):
    keys = {**KEYS, "num_rounds": 1}
    initial = _initial_arrays("fedavg", **keys)
    store_root = tmp_path / "store"
    config = _run_config(store_root, "fedavg", **keys)
    run_in_process(config, NODES, server_app=_starting_from(initial))
    _forget_one_sample(Store.open(store_root))
    other = ArrayRecord({k: Array(v.numpy() * 2) for k, v in initial.items()})
    before = _files(store_root)
    with pytest.raises(ConfigError, match="initial_arrays differ from those the store was trained from"):
        run_in_process({**config, "action": "retrain"}, NODES, server_app=_starting_from(other))
    assert _files(store_root) == before


def test_the_store_check_names_initial_arrays_whose_file_is_gone(tmp_path):
    keys = {**KEYS, "num_rounds": 1}
    store_root = tmp_path / "store"
    run_in_process(_run_config(store_root, "fedavg", **keys), NODES,
                   server_app=_starting_from(_initial_arrays("fedavg", **keys)))
    store = Store.open(store_root)
    assert check_store(store).ok
    store.artifact_path(store.manifest()[INITIAL_ARRAYS]).unlink()
    problems = check_store(store).problems
    assert any("initial arrays" in p and "corrupt or missing" in p for p in problems), problems


def test_a_retrain_handed_arrays_for_a_store_trained_from_the_seed_is_refused(tmp_path):
    keys = {**KEYS, "num_rounds": 1}
    store_root = tmp_path / "store"
    config = _run_config(store_root, "fedavg", **keys)
    run_in_process(config, NODES)
    before = _files(store_root)
    with pytest.raises(ConfigError, match="trained from the seeded start"):
        run_in_process({**config, "action": "retrain"}, NODES,
                       server_app=_starting_from(_initial_arrays("fedavg", **keys)))
    assert _files(store_root) == before


def test_wrong_shaped_initial_arrays_are_refused_naming_the_tensor_before_the_store_exists(tmp_path):
    keys = {**KEYS, "num_rounds": 1}
    initial = _initial_arrays("fedavg", **keys)
    name = next(k for k in initial if k.startswith("head.") and k.endswith("weight"))
    wrong = ArrayRecord({k: Array(np.zeros((3, 3), np.float32)) if k == name else v for k, v in initial.items()})
    store_root = tmp_path / "store"
    with pytest.raises(ConfigError, match=rf"initial_arrays '{name}' is float32\[3, 3\], the model's is float32"):
        run_in_process(_run_config(store_root, "fedavg", **keys), NODES, server_app=_starting_from(wrong))
    assert not store_root.exists()
    missing = ArrayRecord({k: v for k, v in initial.items() if k != name})
    with pytest.raises(ConfigError, match=f"initial_arrays lack '{name}'"):
        run_in_process(_run_config(store_root, "fedavg", **keys), NODES, server_app=_starting_from(missing))
    assert not store_root.exists()


@pytest.mark.parametrize("variant", ["fedsgt", "s3t", "safe", "protosisa", "hosfl", "sfl", "zo-sfl"])
def test_a_method_that_does_not_start_from_one_model_refuses_initial_arrays_saying_why(tmp_path, variant):
    strategy = BY_VARIANT[variant](store=str(tmp_path / "store"))
    with pytest.raises(ConfigError, match="does not start from one model: .*seed.*; pass no initial_arrays"):
        strategy.start(object(), initial_arrays=ArrayRecord({"w": Array(np.zeros(2, dtype=np.float32))}))
    assert not (tmp_path / "store").exists()


def test_initial_arrays_must_be_an_array_record(tmp_path):
    with pytest.raises(ConfigError, match="initial_arrays must be a flwr ArrayRecord"):
        FedAvgLoRA(store=str(tmp_path / "store")).start(object(), initial_arrays={"w": np.zeros(2)})
    assert not (tmp_path / "store").exists()


SHARDED = {"fedshard": {}, "sisa": {"groups": 2, "shards": 2}, "fedcio": {"clusters": 2}}


@pytest.mark.parametrize("variant", sorted(SHARDED))
def test_sharded_methods_start_their_first_models_from_initial_arrays_and_stay_exact(tmp_path, variant):
    keys = {**KEYS, "slices_per_client": 2, **SHARDED[variant]}
    initial = _initial_arrays(variant, **keys)
    seeded, mine = tmp_path / "seeded", tmp_path / "mine"
    run_in_process(_run_config(seeded, variant, **keys), NODES)
    config = _run_config(mine, variant, **keys)
    run_in_process(config, NODES, server_app=_starting_from(initial))
    store = Store.open(mine)
    assert set(artifact_shas(store)) == set(artifact_shas(Store.open(seeded)))
    assert not set(artifact_shas(store).values()) & set(artifact_shas(Store.open(seeded)).values())
    _forget_one_sample(store)
    run_in_process({**config, "action": "retrain"}, NODES)
    result = verify_store(Store.open(mine))
    assert result["exact"], result["reason"]
