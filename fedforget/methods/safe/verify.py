"""What ``fedforget verify`` needs of a SAFE-DP store: the nodes' DP secrets for its scratch run, and the
adapters that carry forgotten samples under DP only (covered by (α, β), not by exactness)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedforget.core.config import RunConfig
from fedforget.methods.safe.budget_store import dp_exposed_to_forgotten, dp_training_nodes
from fedforget.methods.safe.node_secret import secret_path
from fedforget.store import Store
from fedforget.store.ledger import Ledger
from fedforget.store.secret_files import mkdir_private


def prepare_scratch(store: Store, cfg: RunConfig, scratch_root: Path, workdir: Path,
                    config: dict[str, Any]) -> set[int]:
    """Give the scratch nodes the store's DP secrets; the partitions whose secret is not here."""
    if not cfg.safe.dp:
        return set()
    return node_secrets_here(store, scratch_root, int(store.manifest()["num-partitions"]))


def dp_exposure(ledger: Ledger) -> tuple[set[str], dict[str, set[int]]]:
    """(adapters carrying forgotten samples under DP, DP adapter → the partitions whose noise is in it)."""
    return dp_exposed_to_forgotten(ledger), dp_training_nodes(ledger)


def node_secrets_here(store: Store, scratch_root: Path, partitions: int) -> set[int]:
    """Give the scratch run's simulated nodes the DP secrets of the store's simulated nodes (the verifier
    plays those nodes in simulation); return the partitions whose secret is not here (real SuperNodes
    keep it in their own state dir), whose DP adapters therefore cannot be reproduced."""
    import shutil

    missing = set()
    for partition in range(partitions):
        source = secret_path(store.root / "clients" / str(partition))
        if source.is_file():
            target = secret_path(scratch_root / "clients" / str(partition))
            mkdir_private(target.parent)
            shutil.copyfile(source, target)
            target.chmod(0o600)
        else:
            missing.add(partition)
    return missing
