"""What is served: the stored serving plan turned into predictions (server, coordinator, audit).

The plan's ``kind`` picks its method's serving function from the registry. :func:`lora_probabilities`
serves the LoRA models: for chains, per shard the selected prefixes are mixed as softmax
probabilities with the plan's weights (FedSGT AllSeq/MinSeq/LongSeq), then shards are averaged
(S3T/SISA/FedCIO ensembles); a single artifact (fedavg) is served alone and FedShard's flat shards
are averaged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedforget.core.chains import ChainPlan, shard_vote_weights
from fedforget.core.config import RunConfig
from fedforget.store import Store
from fedforget.strategies.chain_model import Module, assemble, split_state
from fedforget.strategies.registry import entry_for_plan, resolve
from fedforget.training.supervised import predict_logits

Tensors = dict[str, torch.Tensor]


class ServingError(RuntimeError):
    """Nothing valid is left to serve: a retrain is required."""


def load_tensors(store: Store, sha256: str) -> Tensors:
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in store.get_arrays(sha256).items()}


def member_model(cfg: RunConfig, num_classes: int, plan: ChainPlan, store: Store, shas: Mapping[str, str],
                 artifacts: list[str], metas: Mapping[str, dict[str, Any]]):  # noqa: ANN201
    """The network of one served chain prefix, built from its stored artifacts."""
    modules, head = [], {}
    for artifact in artifacts:
        lora, head = split_state(load_tensors(store, shas[artifact]))
        meta = metas.get(artifact, {})
        modules.append(Module(str(meta.get("slot", "default")), meta.get("targets"), lora))
    return assemble(cfg, num_classes, plan.stacking, modules, head)


def class_probabilities(logits: torch.Tensor) -> np.ndarray:
    """Softmax in float64: every serving function turns logits into the probabilities it compares alike."""
    return torch.softmax(logits.double(), dim=1).numpy()


def serving_probabilities(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                          serving: dict[str, Any], artifacts: list[dict[str, Any]],
                          inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """Class probabilities of the served ensemble on ``inputs``; raises :class:`ServingError` if none."""
    if not serving.get("available"):
        raise ServingError("no valid model is left to serve; run `fedforget retrain`")
    entry = entry_for_plan(plan_json.get("kind"))
    serving_fn = resolve(entry.serving) if entry is not None else lora_probabilities
    return serving_fn(cfg, num_classes, store, plan_json, serving, artifacts, inputs)


def lora_probabilities(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                       serving: dict[str, Any], artifacts: list[dict[str, Any]],
                       inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """The LoRA-family serving function: one model, FedShard's flat shards, or chain ensembles."""
    shas = {a["artifact"]: a["sha256"] for a in artifacts}
    metas = {a["artifact"]: a["meta"] for a in artifacts}
    kinds = {a["kind"] for a in artifacts if a["artifact"] in serving["artifacts"]}
    if kinds - {"lora+head"}:
        raise ServingError(f"evaluate rebuilds LoRA + head models only, not {', '.join(sorted(kinds))}; "
                           "`fedforget status` shows the accuracy the run measured")
    if plan_json["kind"] in ("single", "fedshard"):  # one model, or FedShard's flat shards ensembled
        probs = []
        for artifact in serving["artifacts"]:
            lora, head = split_state(load_tensors(store, shas[artifact]))
            model = assemble(cfg, num_classes, "continue", [Module("default", None, lora)], head)
            probs.append(class_probabilities(predict_logits(model, inputs)))
        return np.mean(np.stack(probs), axis=0)
    plan = ChainPlan.from_json(plan_json)
    votes = shard_vote_weights(plan_json, serving, metas)
    mixtures = []
    for shard in serving["shards"]:
        if not shard["members"]:
            continue
        mix = None
        for member in shard["members"]:
            model = member_model(cfg, num_classes, plan, store, shas, member["artifacts"], metas)
            probs = member["weight"] * class_probabilities(predict_logits(model, inputs))
            mix = probs if mix is None else mix + probs
        mixtures.append(mix)
    return np.sum(np.stack([w * m for w, m in zip(votes, mixtures, strict=True)]), axis=0)


def serving_accuracy(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                     serving: dict[str, Any], artifacts: list[dict[str, Any]], inputs: tuple[torch.Tensor, ...],
                     labels: torch.Tensor) -> dict[str, float]:
    probs = serving_probabilities(cfg, num_classes, store, plan_json, serving, artifacts, inputs)
    y = labels.numpy()
    picked = np.clip(probs[np.arange(len(y)), y], 1e-12, 1.0)
    return {"accuracy": float((probs.argmax(1) == y).mean()), "loss": float(-np.log(picked).mean()),
            "num-examples": int(len(y))}
