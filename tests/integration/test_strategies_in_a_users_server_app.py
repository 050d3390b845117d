"""fedforget's methods as Flower strategies in a ServerApp of the user's own: ``FedSGT(...).start(grid=grid)``
trains the same store, byte for byte, as fedforget's own app with the same keys; it returns Flower's Result
(what is served, the rounds' metrics, the server's evaluation); the coordinator's retrain goes through the
same app with :func:`fedforget.strategies.start_from_context`. Bad parameters are refused before anything
runs, naming the key."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

from fedforget.core.config import ConfigError
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.strategies import BY_VARIANT, FedAvgLoRA, FedSGT, start_from_context, strategy_for
from fedforget.unlearning.forget import forget_request

from .helpers import artifact_shas, served_ids

NODES = 3
KEYS = {"task": "digits-mlp", "lr": 0.02, "local_epochs": 1, "slices_per_client": 1, "train_size": 300,
        "test_size": 100}
CHAINS = {"groups": 3, "budget": 3}


def _run_config(store, variant: str, **keys: object) -> dict[str, object]:  # noqa: ANN001
    """The same keys as a Flower run config (dotted, dashed), for the nodes and fedforget's own app."""
    strategy = BY_VARIANT[variant](store=str(store), **keys)
    return {k: v for k, v in strategy.config.to_dict().items() if k != "action"}


def _users_app(build, results: list) -> ServerApp:  # noqa: ANN001
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        results.append(start_from_context(build(), grid, context))

    return app


def test_a_users_server_app_with_fedsgt_trains_the_store_fedforgets_app_trains(tmp_path):
    results: list = []
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    app = _users_app(lambda: FedSGT(store=str(mine), **KEYS, **CHAINS), results)
    run_in_process(_run_config(mine, "fedsgt", **KEYS, **CHAINS), NODES, server_app=app)
    run_in_process(_run_config(theirs, "fedsgt", **KEYS, **CHAINS), NODES)
    assert artifact_shas(Store.open(mine)) == artifact_shas(Store.open(theirs))  # every artifact, bit for bit
    result = results[0]
    served = served_ids(Store.open(mine))
    assert len(served) > 1 and {k.split(":")[0] for k in result.arrays} == set(served)  # an ensemble, keyed
    assert result.train_metrics_clientapp and all("train-loss" in m for m in result.train_metrics_clientapp.values())
    last = max(result.train_metrics_clientapp)
    assert 0.0 < result.evaluate_metrics_serverapp[last]["accuracy"] <= 1.0


def test_fedavg_result_holds_the_served_model_and_a_retrain_through_the_users_app_forgets(tmp_path):
    store = tmp_path / "store"
    results: list = []
    app = _users_app(lambda: FedAvgLoRA(store=str(store), num_rounds=2, **KEYS), results)
    config = _run_config(store, "fedavg", num_rounds=2, **KEYS)
    run_in_process(config, NODES, server_app=app)
    trained = Store.open(store)
    sha = artifact_shas(trained)[served_ids(trained)[0]]
    arrays = trained.get_arrays(sha)
    assert set(results[0].arrays) == set(arrays)  # one served model: its own tensor names
    assert all(np.array_equal(results[0].arrays[k].numpy(), v) for k, v in arrays.items())
    forget_request(trained, samples=[trained.manifest()["partitions"]["0"][0][0]])
    run_in_process({**config, "action": "retrain"}, NODES, server_app=app)
    after = Store.open(store)
    assert served_ids(after) and artifact_shas(after)[served_ids(after)[0]] != sha
    assert len(results) == 2 and results[1].arrays


def test_a_strategy_built_in_code_trains_by_its_own_values_not_the_apps_run_config(tmp_path, monkeypatch):
    """The app's run config holds other chains and training values than the ServerApp builds FedSGT with: the
    nodes train by the strategy's (its messages carry them), so the store equals fedforget's own app run with the
    strategy's values; a forget and a retrain through the same app are exact. Negative control: nodes that read
    the app's run config instead train other bytes."""
    import fedforget.client_app as client_app
    from fedforget.unlearning.verify import verify_store

    built = {**KEYS, "groups": 2, "budget": 2, "lr": 0.05, "local_epochs": 2}
    mine, theirs, ignored = tmp_path / "mine", tmp_path / "theirs", tmp_path / "ignored"
    apps_config = _run_config(mine, "fedsgt", **KEYS, **CHAINS)  # what the app's pyproject would hold
    run_in_process(apps_config, NODES, server_app=_users_app(lambda: FedSGT(store=str(mine), **built), []))
    run_in_process(_run_config(theirs, "fedsgt", **built), NODES)
    assert artifact_shas(Store.open(mine)) == artifact_shas(Store.open(theirs))

    store = Store.open(mine)
    forget_request(store, samples=[store.manifest()["partitions"]["1"][0][0]])
    run_in_process({**apps_config, "action": "retrain"}, NODES,
                   server_app=_users_app(lambda: FedSGT(store=str(mine), **built), []))
    assert verify_store(Store.open(mine))["exact"] is True

    with monkeypatch.context() as patched:
        patched.setattr(client_app, "carried_run_config", lambda msg, context: contextlib.nullcontext())
        run_in_process({**apps_config, "store": str(ignored)}, NODES,
                       server_app=_users_app(lambda: FedSGT(store=str(ignored), **built), []))
    assert artifact_shas(Store.open(ignored)) != artifact_shas(Store.open(theirs))


def test_a_retrain_through_an_app_that_now_builds_other_values_is_refused_naming_them(tmp_path):
    """The coordinator submits an app's declared keys only; the app's code builds the rest, so the ServerApp is
    what refuses a retrain whose strategy is not the store's: one line naming each key with both values, nothing
    written."""
    store = tmp_path / "store"
    built = {**KEYS, "groups": 2, "budget": 2, "lr": 0.05}
    apps_config = {"store": str(store), "action": "train", "reference": False}  # the run's own keys only
    run_in_process(apps_config, NODES, server_app=_users_app(lambda: FedSGT(store=str(store), **built), []))
    trained = Store.open(store)
    forget_request(trained, samples=[trained.manifest()["partitions"]["1"][0][0]])
    before = artifact_shas(Store.open(store))
    with pytest.raises(ConfigError, match=r"builds the strategy with lr=0\.07, and the store was trained with "
                                          r"lr=0\.05; build it as the store recorded"):
        run_in_process({**apps_config, "action": "retrain"}, NODES,
                       server_app=_users_app(lambda: FedSGT(store=str(store), **{**built, "lr": 0.07}), []))
    assert artifact_shas(Store.open(store)) == before
    run_in_process({**apps_config, "action": "retrain"}, NODES,
                   server_app=_users_app(lambda: FedSGT(store=str(store), **built), []))
    from fedforget.unlearning.verify import verify_store

    assert verify_store(Store.open(store))["exact"] is True


def test_strategy_parameters_are_checked_when_it_is_built():
    with pytest.raises(TypeError, match="unknown parameter.*grups"):
        FedSGT(grups=3)
    with pytest.raises(ConfigError, match="'chains.groups' must be >= 1"):
        FedSGT(groups=0)
    with pytest.raises(ConfigError, match="does not apply"):
        FedAvgLoRA.from_run_config({"method": "fedavg", "chains.groups": 3})
    with pytest.raises(ConfigError, match="is not one of"):
        strategy_for({"method": "nope"})


def test_start_refuses_what_a_method_does_not_take_before_touching_the_store(tmp_path):
    strategy = FedSGT(store=str(tmp_path / "store"), **KEYS, **CHAINS)
    grid = object()  # never reached
    with pytest.raises(ConfigError, match="initial_arrays"):
        strategy.start(grid, initial_arrays=ArrayRecord({"w": Array(np.zeros(2, dtype=np.float32))}))
    with pytest.raises(ConfigError, match="train_config"):
        strategy.start(grid, train_config=ConfigRecord({"lr": 0.1}))
    with pytest.raises(ConfigError, match="sizes its own rounds"):
        BY_VARIANT["fedshard"](store=str(tmp_path / "store"), **KEYS).start(grid, num_rounds=3)
    assert strategy.run_config(num_rounds=4).chains.rounds_per_phase == 4
    assert not (tmp_path / "store").exists()


def test_every_strategy_is_a_flower_strategy_whose_signature_lists_its_keys():
    import inspect

    from flwr.serverapp.strategy import Strategy

    for variant, cls in BY_VARIANT.items():
        assert issubclass(cls, Strategy) and cls.variant == variant
        names = set(inspect.signature(cls).parameters)
        assert {"task", "store", "seed", "lr"} <= names and "reference" not in names
    assert "groups" in inspect.signature(FedSGT).parameters
    assert "groups" not in inspect.signature(FedAvgLoRA).parameters


def test_flowers_fedprox_made_forgettable_in_a_users_server_app(tmp_path):
    """``Forgettable(FedProx(proximal_mu=0.1))`` in a user's ServerApp trains the store ``method='replay'``
    trains from the run config."""
    from flwr.serverapp.strategy import FedProx

    from fedforget.strategies import Forgettable

    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    keys = {**KEYS, "num_rounds": 2}
    results: list = []
    app = _users_app(lambda: Forgettable(FedProx(proximal_mu=0.1), store=str(mine), **keys), results)
    run_in_process(_run_config(mine, "replay", strategy="fedprox", proximal_mu=0.1, **keys), NODES, server_app=app)
    run_in_process(_run_config(theirs, "replay", strategy="fedprox", proximal_mu=0.1, **keys), NODES)
    assert artifact_shas(Store.open(mine)) == artifact_shas(Store.open(theirs))
    assert served_ids(Store.open(mine)) == ["replay/round-2"] and len(results[0].train_metrics_clientapp) == 2
