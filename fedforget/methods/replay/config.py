"""Replay's run-config keys, ``[tool.flwr.app.config.replay]`` (pure: no torch, no flwr): which Flower
strategy runs the rounds, and its own parameters under Flower's names."""

from __future__ import annotations

from dataclasses import dataclass

from fedforget.core.config_keys import ConfigTable, option

#: the Flower strategies whose every round a retrain can replay bit for bit
STRATEGIES = ("fedavg", "fedprox", "fedavgm", "fedadagrad", "fedadam", "fedyogi")


#: the server learning rate each adaptive strategy learns with on a LoRA adapter and head in 10 rounds
#: (tuned on fmnist-cnn, docs/results/utility_replay_tune.json)
AUTO_ETA = {"fedadagrad": 0.1, "fedadam": 0.1, "fedyogi": 0.03}


@dataclass(frozen=True)
class ReplayConfig(ConfigTable):
    """replay: a Flower strategy whose rounds are checkpoints."""

    group = "replay"

    strategy: str = option("fedavg", choices=STRATEGIES)
    #: FedProx's proximal term weight (Flower's ``proximal_mu``)
    proximal_mu: float = option(0.1, low=0)
    #: FedAvgM's server learning rate and momentum (Flower's ``server_learning_rate``, ``server_momentum``)
    server_learning_rate: float = option(1.0, positive=True)
    server_momentum: float = option(0.5, low=0, high=1)
    #: FedAdagrad, FedAdam, FedYogi: Flower's ``eta`` (0 = the strategy's own, :data:`AUTO_ETA`), ``eta_l``,
    #: ``beta_1``, ``beta_2``, ``tau``
    eta: float = option(0.0, low=0)
    eta_l: float = option(0.0316, positive=True)
    beta_1: float = option(0.9, low=0, high=1)
    beta_2: float = option(0.99, low=0, high=1)
    tau: float = option(0.001, positive=True)


def server_eta(config: ReplayConfig) -> float:
    """``replay.eta``, or the strategy's own when it is left at 0."""
    return config.eta or AUTO_ETA.get(config.strategy, 0.0)
