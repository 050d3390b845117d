"""fedavg's client side: one round of local adapter training (:mod:`fedforget.federation.adapter_round`),
and the node's view, re-exported for the tests and tools that import it from here."""

from __future__ import annotations

from fedforget.federation.adapter_round import evaluate_adapter, train_adapter
from fedforget.federation.client_site import (  # re-exported: the node's view lives in the light module
    ClientSite,
    client_state_dir,
    dataset_key,
    describe,
    node_partition,
)

__all__ = ["ClientSite", "client_state_dir", "dataset_key", "describe", "evaluate_adapter", "node_partition",
           "train_adapter"]
