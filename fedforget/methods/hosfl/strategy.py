"""The split-learning variants as Flower strategies: ``num_rounds`` is the split model's training rounds;
a forget retrains it from scratch."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from fedforget.federation.method_strategy import Built, MethodStrategy
from fedforget.methods.hosfl.plan import HOSFL_PROTOCOL, SFL_PROTOCOL, ZO_SFL_PROTOCOL, SplitProtocol

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedforget.core.config import RunConfig
    from fedforget.federation.registration import Federation
    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger


class _Split(MethodStrategy):
    """One split model trained on every partition (:class:`~fedforget.methods.hosfl.server.SplitRun`: each
    round, the drawn clients' forward pass, the server's step, the clients' step on its feedback): a forget
    invalidates it, a retrain trains it again from the seeded model, as fedavg's does."""

    round_hooks = False  # a round exchanges activations and feedback, not models to average
    no_initial_arrays = ("its clients build their half of the split model from `seed` themselves (only activations "
                         "and feedback travel), so no model reaches them to start from")
    needs_server_test_rows = True  # a test input sizes the replies' bound; rounds are evaluated on the server
    #: how the variant's clients and server step
    protocol: ClassVar[SplitProtocol]
    #: the replay history (seeds, v̄) a retrain replaces, deleted once the new one is served
    _replaced: str | None = None

    def check(self, cfg: RunConfig, federation: Federation, num_classes: int) -> None:
        from fedforget.methods.hosfl.server import check_clients_per_round

        check_clients_per_round(cfg, federation.nodes)

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built:
        ledger.load_samples(run.plan.slices)
        ledger.set_plan({"kind": "split", "artifact": f"{run.cfg.method}/global"})
        return self._rounds(grid, run, ledger, watermark=0)

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """Every round again on what the nodes still hold (a split model is trained on every partition)."""
        from fedforget.methods.hosfl.server import check_clients_per_round

        check_clients_per_round(run.cfg, run.nodes)
        self._replaced = (run.store.manifest().get("split") or {}).get("history")
        return self._rounds(grid, run, ledger, watermark)

    def _rounds(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int) -> Built:
        """``num_rounds`` split rounds from the seeded model; the served [θ_c; θ_s] artifact recorded."""
        from fedforget.methods.hosfl.server import SplitRun

        split = SplitRun(grid, run, watermark)
        split.run_rounds()
        return split.finish(ledger)

    def finished(self, run: ServerRun, built: Built) -> None:
        """The replaced run's (seeds, v̄) were computed on the forgotten samples: nothing needs them now."""
        if self._replaced and self._replaced != (built.manifest.get("split") or {}).get("history"):
            run.store.artifact_path(self._replaced).unlink(missing_ok=True)
        self._replaced = None


class HOSFL(_Split):
    """HO-SFL: split learning whose clients train their half without backpropagation (zeroth order)."""

    variant = "hosfl"
    protocol = HOSFL_PROTOCOL


class SFL(_Split):
    """SFL: split federated learning with first-order clients (the reference for HO-SFL)."""

    variant = "sfl"
    protocol = SFL_PROTOCOL


class ZOSFL(_Split):
    """ZO-SFL: split learning with zeroth-order clients and server."""

    variant = "zo-sfl"
    protocol = ZO_SFL_PROTOCOL
