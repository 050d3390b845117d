"""What ``Forgettable`` accepts: Flower's six strategies and a user's subclass of one whose own code replays
exactly (its hooks deterministic functions of their inputs); refused in one line, naming what a replay could
not repeat: a DP wrapper (unseeded noise), another Flower strategy or none, an override of ``start`` (never
called), code that samples nodes itself or draws random numbers. The instance is kept and each run gets a
fresh copy of it as built; a subclass's class and attributes are what a store records."""

from __future__ import annotations

import random

import numpy as np
import pytest
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAdam,
    FedAvg,
    FedProx,
    FedTrimmedAvg,
)
from flwr.serverapp.strategy.strategy_utils import sample_nodes

from fedforget.core.config import ConfigError
from fedforget.methods.replay import flower_strategies
from fedforget.strategies import Forgettable

from ....flower_subclasses import ClippedFedAvg, NoisyFedAvg


class ShufflingFedProx(FedProx):
    """The draw hides in a helper the hook calls."""

    def configure_train(self, server_round, arrays, config, grid):  # noqa: ANN001, ANN201
        return self._order(list(super().configure_train(server_round, arrays, config, grid)))

    @staticmethod
    def _order(messages: list) -> list:
        random.shuffle(messages)
        return messages


class HalfSampledFedAvg(FedAvg):
    def configure_train(self, server_round, arrays, config, grid):  # noqa: ANN001, ANN201
        nodes, _ = sample_nodes(grid, 0, 1)
        return [m for m in super().configure_train(server_round, arrays, config, grid)
                if m.metadata.dst_node_id in nodes]


class LoopingFedAdam(FedAdam):
    def start(self, grid, initial_arrays, num_rounds=3, **kwargs):  # noqa: ANN001, ANN201
        return super().start(grid, initial_arrays, num_rounds, **kwargs)


def test_flowers_six_and_a_deterministic_subclass_are_accepted_with_their_bases_keys():
    for name, cls in flower_strategies.CLASSES.items():
        assert flower_strategies.refusal(cls()) is None
        assert flower_strategies.keys_of(cls())["replay.strategy"] == name
        assert flower_strategies.identity(cls()) is None  # its keys rebuild it
    clipped = ClippedFedAvg(clip=0.2, fraction_train=0.5)
    assert flower_strategies.refusal(clipped) is None
    assert flower_strategies.keys_of(clipped) == {"replay.strategy": "fedavg", "fraction-train": 0.5}
    recorded = flower_strategies.identity(clipped)
    assert recorded["class"] == f"{ClippedFedAvg.__module__}.ClippedFedAvg" and recorded["attributes"]["clip"] == 0.2
    assert recorded == flower_strategies.identity(ClippedFedAvg(clip=0.2, fraction_train=0.5))  # same in any process
    assert recorded != flower_strategies.identity(ClippedFedAvg(clip=0.3, fraction_train=0.5))


@pytest.mark.parametrize(("strategy", "why"), [
    (DifferentialPrivacyClientSideFixedClipping(FedAvg(), 1.0, 1.0, 2), "adds noise drawn without a seed"),
    (DifferentialPrivacyServerSideFixedClipping(FedAvg(), 1.0, 1.0, 2), "adds noise drawn without a seed"),
    (DifferentialPrivacyClientSideAdaptiveClipping(FedAvg(), 0.1, 20), "adds noise drawn without a seed"),
    (FedTrimmedAvg(), "Flower's FedTrimmedAvg is not one of the strategies fedforget replays"),
    (NoisyFedAvg(), r"NoisyFedAvg.aggregate_train draws random numbers \(normal, random\)"),
    (ShufflingFedProx(), r"ShufflingFedProx._order draws random numbers \(random, shuffle\)"),
    (HalfSampledFedAvg(), r"HalfSampledFedAvg.configure_train samples nodes itself \(sample_nodes\)"),
    (LoopingFedAdam(), r"LoopingFedAdam overrides start\(\), which fedforget never calls"),
])
def test_what_a_replay_could_not_repeat_is_refused_in_one_line_naming_it(strategy, why):
    with pytest.raises(ConfigError, match=why) as refused:
        Forgettable(strategy, task="digits-mlp")
    assert "\n" not in str(refused.value) and "cannot be replayed exactly" in str(refused.value)


def test_another_object_and_a_zero_server_step_are_refused():
    with pytest.raises(ConfigError, match="not FedAvg, FedProx, FedAvgM, FedAdagrad, FedAdam, FedYogi or a subclass"):
        flower_strategies.keys_of(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"FedAdam\(eta=0\) takes no server step"):
        Forgettable(FedAdam(eta=0.0))


def test_the_instance_is_kept_as_built_and_each_run_gets_a_fresh_copy():
    mine = FedAdam(eta=0.05, fraction_train=0.5)
    wrapped = Forgettable(mine, task="digits-mlp")
    mine.eta = 0.5  # the user's object changed afterwards: the strategy as built runs
    first, second = wrapped.flower_strategy(), wrapped.flower_strategy()
    assert first is not second and first is not mine and first.eta == second.eta == 0.05
    first.m_t = {"w": np.ones(2)}  # a run's server state stays in that run's copy
    assert wrapped.flower_strategy().m_t is None
    assert type(Forgettable(ClippedFedAvg(clip=0.1)).flower_strategy()) is ClippedFedAvg
    assert type(Forgettable("fedyogi").flower_strategy()).__name__ == "FedYogi"  # built from the keys


def test_a_parameter_given_both_on_the_strategy_and_to_forgettable_is_refused():
    with pytest.raises(ConfigError, match="proximal_mu both from FedProx and as a parameter"):
        Forgettable(FedProx(proximal_mu=0.1), proximal_mu=0.2)
    assert Forgettable(FedProx(proximal_mu=0.1), proximal_mu=0.1).config.replay.proximal_mu == 0.1


def test_the_keys_a_coordinator_run_sets_are_the_runs_and_the_rest_stay_as_built(tmp_path):
    built = Forgettable(ClippedFedAvg(clip=0.1, fraction_train=0.5), task="digits-mlp", store=str(tmp_path / "a"))
    run = built.for_run(store=str(tmp_path / "scratch"), reference=True)
    assert run.config.store == str(tmp_path / "scratch") and run.config.reference is True
    assert built.config.store == str(tmp_path / "a") and built.config.reference is False
    assert run.config.fraction_train == 0.5 and type(run.flower_strategy()) is ClippedFedAvg
