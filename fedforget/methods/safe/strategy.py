"""SAFE and ProtoSISA as Flower strategies: ``num_rounds`` is each adapter's FedAvg rounds."""

from __future__ import annotations

from typing import ClassVar

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.safe.config import PROTOSISA_LAYOUT, SAFE_LAYOUT, SafeLayout


class SAFE(MethodStrategy):
    """SAFE: adapters over a graph of coarse and fine shards of the clients' features."""

    variant = "safe"
    #: how the variant shards the clients' data
    layout: ClassVar[SafeLayout] = SAFE_LAYOUT


class ProtoSISA(MethodStrategy):
    """ProtoSISA: SAFE's shards with class prototypes in place of trained adapters."""

    variant = "protosisa"
    layout: ClassVar[SafeLayout] = PROTOSISA_LAYOUT
