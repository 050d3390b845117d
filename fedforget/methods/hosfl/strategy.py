"""The split-learning variants as Flower strategies: ``num_rounds`` is the split model's training rounds;
a forget retrains it from scratch."""

from __future__ import annotations

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.hosfl import METHOD


class _Split(MethodStrategy):
    method = METHOD
    round_hooks = False  # a round exchanges activations and feedback, not models to average


class HOSFL(_Split):
    """HO-SFL: split learning whose clients train their half without backpropagation (zeroth order)."""

    variant = "hosfl"


class SFL(_Split):
    """SFL: split federated learning with first-order clients (the reference for HO-SFL)."""

    variant = "sfl"


class ZOSFL(_Split):
    """ZO-SFL: split learning with zeroth-order clients and server."""

    variant = "zo-sfl"
