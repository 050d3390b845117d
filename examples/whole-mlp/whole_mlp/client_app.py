"""fedforget's ClientApp: each node trains the task's MLP on its own CSV records and deletes forgotten ones."""

from fedforget.client import app

__all__ = ["app"]
