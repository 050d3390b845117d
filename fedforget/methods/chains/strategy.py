"""The chains variants as Flower strategies: ``FedSGT(...).start(grid=grid)`` trains every chain position
in ``rounds_per_phase`` FedAvg rounds on its prefix's data (``num_rounds`` sets that; FedCIO's one position
per cluster trains ``num_rounds`` rounds)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from fedforget.federation.control_messages import NEED_CLASS_COUNTS
from fedforget.federation.method_strategy import Built, MethodStrategy
from fedforget.methods.chains.plan import FEDCIO_LAYOUT, FEDSGT_LAYOUT, S3T_LAYOUT, SISA_LAYOUT, ChainLayout

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedforget.core.config import RunConfig
    from fedforget.federation.registration import Federation
    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger


class _Chains(MethodStrategy):
    """A chains variant's ``start``: each wave, every chain position due runs one round on the round engine
    (:class:`~fedforget.methods.chains.server.ChainRound`): the holders of the position's slices train its
    module from the previous round's state (the frozen prefix named, its bytes carried to a node that lacks
    them), and each position averages its replies in partition order. ``configure_train`` sees the positions'
    models as ``<artifact>:<tensor>``; ``aggregate_train`` returns what the positions go on from."""

    #: how the variant groups, orders and places its chains
    layout: ClassVar[ChainLayout]
    rounds_key = "chains.rounds-per-phase"

    def needs(self) -> tuple[str, ...]:
        return (NEED_CLASS_COUNTS,) if self.layout.clustered else ()  # k-means of the label histograms

    def check(self, cfg: RunConfig, federation: Federation, num_classes: int) -> None:
        from fedforget.methods.chains.server import refuse_groups_without_data

        refuse_groups_without_data(cfg, len(federation.nodes))

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built:
        """Plan the chains over the registered slices, then train every position from the first."""
        from fedforget.methods.chains.server import ChainTrainer, build_chain_plan, position_targets

        plan = build_chain_plan(run.cfg, run)
        position_targets(plan, run)  # reject an impossible placement before any training
        ledger.load_samples(run.plan.slices)
        ledger.set_plan(plan.serving_json())
        run.store.update_manifest(plan=plan.to_json())
        trainer = ChainTrainer(grid, run, plan, ledger, watermark=0)
        trainer.train({c.key: 1 for c in plan.chains()})
        return Built(trainer.rebuilt, trainer.unbuilt, trainer.excluded, {"waves": trainer.wave},
                     {"rounds-done": trainer.wave}, f"{run.cfg.method} trained {len(trainer.rebuilt)} artifacts")

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """Continue each chain from its longest valid prefix."""
        from fedforget.methods.chains.plan import ChainPlan, rebuild_from
        from fedforget.methods.chains.server import ChainTrainer

        plan = ChainPlan.from_json(run.store.manifest()["plan"])
        trainer = ChainTrainer(grid, run, plan, ledger, watermark)
        trainer.train(rebuild_from(plan, reusable))
        return Built(trainer.rebuilt, trainer.unbuilt, trainer.excluded,
                     {"waves": trainer.wave, "rebuilt": trainer.rebuilt},
                     summary=f"retrain rebuilt {len(trainer.rebuilt)} artifact(s) up to request {watermark}")


class FedSGT(_Chains):
    """FedSGT: sequences of LoRA modules over groups of slices; a forget drops the affected suffixes at once."""

    variant = "fedsgt"
    layout = FEDSGT_LAYOUT
    no_initial_arrays = "each chain position starts a fresh LoRA module of its own, seeded by `seed`"


class S3T(_Chains):
    """S3T: FedSGT's chains with layer-block modules and budgeted sequence selection."""

    variant = "s3t"
    layout = S3T_LAYOUT
    no_initial_arrays = ("each chain position starts a fresh LoRA module of its own on its block of layers, seeded "
                         "by `seed`")


class SISA(_Chains):
    """SISA: one chain per shard in a fixed order (the classic sharded, sliced retraining)."""

    variant = "sisa"
    layout = SISA_LAYOUT
    no_initial_arrays = None  # one module continued along each chain: every chain's first position starts from it


class FedCIO(_Chains):
    """FedCIO: clients clustered by label histograms, one chain per cluster."""

    variant = "fedcio"
    layout = FEDCIO_LAYOUT
    no_initial_arrays = None  # one module per cluster's chain, as SISA's: each starts from the arrays handed
    rounds_key = FEDCIO_LAYOUT.rounds_key  # its one position trains num-rounds rounds
