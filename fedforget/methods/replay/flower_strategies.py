"""Which Flower strategies a retrain can replay, how each is built from the run config and read back from an
instance, and the server state a round leaves in it (what a checkpoint must hold to resume it exactly).

A user's subclass of one of them replays when its own code could only compute the same again; what can be
seen not to (a DP wrapper's noise, an override of ``start``, code that samples nodes or draws random numbers,
a round that changes an attribute no checkpoint holds) is refused in one line rather than replayed
approximately."""

from __future__ import annotations

import hashlib
from types import CodeType
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvg, FedAvgM, FedProx, FedYogi, Strategy
from flwr.serverapp.strategy.dp_adaptive_clipping import DifferentialPrivacyAdaptiveBase
from flwr.serverapp.strategy.dp_fixed_clipping import DifferentialPrivacyFixedClippingBase

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
#: strategy → the attributes each round overwrites from its own inputs (the round's model): no state carried
ROUND_INPUTS: dict[str, tuple[str, ...]] = {"fedadagrad": ("current_arrays",), "fedadam": ("current_arrays",),
                                            "fedyogi": ("current_arrays",)}

#: Flower Strategy methods fedforget never calls: it runs the rounds itself (an override would not run)
NEVER_CALLED = ("start",)
#: names a subclass's code reads when it samples nodes itself (Flower's unseeded draw over node ids)
SAMPLING = frozenset({"sample_nodes"})
#: names a subclass's code reads when it draws random numbers (a seeded draw cannot be told from another)
RANDOM = frozenset({"random", "secrets", "urandom", "uuid4", "rand", "randn", "randint", "randperm", "rand_like",
                    "randn_like", "default_rng", "RandomState", "shuffle", "permutation", "choice", "normal",
                    "uniform", "laplace", "exponential", "poisson", "binomial", "multinomial", "bernoulli"})


def build(replay: ReplayConfig) -> FedAvg:
    """The Flower strategy the run config names, with its parameters (sampling is the wrapper's)."""
    values = {name: getattr(replay, name) for name in PARAMETERS[replay.strategy]}
    if "eta" in values:
        values["eta"] = server_eta(replay)
    return CLASSES[replay.strategy](**values)


def base_name(cls: type) -> str | None:
    """The run config's name of the strategy ``cls`` is or subclasses (the nearest of :data:`CLASSES`)."""
    return next((n for klass in cls.__mro__ for n, known in CLASSES.items() if klass is known), None)


def own_classes(cls: type) -> list[type]:
    """The classes of ``cls``'s lineage below the Flower strategy it subclasses: the user's code."""
    name = base_name(cls)
    return [klass for klass in cls.__mro__ if name is not None and klass is not CLASSES[name]
            and issubclass(klass, CLASSES[name])]


def _names(code: CodeType) -> set[str]:
    """Every global and attribute name a function's code (its nested functions included) reads."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            out |= _names(const)
    return out


def _not_exact(cls: type) -> str | None:
    """Why a subclass of one of :data:`CLASSES` cannot be replayed exactly (None: it can)."""
    flower = [k for k in own_classes(cls) if k.__module__.split(".")[0] == "flwr"]
    if flower:
        return (f"Flower's {flower[0].__name__} is not one of the strategies fedforget replays (it may sample nodes "
                "or keep server state a checkpoint misses)")
    for klass in own_classes(cls):
        for attr, value in vars(klass).items():
            if attr in NEVER_CALLED and callable(value):
                return (f"{klass.__name__} overrides {attr}(), which fedforget never calls: it runs the rounds "
                        "itself; put the change in configure_train or aggregate_train")
            function = getattr(value, "__func__", value)
            code = getattr(function, "__code__", None)
            if code is None:
                continue
            sampling = _names(code) & SAMPLING
            if sampling:
                return (f"{klass.__name__}.{attr} samples nodes itself ({sorted(sampling)[0]}): fedforget draws each "
                        "round's partitions with a seed and hands configure_train exactly those; send to each of them")
            drawn = _names(code) & RANDOM
            if drawn:
                return (f"{klass.__name__}.{attr} draws random numbers ({', '.join(sorted(drawn))}), which a replay "
                        "would draw differently; make it a deterministic function of its inputs")
    return None


def refusal(strategy: object) -> str | None:
    """Why ``strategy`` cannot be replayed exactly, as one line (None: it can)."""
    cls = type(strategy)
    known = ", ".join(k.__name__ for k in CLASSES.values())
    if isinstance(strategy, DifferentialPrivacyAdaptiveBase | DifferentialPrivacyFixedClippingBase):
        return (f"{cls.__name__} cannot be replayed exactly: it adds noise drawn without a seed, which a replay "
                f"would draw differently; use one of {known} (or a subclass of one)")
    if not isinstance(strategy, Strategy) or base_name(cls) is None:
        return f"{cls.__name__} cannot be replayed exactly: it is not {known} or a subclass of one; use one of those"
    why = _not_exact(cls)
    return None if why is None else f"{cls.__name__} cannot be replayed exactly: {why}"


def keys_of(strategy: Strategy) -> dict[str, object]:
    """The replay keys (and ``fraction-train``) of ``strategy``'s own parameters, those of the strategy it is or
    subclasses; refuses what cannot be replayed exactly (:func:`refusal`)."""
    why = refusal(strategy)
    if why is not None:
        raise ConfigError(why)
    name = base_name(type(strategy))
    assert name is not None
    keys: dict[str, object] = {"replay.strategy": name, "fraction-train": float(strategy.fraction_train)}
    for param in PARAMETERS[name]:
        keys[ReplayConfig.key(param)] = float(getattr(strategy, param))
    if keys.get(ReplayConfig.key("eta")) == 0.0:  # the run config's 0 means "the strategy's own": not the same
        raise ConfigError(f"{type(strategy).__name__}(eta=0) takes no server step; give eta > 0")
    return keys


def attributes(strategy: Strategy) -> dict[str, object]:
    """The attributes a round must leave as they were (all but the checkpointed state and the round's inputs),
    comparable across processes."""
    name = base_name(type(strategy)) or ""
    skip = {*STATE.get(name, ()), *ROUND_INPUTS.get(name, ())}
    return {k: _canonical(v) for k, v in sorted(vars(strategy).items()) if k not in skip}


def carried_state(strategy: Strategy, before: dict[str, object]) -> str | None:
    """Why a round of ``strategy`` cannot be resumed from a checkpoint (None: it can): it changed an attribute
    that is not the state a checkpoint holds (``before``: :func:`attributes` at the run's start)."""
    now = attributes(strategy)
    changed = sorted(k for k in {*before, *now} if before.get(k) != now.get(k))
    if not changed:
        return None
    return (f"{type(strategy).__name__} cannot be replayed exactly: its rounds change {', '.join(changed)}, server "
            "state a checkpoint does not hold (a retrain resuming from a round would start without it); keep the "
            "strategy's attributes as built")


def identity(strategy: Strategy) -> dict[str, Any] | None:
    """What a store records of a subclass (None for Flower's own class, which its keys rebuild): its class and
    every attribute it was built with, so a retrain through an app that now builds another refuses."""
    cls = type(strategy)
    if cls in CLASSES.values():
        return None
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "attributes": attributes(strategy)}


def _canonical(value: object) -> object:
    """``value`` as JSON that is the same for equal values in any process (never an object's address)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.ndarray):
        return {"array": hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest(), "dtype": str(value.dtype),
                "shape": list(value.shape)}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    qualname = getattr(value, "__qualname__", None)
    if callable(value) and qualname is not None:
        return f"{getattr(value, '__module__', '')}.{qualname}"
    return type(value).__qualname__


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
