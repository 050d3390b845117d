"""Which Flower strategies a retrain can replay, how each is built from the run config and read back from an
instance, and the server state a round leaves in it (what a checkpoint must hold to resume it exactly)."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvg, FedAvgM, FedProx, FedYogi, Strategy

from fedforget.core.config_keys import ConfigError
from fedforget.methods.replay.config import ReplayConfig, server_eta

CLASSES: dict[str, type[FedAvg]] = {"fedavg": FedAvg, "fedprox": FedProx, "fedavgm": FedAvgM,
                                    "fedadagrad": FedAdagrad, "fedadam": FedAdam, "fedyogi": FedYogi}
#: the strategies, in the run config's order
STRATEGIES_IN_ORDER = tuple(CLASSES)
#: strategy → (its constructor's parameters as replay keys)
PARAMETERS: dict[str, tuple[str, ...]] = {
    "fedavg": (), "fedprox": ("proximal_mu",), "fedavgm": ("server_learning_rate", "server_momentum"),
    "fedadagrad": ("eta", "eta_l", "tau"), "fedadam": ("eta", "eta_l", "beta_1", "beta_2", "tau"),
    "fedyogi": ("eta", "eta_l", "beta_1", "beta_2", "tau"),
}
#: strategy → the attributes its rounds change (beyond the model they return)
STATE: dict[str, tuple[str, ...]] = {
    "fedavg": (), "fedprox": (), "fedavgm": ("current_arrays", "momentum_vector"),
    "fedadagrad": ("m_t", "v_t"), "fedadam": ("m_t", "v_t"), "fedyogi": ("m_t", "v_t"),
}


def build(replay: ReplayConfig) -> FedAvg:
    """The Flower strategy the run config names, with its parameters (sampling is the wrapper's)."""
    values = {name: getattr(replay, name) for name in PARAMETERS[replay.strategy]}
    if "eta" in values:
        values["eta"] = server_eta(replay)
    return CLASSES[replay.strategy](**values)


def keys_of(strategy: Strategy) -> dict[str, object]:
    """The replay keys (and ``fraction-train``) that rebuild ``strategy``; refuses what cannot be replayed."""
    name = next((n for n, cls in CLASSES.items() if type(strategy) is cls), None)
    if name is None:
        raise ConfigError(f"{type(strategy).__name__} cannot be replayed exactly (known: "
                          f"{', '.join(cls.__name__ for cls in CLASSES.values())}; a DP wrapper's noise is unseeded); "
                          "use one of those")
    keys: dict[str, object] = {"replay.strategy": name, "fraction-train": float(strategy.fraction_train)}
    for param in PARAMETERS[name]:
        keys[ReplayConfig.key(param)] = float(getattr(strategy, param))
    return keys


def is_stateful(replay: ReplayConfig) -> bool:
    return bool(STATE[replay.strategy])


def state_arrays(strategy: FedAvg, name: str) -> dict[str, np.ndarray]:
    """The strategy's server state as named arrays, in an order that survives a safetensors file:
    ``<attribute>/<position>/<key>``."""
    out: dict[str, np.ndarray] = {}
    for attr in STATE[name]:
        value = getattr(strategy, attr)
        if value is None:
            continue
        items: list[tuple[str, Any]]
        if isinstance(value, ArrayRecord):
            items = [(k, v.numpy()) for k, v in value.items()]
        elif isinstance(value, dict):
            items = list(value.items())
        else:
            items = [("", v) for v in value]
        for position, (key, array) in enumerate(items):
            out[f"{attr}/{position:06d}/{key}"] = np.ascontiguousarray(array)
    return out


def restore_state(strategy: FedAvg, name: str, arrays: dict[str, np.ndarray]) -> None:
    """Put a checkpoint's server state back into a fresh strategy."""
    grouped: dict[str, list[tuple[int, str, np.ndarray]]] = {}
    for full, array in arrays.items():
        attr, position, key = full.split("/", 2)
        grouped.setdefault(attr, []).append((int(position), key, np.array(array, copy=True)))
    for attr in STATE[name]:
        if attr not in grouped:
            continue
        items = sorted(grouped[attr], key=lambda item: item[0])
        if attr == "current_arrays":
            setattr(strategy, attr, ArrayRecord({k: Array(v) for _, k, v in items}))
        elif attr == "momentum_vector":
            setattr(strategy, attr, [v for _, _, v in items])
        else:
            setattr(strategy, attr, {k: v for _, k, v in items})
