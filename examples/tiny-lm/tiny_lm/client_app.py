"""fedforget's ClientApp: each node trains LoRA modules of the task's language model on its own texts and deletes
forgotten ones."""

from fedforget.client import app

__all__ = ["app"]
