"""What a method declares about itself, by its name inside the methods' floor: the declaration lives in
:mod:`fedforget.core.method`, on the lowest floor, where every floor can read it."""

from fedforget.core.method import Defaults, HeldSamples, Method, Value

__all__ = ["Defaults", "HeldSamples", "Method", "Value"]
