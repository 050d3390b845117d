"""SAFE and ProtoSISA as Flower strategies: ``num_rounds`` is each adapter's FedAvg rounds."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from fedforget.federation.control_messages import NEED_LABELS
from fedforget.federation.method_strategy import Built, MethodStrategy
from fedforget.methods.safe.config import PROTOSISA_LAYOUT, SAFE_LAYOUT, SafeLayout

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedforget.core.config import RunConfig
    from fedforget.federation.registration import Federation
    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger


class _Safe(MethodStrategy):
    """SAFE's and ProtoSISA's run: one adapter per clique (per class and clique under SAFE-DP) and per-cell
    prototypes; a retrain rebuilds the invalid adapters and the stale prototypes.

    ``start`` trains every adapter on the round engine (:class:`~fedforget.methods.safe.server.SafeRound`):
    each round, one message per node carries the blocks of all its cliques, each adapter is averaged in float64
    over its clique's replies in partition order, the server's safe shard last. ``configure_train``/
    ``aggregate_train`` see the adapters as ``<adapter>:<tensor>``."""

    #: how the variant shards the clients' data
    layout: ClassVar[SafeLayout]
    no_initial_arrays = ("it trains one InCA adapter (queries and heads, not LoRA) per clique on the frozen "
                         "backbone's features, each seeded by `seed`")
    needs_server_test_rows = True  # the test inputs give the tokens' shape; prototypes are scored on them
    #: the whole train split (read by ``check`` when a safe shard is drawn) and the shard's rows, for ``train``
    _whole: Any = None
    _shard_ids: list[int] = []

    def needs(self) -> tuple[str, ...]:
        return (NEED_LABELS,)  # SAFE's cells are (client, class group): each record's class leaves its node

    def check(self, cfg: RunConfig, federation: Federation, num_classes: int) -> None:
        """Before the store exists: a bad graph or too few unused rows writes nothing."""
        from fedforget.methods.safe.graph import check_clique_classes
        from fedforget.methods.safe.shard import safe_shard_ids, whole_train_split

        check_clique_classes(self.layout, num_classes, cfg.safe.fine, cfg.task)
        self._whole = whole_train_split(cfg) if cfg.safe.shard > 0 else None  # read once: the draw, then the rows
        used = [i for p in sorted(federation.plan.slices) for i in federation.plan.partition_ids(p)]
        self._shard_ids = safe_shard_ids(cfg, used, self._whole)

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built:
        """The graph of cliques from the nodes' labels, every clique's adapter, then the cells' prototypes."""
        from fedforget.methods.safe.budget import adapter_budget
        from fedforget.methods.safe.server import (
            SafeTrainer,
            collect_prototypes,
            make_plan,
            record_shard_prototypes,
            token_dim,
        )
        from fedforget.methods.safe.shard import load_safe_shard

        cfg = run.cfg
        shard = load_safe_shard(cfg, run.store.root, self._shard_ids, self._whole)
        self._whole = None
        plan, cells = make_plan(cfg, run, shard)
        dim = token_dim(cfg, run.test.inputs)
        width = plan.coarse * plan.num_classes
        ledger.load_samples({p: [cells[p].get(c, []) for c in range(width)] for p in sorted(cells)})
        ledger.set_plan(plan.to_json())
        run.store.update_manifest(plan=plan.to_json(), cells={str(p): {str(c): v for c, v in cs.items()}
                                                              for p, cs in cells.items()},
                                  **{"token-dim": dim, "adapter-budget": adapter_budget(cfg).to_json(),
                                     "safe-shard-ids": self._shard_ids})
        trainer = SafeTrainer(grid, run, plan, ledger, 0, dim, shard)
        trainer.train(trainer.specs(None))
        units = sorted(u for u in plan.sizes if plan.sizes[u] > 0) if plan.prototypes else []
        protos = collect_prototypes(grid, run, plan, ledger, units, 0, dim, trainer.unbuilt, trainer.excluded)
        protos += record_shard_prototypes(run, plan, ledger, shard, plan.shard_proto_artifacts(), 0)
        return Built(trainer.rebuilt + protos, trainer.unbuilt, trainer.excluded,
                     {"rebuilt": trainer.rebuilt, "prototypes": len(protos), "client-rounds": trainer.client_rounds,
                      "samples-visited": trainer.samples_visited, "safe-shard-visited": trainer.shard_visited},
                     {"rounds-done": cfg.num_rounds},
                     f"{cfg.method} trained {len(trainer.rebuilt)} adapter artifact(s) over {len(plan.cliques())} "
                     "clique(s)")

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """The invalid adapters again, then the prototypes of the cells whose records changed."""
        from fedforget.methods.safe.graph import SafePlan
        from fedforget.methods.safe.server import SafeTrainer, collect_prototypes, record_shard_prototypes
        from fedforget.methods.safe.shard import load_safe_shard

        cfg = run.cfg
        manifest = run.store.manifest()
        plan = SafePlan.from_json(manifest["plan"])
        dim = int(manifest["token-dim"])
        shard = load_safe_shard(cfg, run.store.root, [int(i) for i in manifest.get("safe-shard-ids", [])])
        trainer = SafeTrainer(grid, run, plan, ledger, watermark, dim, shard)
        invalid = [s for s in trainer.specs(None) if s["id"] not in reusable]
        started = time.monotonic()
        if invalid:
            trainer.train(invalid)
        stale = [u for u in sorted(plan.sizes) if plan.sizes[u] > 0 and plan.prototypes
                 and plan.proto_id(u) not in reusable]
        protos = collect_prototypes(grid, run, plan, ledger, stale, watermark, dim, trainer.unbuilt, trainer.excluded)
        missing = [a for a in plan.shard_proto_artifacts() if a not in reusable]
        protos += record_shard_prototypes(run, plan, ledger, shard, missing, watermark)
        return Built(trainer.rebuilt + protos, trainer.unbuilt, trainer.excluded,
                     {"rebuilt": trainer.rebuilt, "prototypes": protos, "client-rounds": trainer.client_rounds,
                      "samples-visited": trainer.samples_visited, "safe-shard-visited": trainer.shard_visited,
                      "seconds": time.monotonic() - started},
                     summary=f"retrain rebuilt {len(trainer.rebuilt)} adapter artifact(s) and {len(protos)} "
                             f"prototype cell(s) up to request {watermark}")

    def evaluate_served(self, run: ServerRun, ledger: Ledger) -> dict[str, float]:
        """The served ensemble's accuracy on the server's test set, through the frozen backbone's features."""
        from fedforget.methods.safe.server import evaluate_safe

        return evaluate_safe(run, ledger)


class SAFE(_Safe):
    """SAFE: adapters over a graph of coarse and fine shards of the clients' features."""

    variant = "safe"
    layout = SAFE_LAYOUT


class ProtoSISA(_Safe):
    """ProtoSISA: SAFE's shards with class prototypes in place of trained adapters; uniform random shards
    whose adapters train with SAFE's rounds."""

    variant = "protosisa"
    layout = PROTOSISA_LAYOUT
