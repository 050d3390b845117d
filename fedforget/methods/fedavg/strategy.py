"""FedAvg over LoRA + head as a Flower strategy: the reference every method is measured against, and the
retrain-from-scratch baseline of forgetting (``start(grid=grid, action="retrain")``)."""

from __future__ import annotations

from logging import WARNING
from typing import TYPE_CHECKING

from flwr.supercore import log

from fedforget.federation.method_strategy import Built, MethodStrategy

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger


class FedAvgLoRA(MethodStrategy):
    """Flower's FedAvg over one LoRA adapter + head, seeded by partition and averaged in partition order.

    ``start`` trains one artifact, the global model: ``num_rounds`` rounds on the round engine
    (:class:`~fedforget.methods.fedavg.server.FedAvgRound`), each sending every partition the global model,
    averaging every reply in partition order (Flower's float32 arithmetic) and evaluating the result on the
    server's test set. A forget invalidates it; a retrain trains it again from the same start: the seeded model,
    or the ``initial_arrays`` training was handed (recorded in the store).
    ``configure_train``/``aggregate_train`` see the model under its tensor names."""

    variant = "fedavg"
    no_initial_arrays = None  # one global model, started from the arrays handed

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built:
        from fedforget.methods.fedavg.server import ARTIFACT

        ledger.load_samples(run.plan.slices)
        ledger.set_plan({"kind": "single", "artifact": ARTIFACT})
        return self.retrain(grid, run, ledger, watermark=0, reusable=set())

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """The whole training again on what the nodes still hold (nothing of one global model is reusable)."""
        from fedforget.federation.failover import PartitionsExcluded
        from fedforget.federation.run_setup import DEFAULT_ADAPTER
        from fedforget.federation.units import all_units
        from fedforget.methods.fedavg.server import ARTIFACT, train_global

        rounds = run.cfg.num_rounds
        try:
            sha, participants = train_global(grid, run)
        except PartitionsExcluded as lost:  # the global model needs every partition: it stays unbuilt
            log(WARNING, "fedforget: %s stays unbuilt: partition(s) %s were lost; run `fedforget retrain` "
                "when they are back", ARTIFACT, sorted(lost.partitions))
            return Built([], [ARTIFACT], set(lost.partitions), manifest={"rounds-done": rounds},
                         summary=f"{ARTIFACT} unbuilt")
        ledger.record_artifact(ARTIFACT, sha, "lora+head", all_units(run, participants), watermark,
                               {"adapter": DEFAULT_ADAPTER, "rounds": rounds, "slot": DEFAULT_ADAPTER})
        return Built([ARTIFACT], manifest={"rounds-done": rounds}, summary=f"fedavg trained {ARTIFACT} (sha256 {sha})")
