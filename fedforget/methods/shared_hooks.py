"""Hooks that several methods declare: each imports its code when called (the ClientApp reads every
declaration in each per-message process, so importing this costs the standard library only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flwr.app import Context, Message


def lora_serving(*args: Any) -> Any:  # noqa: ANN401 - serve.lora_probabilities' arguments and result
    """One LoRA + head model per served artifact (:func:`fedforget.federation.serve.lora_probabilities`)."""
    from fedforget.federation.serve import lora_probabilities

    return lora_probabilities(*args)


def module_training(msg: Message, context: Context) -> Message:
    """The chain message's handler: train one module of a chain position, earlier modules frozen."""
    from fedforget.federation.module_training import train_chain_position

    return train_chain_position(msg, context)


def train_adapter(msg: Message, context: Context) -> Message:
    """Train the received adapter + head on this partition's data (one round of a one-model method)."""
    from fedforget.federation.adapter_round import train_adapter as train

    return train(msg, context)


def evaluate_adapter(msg: Message, context: Context) -> Message:
    """Evaluate the received adapter + head on this client's share of the test split."""
    from fedforget.federation.adapter_round import evaluate_adapter as evaluate

    return evaluate(msg, context)
