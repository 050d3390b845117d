"""Every method, one entry each: where its planning, server driver, client handlers and serving live.

The answer to "where is method X?" is its entry here. Entries hold dotted names ("module:function"
strings), never imported objects: the ClientApp reads this module in every fresh per-message
process, so importing it must cost nothing beyond the standard library. A target is imported only
when it is called (:func:`resolve`).

Machinery that several methods use (partition discovery, forget propagation, serving evaluation,
messaging, the failure policy, LoRA module training) lives in shared modules (:data:`SHARED_MODULES`)
and its client handlers in :data:`SHARED_HANDLERS`; a method module never imports another method's
module. Adding a method is one entry here plus its own files, its name in the run config and, for a
new plan kind, its serving rule in :mod:`fedforget.core.serving_plans`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

FORGET = "query.forget"  # a node deletes samples for good (tombstones): every LoRA-family method
CHAIN = "train.chain"  # a node trains one LoRA module on given slices, earlier modules frozen
LORA_SERVING = "fedforget.strategies.serve:lora_probabilities"


@dataclass(frozen=True)
class Method:
    """One method family and every module that belongs to it."""

    name: str
    variants: tuple[str, ...]  # the run config's ``method=`` values this entry runs
    driver: str  # "module:function(grid, cfg)" that the ServerApp runs on the Grid
    handlers: Mapping[str, str]  # message type → "module:function(msg, context)" on the ClientApp
    serving: str  # "module:function": the stored serving plan → class probabilities
    plan_kinds: tuple[str, ...]  # the ``kind`` of the serving plan it writes to the ledger
    forget_message: str  # the message type that makes a node delete forgotten samples
    config_group: str | None  # the run-config key group it reads (:mod:`fedforget.core.config`)
    planning: tuple[str, ...] = ()  # pure modules under fedforget.core: no torch, no flwr
    modules: tuple[str, ...] = ()  # its other modules: tasks, training, store, views
    forget_detail: str | None = None  # "module:function(plan, units, removed, serving)" → extra `forget` report

    def files(self) -> tuple[str, ...]:
        """The modules that belong to this method alone (shared ones left out), each once."""
        named = [*self.planning, self.driver, *self.handlers.values(), self.serving, *self.modules]
        return tuple(m for m in dict.fromkeys(t.partition(":")[0] for t in named) if m not in SHARED_MODULES)


SHARED_HANDLERS: Mapping[str, str] = {
    "query": "fedforget.strategies.client_site:describe",  # partition discovery, every method
    FORGET: "fedforget.strategies.forget_client:forget_samples",
}

SHARED_MODULES: tuple[str, ...] = (
    "fedforget.core.config",  # the run config and its key groups
    "fedforget.core.defaults",
    "fedforget.core.seeds",
    "fedforget.core.slicing",  # units: a partition's slices
    "fedforget.core.serving_plans",  # what is served after a request, by plan kind
    "fedforget.core.theory",  # deletion-rate theory (`fedforget theory`), harmonic numbers
    "fedforget.strategies.messaging",  # message types, retries, record conversion
    "fedforget.strategies.failover",  # the failure policy: redo, exclude, check replies
    "fedforget.strategies.run_setup",  # the server's run: data, plan, store, backbone
    "fedforget.strategies.units",  # unit listing
    "fedforget.strategies.forget_messages",  # forget propagation inside a retrain
    "fedforget.strategies.propagate",  # forget propagation without a retrain (`forget --propagate`)
    "fedforget.strategies.serve",  # the serving plan → predictions, per plan kind
    "fedforget.strategies.serving_eval",  # accuracy of what is served, recorded in the ledger
    "fedforget.strategies.client_site",  # a node's partition, data and state directory
    "fedforget.strategies.forget_client",
    "fedforget.strategies.chain_model",  # LoRA modules stacked on the backbone
    "fedforget.strategies.chain_client",  # train one LoRA module (chains, FedShard)
    "fedforget.strategies.module_shipping",  # send a node only the modules it lacks
)

FAMILIES: tuple[Method, ...] = (
    Method(
        name="fedavg",
        variants=("fedavg",),
        driver="fedforget.strategies.fedavg:run_fedavg",
        handlers={
            "train": "fedforget.strategies.client_work:train_adapter",
            "evaluate": "fedforget.strategies.client_work:evaluate_adapter",
        },
        serving=LORA_SERVING,
        plan_kinds=("single",),
        forget_message=FORGET,
        config_group=None,
    ),
    Method(
        name="chains",
        variants=("fedsgt", "s3t", "sisa", "fedcio"),
        driver="fedforget.strategies.chains:run_chains",
        handlers={CHAIN: "fedforget.strategies.chain_client:train_chain_position"},
        serving=LORA_SERVING,
        plan_kinds=("chains",),
        forget_message=FORGET,
        config_group="chains",
        planning=("fedforget.core.chains", "fedforget.core.grouping", "fedforget.core.sequences",
                  "fedforget.core.serving"),
    ),
    Method(
        name="hosfl",
        variants=("hosfl", "sfl", "zo-sfl"),
        driver="fedforget.strategies.hosfl:run_split_method",
        handlers={
            "train.forward": "fedforget.strategies.hosfl_client:forward",
            "train.zo": "fedforget.strategies.hosfl_client:zo_phase",
            "train.backprop": "fedforget.strategies.hosfl_client:backprop",
        },
        serving="fedforget.strategies.split_serve:split_probabilities",  # one [θ_c; θ_s] artifact
        plan_kinds=("split",),
        forget_message=FORGET,
        config_group="hosfl",
        planning=("fedforget.core.hosfl_plan",),
        modules=("fedforget.tasks.split", "fedforget.training.zo"),
    ),
    Method(
        name="fedshard",
        variants=("fedshard",),
        driver="fedforget.strategies.fedshard:run_fedshard",
        handlers={CHAIN: "fedforget.strategies.chain_client:train_chain_position"},
        serving=LORA_SERVING,
        plan_kinds=("fedshard",),
        forget_message=FORGET,
        config_group="fedshard",
        planning=("fedforget.core.fedshard", "fedforget.core.fedshard_costs", "fedforget.core.angles",
                  "fedforget.core.lora_merge"),
        modules=("fedforget.unlearning.tree_status", "fedforget.unlearning.fairness"),
    ),
    Method(
        name="safe",
        variants=("safe", "protosisa"),
        driver="fedforget.strategies.safe:run_safe",
        handlers={
            "train.safe": "fedforget.strategies.safe_client:train_cliques",
            "query.safeproto": "fedforget.strategies.safe_client:prototype_sums",
            "query.safeforget": "fedforget.strategies.safe_client:forget_samples",
        },
        serving="fedforget.strategies.safe_serve:served_probabilities",
        plan_kinds=("safe",),
        forget_message="query.safeforget",
        config_group="safe",
        forget_detail="fedforget.core.safe_graph:forget_detail",
        planning=("fedforget.core.safe_graph", "fedforget.core.safe_dp", "fedforget.core.safe_shard",
                  "fedforget.core.safe_budget"),
        modules=("fedforget.strategies.safe_shard", "fedforget.tasks.safe_adapters", "fedforget.tasks.safe_features",
                 "fedforget.tasks.safe_dp_training", "fedforget.store.safe_budget",
                 "fedforget.store.node_secret"),
    ),
)

BY_VARIANT: dict[str, Method] = {v: m for m in FAMILIES for v in m.variants}


def resolve(target: str) -> Callable[..., Any]:
    """Import ``"module:function"`` and return the function."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def method_entry(name: str) -> Method:
    """The entry that runs ``method=name``."""
    try:
        return BY_VARIANT[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(BY_VARIANT))}") from None


def get_method(name: str) -> Callable[..., None]:
    """The server driver of ``method=name``, imported now: ``driver(grid, cfg)``."""
    return resolve(method_entry(name).driver)


def entry_for_plan(kind: str | None) -> Method | None:
    """The first entry writing serving plans of ``kind`` (entries sharing a kind serve it alike)."""
    return next((m for m in FAMILIES if kind in m.plan_kinds), None)


def client_handlers() -> dict[str, str]:
    """Message type → handler, over the shared handlers and every entry; one handler per type."""
    out = dict(SHARED_HANDLERS)
    for method in FAMILIES:
        for kind, target in method.handlers.items():
            if out.setdefault(kind, target) != target:
                raise ValueError(f"message type {kind!r} has two handlers: {out[kind]} and {target}")
    return out
