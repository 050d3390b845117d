"""The chains variants as Flower strategies: ``FedSGT(...).start(grid=grid)`` trains every chain position
in ``rounds_per_phase`` FedAvg rounds on its prefix's data (``num_rounds`` sets that)."""

from __future__ import annotations

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.chains import METHOD


class _Chains(MethodStrategy):
    method = METHOD
    rounds_key = "chains.rounds-per-phase"


class FedSGT(_Chains):
    """FedSGT: sequences of LoRA modules over groups of slices; a forget drops the affected suffixes at once."""

    variant = "fedsgt"


class S3T(_Chains):
    """S3T: FedSGT's chains with layer-block modules and budgeted sequence selection."""

    variant = "s3t"


class SISA(_Chains):
    """SISA: one chain per shard in a fixed order (the classic sharded, sliced retraining)."""

    variant = "sisa"


class FedCIO(_Chains):
    """FedCIO: clients clustered by label histograms, one chain per cluster."""

    variant = "fedcio"
