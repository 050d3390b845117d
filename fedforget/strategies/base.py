"""The base of every method's strategy, by its public name: it lives in
:mod:`fedforget.federation.method_strategy`, below the methods that subclass it."""

from fedforget.federation.method_strategy import MethodStrategy, parameter_keys, served_arrays, served_result

__all__ = ["MethodStrategy", "parameter_keys", "served_arrays", "served_result"]
