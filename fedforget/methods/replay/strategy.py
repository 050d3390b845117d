"""Flower's own strategies made forgettable: ``Forgettable(FedProx(proximal_mu=0.1), task=..., store=...)``."""

from __future__ import annotations

import copy
from logging import INFO, WARNING
from typing import TYPE_CHECKING

from flwr.serverapp.strategy import Strategy
from flwr.supercore import log

from fedforget.federation.method_strategy import Built, MethodStrategy

if TYPE_CHECKING:
    from collections.abc import Callable

    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import Result

    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger

#: the manifest field of a store whose rounds a subclass ran: its class and the attributes it was built with
RECORDED = "replay-strategy"


def _copy_of(strategy: Strategy) -> Strategy:
    """A deep copy: the instance the user built stays as built, whatever a run does to its copy."""
    from fedforget.core.config import ConfigError

    try:
        return copy.deepcopy(strategy)
    except Exception as exc:  # noqa: BLE001 - any attribute that will not copy
        raise ConfigError(f"{type(strategy).__name__} cannot be copied ({type(exc).__name__}: {exc}); each run "
                          "starts from a copy of the strategy as built, so keep its attributes copyable") from None


class Forgettable(MethodStrategy):
    """A Flower ``FedAvg``, ``FedProx``, ``FedAvgM``, ``FedAdagrad``, ``FedAdam`` or ``FedYogi`` (or a subclass of
    one) whose every round is a checkpoint: forgetting a record rolls back to the last round that did not see it
    and replays the rest without it, bit-identical to training from scratch without it.

    Takes the strategy instance, or its name as ``strategy="fedprox"``, and the run config's keys as Python names.
    The instance is what runs: each run (train, a retrain's replay, ``verify``'s reference) starts from a fresh
    copy of it as built, so no server state passes from one run to the next. Its parameters and
    ``fraction_train`` are read into the run config's ``replay.*`` and ``fraction-train`` keys, which the store
    records; a subclass's class and attributes are recorded too, and a retrain that builds another refuses.
    What cannot be replayed exactly is refused in one line (``flower_strategies.refusal``): a DP wrapper (its
    noise is unseeded), any other strategy, a subclass that overrides ``start`` or whose own code samples nodes
    or draws random numbers.

    ``start`` runs the rounds on the round engine (:class:`~fedforget.methods.replay.server.ReplayRound`): each
    round the Flower strategy's own ``configure_train`` builds the drawn partitions' messages and its own
    ``aggregate_train`` makes the model from the replies in partition order; each round is then checkpointed.
    This class's ``configure_train``/``aggregate_train`` see the model under its tensor names.
    """

    variant = "replay"
    no_initial_arrays = None  # one global model, its first round started from the arrays handed
    #: the Flower strategy as built (None: built from the run config's keys at each run)
    _flower: Strategy | None = None

    def __init__(self, strategy: Strategy | str | None = None, **parameters: object) -> None:
        if isinstance(strategy, Strategy):
            from fedforget.core.config import ConfigError
            from fedforget.methods.replay.flower_strategies import keys_of

            taken = {key.split(".", 1)[-1].replace("-", "_"): value for key, value in keys_of(strategy).items()}
            clash = sorted(k for k in taken if k in parameters and parameters[k] != taken[k])
            if clash:
                raise ConfigError(f"Forgettable got {', '.join(clash)} both from {type(strategy).__name__} and as a "
                                  "parameter; set it on the strategy, which is what runs")
            parameters = {**taken, **parameters}
            self._flower = _copy_of(strategy)
        elif strategy is not None:
            parameters = {"strategy": strategy, **parameters}
        super().__init__(**parameters)

    def flower_strategy(self) -> Strategy:
        """A fresh copy of the Flower strategy as built (or as the run config's keys build it): one per run."""
        import fedforget.methods.replay.flower_strategies as flower_strategies

        return flower_strategies.build(self.config.replay) if self._flower is None else _copy_of(self._flower)

    def train_step_refusal(self) -> str | None:
        """FedProx adds its proximal term to each batch's loss on the nodes, which a task's own step would hide."""
        from flwr.serverapp.strategy import FedProx

        built = self.flower_strategy()
        if isinstance(built, FedProx) and built.proximal_mu:
            return (f"{type(built).__name__} adds its proximal term to the loss the nodes compute, and a train step "
                    "computes its own loss; build it with FedAvg (strategy='fedavg'), or give the loss as "
                    "Task(loss=...)")
        return super().train_step_refusal()

    def _start(self, grid: Grid, initial_arrays: ArrayRecord | None, num_rounds: int | None, timeout: float | None,
               train_config: ConfigRecord | None, evaluate_config: ConfigRecord | None,
               evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None, action: str) -> Result:
        """A retrain replays the rounds the store recorded: the strategy must be the one that ran them."""
        if action == "retrain":
            self._check_recorded()
        return super()._start(grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn,
                              action)

    def _check_recorded(self) -> None:
        """Refuse (one line, nothing written) a retrain whose strategy is not the one the store recorded: its
        keys (the store's config), and a subclass's class and attributes."""
        import fedforget.methods.replay.flower_strategies as flower_strategies
        from fedforget.core.config import ConfigError, stored_run_config
        from fedforget.store.store import Store, StoreError, resolve_store_path

        try:
            manifest = Store.open(resolve_store_path(self.config.store)).manifest()
        except StoreError:
            return  # opening the store refuses it, with its reason
        stored, mine = stored_run_config(manifest.get("config", {})), self.config.to_dict()
        keys = sorted(k for k in mine
                      if (k.startswith("replay.") or k == "fraction-train") and stored.get(k) != mine[k])
        if keys:
            raise ConfigError(f"this store's rounds were run with {', '.join(f'{k}={stored.get(k)}' for k in keys)}, "
                              f"and this run builds {', '.join(f'{k}={mine[k]}' for k in keys)}; a retrain replays "
                              "them, so build the strategy with the parameters the store recorded")
        recorded = manifest.get(RECORDED)
        built = self.flower_strategy()
        running = flower_strategies.identity(built)
        if recorded == running:
            return
        if recorded and running and recorded.get("class") == running["class"]:
            was, now = recorded.get("attributes", {}), running["attributes"]
            differ = sorted(k for k in {*was, *now} if was.get(k) != now.get(k))
            raise ConfigError(f"this store's rounds were run by {running['class']} built with other "
                              f"{', '.join(differ)}; a retrain replays them, so build it as the store recorded")
        ran = recorded["class"] if recorded else f"Flower's {type(built).__name__}"
        runs = running["class"] if running else f"Flower's {type(built).__name__}"
        raise ConfigError(f"this store's rounds were run by {ran}, and this run builds {runs}; a retrain replays "
                          "them, so retrain through the app that trained the store, building the same strategy")

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built:
        """Every round, each a checkpoint."""
        import fedforget.methods.replay.flower_strategies as flower_strategies
        from fedforget.methods.replay.plan import replay_plan

        ledger.load_samples(run.plan.slices)
        recorded = flower_strategies.identity(self.flower_strategy())
        if recorded is not None:  # a subclass: what a retrain must build again (Flower's own: its keys)
            run.store.update_manifest(**{RECORDED: recorded, **self._app_of_subclass(run)})
        ledger.set_plan(replay_plan(run.cfg.num_rounds, flower_strategies.is_stateful(run.cfg.replay)))
        return self._rounds(grid, run, ledger, watermark=0, resume=0)

    def _app_of_subclass(self, run: ServerRun) -> dict[str, object]:
        """The Flower app whose code defines the subclass, as the manifest's ``app`` (the app the coordinator
        submits for a retrain and ``verify --federation``), unless the store records one already (a user task's)."""
        from fedforget.tasks.user_task import app_of_task

        if "app" in run.store.manifest():
            return {}
        cls = type(self._flower)
        app = app_of_task(f"{cls.__module__}:{cls.__qualname__}")
        return {} if app is None else {"app": app}

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """Resume from the last round no forgotten data reached; replay the rest."""
        import fedforget.methods.replay.flower_strategies as flower_strategies
        from fedforget.methods.replay.plan import resume_round

        cfg = run.cfg
        resume = resume_round(reusable, cfg.num_rounds, flower_strategies.is_stateful(cfg.replay))
        log(INFO, "fedforget: replay resumes after round %d of %d", resume, cfg.num_rounds)
        return self._rounds(grid, run, ledger, watermark, resume)

    def _rounds(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, resume: int) -> Built:
        """Rounds ``resume + 1`` to ``num_rounds`` of the Flower strategy (a fresh copy of it), from round
        ``resume``'s checkpoint (for 0, the run's initial model: the seeded one, or the initial arrays the store
        recorded); each round's model checkpointed and evaluated."""
        import fedforget.methods.replay.flower_strategies as flower_strategies
        from fedforget.core.config import ConfigError
        from fedforget.federation.failover import PartitionsExcluded
        from fedforget.methods.replay.server import (
            SEED_ARTIFACT,
            ReplayRound,
            checkpoint,
            forgotten_meanwhile,
            report,
            restore,
            round_artifacts,
            sampled,
        )
        from fedforget.store.store import StoreError

        cfg, name = run.cfg, run.cfg.replay.strategy
        flower = self.flower_strategy()  # a fresh copy: no server state from another run
        initial = {k: v.detach().numpy() for k, v in run.initial_state.items()}
        try:
            arrays = dict(initial) if resume == 0 else restore(run, ledger, flower, resume, initial)
        except StoreError:
            if not forgotten_meanwhile(cfg, ledger, resume):
                raise
            log(INFO, "fedforget: a request applied during this run forgot round %d, the one replay resumes from; "
                      "the next retrain rebuilds from the last round still valid", resume)
            unbuilt = [a for r in range(resume + 1, cfg.num_rounds + 1) for a in round_artifacts(r, name)]
            return Built([], unbuilt, summary=f"replay ({name}) built nothing: round {resume} was forgotten meanwhile")
        seen = {p for r in range(1, resume + 1) for p in sampled(run, r)}
        as_built = flower_strategies.attributes(flower)
        rnd = ReplayRound(grid, run, flower, sampled)
        rebuilt: list[str] = []
        for server_round in range(resume + 1, cfg.num_rounds + 1):
            try:
                arrays = rnd.run(server_round, {SEED_ARTIFACT: arrays}).states[SEED_ARTIFACT]
            except PartitionsExcluded as lost:
                log(WARNING, "fedforget: replay stops before round %d: partition(s) %s were lost; run "
                    "`fedforget retrain` when they are back", server_round, sorted(lost.partitions))
                unbuilt = [a for r in range(server_round, cfg.num_rounds + 1) for a in round_artifacts(r, name)]
                return Built(rebuilt, unbuilt, set(lost.partitions), manifest={"rounds-done": server_round - 1},
                             summary=f"replay built {len(rebuilt)} artifact(s), stopped at round {server_round}")
            carried = flower_strategies.carried_state(flower, as_built)
            if carried is not None:  # before the round is recorded: a resume from it could not be exact
                raise ConfigError(carried)
            seen.update(rnd.chosen)
            rebuilt += checkpoint(run, ledger, flower, server_round, arrays, sorted(seen), watermark)
            report(run, server_round, arrays, rnd)
        return Built(rebuilt, manifest={"rounds-done": cfg.num_rounds},
                     summary=f"replay ({name}) built {len(rebuilt)} artifact(s) from round {resume + 1}")
