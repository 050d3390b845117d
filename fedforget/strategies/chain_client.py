"""Client side of the sequence-sharded methods: train one chain position, and delete data for good."""

from __future__ import annotations

import json

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict

from fedforget.core.seeds import derive_seed
from fedforget.strategies.chain_model import Module, assemble, split_state
from fedforget.strategies.client_work import ClientSite
from fedforget.strategies.forget_client import forget_samples as forget_samples  # its old home
from fedforget.strategies.messaging import PARTITION_KEY, to_numpy
from fedforget.training.supervised import TrainSettings, train_supervised

PREFIX_SEP = "|"


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in to_numpy(record).items()}


def pack_prefix(modules: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Frozen prefix modules as one flat record: ``"<index>|<lora key>"``."""
    return {f"{i}{PREFIX_SEP}{k}": v for i, m in enumerate(modules) for k, v in m.items()}


def unpack_prefix(flat: dict[str, torch.Tensor], count: int) -> list[dict[str, torch.Tensor]]:
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(count)]
    for key, value in flat.items():
        index, name = key.split(PREFIX_SEP, 1)
        out[int(index)][name] = value
    return out


def train_chain_position(msg: Message, context: Context) -> Message:
    """Train the last module of a chain prefix (+ head) on this node's slices of the prefix's groups."""
    site = ClientSite.from_context(context)
    config = msg.content["config"]
    artifact = str(config["artifact"])
    server_round = int(config["server-round"])
    stacking = str(config["stacking"])
    slots = json.loads(str(config["slots"]))
    slices = [int(s) for s in config["slices"]]
    trainable = _tensors(msg.content["arrays"])
    prefix = unpack_prefix(_tensors(msg.content["prefix"]), len(slots) - 1) if "prefix" in msg.content else []
    lora, head = split_state(trainable)
    modules = [Module(s["slot"], s["targets"], m) for s, m in zip(slots[:-1], prefix, strict=True)]
    modules.append(Module(slots[-1]["slot"], slots[-1]["targets"], lora))
    examples = site.slice_examples(slices)
    metrics = {"num-examples": len(examples.ids), PARTITION_KEY: site.partition, "train-loss": 0.0}
    if len(examples.ids) == 0:  # everything this node held for the prefix was deleted: it abstains
        return Message(RecordDict({"arrays": msg.content["arrays"], "metrics": MetricRecord(metrics)}), reply_to=msg)
    model = assemble(site.cfg, site.data.num_classes, stacking, modules, head, train_last=True)
    cfg = site.cfg
    settings = TrainSettings(
        epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr, optimizer=cfg.optimizer,
        seed=derive_seed(cfg.seed, cfg.method, artifact, server_round, site.partition, "train-order"),
    )
    result = train_supervised(model, examples.inputs, examples.labels, settings)
    metrics["train-loss"] = result.mean_loss
    slot = "default" if stacking == "continue" else slots[-1]["slot"]
    reply = ArrayRecord(model.trainable_state(slot))
    return Message(RecordDict({"arrays": reply, "metrics": MetricRecord(metrics)}), reply_to=msg)
