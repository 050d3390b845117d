"""Client side of the sequence-sharded methods: train one chain position, and delete data for good."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from safetensors.numpy import load as st_load

from fedforget.core.seeds import derive_seed
from fedforget.federation.client_site import ClientSite
from fedforget.federation.control_messages import ModuleNeed
from fedforget.federation.messaging import PARTITION_KEY, to_numpy
from fedforget.federation.module_messages import INIT_SEED_KEY, KEEP_KEY, MODULES_KEY, PREFIX_KEY, Slot, TrainModule
from fedforget.federation.module_stack import Module, assemble, fresh_module, initial_head, split_state
from fedforget.store.module_cache import cached_module, keep_module
from fedforget.tasks.task_functions import task_loss, task_train_step
from fedforget.training.supervised import TrainSettings, train_supervised


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in to_numpy(record).items()}


def _decode(data: bytes) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in st_load(data).items()}  # safetensors only


def frozen_modules(msg: Message, state_dir: Path) -> tuple[list[dict[str, torch.Tensor]], list[str]]:
    """The frozen prefix modules a message names (LoRA + head each), from its bytes or this node's cache;
    and the sha256s this node lacks (then nothing is returned: the node asks for them)."""
    config = msg.content["config"]
    names = [str(s) for s in config[PREFIX_KEY]] if PREFIX_KEY in config else []
    carried = ({k: v.tobytes() for k, v in to_numpy(msg.content[MODULES_KEY]).items()}
               if MODULES_KEY in msg.content else {})
    keep = bool(config.get(KEEP_KEY, True))
    found: dict[str, bytes] = {}
    for sha in names:
        if sha in carried:
            if keep:
                keep_module(state_dir, sha, carried[sha])
            elif hashlib.sha256(carried[sha]).hexdigest() != sha:
                raise ValueError(f"module {sha[:12]}… arrived with bytes that do not match its sha256")
            found[sha] = carried[sha]
        elif (cached := cached_module(state_dir, sha)) is not None:
            found[sha] = cached
    missing = [sha for sha in names if sha not in found]
    return ([] if missing else [_decode(found[sha]) for sha in names]), missing


def _targets(slot: Slot) -> list[str] | None:
    return None if slot.targets is None else list(slot.targets)


def start_state(site: ClientSite, msg: Message, slot: Slot, frozen: list[dict[str, torch.Tensor]]) -> dict:
    """What the position starts from: the message's arrays, or (first round of a new module) the seeded
    module rebuilt here on the head of the last frozen artifact, the very tensors the server computed."""
    if "arrays" in msg.content:
        return _tensors(msg.content["arrays"])
    seed = int(msg.content["config"][INIT_SEED_KEY])
    lora = fresh_module(site.cfg, site.data.num_classes, slot.slot, _targets(slot), seed)
    head = split_state(frozen[-1])[1] if frozen else initial_head(site.cfg, site.data.num_classes)
    return {k: v.detach().clone() for k, v in {**lora, **head}.items()}


def train_chain_position(msg: Message, context: Context) -> Message:
    """Train the last module of a chain prefix (+ head) on this node's slices of the prefix's groups."""
    site = ClientSite.from_context(context)
    request = TrainModule.from_config(msg.content["config"])
    artifact, server_round, stacking = request.artifact, request.server_round, request.stacking
    slots = request.slots
    slices = list(request.slices)
    frozen, missing = frozen_modules(msg, site.state_dir)
    if missing:  # not cached here (fresh state dir, corrupt file): ask for the bytes
        return Message(ModuleNeed(site.partition, tuple(missing)).to_record(), reply_to=msg)
    if len(frozen) != len(slots) - 1:
        raise ValueError(f"the message names {len(frozen)} frozen module(s) for {len(slots)} slot(s)")
    trainable = start_state(site, msg, slots[-1], frozen)
    lora, head = split_state(trainable)
    modules = [Module(s.slot, _targets(s), split_state(m)[0]) for s, m in zip(slots[:-1], frozen, strict=True)]
    modules.append(Module(slots[-1].slot, _targets(slots[-1]), lora))
    examples = site.slice_examples(slices)
    metrics = {"num-examples": len(examples.ids), PARTITION_KEY: site.partition, "train-loss": 0.0}
    if len(examples.ids) == 0:  # everything this node held for the prefix was deleted: it abstains
        return Message(RecordDict({"arrays": ArrayRecord(trainable), "metrics": MetricRecord(metrics)}),
                       reply_to=msg)
    model = assemble(site.cfg, site.data.num_classes, stacking, modules, head, train_last=True)
    cfg = site.cfg
    settings = TrainSettings(
        epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr, optimizer=cfg.optimizer,
        seed=derive_seed(cfg.seed, cfg.method, artifact, server_round, site.partition, "train-order"),
        loss=task_loss(cfg), train_step=task_train_step(cfg),
    )
    result = train_supervised(model, examples.inputs, examples.targets, settings)
    metrics["train-loss"] = result.mean_loss
    slot = "default" if stacking == "continue" else slots[-1].slot
    reply = ArrayRecord(model.trainable_state(slot))
    return Message(RecordDict({"arrays": reply, "metrics": MetricRecord(metrics)}), reply_to=msg)
