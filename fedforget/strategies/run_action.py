"""One run of a method on the Grid under fedforget's guards, by its public name: it lives in
:mod:`fedforget.federation.run_action`, below the methods' strategies that start it."""

from fedforget.federation.run_action import RunLockRefused, reliable, run_action

__all__ = ["RunLockRefused", "reliable", "run_action"]
