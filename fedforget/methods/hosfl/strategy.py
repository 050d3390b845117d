"""The split-learning variants as Flower strategies: ``num_rounds`` is the split model's training rounds;
a forget retrains it from scratch."""

from __future__ import annotations

from typing import ClassVar

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.hosfl.plan import HOSFL_PROTOCOL, SFL_PROTOCOL, ZO_SFL_PROTOCOL, SplitProtocol


class _Split(MethodStrategy):
    round_hooks = False  # a round exchanges activations and feedback, not models to average
    #: how the variant's clients and server step
    protocol: ClassVar[SplitProtocol]


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
