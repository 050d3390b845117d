"""The ClientApp is fedforget's: it trains the app's task on each node's own records and deletes forgotten ones."""

from fedforget.client import app

__all__ = ["app"]
