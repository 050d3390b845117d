"""Flower's own strategies made forgettable: ``Forgettable(FedProx(proximal_mu=0.1), task=..., store=...)``."""

from __future__ import annotations

from logging import INFO, WARNING
from typing import TYPE_CHECKING

from flwr.serverapp.strategy import Strategy
from flwr.supercore import log

from fedforget.federation.method_strategy import Built, MethodStrategy

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger


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
    no_initial_arrays = None  # one global model, its first round started from the arrays handed

    def __init__(self, strategy: Strategy | str | None = None, **parameters: object) -> None:
        if isinstance(strategy, Strategy):
            from fedforget.methods.replay.flower_strategies import keys_of

            taken = {key.split(".", 1)[-1].replace("-", "_"): value for key, value in keys_of(strategy).items()}
            parameters = {**taken, **parameters}
        elif strategy is not None:
            parameters = {"strategy": strategy, **parameters}
        super().__init__(**parameters)

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built:
        """Every round, each a checkpoint."""
        import fedforget.methods.replay.flower_strategies as flower_strategies
        from fedforget.methods.replay.plan import replay_plan

        ledger.load_samples(run.plan.slices)
        ledger.set_plan(replay_plan(run.cfg.num_rounds, flower_strategies.is_stateful(run.cfg.replay)))
        return self._rounds(grid, run, ledger, watermark=0, resume=0)

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """Resume from the last round no forgotten data reached; replay the rest."""
        import fedforget.methods.replay.flower_strategies as flower_strategies
        from fedforget.methods.replay.plan import resume_round

        cfg = run.cfg
        resume = resume_round(reusable, cfg.num_rounds, flower_strategies.is_stateful(cfg.replay))
        log(INFO, "fedforget: replay resumes after round %d of %d", resume, cfg.num_rounds)
        return self._rounds(grid, run, ledger, watermark, resume)

    def _rounds(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, resume: int) -> Built:
        """Rounds ``resume + 1`` to ``num_rounds`` of the Flower strategy the run config builds, from round
        ``resume``'s checkpoint (for 0, the run's initial model: the seeded one, or the initial arrays the store
        recorded); each round's model checkpointed and evaluated."""
        import fedforget.methods.replay.flower_strategies as flower_strategies
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
        flower = flower_strategies.build(cfg.replay)
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
            seen.update(rnd.chosen)
            rebuilt += checkpoint(run, ledger, flower, server_round, arrays, sorted(seen), watermark)
            report(run, server_round, arrays, rnd)
        return Built(rebuilt, manifest={"rounds-done": cfg.num_rounds},
                     summary=f"replay ({name}) built {len(rebuilt)} artifact(s) from round {resume + 1}")
