"""Client side of SAFE: train the cliques this node holds data of, report prototype sums (a forget runs the
nodes' one handler, :mod:`fedforget.federation.forget_client`, which drops SAFE's declared token caches).

A node only ever trains a clique on that clique's cells (its samples of the clique's classes in the
clique's coarse group); each clique has its own fresh optimizer and a data order seeded by
(run seed, method, clique, round, partition), so a clique's update never depends on another's data.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.federation.client_site import ClientSite
from fedforget.federation.messaging import PARTITION_KEY, to_numpy
from fedforget.methods.safe.adapters import AdapterSettings, FrozenCrossAttention, normalised, train_adapters
from fedforget.methods.safe.budget import adapter_budget
from fedforget.methods.safe.dp import secret_seed
from fedforget.methods.safe.features import cached_tokens
from fedforget.methods.safe.graph import bilevel_cells
from fedforget.methods.safe.messages import CliqueResults, PlanKeys, PrototypeQuery, TrainCliques
from fedforget.methods.safe.node_secret import node_secret
from fedforget.tasks.registry import get_task

SEP = "|"
PARAM_KEYS = ("queries", "heads", "bias")


@lru_cache(maxsize=2)
def frozen_backbone(task: str, hf_model: str, seed: int):  # noqa: ANN201
    """The task's backbone as loaded (no peft wrapper): what tokens are read from."""
    cfg = RunConfig(task=task, seed=seed).with_keys({"hf.model": hf_model})
    return get_task(task).load_backbone(cfg, seed)


@lru_cache(maxsize=4)
def frozen_theta(dim: int, seed: int, width: int) -> FrozenCrossAttention:
    """θ of the run: the same seeded, frozen cross-attention on every node and the server."""
    return FrozenCrossAttention(dim, derive_seed(seed, "safe", "theta"), width)


def node_cells(site: ClientSite, mode: str, coarse: int, fine: int, group: int | None) -> dict[int, list[int]]:
    """cell -> sample ids of this node, drawn from the original partition plan (deletions never move a
    sample to another cell); deleted samples are removed afterwards."""
    held_now = set(site.data.train.ids.tolist())  # a node's own record deleted with its row has no label left
    ids = [i for i in site.partition_ids() if i in held_now]
    labels = site.data.train.by_ids(ids).labels.tolist()
    lab = dict(zip(ids, labels, strict=True))
    k = site.data.num_classes
    if mode == "client":
        if group is None:
            return {}
        cells: dict[int, list[int]] = {}
        for s, y in sorted(lab.items()):
            cells.setdefault(group * k + y, []).append(s)
    else:
        cells = bilevel_cells({site.partition: lab}, k, coarse, fine, mode, site.cfg.seed)[site.partition]
    held = set(site.slice_examples(None).ids.tolist())
    return {c: [s for s in v if s in held] for c, v in cells.items()}


def node_tokens(site: ClientSite, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Tokens, labels and pooled features of ``ids`` (cached once per node in its state dir)."""
    backbone = frozen_backbone(site.cfg.task, site.cfg.hf.model, site.cfg.seed)
    held = sorted(site.slice_examples(None).ids.tolist())
    examples = site.data.train.by_ids(held)
    tokens, pooled = cached_tokens(site.state_dir, f"train-{site.dataset_key}", backbone.weights_sha256, held,
                                   backbone.module, examples.inputs)
    row = {s: r for r, s in enumerate(held)}
    rows = [row[s] for s in ids]
    return torch.from_numpy(tokens[rows]), examples.labels[rows], pooled[rows]


def _plan_args(plan: PlanKeys) -> tuple[str, int, int, int | None]:
    group = int(plan["group"]) if "group" in plan else None
    return str(plan["mode"]), int(plan["coarse"]), int(plan["fine"]), group


def train_cliques(msg: Message, context: Context) -> Message:
    """``train.safe``: one FedAvg round of every clique named, each on its own cells only."""
    site = ClientSite.from_context(context)
    cfg = site.cfg
    request = TrainCliques.from_config(msg.content["config"])
    server_round = request.server_round
    cells = node_cells(site, *_plan_args(request.plan))
    budget = adapter_budget(cfg)
    start = to_numpy(msg.content["arrays"])
    out: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    losses: dict[str, float] = {}
    for spec in request.work:
        clique = spec.adapter
        ids = sorted(s for c in spec.cells for s in cells.get(int(c), []))
        params = {k: torch.from_numpy(np.array(start[f"{clique}{SEP}{k}"], copy=True)) for k in PARAM_KEYS}
        counts[clique] = len(ids)
        if ids:
            tokens, labels, _ = node_tokens(site, ids)
            theta = frozen_theta(int(tokens.shape[-1]), cfg.seed, budget.width)
            if spec.dp:
                from fedforget.methods.safe.dp_training import train_dp_adapter

                settings = AdapterSettings(cfg.local_epochs, cfg.batch_size, cfg.lr, cfg.optimizer,
                                           derive_seed(cfg.seed, cfg.method, clique, server_round, site.partition,
                                                       "order"), cfg.safe.schedule, server_round, cfg.num_rounds)
                private_seed = secret_seed(node_secret(site.state_dir), "safe-dp", cfg.method, clique, server_round,
                                           site.partition)
                params, losses[clique] = train_dp_adapter(theta, params, tokens, labels, int(spec.classes[0]),
                                                          [int(c) for c in spec.clique or ()], settings, cfg,
                                                          num_rounds=cfg.num_rounds, private_seed=private_seed)
            else:
                order_seed = derive_seed(cfg.seed, cfg.method, clique, site.partition, "order")
                params, losses[clique] = train_adapters(theta, params, tokens, labels, list(spec.classes),
                                                        budget, server_round, order_seed)
        for k in PARAM_KEYS:
            out[f"{clique}{SEP}{k}"] = np.ascontiguousarray(params[k].numpy())
    info = CliqueResults(counts, losses).to_config()
    metrics = MetricRecord({PARTITION_KEY: site.partition, "num-examples": int(sum(counts.values()))})
    record = ArrayRecord({k: Array(v) for k, v in out.items()})
    return Message(RecordDict({"arrays": record, "info": info, "metrics": metrics}), reply_to=msg)


def prototype_sums(msg: Message, context: Context) -> Message:
    """``query.safeproto``: per cell, the float64 sum of L2-normalised pooled features and the count."""
    site = ClientSite.from_context(context)
    query = PrototypeQuery.from_config(msg.content["config"])
    cells = node_cells(site, *_plan_args(query.plan))
    out: dict[str, np.ndarray] = {}
    for cell in query.cells:
        ids = cells.get(int(cell), [])
        if ids:
            _, _, pooled = node_tokens(site, ids)
            total = normalised(torch.from_numpy(pooled)).sum(axis=0)
        else:
            total = np.zeros(query.dim)
        out[f"{cell}{SEP}sum"] = np.ascontiguousarray(total)
        out[f"{cell}{SEP}count"] = np.asarray([len(ids)], dtype=np.int64)
    metrics = MetricRecord({PARTITION_KEY: site.partition})
    return Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in out.items()}), "metrics": metrics}),
                   reply_to=msg)

