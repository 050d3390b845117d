"""SAFE and ProtoSISA as Flower strategies: ``num_rounds`` is each adapter's FedAvg rounds."""

from __future__ import annotations

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.safe import METHOD


class SAFE(MethodStrategy):
    """SAFE: adapters over a graph of coarse and fine shards of the clients' features."""

    method = METHOD

    variant = "safe"


class ProtoSISA(MethodStrategy):
    """ProtoSISA: SAFE's shards with class prototypes in place of trained adapters."""

    method = METHOD

    variant = "protosisa"
