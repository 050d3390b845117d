"""Flower's own strategies made forgettable: ``Forgettable(FedProx(proximal_mu=0.1), task=..., store=...)``."""

from __future__ import annotations

from flwr.serverapp.strategy import Strategy

from fedforget.federation.method_strategy import MethodStrategy


class Forgettable(MethodStrategy):
    """A Flower ``FedAvg``, ``FedProx``, ``FedAvgM``, ``FedAdagrad``, ``FedAdam`` or ``FedYogi`` whose every round
    is a checkpoint: forgetting a record rolls back to the last round that did not see it and replays the rest
    without it, bit-identical to training from scratch without it.

    Takes the strategy instance (its parameters and ``fraction_train`` become the run config's ``replay.*`` and
    ``fraction-train`` keys) or its name as ``strategy="fedprox"``, and the run config's keys as Python names.
    Any other strategy, a subclass or a DP wrapper (whose noise is unseeded) is refused: it cannot be replayed.

    ``start`` runs the rounds on the round engine (:class:`~fedforget.methods.replay.server.ReplayRound`): each
    round the Flower strategy's own ``configure_train`` builds the drawn partitions' messages and its own
    ``aggregate_train`` makes the model from the replies in partition order; each round is then checkpointed.
    This class's ``configure_train``/``aggregate_train`` see the model under its tensor names.
    """


    variant = "replay"

    def __init__(self, strategy: Strategy | str | None = None, **parameters: object) -> None:
        if isinstance(strategy, Strategy):
            from fedforget.methods.replay.flower_strategies import keys_of

            taken = {key.split(".", 1)[-1].replace("-", "_"): value for key, value in keys_of(strategy).items()}
            parameters = {**taken, **parameters}
        elif strategy is not None:
            parameters = {"strategy": strategy, **parameters}
        super().__init__(**parameters)
