"""A method strategy's ``configure_train``/``aggregate_train`` are real hooks of the rounds its ``start`` runs,
as Flower's are: a subclass that overrides them is called once per round with the round's models (several as
``<group>:<tensor>``), what its defaults return changes no byte, and what an override returns is what the round
goes on from (the negative control: a changed aggregate changes what is served). Split learning refuses an
override, and a hook called outside ``start`` says so."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message
from flwr.serverapp import Grid, ServerApp

from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.strategies import HOSFL, FedAvgLoRA, FedSGT, FedShard, Forgettable, start_from_context

from .helpers import artifact_shas, served_ids

NODES = 3
KEYS = {"task": "digits-mlp", "lr": 0.02, "local_epochs": 1, "slices_per_client": 1, "train_size": 300,
        "test_size": 100}
CHAINS = {"groups": 2, "budget": 2}


def _app(build) -> ServerApp:  # noqa: ANN001
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        start_from_context(build(), grid, context)

    return app


def _train(tmp_path, name: str, strategy_class, **keys: object) -> Store:  # noqa: ANN001
    store = tmp_path / name
    config = {k: v for k, v in strategy_class(store=str(store), **keys).config.to_dict().items() if k != "action"}
    run_in_process(config, NODES, server_app=_app(lambda: strategy_class(store=str(store), **keys)))
    return Store.open(store)


class _WatchedFedSGT(FedSGT):
    """Every hook call noted; the defaults' results passed on unchanged."""

    calls: list[tuple[str, int, frozenset[str], int]] = []

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):  # noqa: ANN201
        messages = list(super().configure_train(server_round, arrays, config, grid))
        type(self).calls.append(("configure", server_round, frozenset(k.split(":")[0] for k in arrays),
                                 len(messages)))
        return messages

    def aggregate_train(self, server_round: int, replies):  # noqa: ANN001, ANN201
        arrays, metrics = super().aggregate_train(server_round, replies)
        type(self).calls.append(("aggregate", server_round, frozenset(k.split(":")[0] for k in arrays), len(replies)))
        assert metrics["client-rounds"] == len(replies) and "train-loss" in metrics
        return arrays, metrics


def test_fedsgt_rounds_pass_through_the_hooks_and_the_defaults_change_no_byte(tmp_path):
    _WatchedFedSGT.calls = []
    watched = _train(tmp_path, "watched", _WatchedFedSGT, **KEYS, **CHAINS)
    plain = _train(tmp_path, "plain", FedSGT, **KEYS, **CHAINS)
    assert artifact_shas(watched) == artifact_shas(plain)
    calls = _WatchedFedSGT.calls
    configured = [c for c in calls if c[0] == "configure"]
    assert len(configured) == len([c for c in calls if c[0] == "aggregate"]) > 0
    groups = set().union(*(c[2] for c in configured))
    assert groups == set(artifact_shas(plain))  # every chain position was a group of some round
    assert all(c[3] > 0 for c in configured)


class _ZeroHeadFedShard(FedShard):
    """An aggregate that zeroes every head bias: what the round goes on from."""

    def aggregate_train(self, server_round: int, replies):  # noqa: ANN001, ANN201
        arrays, metrics = super().aggregate_train(server_round, replies)
        changed = ArrayRecord({k: Array(np.zeros_like(v.numpy()) if k.endswith("bias") else v.numpy())
                               for k, v in arrays.items()})
        return changed, metrics


def test_an_aggregate_override_is_what_the_rounds_go_on_from(tmp_path):
    keys = {**KEYS, "fanout": 2, "rounds_min": 1, "rounds_max": 1}
    changed = _train(tmp_path, "changed", _ZeroHeadFedShard, **keys)
    plain = _train(tmp_path, "plain", FedShard, **keys)
    shas, reference = artifact_shas(changed), artifact_shas(plain)
    assert set(shas) == set(reference) and all(shas[a] != reference[a] for a in shas)
    served = changed.get_arrays(shas[served_ids(changed)[0]])
    assert all(not v.any() for k, v in served.items() if k.endswith("bias"))


class _TaggedFedAvg(FedAvgLoRA):
    """A config entry added to every train message, as a Flower user adds one."""

    rounds: list[int] = []

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):  # noqa: ANN201
        messages = list(super().configure_train(server_round, arrays, config, grid))
        for message in messages:
            message.content["config"]["user-tag"] = f"round-{server_round}"
        type(self).rounds.append(server_round)
        return messages


def test_fedavg_calls_configure_train_once_per_flower_round(tmp_path):
    _TaggedFedAvg.rounds = []
    tagged = _train(tmp_path, "tagged", _TaggedFedAvg, num_rounds=3, **KEYS)
    plain = _train(tmp_path, "plain", FedAvgLoRA, num_rounds=3, **KEYS)
    assert _TaggedFedAvg.rounds == [1, 2, 3]
    assert artifact_shas(tagged) == artifact_shas(plain)  # a config entry the nodes do not read changes nothing


class _WatchedReplay(Forgettable):
    """Flower's FedAvgM made forgettable, each round's aggregate noted."""

    rounds: list[tuple[int, int]] = []

    def aggregate_train(self, server_round: int, replies):  # noqa: ANN001, ANN201
        arrays, metrics = super().aggregate_train(server_round, replies)
        type(self).rounds.append((server_round, len(replies)))
        return arrays, metrics


def test_a_forgettable_flower_strategy_aggregates_through_the_hook_with_no_byte_changed(tmp_path):
    _WatchedReplay.rounds = []
    keys = {**KEYS, "strategy": "fedavgm", "num_rounds": 2}
    watched = _train(tmp_path, "watched", _WatchedReplay, **keys)
    plain = _train(tmp_path, "plain", Forgettable, **keys)
    assert [r for r, _ in _WatchedReplay.rounds] == [1, 2] and all(n > 0 for _, n in _WatchedReplay.rounds)
    assert artifact_shas(watched) == artifact_shas(plain)


class _DroppingFedAvg(FedAvgLoRA):
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):  # noqa: ANN201
        return list(super().configure_train(server_round, arrays, config, grid))[1:]


def test_a_configure_override_that_drops_a_node_is_refused_naming_the_rule(tmp_path):
    with pytest.raises(ValueError, match="one message per node of the round"):
        _train(tmp_path, "dropped", _DroppingFedAvg, num_rounds=1, **KEYS)


def test_split_learning_refuses_a_hook_override_at_class_definition():
    with pytest.raises(TypeError, match="not FedAvg rounds"):
        class _Mine(HOSFL):  # noqa: F841
            def aggregate_train(self, server_round: int, replies: list[Message]):  # noqa: ANN201
                return None, None


def test_a_hook_called_outside_start_says_start_calls_it(tmp_path):
    strategy = FedSGT(store=str(tmp_path / "s"), **KEYS)
    with pytest.raises(RuntimeError, match=r"called by start\(\), once per round"):
        strategy.configure_train(1, ArrayRecord(), ConfigRecord(), None)  # type: ignore[arg-type]
