"""fedforget's methods as Flower strategies, for a ServerApp of your own::

    from fedforget.strategies import FedSGT

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        FedSGT(task="fmnist-cnn", store="runs/mine", groups=4).start(grid=grid)

Each class is one ``method=`` value of the run config; :func:`start_from_context` runs the action
(train, retrain, propagate) the fedforget coordinator submits, so ``fedforget forget``, ``retrain`` and
``verify`` work on the store your app writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from logging import INFO

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.supercore import log

from fedforget.federation.refusal import refusals_logged
from fedforget.methods.registry import FAMILIES
from fedforget.strategies.base import MethodStrategy


def _declared_strategies() -> tuple[type[MethodStrategy], ...]:
    """Each registered method's strategy classes, one per variant in its declaration's order (its
    ``strategies`` hook): a method added to the registry is in this list without a line here."""
    return tuple(cls for method in FAMILIES if method.strategies is not None for cls in method.strategies())


STRATEGIES: tuple[type[MethodStrategy], ...] = _declared_strategies()
#: the run config's ``method=`` value → its strategy class
BY_VARIANT: dict[str, type[MethodStrategy]] = {cls.variant: cls for cls in STRATEGIES}
globals().update({cls.__name__: cls for cls in STRATEGIES})  # ``from fedforget.strategies import FedSGT``

__all__ = ["BY_VARIANT", "RUN_KEYS", "STRATEGIES", "MethodStrategy", "start_from_context", "strategy_for",
           *sorted(cls.__name__ for cls in STRATEGIES)]


def strategy_for(run_config: Mapping[str, object]) -> MethodStrategy:
    """The strategy a Flower run config names with ``method`` (its other keys as its parameters)."""
    from fedforget.core.config import ConfigError, declared_defaults

    with refusals_logged():  # a refusal is one line in the run's log, not Flower's traceback
        variant = str(run_config.get("method", declared_defaults()["method"]))
        if variant not in BY_VARIANT:
            raise ConfigError(f"run-config 'method'={variant!r} is not one of {', '.join(BY_VARIANT)}")
        return BY_VARIANT[variant].from_run_config(run_config)


#: the keys a coordinator run sets itself (retrain, ``verify --federation``'s reference into a scratch store): the
#: run config's value is the run's, whatever the strategy was built with
RUN_KEYS = ("action", "store", "reference")


def start_from_context(strategy: MethodStrategy, grid: Grid, context: Context,
                       initial_arrays: ArrayRecord | None = None) -> Result:
    """Start ``strategy`` with the action the run config asks for (``action``: train, retrain or propagate),
    the way the fedforget coordinator submits them to your app: Flower's ``Strategy.start`` receives no
    ``Context``, so a ServerApp passes it here. The strategy is what it was built with (its messages carry its
    config to the nodes, whatever the app's run config holds), but for the keys that are the run's own
    (:data:`RUN_KEYS`): the run config's ``action``, ``store`` and ``reference``, so that a retrain and
    ``fedforget verify``'s reference reach a strategy built in code. ``initial_arrays`` go to ``start`` as they
    are: training records them in the store; a retrain and a reference run start from the recorded ones, and
    refuse other arrays handed again."""
    from fedforget.core.config import parse_run_config

    with refusals_logged():  # a refusal is one line in the run's log, not Flower's traceback
        asked = parse_run_config(dict(context.run_config), warn=False)
        given = asked.to_dict()
        if strategy.config.store != asked.store:
            log(INFO, "fedforget: the run config's store=%s is this run's (%s was built with store=%s)", asked.store,
                type(strategy).__name__, strategy.config.store)
        run = strategy.for_run(store=given["store"], reference=given["reference"])
        return run.start(grid=grid, initial_arrays=initial_arrays, action=asked.action)
