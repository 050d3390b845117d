"""The chains variants as Flower strategies: ``FedSGT(...).start(grid=grid)`` trains every chain position
in ``rounds_per_phase`` FedAvg rounds on its prefix's data (``num_rounds`` sets that; FedCIO's one position
per cluster trains ``num_rounds`` rounds)."""

from __future__ import annotations

from typing import ClassVar

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.chains.plan import FEDCIO_LAYOUT, FEDSGT_LAYOUT, S3T_LAYOUT, SISA_LAYOUT, ChainLayout


class _Chains(MethodStrategy):
    """A chains variant's ``start``: each wave, every chain position due runs one round on the round engine
    (:class:`~fedforget.methods.chains.server.ChainRound`): the holders of the position's slices train its
    module from the previous round's state (the frozen prefix named, its bytes carried to a node that lacks
    them), and each position averages its replies in partition order. ``configure_train`` sees the positions'
    models as ``<artifact>:<tensor>``; ``aggregate_train`` returns what the positions go on from."""

    #: how the variant groups, orders and places its chains
    layout: ClassVar[ChainLayout]
    rounds_key = "chains.rounds-per-phase"


class FedSGT(_Chains):
    """FedSGT: sequences of LoRA modules over groups of slices; a forget drops the affected suffixes at once."""

    variant = "fedsgt"
    layout = FEDSGT_LAYOUT


class S3T(_Chains):
    """S3T: FedSGT's chains with layer-block modules and budgeted sequence selection."""

    variant = "s3t"
    layout = S3T_LAYOUT


class SISA(_Chains):
    """SISA: one chain per shard in a fixed order (the classic sharded, sliced retraining)."""

    variant = "sisa"
    layout = SISA_LAYOUT


class FedCIO(_Chains):
    """FedCIO: clients clustered by label histograms, one chain per cluster."""

    variant = "fedcio"
    layout = FEDCIO_LAYOUT
    rounds_key = FEDCIO_LAYOUT.rounds_key  # its one position trains num-rounds rounds
