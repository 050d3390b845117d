"""FedShard as a Flower strategy: each shard sizes its own rounds (``rounds_min``/``rounds_max``)."""

from __future__ import annotations

from logging import INFO
from typing import TYPE_CHECKING

from flwr.supercore import log

from fedforget.federation.control_messages import NEED_CLASS_COUNTS
from fedforget.federation.method_strategy import Built, MethodStrategy

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger


class FedShard(MethodStrategy):
    """FedShard: clients sharded by a fairness-aware plan; a forget retrains only its shard.

    ``start`` runs each stage's shards on the round engine (:class:`~fedforget.methods.fedshard.server.ShardRound`):
    each round, every member of a shard with rounds left trains the shard's model on all its slices and the
    shard averages its members' replies in partition order; the stage's shards are then merged into the next.
    ``configure_train``/``aggregate_train`` see the shards' models as ``<artifact>:<tensor>``."""


    variant = "fedshard"
    rounds_key = None
    no_initial_arrays = None  # every first-stage shard starts from the one model θ^0: the arrays handed
    needs_server_test_rows = True  # the first served model's per-class test accuracy (fairness)

    def needs(self) -> tuple[str, ...]:
        return (NEED_CLASS_COUNTS,)  # the fairness report weighs each client's per-class accuracy drop by them

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built:
        """The tree stage by stage (planned as it goes, or replayed from ``fedshard.plan-file``)."""
        from fedforget.methods.fedshard.server import ShardTrainer, load_plan_file, train_tree

        cfg = run.cfg
        replay = load_plan_file(cfg.fedshard.plan_file) if cfg.fedshard.plan_file else None
        if replay and sorted(c for s in replay.stages[0] for c in s.clients) != sorted(run.nodes):
            raise ValueError(f"plan-file {cfg.fedshard.plan_file} covers other clients than the {len(run.nodes)} "
                             "connected")
        ledger.load_samples(run.plan.slices)
        trainer = ShardTrainer(grid, run, ledger, watermark=0)
        tree = train_tree(trainer, cfg, sorted(run.nodes), replay)
        ledger.set_plan(tree.serving_json(cfg.fedshard.fallback))
        ledger.set_meta("client-angles", {str(c): a for c, a in trainer.client_angles.items()})
        run.store.update_manifest(plan=tree.to_json(), **{"rounds-done": sum(
            max(s.rounds for s in stage) for stage in tree.stages)})
        return Built(trainer.rebuilt, trainer.unbuilt, trainer.excluded, {"client-rounds": trainer.client_rounds},
                     summary=f"fedshard trained {len(trainer.rebuilt)} shard(s) in {len(tree.stages)} stage(s)")

    def first_served(self, run: ServerRun, ledger: Ledger, serving: dict) -> None:
        from fedforget.methods.fedshard.server import record_first_per_class_accuracy

        record_first_per_class_accuracy(run, ledger, serving)

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """Rebuild the invalid shards stage by stage, each from its re-aggregated children."""
        from fedforget.federation.serve import load_tensors
        from fedforget.methods.fedshard.plan import ShardNode, ShardTree
        from fedforget.methods.fedshard.server import ShardResult, ShardTrainer, stage_angles, stage_inits

        tree = ShardTree.from_json(run.store.manifest()["plan"])
        stored = {a["artifact"]: a for a in ledger.artifacts()}
        trainer = ShardTrainer(grid, run, ledger, watermark, gone=set(ledger.exhausted_partitions()))
        results: dict[int, ShardResult] = {}
        below: list[ShardNode] | None = None
        for stage in tree.stages:
            inits = stage_inits(trainer, stage, below, results)
            todo = [s for s in stage if s.artifact not in reusable]
            trained = trainer.train_stage(todo, {s.index: inits[s.index] for s in todo}) if todo else {}
            results = {}
            for s in stage:
                if s.index in trained:
                    results[s.index] = trained[s.index]
                else:
                    row = stored[s.artifact]
                    state = {k: v.numpy() for k, v in load_tensors(run.store, row["sha256"]).items()}
                    results[s.index] = ShardResult(state, int(row["meta"]["weight"]))
            if todo:
                angles, signed = stage_angles([results[s.index].state for s in stage],
                                              [inits[s.index] for s in stage],
                                              [results[s.index].weight for s in stage])
                for s in todo:
                    trainer.record(s, results[s.index], angles[s.index], signed[s.index])
                log(INFO, "fedforget: FedShard stage %d/%d: retrained %s", stage[0].stage, len(tree.stages),
                    ", ".join(s.artifact for s in todo))
            below = stage
        return Built(trainer.rebuilt, trainer.unbuilt, trainer.excluded,
                     {"rebuilt": trainer.rebuilt, "client-rounds": trainer.client_rounds},
                     summary=f"retrain rebuilt {len(trainer.rebuilt)} shard(s) in {trainer.client_rounds} "
                             f"client-rounds up to request {watermark}")
